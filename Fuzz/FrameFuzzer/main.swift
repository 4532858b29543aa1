// A link's byte stream after TLS, read as frames and then as link messages. Any input must end
// in frames, a typed MultipeerError, or a wait for more bytes: never a trap, and never a value
// buffered beyond the frame limit.
import FuzzSupport
import MultipeerCore
import NIOCore

let frameFuzzer: FuzzTarget = { data, size in
    var buffer = ByteBuffer(bytes: bytes(data, size))
    // Small limits, so that inputs reach both sides of them.
    var decoder = FrameDecoder(maximumLength: 4096, firstFrameMaximumLength: 1024)
    refusalsOnly(MultipeerError.self) {
        while let frame = try decoder.decode(buffer: &buffer) {
            if let message = try? LinkMessage(frame: frame) {
                // What decodes must encode to a frame that decodes to the same message.
                var encoded = ByteBuffer()
                message.writeFrame(to: &encoded)
                var again = FrameDecoder(maximumLength: 1 << 20)
                let reread = try again.decode(buffer: &encoded).map { try LinkMessage(frame: $0) }
                precondition(reread == message, "a decoded message encodes to itself")
            }
        }
        _ = try decoder.decodeLast(buffer: &buffer, seenEOF: true)
    }
    return 0
}

#if FUZZING
@_cdecl("FrameFuzzer_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runLibFuzzer(argc, argv, frameFuzzer)
}
#endif
