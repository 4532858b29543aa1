// A DNS-SD TXT record as it comes from the network (entries, each a length byte then its
// bytes), parsed into an advertisement. Any input must parse or be rejected with a typed
// Rejection: never a trap.
import FuzzSupport
import MultipeerDiscovery

let txtFuzzer: FuzzTarget = { data, size in
    var input = bytes(data, size)[...]
    var entries: [[UInt8]] = []
    while let length = input.popFirst() {
        entries.append(Array(input.prefix(Int(length))))
        input = input.dropFirst(Int(length))
    }
    if let advert = try? AdvertTXT(entries: entries) {
        // What parses must survive its own entries.
        precondition(
            (try? AdvertTXT(entries: advert.entries.map { Array($0.utf8) })) == advert,
            "an advertisement reads back from its entries"
        )
    }
    return 0
}

#if FUZZING
@_cdecl("TXTFuzzer_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runLibFuzzer(argc, argv, txtFuzzer)
}
#else
// (A declaration: the fuzzing build parses this file as a library.)
let replayed: Void = replayCorpus(txtFuzzer)
#endif
