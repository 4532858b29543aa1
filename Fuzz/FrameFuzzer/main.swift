import FuzzSupport
import MultipeerCore
import NIOCore

// A link's byte stream after TLS, read as frames and then as link messages. Any input must end
// in frames, a typed MultipeerError, or a wait for more bytes: never a trap, and never a value
// buffered beyond the frame limit.
import struct Foundation.UUID

let frameFuzzer: FuzzTarget = { data, size in
    var buffer = ByteBuffer(bytes: bytes(data, size))
    // Small limits, so that inputs reach both sides of them.
    var decoder = FrameDecoder(maximumLength: 4096, firstFrameMaximumLength: 1024)
    var delivery = Delivery()
    refusalsOnly(MultipeerError.self) {
        while let frame = try decoder.decode(buffer: &buffer) {
            if let message = try? LinkMessage(frame: frame) {
                // What decodes must encode to a frame that decodes to the same message.
                var encoded = ByteBuffer()
                message.writeFrame(to: &encoded)
                var again = FrameDecoder(maximumLength: 1 << 20)
                let reread = try again.decode(buffer: &encoded).map { try LinkMessage(frame: $0) }
                precondition(reread == message, "a decoded message encodes to itself")
                try delivery.receive(message)
            }
        }
        _ = try decoder.decodeLast(buffer: &buffer, seenEOF: true)
    }
    return 0
}

/// What a link's receiving side does with DATA and FRAGMENT (docs/PROTOCOL.md, 2b and 3b):
/// whatever arrives, a message is delivered whole or not at all, and what is held of an
/// incomplete one stays within the maximum message.
struct Delivery {
    static let maximumMessage = 8192
    var window = ReceiveWindow(incarnation: 1)
    var unreliable: MessageAssembly?
    /// The resources offered (docs/PROTOCOL.md 3c), received as a receiver that holds nothing
    /// of them and writes each chunk at once; whatever arrives, no more than was granted is
    /// ever taken in, and what is written never passes the offered length.
    var resources: [UUID: ResourceReceiveStateMachine] = [:]
    /// Streams the input opened, each with a window's bytes written towards it: what is sent
    /// never passes what was written, and what arrives is held within the window.
    var streams: [UUID: ByteStreamStateMachine] = [:]

    /// Throws (ends the input) where a receiver closes the link.
    mutating func receive(_ message: LinkMessage) throws {
        switch message {
        case .data(let data) where data.sequence > 0:
            try check(window.receive(data, from: "fuzz").0)
        case .fragment(let fragment) where fragment.sequence > 0:
            let verdict = window.receive(fragment, limit: Self.maximumMessage, from: "fuzz").0
            if case .deliver(let whole) = verdict {
                precondition(whole.payload.readableBytes == fragment.length, "delivered whole")
            }
            try check(verdict)
        case .fragment(let fragment):
            if unreliable == nil {
                if case .partial(let assembly) = try MessageAssembly.begin(
                    with: fragment,
                    limit: Self.maximumMessage,
                    from: "fuzz"
                ) {
                    unreliable = assembly
                }
            } else if let whole = try unreliable!.append(fragment, from: "fuzz") {
                precondition(whole.payload.readableBytes == fragment.length, "delivered whole")
                unreliable = nil
            }
        case .resourceOffer(let offer):
            var resource = resources[offer.id] ?? ResourceReceiveStateMachine(offer: offer, window: 4096)
            _ = resources[offer.id] == nil ? resource.prepared(holding: 0) : resource.offeredAgain()
            resources[offer.id] = resource
        case .resourceChunk(let chunk):
            guard var resource = resources[chunk.id] else { break }
            if case .write(let offset, let count) = try resource.chunk(
                offset: chunk.offset,
                count: UInt64(chunk.bytes.readableBytes)
            ) {
                precondition(
                    offset == chunk.offset && offset + count <= resource.offer.length,
                    "written within the file"
                )
                _ = resource.wrote(through: offset + count)
            }
            resources[chunk.id] = resource
        case .resourceEnd(let end):
            _ = resources[end.id]?.ended(end.reason)
        case .streamOpen(let open):
            if streams[open.id] == nil {
                var stream = ByteStreamStateMachine(id: open.id, name: open.name, opener: false, window: 4096)
                stream.linkUp()
                var written = ByteBuffer(repeating: 7, count: 5000)
                stream.write(&written)
                precondition(stream.written == 4096, "a writer keeps at most a window")
                streams[open.id] = stream
            }
        case .streamWant(let want):
            guard var stream = streams[want.id] else { break }
            _ = try stream.want(received: want.received, granted: want.granted, endReceived: want.endReceived)
            for frame in stream.framesDue(chunkLimit: 1000) {
                if case .streamData(let data) = frame {
                    precondition(
                        data.offset + UInt64(data.bytes.readableBytes) <= stream.written,
                        "sent only what was written"
                    )
                }
            }
            streams[want.id] = stream
        case .streamData(let data):
            guard var stream = streams[data.id] else { break }
            try stream.data(offset: data.offset, bytes: data.bytes, end: data.end)
            var held = 0
            while case .bytes(let bytes) = stream.read(maximum: 1000) { held += bytes.readableBytes }
            precondition(held <= 4096, "held within the window")
            streams[data.id] = stream
        case .streamEnd(let end):
            streams[end.id]?.ended(end.reason, text: end.text)
        default:
            break
        }
        if let assembly = window.assembly {
            precondition(
                assembly.received < assembly.length && assembly.length <= Self.maximumMessage,
                "held within the limit"
            )
        }
    }

    private func check(_ verdict: ReceiveWindow.Verdict) throws {
        if case .invalid(let error) = verdict { throw error }
    }
}

#if FUZZING
@_cdecl("FrameFuzzer_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runLibFuzzer(argc, argv, frameFuzzer)
}
#else
// (A declaration: the fuzzing build parses this file as a library.)
let replayed: Void = replayCorpus(frameFuzzer)
#endif
