// A replicated store's version as a peer sends it (docs/SYNC.md 3, 11). Any input must be refused
// with a typed SyncError, or read as a version whose signed bytes are the one encoding of its
// write (so a relayed version is the bytes its origin wrote; format 3, navlog-sync 0.9's, has
// its own) and that reads back to itself;
// checking its signature, with its origin's key or another, never traps.
import FuzzSupport
import MultipeerSession
import MultipeerSync

/// A key that is nobody's origin: verifying with it must refuse, never trap.
let stranger = PeerIdentity()

let syncVersionFuzzer: FuzzTarget = { data, size in
    refusalsOnly(SyncError.self) {
        let version = try SignedVersion(decoding: bytes(data, size))
        if version.bytes.first != 3 {  // (format 3 is navlog-sync 0.9's encoding, docs/SYNC.md 11)
            let encoded = try SignedVersion.signedBytes(
                collection: version.collection,
                recordID: version.recordID,
                stamp: version.stamp,
                change: version.change,
                attachments: version.attachments
            )
            precondition(encoded[...] == version.signedBytes, "a version's signed bytes are its write's one encoding")
        }
        let reread = try SignedVersion(decoding: version.bytes)
        precondition(reread == version, "a version reads back to itself")
        precondition(version.id.count == 32)
        _ = try? version.verify(with: stranger.key)
    }
    return 0
}

#if FUZZING
@_cdecl("SyncVersionFuzzer_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runLibFuzzer(argc, argv, syncVersionFuzzer)
}
#else
// (A declaration: the fuzzing build parses this file as a library.)
let replayed: Void = replayCorpus(syncVersionFuzzer)
#endif
