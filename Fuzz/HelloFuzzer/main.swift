// A HELLO value. Any input must decode to a Hello that encodes and decodes to itself, or fail
// with a typed MultipeerError: never a trap.
import FuzzSupport
import MultipeerCore
import NIOCore

let helloFuzzer: FuzzTarget = { data, size in
    refusalsOnly(MultipeerError.self) {
        let hello = try Hello(decoding: ByteBuffer(bytes: bytes(data, size)))
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
#endif
