import Foundation
import MultipeerCore
import NIOCore
import Testing

@Suite struct HelloTests {
    static func hello(name: String = "Navigator", metadata: [String: String] = ["seat": "R", "role": "FO"]) throws -> Hello {
        try Hello(peerID: UUID(), incarnation: .random(in: 0...UInt64.max), displayName: name, metadata: metadata)
    }

    static func encode(_ hello: Hello) -> ByteBuffer {
        var buffer = ByteBuffer()
        hello.encode(into: &buffer)
        return buffer
    }

    @Test func roundTripsWithUnicodeAndEmptyFields() throws {
        for hello in [try Self.hello(), try Self.hello(name: "", metadata: [:]), try Self.hello(name: "Kapitän ✈︎")] {
            #expect(try Hello(decoding: Self.encode(hello)) == hello)
        }
    }

    @Test func trailingBytesAreIgnoredForLaterVersions() throws {
        let hello = try Self.hello()
        var buffer = Self.encode(hello)
        buffer.writeBytes([1, 2, 3, 4])
        #expect(try Hello(decoding: buffer) == hello)
    }

    @Test func anotherProtocolVersionIsRejectedBeforeTheRest() throws {
        // Version 2 followed by nothing: the version is all a receiver needs to refuse.
        let error = try #require(throws: MultipeerError.self) { try Hello(decoding: ByteBuffer(bytes: [0, 2])) }
        #expect(error.code == .protocolVersionMismatch)
        #expect(error.message.contains("version 2"))
    }

    @Test func everyTruncationIsMalformedAndNamesTheField() throws {
        let full = Self.encode(try Self.hello())
        // (Without its last field, the maximum frame, it is a HELLO of the first release.)
        for length in 2..<full.readableBytes where length != full.readableBytes - 4 {
            let error = try #require(throws: MultipeerError.self) { try Hello(decoding: full.getSlice(at: 0, length: length)!) }
            #expect(error.code == .malformedMessage)
            #expect(error.message.hasPrefix("HELLO is malformed: it ends before the"))
        }
    }

    @Test func theMaximumFrameIsOptionalAndBounded() throws {
        let hello = try Self.hello()
        var earlier = Self.encode(hello)
        earlier.moveWriterIndex(to: earlier.writerIndex - 4)
        #expect(try Hello(decoding: earlier).maximumFrameLength == 1 << 20, "a HELLO of the first release: the default")
        var small = try Self.hello()
        small.maximumFrameLength = 1_000
        let error = try #require(throws: MultipeerError.self) { try Hello(decoding: Self.encode(small)) }
        #expect(error.code == .malformedMessage)
        #expect(error.message.contains("16384"))
    }

    @Test func limitsAreEnforcedOnBothSides() throws {
        let longName = String(repeating: "x", count: Hello.maximumDisplayNameLength + 1)
        #expect(throws: MultipeerError.self) { try Self.hello(name: longName) }
        #expect(throws: MultipeerError.self) { try Self.hello(metadata: ["k": String(repeating: "v", count: 254)]) }
        #expect(throws: MultipeerError.self) { try Self.hello(metadata: ["a=b": "c"]) }
        let tooMany = Dictionary(uniqueKeysWithValues: (0...Hello.maximumMetadataCount).map { ("k\($0)", "v") })
        #expect(throws: MultipeerError.self) { try Self.hello(metadata: tooMany) }

        // A hand-made HELLO whose name is 251 bytes: a receiver refuses it too.
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt16(1))
        buffer.writeBytes([UInt8](repeating: 0xAB, count: 16))
        buffer.writeMultipleIntegers(UInt64(1), UInt32(500), UInt32(1500))
        buffer.writeInteger(UInt8(251))
        buffer.writeBytes([UInt8](repeating: 0x61, count: 251))
        buffer.writeInteger(UInt8(0))
        let error = try #require(throws: MultipeerError.self) { try Hello(decoding: buffer) }
        #expect(error.code == .malformedMessage)
        #expect(error.message.contains("display name"))
    }

    @Test func invalidUTF8IsMalformed() throws {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt16(1))
        buffer.writeBytes([UInt8](repeating: 0, count: 16))
        buffer.writeMultipleIntegers(UInt64(1), UInt32(500), UInt32(1500))
        buffer.writeBytes([2, 0xC3, 0x28, 0])
        let error = try #require(throws: MultipeerError.self) { try Hello(decoding: buffer) }
        #expect(error.message.contains("not valid UTF-8"))
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
