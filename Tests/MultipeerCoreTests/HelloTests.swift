import Crypto
import Foundation
import MultipeerCore
import NIOCore
import Testing

/// A signing key pair for tests of the core (the session's is ``PeerIdentity``, a layer up).
struct TestSigner {
    let privateKey: Curve25519.Signing.PrivateKey
    var key: PeerKey { try! PeerKey(rawRepresentation: privateKey.publicKey.rawRepresentation) }

    init(rawPrivateKey: [UInt8]? = nil) {
        privateKey =
            rawPrivateKey.map { try! Curve25519.Signing.PrivateKey(rawRepresentation: $0) }
            ?? Curve25519.Signing.PrivateKey()
    }

    func sign(_ message: [UInt8]) throws -> [UInt8] { Array(try privateKey.signature(for: message)) }
}

@Suite struct HelloTests {
    static let exporter = [UInt8](repeating: 0x5A, count: Hello.exporterLength)

    static func hello(
        name: String = "Navigator",
        metadata: [String: String] = ["seat": "R", "role": "FO"],
        signer: TestSigner = TestSigner()
    ) throws -> Hello {
        try Hello(
            peerID: signer.key.peerID,
            key: signer.key,
            incarnation: .random(in: 0...UInt64.max),
            displayName: name,
            metadata: metadata
        )
        .signed(exporter: exporter, side: .dialler, sign: signer.sign)
    }

    static func encode(_ hello: Hello) -> ByteBuffer {
        var buffer = ByteBuffer()
        hello.encode(into: &buffer)
        return buffer
    }

    @Test func roundTripsWithUnicodeAndNoMetadata() throws {
        for hello in [try Self.hello(), try Self.hello(name: "K", metadata: [:]), try Self.hello(name: "Kapitän ✈︎")] {
            let encoded = Self.encode(hello)
            let decoded = try Hello(decoding: encoded)
            #expect(decoded == hello)
            try decoded.verify(value: encoded, exporter: Self.exporter, side: .dialler, peer: "the test")
        }
    }

