// A HELLO value. Any input must decode to a Hello that encodes and decodes to itself, or fail
// with a typed MultipeerError: never a trap; checking its proof never traps either.
import FuzzSupport
import MultipeerCore
import NIOCore

let helloFuzzer: FuzzTarget = { data, size in
    refusalsOnly(MultipeerError.self) {
        let input = ByteBuffer(bytes: bytes(data, size))
        let hello = try Hello(decoding: input)
        _ = try? hello.verify(
            value: input,
            exporter: [UInt8](repeating: 0, count: Hello.exporterLength),
            side: .dialler,
            peer: "fuzz"
        )
        var encoded = ByteBuffer()
        hello.encode(into: &encoded)
        let reread = try Hello(decoding: encoded)
        precondition(reread == hello, "a decoded HELLO encodes to itself")
    }
    return 0
}

#if FUZZING
@_cdecl("HelloFuzzer_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runLibFuzzer(argc, argv, helloFuzzer)
}
#else
// (A declaration: the fuzzing build parses this file as a library.)
let replayed: Void = replayCorpus(helloFuzzer)
#endif
