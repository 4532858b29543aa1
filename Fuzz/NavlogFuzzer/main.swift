// A navlog entry as a peer's version holds it (docs/NAVLOG.md 1: the record the store keeps
// whole, in the session's binary encoding or JSON, docs/SYNC.md 1 and 11), decoded as the store
// decodes a record of `navlog.entries` and checked as a host checks it before showing it
// (NavlogRecord.validate). Any input must be refused with a DecodingError, or decode to a record
// that encodes and decodes back to itself and that validate judges without a trap.
import Foundation
import FuzzSupport
import MultipeerSession
import NavlogSync

let navlogFuzzer: FuzzTarget = { data, size in
    refusalsOnly(DecodingError.self) {
        let record = try MessageEncoding.decode(NavlogRecord.self, from: bytes(data, size))
        let again = try MessageEncoding.decode(NavlogRecord.self, from: try MessageEncoding.binary.encode(record))
        precondition(again == record, "a record reads back to itself")
        _ = try? record.validate()
    }
    return 0
}

#if FUZZING
@_cdecl("NavlogFuzzer_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runLibFuzzer(argc, argv, navlogFuzzer)
}
#else
// (A declaration: the fuzzing build parses this file as a library.)
let replayed: Void = replayCorpus(navlogFuzzer)
#endif
