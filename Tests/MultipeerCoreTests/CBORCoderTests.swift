import Foundation
import MultipeerCore
import NIOCore
import Testing

/// The binary message encoding (CBOR, PROTOCOL.md 2a): what it writes byte for byte, that every
/// Codable shape comes back as it went, what another implementation may write instead, and that
/// malformed bytes from the network are refused with a `DecodingError`.
@Suite struct CBORCoderTests {
    static func encoded<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        var buffer = ByteBuffer()
        try CBOREncoder().encode(value, into: &buffer)
        return Array(buffer.readableBytesView)
    }

    static func decoded<Value: Decodable>(_ type: Value.Type, _ bytes: [UInt8]) throws -> Value {
        try CBORDecoder().decode(type, from: ByteBuffer(bytes: bytes))
    }

    static func roundTrip<Value: Codable & Equatable>(_ value: Value) throws -> Value {
        try decoded(Value.self, try encoded(value))
    }

    struct Note: Codable, Equatable {
        var text: String
    }

    enum Phase: Codable, Equatable {
        case taxi
        case climb(flightLevel: Int)
        case cruise(Int, mach: Double?)
    }

    struct Everything: Codable, Equatable {
        var flag = true
        var small: Int8 = -128
        var wide: Int64 = .min
        var huge: UInt64 = .max
        var unsigned: UInt16 = 65_535
        var int = -1
        var double = 3.141592653589793
        var float: Float = 0.5
        var text = "Grüße, ✈️"
        var empty = ""
        var none: String? = nil
        var some: Int? = 0
        var data = Data([0, 1, 2, 255])
        var bytes: [UInt8] = [9, 8, 7]
        var date = Date(timeIntervalSince1970: 1_795_000_000.25)
        var id = UUID(uuidString: "00112233-4455-6677-8899-AABBCCDDEEFF")!
        var url = URL(string: "https://example.com/a?b=c")!
        var list = [1, 2, 3]
        var nested = [[Note(text: "a")], []]
        var byName = ["b": 2, "a": 1]
        var byNumber = [7: "seven"]
        var phases: [Phase] = [.taxi, .climb(flightLevel: 350), .cruise(360, mach: nil)]
        var optionals: [Int?] = [1, nil, 3]
    }

    @Test func everyCodableShapeComesBackAsItWent() throws {
        #expect(try Self.roundTrip(Everything()) == Everything())
        #expect(try Self.roundTrip([Int8.min, 0, .max]) == [Int8.min, 0, .max])
        #expect(try Self.roundTrip("bare") == "bare")
        // Beyond 256 KiB a decoded Data shares the payload's storage instead of copying it.
        let large = Data((0..<(300 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        #expect(try Self.roundTrip(large) == large)
        #expect(try Self.roundTrip(Optional<Int>.none) == nil)
        let specials = try Self.decoded(
            [Double].self,
            try Self.encoded([Double.infinity, -0.0, .nan, .leastNonzeroMagnitude])
        )
        #expect(
            specials[0] == .infinity && specials[1].sign == .minus && specials[2].isNaN
                && specials[3] == .leastNonzeroMagnitude
        )
    }

    /// The vectors of PROTOCOL.md 2a.
    @Test func writesTheSpecifiedBytes() throws {
        // {"text": "hi"}: an indefinite map, a 4-byte text key, a 2-byte text value, a break.
        #expect(try Self.encoded(Note(text: "hi")) == [0xBF, 0x64, 0x74, 0x65, 0x78, 0x74, 0x62, 0x68, 0x69, 0xFF])
        // Integers in the fewest bytes; negative n as -1 - n; Double as float64.
        #expect(
            try Self.encoded([0, 23, 24, 255, 256, -1, -25, Int(UInt32.max) + 1]) == [
                0x9F, 0x00, 0x17, 0x18, 0x18, 0x18, 0xFF, 0x19, 0x01, 0x00, 0x20, 0x38, 0x18,
                0x1B, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0xFF,
            ]
        )
        #expect(try Self.encoded(1.5) == [0xFB, 0x3F, 0xF8, 0, 0, 0, 0, 0, 0])
        #expect(try Self.encoded(Data([1, 2])) == [0x42, 0x01, 0x02])
        #expect(
            try Self.encoded(UUID(uuidString: "00112233-4455-6677-8899-AABBCCDDEEFF")!) == [0xD8, 0x25, 0x50]
                + [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF]
        )
        #expect(try Self.encoded(Date(timeIntervalSince1970: 1)) == [0xC1, 0xFB, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0])
        // An optional that is nil is left out of a map, as JSON leaves it out.
        struct Maybe: Codable { var a: Int? }
        #expect(try Self.encoded(Maybe()) == [0xBF, 0xFF])
        #expect(try Self.encoded([Int?.none]) == [0x9F, 0xF6, 0xFF])
    }

    /// Another implementation may write definite lengths, shorter floats, integral numbers as
    /// integers, chunked strings, and a UUID or URL as plain text.
    @Test func readsWhatAnotherImplementationMayWrite() throws {
        #expect(
            try Self.decoded(Note.self, [0xA1, 0x64, 0x74, 0x65, 0x78, 0x74, 0x62, 0x68, 0x69]) == Note(text: "hi")
        )
        #expect(
            try Self.decoded(Note.self, [0xBF, 0x64, 0x74, 0x65, 0x78, 0x74, 0x7F, 0x61, 0x68, 0x61, 0x69, 0xFF, 0xFF])
                == Note(text: "hi")
        )
        #expect(try Self.decoded(Double.self, [0xF9, 0x3E, 0x00]) == 1.5)  // half precision
        #expect(try Self.decoded(Double.self, [0xFA, 0x3F, 0xC0, 0x00, 0x00]) == 1.5)
        #expect(try Self.decoded(Double.self, [0x18, 0x64]) == 100)
        #expect(try Self.decoded(Float.self, [0x38, 0x63]) == -100)
        #expect(try Self.decoded([Int].self, [0x83, 0x01, 0x02, 0x03]) == [1, 2, 3])
        let text = Array("00112233-4455-6677-8899-AABBCCDDEEFF".utf8)
        #expect(
            try Self.decoded(UUID.self, [0x78, UInt8(text.count)] + text)
                == UUID(uuidString: "00112233-4455-6677-8899-AABBCCDDEEFF")
        )
        #expect(try Self.decoded(Data.self, [0x5F, 0x41, 0x01, 0x41, 0x02, 0xFF]) == Data([1, 2]))
        // Keys beyond ASCII: {"é": 1, "a": 2}.
        #expect(
            try Self.decoded([String: Int].self, [0xA2, 0x62, 0xC3, 0xA9, 0x01, 0x61, 0x61, 0x02]) == ["é": 1, "a": 2]
        )
    }

    @Test func aValueOfTheWrongShapeIsATypeMismatchNamingWhere() throws {
        let error = try #require(throws: DecodingError.self) {
            try Self.decoded(Note.self, [0xBF, 0x64, 0x74, 0x65, 0x78, 0x74, 0x01, 0xFF])
        }
        guard case .typeMismatch(_, let context) = error else {
            Issue.record("\(error)")
            return
        }
        #expect(context.codingPath.map(\.stringValue) == ["text"])
        #expect(context.debugDescription == "expected String, found an integer at byte 6")
        #expect(throws: DecodingError.self) { try Self.decoded(Int8.self, [0x18, 0x80]) }  // 128 does not fit
        #expect(throws: DecodingError.self) { try Self.decoded(UInt.self, [0x20]) }  // -1
        // -1 - 2^63
        #expect(throws: DecodingError.self) { try Self.decoded(Int64.self, [0x3B, 0x80, 0, 0, 0, 0, 0, 0, 0]) }
        #expect(throws: DecodingError.self) { try Self.decoded(Note.self, [0xBF, 0xFF]) }  // no "text"
    }

    /// Bytes from the network: each malformation is a `DecodingError.dataCorrupted` saying what.
    @Test(
        arguments: [
            ([0xBF, 0x64, 0x74, 0x65, 0x78, 0x74], "at byte 6: the data ends"),  // a key without its value
            ([0x1C], "reserved additional information 28"),
            ([0x1F], "an indefinite length for major type 0"),
            ([0x9B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], "items announced, more than the bytes left"),
            ([0x5A, 0xFF, 0xFF, 0xFF, 0xFF], "more than the bytes left"),
            ([0xFF], "a break outside an indefinite-length item"),
            ([0x01, 0x02], "at byte 1: more bytes after the value"),
            ([0xA2, 0x61, 0x61, 0x01, 0x61, 0x61, 0x02], "the key \"a\" twice"),
            ([0xA2, 0x61, 0x61, 0x01, 0x7F, 0x61, 0x61, 0xFF, 0x02], "the key \"a\" twice"),  // once in a chunk
            (
                [0xB1] + (0..<16).flatMap { [0x61, 0x61 + UInt8($0), 0x01] } + [0x61, 0x61, 0x02], "the key \"a\" twice"
            ),  // 17 keys
            ([0xA1, 0x61, 0xFF, 0x01], "is not valid UTF-8"),
            ([0xA1, 0x01, 0x02], "a map key that is an integer, not a text string"),
            ([0x5F, 0x61, 0x61, 0xFF], "a chunk of an indefinite-length string is not a definite string of its type"),
            ([0x9F, 0x01], "the data ends inside an indefinite-length item"),
            (Array(repeating: 0x81, count: 200) + [0x01], "nested deeper than 128 levels"),
        ] as [([UInt8], String)]
    )
    func malformedBytesAreRefusedSayingWhat(bytes: [UInt8], what: String) throws {
        let error = try #require(throws: DecodingError.self) { try Self.decoded(Note.self, bytes) }
        guard case .dataCorrupted(let context) = error else {
            Issue.record("\(error)")
            return
        }
        #expect(context.debugDescription.contains(what), "\(context.debugDescription)")
    }

    @Test func invalidUTF8IsRefused() throws {
        let error = try #require(throws: DecodingError.self) { try Self.decoded(String.self, [0x62, 0xC3, 0x28]) }
        guard case .dataCorrupted(let context) = error else {
            Issue.record("\(error)")
            return
        }
        #expect(context.debugDescription.hasSuffix("is not valid UTF-8"))
    }

    /// Classes encode their superclass under "super", through a nested encoder.
    class Base: Codable {
        var name = "base"
    }

    final class Derived: Base {
        var extra = 1
        enum CodingKeys: CodingKey { case extra }
        override init() { super.init() }
        required init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            extra = try container.decode(Int.self, forKey: .extra)
            try super.init(from: container.superDecoder())
        }
        override func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try super.encode(to: container.superEncoder())
            try container.encode(extra, forKey: .extra)
        }
    }

    @Test func aSuperclassTravelsUnderSuper() throws {
        let value = Derived()
        value.name = "derived"
        value.extra = 7
        let decoded = try Self.decoded(Derived.self, try Self.encoded(value))
        #expect(decoded.name == "derived" && decoded.extra == 7)
    }

    /// A nested encoder handed out and never written to is an empty map, as a value that
    /// encodes nothing is.
    @Test func aNestedEncoderLeftUnusedIsAnEmptyMap() throws {
        struct Lazy: Encodable {
            enum CodingKeys: CodingKey { case unused, after }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                _ = container.superEncoder(forKey: .unused)
                try container.encode(1, forKey: .after)
            }
        }
        // {"unused": {}, "after": 1}
        #expect(
            try Self.encoded(Lazy()) == [0xBF, 0x66] + Array("unused".utf8) + [0xA0, 0x65] + Array("after".utf8) + [
                0x01, 0xFF,
            ]
        )
    }

    /// Writing to a container after its parent went on would put bytes in the wrong place: it is
    /// refused instead.
    @Test func aContainerWrittenAfterItsParentWentOnIsRefused() throws {
        struct Interleaved: Encodable {
            enum CodingKeys: CodingKey { case first, second }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                var first = container.nestedUnkeyedContainer(forKey: .first)
                try first.encode(1)
                var second = container.nestedUnkeyedContainer(forKey: .second)
                try second.encode(2)
                try first.encode(3)
            }
        }
        #expect(throws: EncodingError.self) { try Self.encoded(Interleaved()) }
    }
}