    @Test func theSignatureBindsTheConnectionTheSideAndEveryByte() throws {
        let encoded = Self.encode(try Self.hello())
        let hello = try Hello(decoding: encoded)
        var otherExporter = Self.exporter
        otherExporter[0] ^= 1
        for (exporter, side) in [(otherExporter, Hello.Side.dialler), (Self.exporter, .listener)] {
            let error = try #require(throws: MultipeerError.self) {
                try hello.verify(value: encoded, exporter: exporter, side: side, peer: "peer at 198.18.0.9:7000")
            }
            #expect(error.code == .badSignature)
            #expect(error.message.contains("peer at 198.18.0.9:7000"))
        }
        // Any byte before the signature changed (the incarnation's last, here): the signature fails.
        var altered = encoded
        let offset = 2 + 16 + 32 + 7
        altered.setInteger(altered.getInteger(at: offset, as: UInt8.self)! ^ 1, at: offset)
        #expect(throws: MultipeerError.self) {
            try Hello(decoding: altered).verify(value: altered, exporter: Self.exporter, side: .dialler, peer: "p")
        }
    }

    @Test func aKeyThatDoesNotDeriveTheClaimedIDIsAnIdentityMismatch() throws {
        let impostor = TestSigner()
        let victim = TestSigner().key.peerID
        let hello = try Hello(peerID: victim, key: impostor.key, incarnation: .max, displayName: "bravo")
            .signed(exporter: Self.exporter, side: .dialler, sign: impostor.sign)
        let encoded = Self.encode(hello)
        let error = try #require(throws: MultipeerError.self) {
            try Hello(decoding: encoded).verify(
                value: encoded,
                exporter: Self.exporter,
                side: .dialler,
                peer: "peer at 198.18.0.9:7000"
            )
        }
        #expect(error.code == .identityMismatch)
        #expect(error.message.contains("\(victim)") && error.message.contains("198.18.0.9"))
    }

    @Test func reservedBytesBeforeTheSignatureAreIgnoredAndSigned() throws {
        let signer = TestSigner()
        let hello = try Self.hello(signer: signer)
        var unsigned = Self.encode(hello)
        unsigned.moveWriterIndex(to: unsigned.writerIndex - Hello.signatureLength)
        unsigned.writeBytes([1, 2, 3, 4])  // a later version's field
        let signature = try signer.sign(
            Hello.signedMessage(exporter: Self.exporter, side: .dialler, unsignedValue: unsigned.readableBytesView)
        )
        unsigned.writeBytes(signature)
        let decoded = try Hello(decoding: unsigned)
        try decoded.verify(value: unsigned, exporter: Self.exporter, side: .dialler, peer: "p")
        #expect(decoded.displayName == hello.displayName && decoded.maximumFrameLength == hello.maximumFrameLength)
    }

    @Test func anotherProtocolVersionIsRejectedBeforeTheRestWithWhatToDo() throws {
        let older = try #require(throws: MultipeerError.self) { try Hello(decoding: ByteBuffer(bytes: [0, 1])) }
        #expect(older.code == .protocolVersionMismatch)
        #expect(older.message.contains("version 1") && older.message.contains("upgrade that peer"))
        let newer = try #require(throws: MultipeerError.self) { try Hello(decoding: ByteBuffer(bytes: [0, 3])) }
        #expect(newer.message.contains("upgrade this peer"))
    }

    @Test func everyTruncationIsMalformedAndSaysWhere() throws {
        let full = Self.encode(try Self.hello())
        for length in 2..<full.readableBytes {
            let error = try #require(throws: MultipeerError.self) {
                try Hello(decoding: full.getSlice(at: 0, length: length)!)
            }
            #expect(error.code == .malformedMessage)
            #expect(error.message.hasPrefix("HELLO is malformed: it ends before"))
        }
    }

    @Test func theMaximumFrameIsBounded() throws {
        let signer = TestSigner()
        var small = try Hello(peerID: signer.key.peerID, key: signer.key, incarnation: 1, displayName: "x")
        small.maximumFrameLength = 1_000
        let error = try #require(throws: MultipeerError.self) {
            try Hello(decoding: Self.encode(small.signed(exporter: Self.exporter, side: .dialler, sign: signer.sign)))
        }
        #expect(error.code == .malformedMessage)
        #expect(error.message.contains("16384"))
    }

    @Test func limitsAreEnforcedOnBothSides() throws {
        let longName = String(repeating: "x", count: Hello.maximumDisplayNameLength + 1)
        #expect(throws: MultipeerError.self) { try Self.hello(name: longName) }
        #expect(throws: MultipeerError.self) { try Self.hello(name: "") }
        #expect(throws: MultipeerError.self) { try Self.hello(name: "two\nlines") }
        #expect(throws: MultipeerError.self) { try Self.hello(metadata: ["k": String(repeating: "v", count: 254)]) }
        #expect(throws: MultipeerError.self) { try Self.hello(metadata: ["a=b": "c"]) }
        let tooMany = Dictionary(uniqueKeysWithValues: (0...Hello.maximumMetadataCount).map { ("k\($0)", "v") })
        #expect(throws: MultipeerError.self) { try Self.hello(metadata: tooMany) }

        // Hand-made HELLOs that a receiver refuses: a 251-byte name, an empty one.
        for name in [[UInt8](repeating: 0x61, count: 251), []] {
            let error = try #require(throws: MultipeerError.self) { try Hello(decoding: Self.handMade(name: name)) }
            #expect(error.code == .malformedMessage)
            #expect(error.message.contains("display name"))
        }
    }

    @Test func metadataOutOfOrderOrRepeatedIsMalformed() throws {
        for keys in [["seat", "role"], ["seat", "seat"]] {
            let error = try #require(throws: MultipeerError.self) {
                try Hello(decoding: Self.handMade(metadataKeys: keys))
            }
            #expect(error.code == .malformedMessage)
            #expect(error.message.contains("sorted"))
        }
    }

    @Test func invalidUTF8IsMalformed() throws {
        let error = try #require(throws: MultipeerError.self) {
            try Hello(decoding: Self.handMade(name: [0xC3, 0x28]))
        }
        #expect(error.message.contains("not valid UTF-8"))
    }

    /// A version 2 HELLO value written by hand, with a signature of zeros.
    static func handMade(name: [UInt8] = Array("ok".utf8), metadataKeys: [String] = []) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt16(2))
        buffer.writeBytes([UInt8](repeating: 0xAB, count: 16 + 32))
        buffer.writeMultipleIntegers(UInt64(1), UInt32(500), UInt32(1500))
        buffer.writeInteger(UInt8(name.count))
        buffer.writeBytes(name)
        buffer.writeInteger(UInt8(metadataKeys.count))
        for key in metadataKeys {
            buffer.writeInteger(UInt8(key.utf8.count))
            buffer.writeString(key)
            buffer.writeInteger(UInt8(0))
        }
        buffer.writeInteger(UInt32(1 << 20))
        buffer.writeBytes([UInt8](repeating: 0, count: Hello.signatureLength))
        return buffer
    }

    @Test func malformedPingAndDataNameWhatIsMissing() throws {
        let ping = try #require(throws: MultipeerError.self) {
            try LinkMessage(frame: Frame(type: .ping, value: ByteBuffer(bytes: [0, 0, 0])))
        }
        #expect(ping.message == "PING is malformed: it ends before the nonce")
        let data = try #require(throws: MultipeerError.self) {
            try LinkMessage(frame: Frame(type: .data, value: ByteBuffer(bytes: [0, 0, 0, 0, 0, 0, 0, 1, 9, 0x41])))
        }
        #expect(data.message == "DATA is malformed: it ends before the type name")
    }
}

@Suite struct HelloFeatureTests {
    static func hello(features: Hello.Features) throws -> Hello {
        let identity = TestSigner()
        var hello = try Hello(
            peerID: identity.key.peerID,
            key: identity.key,
            incarnation: 1,
            displayName: "Nav",
            maximumMessageLength: 1 << 20
        )
        hello.features = features
        return try hello.signed(exporter: HelloTests.exporter, side: .dialler, sign: identity.sign)
    }

    @Test func featuresRoundTripAndAHelloWithoutThemTakesNone() throws {
        for features: Hello.Features in [[], .resources, .streams, [.resources, .streams]] {
            #expect(try Hello(decoding: HelloTests.encode(Self.hello(features: features))).features == features)
        }
    }

    @Test func bitsThisVersionDoesNotKnowAreIgnored() throws {
        let hello = try Hello(decoding: HelloTests.encode(Self.hello(features: Hello.Features(rawValue: 0x8000_0003))))
        #expect(hello.features == [.resources, .streams])
    }
}
