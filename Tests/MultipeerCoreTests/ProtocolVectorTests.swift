import Foundation
import MultipeerCore
import MultipeerTestSupport
import NIOCore
import Testing

/// Checks the encoder and decoder against the hex vectors written in docs/PROTOCOL.md.
@Suite struct ProtocolVectorTests {
    static let peerID = UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!

    static func expectedMessages() throws -> [String: LinkMessage] {
        var payload = ByteBuffer()
        payload.writeString(#"{"id":1}"#)
        return [
            "hello": .hello(try Hello(
                peerID: peerID, incarnation: 7, displayName: "Captain", metadata: ["seat": "L"],
                keepalive: KeepaliveParameters(interval: .milliseconds(500), timeout: .milliseconds(1500)))),
            "ping": .ping(Probe(nonce: 1, timestamp: 1_000_000_000)),
            "pong": .pong(Probe(nonce: 1, timestamp: 1_000_000_000)),
            "data": .data(try DataMessage(sequence: 42, typeName: "NavlogEntry", payload: payload)),
            "ack": .ack(42),
            "goodbye": .goodbye(.keepaliveTimeout, "no traffic for 1.5 s"),
            "flow": .flow(reading: false),
        ]
    }

    @Test func everyMessageEncodesToItsVector() throws {
        let vectors = try ProtocolVectors.load()
        for (name, message) in try Self.expectedMessages() {
            var bytes = ByteBuffer()
            message.frame().write(to: &bytes)
            #expect(Array(bytes.readableBytesView) == vectors[name], "vector \(name)")
            var direct = ByteBuffer()
            message.writeFrame(to: &direct)
            #expect(direct == bytes, "writeFrame and frame() agree for \(name)")
        }
    }

    @Test func everyVectorDecodesToItsMessage() throws {
        let vectors = try ProtocolVectors.load()
        let expected = try Self.expectedMessages()
        #expect(Set(vectors.keys).isSuperset(of: expected.keys))
        for (name, message) in expected {
            var buffer = ByteBuffer(bytes: try #require(vectors[name]))
            var decoder = FrameDecoder()
            let frame = try #require(try decoder.decode(buffer: &buffer))
            #expect(buffer.readableBytes == 0)
            #expect(try LinkMessage(frame: frame) == message, "vector \(name)")
        }
    }

    @Test func aHelloWithoutTheMaximumFrameMeansTheDefault() throws {
        var buffer = ByteBuffer(bytes: try #require(try ProtocolVectors.load()["hello-without-maximum-frame"]))
        var decoder = FrameDecoder()
        let frame = try #require(try decoder.decode(buffer: &buffer))
        guard case .hello(let hello) = try LinkMessage(frame: frame) else {
            Issue.record("a HELLO")
            return
        }
        #expect(hello.maximumFrameLength == 1 << 20)
        #expect(LinkMessage.hello(hello) == (try Self.expectedMessages())["hello"])
    }

    @Test func theUnknownTypeVectorIsTolerated() throws {
        var buffer = ByteBuffer(bytes: try #require(try ProtocolVectors.load()["unknown"]))
        var decoder = FrameDecoder()
        let frame = try #require(try decoder.decode(buffer: &buffer))
        #expect(try LinkMessage(frame: frame) == .unknown(FrameType(rawValue: 256)))
    }
}
