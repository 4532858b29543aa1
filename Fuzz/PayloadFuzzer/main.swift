// A DATA payload as a receiver reads it (MessageEncoding.decode: CBOR after its tag, else JSON),
// into a value that takes any shape of data. Any input must decode, or fail with a
// DecodingError: never a trap. A decoded value encodes (binary) and decodes to the same bytes
// again.
import Foundation
import FuzzSupport
import MultipeerCore
import NIOCore

/// Any data: whichever container or single value the input holds, tried in turn.
indirect enum AnyValue: Codable {
    case null
    case bool(Bool)
    case unsigned(UInt64)
    case signed(Int64)
    case double(Double)
    case text(String)
    case bytes(Data)
    case date(Date)
    case id(UUID)
    case array([AnyValue])
    case map([String: AnyValue])

    struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    init(from decoder: any Decoder) throws {
        if let map = try? decoder.container(keyedBy: Key.self) {
            self = .map(
                try Dictionary(
                    uniqueKeysWithValues: map.allKeys.map {
                        ($0.stringValue, try map.decode(AnyValue.self, forKey: $0))
                    }
                )
            )
            return
        }
        if var array = try? decoder.unkeyedContainer() {
            var items: [AnyValue] = []
            while !array.isAtEnd { items.append(try array.decode(AnyValue.self)) }
            self = .array(items)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let value = try? single.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? single.decode(UInt64.self) {
            self = .unsigned(value)
        } else if let value = try? single.decode(Int64.self) {
            self = .signed(value)
        } else if let value = try? single.decode(Double.self) {
            self = .double(value)
        } else if let value = try? single.decode(String.self) {
            self = .text(value)
        } else if let value = try? single.decode(Data.self) {
            self = .bytes(value)
        } else if let value = try? single.decode(Date.self) {
            self = .date(value)
        } else {
            self = .id(try single.decode(UUID.self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        switch self {
        case .map(let map):
            var container = encoder.container(keyedBy: Key.self)
            for key in map.keys.sorted() { try container.encode(map[key]!, forKey: Key(stringValue: key)) }
        case .array(let items):
            var container = encoder.unkeyedContainer()
            for item in items { try container.encode(item) }
        case .null:
            var container = encoder.singleValueContainer()
            try container.encodeNil()
        case .bool(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .unsigned(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .signed(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .double(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .text(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .bytes(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .date(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        case .id(let value):
            var container = encoder.singleValueContainer()
            try container.encode(value)
        }
    }
}

func binary(_ value: AnyValue) throws -> ByteBuffer {
    var buffer = ByteBuffer()
    try MessageEncoding.binary.encode(value, into: &buffer)
    return buffer
}

let payloadFuzzer: FuzzTarget = { data, size in
    refusalsOnly(DecodingError.self) {
        let value = try MessageEncoding.decode(AnyValue.self, from: ByteBuffer(bytes: bytes(data, size)))
        let encoded = try binary(value)
        let again = try binary(try MessageEncoding.decode(AnyValue.self, from: encoded))
        precondition(again == encoded, "a decoded payload encodes and decodes to the same bytes")
    }
    return 0
}

#if FUZZING
@_cdecl("PayloadFuzzer_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runLibFuzzer(argc, argv, payloadFuzzer)
}
#else
// (A declaration: the fuzzing build parses this file as a library.)
let replayed: Void = replayCorpus(payloadFuzzer)
#endif
