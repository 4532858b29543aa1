import MultipeerCore
import NIOCore
import NIOTestUtils
import Testing

@Suite struct FrameDecoderTests {
    static func frame(_ type: FrameType, _ bytes: [UInt8]) -> Frame {
        Frame(type: type, value: ByteBuffer(bytes: bytes))
    }

    static func encoded(_ frames: [Frame]) -> ByteBuffer {
        var buffer = ByteBuffer()
        for frame in frames { frame.write(to: &buffer) }
        return buffer
    }

    /// One frame of every type, known and unknown, with empty and non-empty values.
    static let mixedFrames: [Frame] = [
        frame(.hello, [0, 1, 2]),
        frame(.ping, Array(repeating: 7, count: 16)),
        frame(.pong, []),
        frame(.data, Array(0..<200).map { UInt8($0) }),
        frame(.ack, [0, 0, 0, 0, 0, 0, 0, 42]),
        frame(.goodbye, [0, 1, 0]),
        frame(FrameType(rawValue: 0xFFFF_FFFF), [0xDE, 0xAD]),
    ]

    @Test func everyTypeRoundTripsThroughNIOsDecoderVerifier() throws {
        // The verifier feeds the input all at once, byte by byte, and in random splits,
        // and checks the decoder produces the same frames each way.
        let pairs =
            Self.mixedFrames.map { (Self.encoded([$0]), [$0]) } + [(Self.encoded(Self.mixedFrames), Self.mixedFrames)]
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs) { FrameDecoder() }
    }

    @Test func splittingAtEveryOffsetGivesTheSameFrames() throws {
        let stream = Self.encoded(Self.mixedFrames)
        for offset in 0...stream.readableBytes {
            var decoder = FrameDecoder()
            var accumulated = ByteBuffer()
            var decoded: [Frame] = []
            for part in [
                stream.getSlice(at: 0, length: offset)!,
                stream.getSlice(at: offset, length: stream.readableBytes - offset)!,
            ] {
                var part = part
                accumulated.writeBuffer(&part)
                while let frame = try decoder.decode(buffer: &accumulated) { decoded.append(frame) }
            }
            #expect(decoded == Self.mixedFrames, "split at \(offset)")
        }
    }

    @Test func anOversizeLengthIsRejectedFromTheHeaderAlone() throws {
        var decoder = FrameDecoder(maximumLength: 1024)
        // A header announcing 4 GiB - 1 with no value behind it: rejected before anything is buffered.
        var buffer = ByteBuffer(bytes: [0, 0, 0, 4, 0xFF, 0xFF, 0xFF, 0xFF])
        let error = try #require(throws: MultipeerError.self) { try decoder.decode(buffer: &buffer) }
        #expect(error.code == .frameTooLarge)
        #expect(error.message.contains("4294967295"))
        #expect(error.message.contains("1024"))
    }

    @Test func theFirstFrameHasALimitOfItsOwn() throws {
        var decoder = FrameDecoder(maximumLength: 1 << 20, firstFrameMaximumLength: Hello.maximumLength)
        var buffer = ByteBuffer()
        buffer.writeMultipleIntegers(FrameType.hello.rawValue, UInt32(1_000_000))
        let error = try #require(throws: MultipeerError.self) { try decoder.decode(buffer: &buffer) }
        #expect(error.code == .frameTooLarge)
        #expect(
            error.message
                == "a HELLO frame announced 1000000 bytes, more than the limit of 16384 for a link's first frame"
        )
        // After the first frame, the general limit applies.
        var decoder2 = FrameDecoder(maximumLength: 1 << 20, firstFrameMaximumLength: 16)
        var frames = ByteBuffer()
        frames.writeMultipleIntegers(FrameType.hello.rawValue, UInt32(16))
        frames.writeRepeatingByte(1, count: 16)
        frames.writeMultipleIntegers(FrameType.data.rawValue, UInt32(1000))
        frames.writeRepeatingByte(2, count: 1000)
        #expect(try decoder2.decode(buffer: &frames)?.value.readableBytes == 16)
        #expect(try decoder2.decode(buffer: &frames)?.value.readableBytes == 1000)
    }

    @Test func aFrameAtExactlyTheLimitIsAccepted() throws {
        var decoder = FrameDecoder(maximumLength: 16)
        var buffer = Self.encoded([Self.frame(.data, Array(repeating: 1, count: 16))])
        #expect(try decoder.decode(buffer: &buffer)?.value.readableBytes == 16)
    }

    @Test func aTruncatedFrameWaitsAndFailsOnlyAtEOF() throws {
        var decoder = FrameDecoder()
        var whole = Self.encoded([Self.frame(.data, [1, 2, 3, 4])])
        var partial = whole.readSlice(length: 10)!
        #expect(try decoder.decode(buffer: &partial) == nil)
        #expect(try decoder.decodeLast(buffer: &partial, seenEOF: false) == nil)
        let error = try #require(throws: MultipeerError.self) {
            try decoder.decodeLast(buffer: &partial, seenEOF: true)
        }
        #expect(error.code == .truncatedFrame)
    }

    @Test func unknownTypesDecodeAsUnknownMessages() throws {
        let message = try LinkMessage(frame: Self.frame(FrameType(rawValue: 999), [1, 2, 3]))
        #expect(message == .unknown(FrameType(rawValue: 999)))
        #expect(FrameType(rawValue: 999) == .unknown(999))
    }

    /// Each frame of docs/PROTOCOL.md 2 has its case, numbered as the table says; every other
    /// number is unknown, whatever it is.
    @Test func everyKnownTypeHasItsNumberAndNameAndTheRestAreUnknown() {
        #expect(FrameType.known.map(\.rawValue) == Array(1...20))
        #expect(
            FrameType.known.allSatisfy { FrameType(rawValue: $0.rawValue) == $0 && !$0.description.hasPrefix("type ") }
        )
        #expect(Set(FrameType.known.map(\.description)).count == 20, "one name each")
        for number: UInt32 in [0, 21, 4_096, .max] {
            #expect(FrameType(rawValue: number) == .unknown(number) && FrameType(rawValue: number).rawValue == number)
        }
    }

    @Test func aFlowSaysZeroOrOneAndNothingElse() throws {
        #expect(try LinkMessage(frame: Self.frame(.flow, [0])) == .flow(reading: false))
        #expect(try LinkMessage(frame: Self.frame(.flow, [1])) == .flow(reading: true))
        let other = try #require(throws: MultipeerError.self) { try LinkMessage(frame: Self.frame(.flow, [2])) }
        #expect(other.code == .malformedMessage)
        let empty = try #require(throws: MultipeerError.self) { try LinkMessage(frame: Self.frame(.flow, [])) }
        #expect(empty.code == .malformedMessage)
    }

    @Test func aRejectNamesAReliableMessageAndEndsWithItsReason() throws {
        let valid: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 3, 1, 0x41, 2, 0x6e, 0x6f]
        #expect(
            try LinkMessage(frame: Self.frame(.reject, valid))
                == .reject(Rejection(sequence: 3, typeName: "A", reason: "no"))
        )
        let unreliable = try #require(throws: MultipeerError.self) {
            try LinkMessage(frame: Self.frame(.reject, [0, 0, 0, 0, 0, 0, 0, 0] + valid.dropFirst(8)))
        }
        #expect(unreliable.message.hasPrefix("REJECT is malformed: sequence number 0"))
        let trailing = try #require(throws: MultipeerError.self) {
            try LinkMessage(frame: Self.frame(.reject, valid + [0]))
        }
        #expect(trailing.code == .malformedMessage)
        let short = try #require(throws: MultipeerError.self) {
            try LinkMessage(frame: Self.frame(.reject, Array(valid.dropLast(1))))
        }
        #expect(short.message == "REJECT is malformed: it ends before the reason")
    }

    @Test func aLongReasonIsCutAtACharactersEndToWhatAShortStringHolds() throws {
        // 254 bytes, then a character of two: the cut falls inside it, so it goes whole.
        let reason = String(repeating: "x", count: 254) + "é" + "tail"
        var bytes = ByteBuffer()
        LinkMessage.reject(Rejection(sequence: 1, typeName: "A", reason: reason)).writeFrame(to: &bytes)
        var decoder = FrameDecoder(maximumLength: 1 << 20)
        let frame = try #require(try decoder.decode(buffer: &bytes))
        #expect(
            try LinkMessage(frame: frame)
                == .reject(Rejection(sequence: 1, typeName: "A", reason: String(repeating: "x", count: 254)))
        )
    }
}
