import Crypto
import Foundation
import MultipeerCore
import MultipeerTestSupport
import NIOCore
import Testing

/// Checks the encoder and decoder against the hex vectors written in docs/PROTOCOL.md.
@Suite struct ProtocolVectorTests {
    /// The key pair of RFC 8032's first Ed25519 test vector.
    static let signer = TestSigner(
        rawPrivateKey: try! bytes("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    )
    /// The exporter value the vectors take: bytes 0 to 31 (a real one comes from the TLS connection).
    static let exporter = [UInt8](0..<32)

    static func bytes(_ hex: String) throws -> [UInt8] {
        try stride(from: 0, to: hex.count, by: 2).map { offset in
            let start = hex.index(hex.startIndex, offsetBy: offset)
            return try #require(UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16))
        }
    }

    /// The HELLO of the vectors; `maximumMessageLength` nil: from a release without fragments.
    static func vectorHello(
        maximumMessageLength: Int? = 128 << 20,
        features: Hello.Features = [],
        reads: [String]? = nil
    ) throws -> Hello {
        var hello = try Hello(
            peerID: signer.key.peerID,
            key: signer.key,
            incarnation: 7,
            displayName: "Captain",
            metadata: ["seat": "L"],
            keepalive: KeepaliveParameters(interval: .milliseconds(500), timeout: .milliseconds(1500)),
            maximumMessageLength: maximumMessageLength
        )
        hello.features = features
        hello.reads = try reads.map(MessageTypeList.init)
        return try hello.signed(exporter: exporter, side: .dialler, sign: signer.sign)
    }

    /// The resource of the vectors (section 3c): the ten bytes 00 to 09, offered as `chart.pdf`.
    static let resourceID = UUID(uuidString: "00112233-4455-6677-8899-aabbccddeeff")!
    static let resourceBytes = [UInt8](0..<10)

    /// The message of the binary encoding's vectors (section 2a).
    struct PositionReport: Codable, Equatable {
        var waypoint = "KPDX"
        var latitude = 45.5887
        var altitude = -30
        var sample = Data([1, 2, 3])
        var id = UUID(uuidString: "00112233-4455-6677-8899-aabbccddeeff")!
        var note: String?
        var fixes = [1, 500]
    }

    /// W3C Trace Context's example (section 2c's vectors).
    static let traceContext = TraceContext(
        fitting: [
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "tracestate": "congo=t61rcWkgMzE",
        ]
    )!

    static func expectedMessages() throws -> [String: LinkMessage] {
        var payload = ByteBuffer()
        payload.writeString(#"{"id":1}"#)
        var binary = ByteBuffer()
        try MessageEncoding.binary.encode(PositionReport(), into: &binary)
        return [
            "data-binary": .data(try DataMessage(sequence: 7, typeName: "PositionReport", payload: binary)),
            "hello": .hello(try vectorHello()),
            "hello-without-fragments": .hello(try vectorHello(maximumMessageLength: nil)),
            "fragment": .fragment(
                try Fragment(
                    sequence: 9,
                    offset: 4,
                    length: 10,
                    typeName: "Chart",
                    bytes: ByteBuffer(bytes: [0x04, 0x05, 0x06, 0x07, 0x08, 0x09])
                )
            ),
            "ack-partial": .ack(12, partial: PartialMessage(sequence: 9, received: 4)),
            "ping": .ping(Probe(nonce: 1, timestamp: 1_000_000_000)),
            "pong": .pong(Probe(nonce: 1, timestamp: 1_000_000_000)),
            "data": .data(try DataMessage(sequence: 42, typeName: "NavlogEntry", payload: payload)),
            "ack": .ack(42),
            "goodbye": .goodbye(.keepaliveTimeout, "no traffic for 1.5 s"),
            "flow": .flow(reading: false),
            "reject": .reject(Rejection(sequence: 42, typeName: "NavlogEntry", reason: #"expected a number for "id""#)),
            "hello-with-features": .hello(try vectorHello(features: .resources)),
            "hello-with-types": .hello(
                try vectorHello(features: [.resources, .streams], reads: ["NavlogMessage", "Note"])
            ),
            "hello-takes-types": .hello(try vectorHello(features: [.resources, .streams, .takesTypes])),
            "hello-takes-trace-context": .hello(
                try vectorHello(features: [.resources, .streams, .takesTypes, .traceContext])
            ),
            "data-traced": .data(
                try DataMessage(sequence: 42, typeName: "NavlogEntry", payload: payload, context: traceContext)
            ),
            "fragment-traced": .fragment(
                try Fragment(
                    sequence: 9,
                    offset: 4,
                    length: 10,
                    typeName: "Chart",
                    bytes: ByteBuffer(bytes: [0x04, 0x05, 0x06, 0x07, 0x08, 0x09]),
                    context: traceContext
                )
            ),
            "types": .types(.only(try MessageTypeList(["Weather", "NavlogMessage", "Note"]))),
            "types-every-but": .types(.allBut(try MessageTypeList(["Weather"]))),
            "types-every": .types(.every),
            "resource-offer": .resourceOffer(
                try ResourceOffer(
                    id: resourceID,
                    name: "chart.pdf",
                    length: 10,
                    sha256: Array(SHA256.hash(data: resourceBytes)),
                    metadata: ["entry": "7"]
                )
            ),
            "resource-want": .resourceWant(ResourceWant(id: resourceID, received: 4, granted: 10)),
            "resource-chunk": .resourceChunk(
                ResourceChunk(id: resourceID, offset: 4, bytes: ByteBuffer(bytes: resourceBytes[4...]))
            ),
            "resource-end": .resourceEnd(ResourceEnd(id: resourceID, reason: .complete, text: "")),
            "stream-open": .streamOpen(try StreamOpen(id: resourceID, resuming: false, name: "log")),
            "stream-want": .streamWant(
                StreamWant(id: resourceID, received: 4, granted: 4 + (256 << 10), endReceived: false)
            ),
            "stream-data": .streamData(
                StreamData(id: resourceID, offset: 4, end: true, bytes: ByteBuffer(bytes: resourceBytes[4...]))
            ),
            "stream-end": .streamEnd(StreamEnd(id: resourceID, reason: .cancelled, text: "")),
        ]
    }

    @Test func everyMessageEncodesToItsVector() throws {
        let vectors = try ProtocolVectors.load()
        for (name, message) in try Self.expectedMessages() {
            var bytes = ByteBuffer()
            message.writeFrame(to: &bytes)
            #expect(Array(bytes.readableBytesView) == vectors[name], "vector \(name)")
            var head = ByteBuffer()
            if let payload = message.writeFrameHead(to: &head) { head.writeImmutableBuffer(payload) }
            #expect(head == bytes, "writeFrameHead and its payload make the frame for \(name)")
        }
    }

    /// The frame fuzzer starts from every frame vector (Fuzz/Corpus/FrameFuzzer, one file each,
    /// named after it), so a new frame type is fuzzed from its first commit.
    @Test func theFrameFuzzerIsSeededWithEveryFrameVector() throws {
        let vectors = try ProtocolVectors.load()
        let corpus = ProtocolVectors.repositoryRoot.appendingPathComponent("Fuzz/Corpus/FrameFuzzer")
        for name in try Self.expectedMessages().keys {
            let seed = try? Data(contentsOf: corpus.appendingPathComponent(name))
            #expect(seed.map(Array.init) == vectors[name], "Fuzz/Corpus/FrameFuzzer/\(name) is the vector \(name)")
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

    @Test func theBinaryPayloadEncodesAndDecodesAsTheSpecSpellsOut() throws {
        let vector = try #require(try ProtocolVectors.load()["binary-payload"])
        var encoded = ByteBuffer()
        try MessageEncoding.binary.encode(PositionReport(), into: &encoded)
        #expect(Array(encoded.readableBytesView) == vector)
        #expect(try MessageEncoding.decode(PositionReport.self, from: ByteBuffer(bytes: vector)) == PositionReport())
        // The same message as JSON is read by the same call: the receiver needs no setting.
        var json = ByteBuffer()
        try MessageEncoding.json.encode(PositionReport(), into: &json)
        #expect(try MessageEncoding.decode(PositionReport.self, from: json) == PositionReport())
    }

    @Test func thePeerKeyDerivesItsIDAndFingerprint() throws {
        let vectors = try ProtocolVectors.load()
        let key = try PeerKey(rawRepresentation: try #require(vectors["peer-key"]))
        #expect(key == Self.signer.key)
        #expect(key.peerID == UUID(uuidString: "21fe31df-a154-8261-a26b-f854046fd227"))
        #expect(key.fingerprint == "21fe-31df-a154-a261")
    }

    /// An application's signature is made under its own context (docs/PROTOCOL.md 1.3): valid as
    /// one, never as the protocol's signature of the same bytes.
    @Test func anApplicationSignatureIsMadeUnderItsOwnContext() throws {
        let vectors = try ProtocolVectors.load()
        let key = try PeerKey(rawRepresentation: try #require(vectors["peer-key"]))
        let signature = try #require(vectors["application-signature"])
        let message = Array("abc".utf8)
        #expect(key.isValidSignature(signature, for: message))
        #expect(key.isValidProtocolSignature(signature, for: Array("multipeer application v1".utf8) + [0] + message))
        #expect(!key.isValidProtocolSignature(signature, for: message), "not the protocol's signature of the bytes")
        #expect(!key.isValidSignature(signature, for: Array("abd".utf8)))
    }

    @Test func theHelloSignsTheMessageTheSpecSpellsOut() throws {
        let vectors = try ProtocolVectors.load()
        var frame = ByteBuffer(bytes: try #require(vectors["hello"]))
        var decoder = FrameDecoder()
        let value = try #require(try decoder.decode(buffer: &frame)).value
        let unsigned = value.readableBytesView.dropLast(Hello.signatureLength)
        #expect(
            Hello.signedMessage(exporter: Self.exporter, side: .dialler, unsignedValue: ByteBufferView(unsigned))
                == vectors["hello-signed-message"]
        )
        let hello = try Hello(decoding: value)
        try hello.verify(value: value, exporter: Self.exporter, side: .dialler, peer: "the vector")
        #expect(throws: MultipeerError.self) {
            try hello.verify(value: value, exporter: Self.exporter, side: .listener, peer: "the vector")
        }
    }

    @Test func aVersion1HelloIsRefusedWithWhatToDo() throws {
        var buffer = ByteBuffer(bytes: try #require(try ProtocolVectors.load()["hello-v1"]))
        var decoder = FrameDecoder()
        let frame = try #require(try decoder.decode(buffer: &buffer))
        let error = try #require(throws: MultipeerError.self) { try LinkMessage(frame: frame) }
        #expect(error.code == .protocolVersionMismatch)
        #expect(error.message.contains("upgrade that peer to a release that speaks version 2"))
    }

    @Test func theUnknownTypeVectorIsTolerated() throws {
        var buffer = ByteBuffer(bytes: try #require(try ProtocolVectors.load()["unknown"]))
        var decoder = FrameDecoder()
        let frame = try #require(try decoder.decode(buffer: &buffer))
        #expect(try LinkMessage(frame: frame) == .unknown(FrameType(rawValue: 256)))
    }
}
