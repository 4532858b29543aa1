// A replicated store's message as a peer sends it (docs/SYNC.md 5). Any input must be refused
// with a typed SyncError, or read as a message that encodes to the same bytes (each message one
// form; versions compressed, kind 7, to the plain bytes they inflate to, and compressed again to
// a message that reads the same); a reconciliation round is answered without a trap; a batch's versions
// are read and checked one by one, each refused alone or taken.
import FuzzSupport
import MultipeerSession
import MultipeerSync

/// What the receiving station holds: a few versions' items, some sharing a timestamp.
let held = (0..<40).map { number in
    RangeReconciliation.Item(
        timestamp: 1_000 + UInt64(number / 3),
        id: (0..<32).map { UInt8(truncatingIfNeeded: number &* 31 &+ $0) }
    )
}
let station = RangeReconciliation(items: held)
let stranger = PeerIdentity()

let syncMessageFuzzer: FuzzTarget = { data, size in
    refusalsOnly(SyncError.self) {
        let input = bytes(data, size)
        let message = try SyncMessage(decoding: input)
        if input.first == 7 {
            precondition(message.bytes.first == 2, "compressed versions read as versions")
            let again = try SyncMessage(decoding: message.compactBytes())
            precondition(again == message, "and compress again to them")
        } else {
            precondition(message.bytes == input, "a message that reads encodes to the same bytes")
        }
        switch message {
        case .reconcile(_, _, let ranges):
            _ = try station.reconcile(ranges)
        case .versions(let keys, let versions):
            for bytes in versions {
                guard let version = try? SignedVersion(decoding: bytes) else { continue }
                _ = try? version.verify(with: keys.first ?? stranger.key)
            }
        case .want(let ids):
            precondition(ids.allSatisfy { $0.count == 32 })
        case .lack(let files):
            precondition(
                !files.isEmpty && files.count <= SyncMessage.maximumLack && files.allSatisfy { $0.count == 32 }
            )
        case .schemas(let schemas):
            precondition(schemas.count <= SyncMessage.maximumSchemas && schemas.allSatisfy { !$0.collection.isEmpty })
        case .keeps(let scope, let run, _):
            let collections = scope.collections ?? []
            precondition(
                run != 0 && collections.count <= SyncMessage.maximumSchemas
                    && collections.allSatisfy { (1...255).contains($0.utf8.count) }
            )
            _ = scope.intersection(.only(["checklist"]))
        }
    }
    return 0
}

#if FUZZING
@_cdecl("SyncMessageFuzzer_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runLibFuzzer(argc, argv, syncMessageFuzzer)
}
#else
// (A declaration: the fuzzing build parses this file as a library.)
let replayed: Void = replayCorpus(syncMessageFuzzer)
#endif
