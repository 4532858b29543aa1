import Foundation
package import NIOCore
import NIOFoundationCompat

/// Decodes `Decodable` values from CBOR (RFC 8949) as PROTOCOL.md section 2a maps them: what
/// ``CBOREncoder`` writes, and what another implementation may write in its place (definite or
/// indefinite lengths, integers and floats of any width, a UUID or URL as plain text).
///
/// The bytes come from the network: the item is checked whole before anything is decoded
/// (every length against the bytes there are, nesting at most ``maximumDepth`` deep, nothing
/// after it), and every failure is a `DecodingError` saying where.
package struct CBORDecoder {
    /// How deeply arrays, maps and tags may nest.
    package static let maximumDepth = 128

    package init() {}

    package func decode<Value: Decodable>(_ type: Value.Type, from buffer: ByteBuffer) throws -> Value {
        let reader = CBORReader(buffer)
        let end = try reader.skip(at: buffer.readerIndex, depth: 0, codingPath: [])
        guard end == buffer.writerIndex else {
            throw reader.corrupted(at: end, [], "more bytes after the value")
        }
        return try reader.decode(type, at: buffer.readerIndex, codingPath: [])
    }
}

/// A data item's first byte and argument.
struct CBORHead {
    var major: CBORMajor
    /// The low five bits of the first byte.
    var info: UInt8
    /// The count, length, value, tag number or float bits; 0 for an indefinite length.
    var argument: UInt64
    /// Where the item's content (or the next item) begins.
    var end: Int

    var isIndefinite: Bool { info == 31 }
}

/// Reads CBOR from one buffer, by absolute index; every read is bounds-checked.
struct CBORReader {
    let buffer: ByteBuffer

    init(_ buffer: ByteBuffer) {
        self.buffer = buffer
    }

    func corrupted(at index: Int, _ codingPath: @autoclosure () -> [any CodingKey], _ what: String) -> DecodingError {
        .dataCorrupted(
            DecodingError.Context(
                codingPath: codingPath(),
                debugDescription: "malformed CBOR at byte \(index - buffer.readerIndex): \(what)"
            )
        )
    }

    func head(at index: Int, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> CBORHead {
        guard let first = buffer.getInteger(at: index, as: UInt8.self) else {
            throw corrupted(at: index, codingPath(), "the data ends")
        }
        let major = CBORMajor(rawValue: first >> 5)!
        let info = first & 0x1F
        let argument: UInt64?
        var end = index + 1
        switch info {
        case ..<24: argument = UInt64(info)
        case 24:
            argument = buffer.getInteger(at: end, as: UInt8.self).map(UInt64.init)
            end += 1
        case 25:
            argument = buffer.getInteger(at: end, as: UInt16.self).map(UInt64.init)
            end += 2
        case 26:
            argument = buffer.getInteger(at: end, as: UInt32.self).map(UInt64.init)
            end += 4
        case 27:
            argument = buffer.getInteger(at: end, as: UInt64.self)
            end += 8
        case 31:
            guard [.bytes, .text, .array, .map, .simple].contains(major) else {
                throw corrupted(at: index, codingPath(), "an indefinite length for major type \(major.rawValue)")
            }
            argument = 0
        default: throw corrupted(at: index, codingPath(), "reserved additional information \(info)")
        }
        guard let argument else { throw corrupted(at: index, codingPath(), "the data ends in an item's head") }
        return CBORHead(major: major, info: info, argument: argument, end: end)
    }

    /// The index after the item at `index`, which is checked whole: lengths, nesting, chunks.
    func skip(at index: Int, depth: Int, codingPath: @autoclosure () -> [any CodingKey]) throws -> Int {
        guard depth <= CBORDecoder.maximumDepth else {
            throw corrupted(at: index, codingPath(), "nested deeper than \(CBORDecoder.maximumDepth) levels")
        }
        let head = try head(at: index, codingPath())
        switch head.major {
        case .unsigned, .negative:
            return head.end
        case .bytes, .text:
            guard head.isIndefinite else { return try contentEnd(head, codingPath()) }
            var next = head.end
            while try !isBreak(at: next, codingPath()) {
                let chunk = try self.head(at: next, codingPath())
                guard chunk.major == head.major, !chunk.isIndefinite else {
                    throw corrupted(
                        at: next,
                        codingPath(),
                        "a chunk of an indefinite-length string is not a definite string of its type"
                    )
                }
                next = try contentEnd(chunk, codingPath())
            }
            return next + 1
        case .array, .map:
            let perEntry = head.major == .map ? 2 : 1
            var next = head.end
            if head.isIndefinite {
                while try !isBreak(at: next, codingPath()) {
                    for _ in 0..<perEntry { next = try skip(at: next, depth: depth + 1, codingPath: codingPath()) }
                }
                return next + 1
            }
            // Each item takes a byte at least: a count beyond the bytes left is refused at once.
            guard head.argument <= UInt64(buffer.writerIndex - next) else {
                throw corrupted(at: index, codingPath(), "\(head.argument) items announced, more than the bytes left")
            }
            for _ in 0..<(Int(head.argument) * perEntry) {
                next = try skip(at: next, depth: depth + 1, codingPath: codingPath())
            }
            return next
        case .tag:
            return try skip(at: head.end, depth: depth + 1, codingPath: codingPath())
        case .simple:
            guard head.info != 31 else {
                throw corrupted(at: index, codingPath(), "a break outside an indefinite-length item")
            }
            guard head.info != 24 || head.argument >= 32 else {
                throw corrupted(at: index, codingPath(), "a simple value below 32 in two bytes")
            }
            return head.end
        }
    }

    /// Where a definite string's content ends.
    private func contentEnd(_ head: CBORHead, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> Int {
        guard head.argument <= UInt64(buffer.writerIndex - head.end) else {
            throw corrupted(at: head.end, codingPath(), "a string of \(head.argument) bytes, more than the bytes left")
        }
        return head.end + Int(head.argument)
    }

    /// Whether the `length` bytes at `index` (inside the buffer) are all ASCII.
    func isASCII(from index: Int, length: Int) -> Bool {
        buffer.withUnsafeReadableBytes { bytes in
            let start = index - buffer.readerIndex
            return bytes[start..<start + length].allSatisfy { $0 < 0x80 }
        }
    }

    /// Whether the `length` bytes at `first` and at `second` (inside the buffer) are the same.
    func bytesEqual(_ first: Int, _ second: Int, length: Int) -> Bool {
        buffer.withUnsafeReadableBytes { bytes in
            let (a, b) = (first - buffer.readerIndex, second - buffer.readerIndex)
            return bytes[a..<a + length].elementsEqual(bytes[b..<b + length])
        }
    }

    /// Whether the bytes at `index` (inside the buffer) are `expected`.
    func bytes(at index: Int, equal expected: UnsafeBufferPointer<UInt8>) -> Bool {
        buffer.withUnsafeReadableBytes { bytes in
            let start = index - buffer.readerIndex
            return expected.isEmpty || memcmp(bytes.baseAddress! + start, expected.baseAddress!, expected.count) == 0
        }
    }

    func isBreak(at index: Int, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> Bool {
        guard let byte = buffer.getInteger(at: index, as: UInt8.self) else {
            throw corrupted(at: index, codingPath(), "the data ends inside an indefinite-length item")
        }
        return byte == CBORByte.break
    }

    // MARK: Values (of an item checked by skip)

    func mismatch(
        _ type: Any.Type,
        at index: Int,
        _ codingPath: @autoclosure () -> [any CodingKey],
        found head: CBORHead
    ) -> DecodingError {
        .typeMismatch(
            type,
            DecodingError.Context(
                codingPath: codingPath(),
                debugDescription: "expected \(type), found \(Self.describe(head)) at byte \(index - buffer.readerIndex)"
            )
        )
    }

    static func describe(_ head: CBORHead) -> String {
        switch head.major {
        case .unsigned, .negative: "an integer"
        case .bytes: "a byte string"
        case .text: "a text string"
        case .array: "an array"
        case .map: "a map"
        case .tag: "tag \(head.argument)"
        case .simple:
            switch head.info {
            case 20, 21: "a Boolean"
            case 22: "null"
            case 25, 26, 27: "a float"
            default: "simple value \(head.argument)"
            }
        }
    }

    func isNull(at index: Int) -> Bool {
        buffer.getInteger(at: index, as: UInt8.self) == CBORByte.null
    }

    func bool(at index: Int, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> Bool {
        let head = try head(at: index, codingPath())
        guard head.major == .simple, head.info == 20 || head.info == 21 else {
            throw mismatch(Bool.self, at: index, codingPath(), found: head)
        }
        return head.info == 21
    }

    func integer<Integer: FixedWidthInteger>(
        _ type: Integer.Type,
        at index: Int,
        _ codingPath: @autoclosure () -> [any CodingKey]
    ) throws -> Integer {
        let head = try head(at: index, codingPath())
        let value: Integer?
        switch head.major {
        case .unsigned:
            value = Integer(exactly: head.argument)
        case .negative:
            // -1 - argument, which fits a signed type only if the argument does.
            value = Integer.isSigned ? Integer(exactly: head.argument).map { ~$0 } : nil
        default:
            throw mismatch(type, at: index, codingPath(), found: head)
        }
        guard let value else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: codingPath(),
                    debugDescription: "the number at byte \(index - buffer.readerIndex) does not fit in \(type)"
                )
            )
        }
        return value
    }

    func double(at index: Int, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> Double {
        let head = try head(at: index, codingPath())
        switch (head.major, head.info) {
        case (.simple, 25): return Double(halfPrecision(UInt16(head.argument)))
        case (.simple, 26): return Double(Float(bitPattern: UInt32(head.argument)))
        case (.simple, 27): return Double(bitPattern: head.argument)
        case (.unsigned, _), (.negative, _):
            // An implementation may write an integral number as an integer.
            if head.major == .unsigned { return Double(head.argument) }
            return -1 - Double(head.argument)
        default: throw mismatch(Double.self, at: index, codingPath(), found: head)
        }
    }

    func float(at index: Int, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> Float {
        let value = try double(at: index, codingPath())
        let narrowed = Float(value)
        guard value.isNaN || Double(narrowed) == value else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: codingPath(),
                    debugDescription: "the number \(value) at byte \(index - buffer.readerIndex) does not fit in Float"
                )
            )
        }
        return narrowed
    }

    /// The bytes of a byte or text string (its chunks joined, if of indefinite length).
    func string(
        _ major: CBORMajor,
        at index: Int,
        _ codingPath: @autoclosure () -> [any CodingKey],
        as type: Any.Type
    ) throws -> ByteBuffer {
        let head = try head(at: index, codingPath())
        guard head.major == major else { throw mismatch(type, at: index, codingPath(), found: head) }
        guard head.isIndefinite else { return buffer.getSlice(at: head.end, length: Int(head.argument))! }
        var joined = ByteBuffer()
        var next = head.end
        while try !isBreak(at: next, codingPath()) {
            let chunk = try self.head(at: next, codingPath())
            var slice = buffer.getSlice(at: chunk.end, length: Int(chunk.argument))!
            joined.writeBuffer(&slice)
            next = chunk.end + Int(chunk.argument)
        }
        return joined
    }

    func text(at index: Int, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> String {
        var bytes = try string(.text, at: index, codingPath(), as: String.self)
        guard let text = try? bytes.readUTF8ValidatedString(length: bytes.readableBytes) else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: codingPath(),
                    debugDescription: "the text string at byte \(index - buffer.readerIndex) is not valid UTF-8"
                )
            )
        }
        return text
    }

    /// The item a tag encloses, if the item at `index` is that tag.
    func untag(_ tag: UInt64, at index: Int, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> Int? {
        let head = try head(at: index, codingPath())
        return head.major == .tag && head.argument == tag ? head.end : nil
    }

    /// Decodes the item at `index` as `type`, with this encoding's special cases.
    func decode<Value: Decodable>(
        _ type: Value.Type,
        at index: Int,
        codingPath: @autoclosure () -> [any CodingKey]
    ) throws -> Value {
        if type == Data.self {
            // Above 256 KiB the Data shares the payload's storage instead of copying it (NIO's
            // `.automatic`): a 64 MiB field is not allocated, faulted in and copied once more.
            return Data(buffer: try string(.bytes, at: index, codingPath(), as: type), byteTransferStrategy: .automatic)
                as! Value
        }
        if type == [UInt8].self {
            return Array(try string(.bytes, at: index, codingPath(), as: type).readableBytesView) as! Value
        }
        if type == Date.self {
            guard let content = try untag(CBORByte.epochDateTag, at: index, codingPath()) else {
                throw mismatch(type, at: index, codingPath(), found: try head(at: index, codingPath()))
            }
            return Date(timeIntervalSince1970: try double(at: content, codingPath())) as! Value
        }
        if type == UUID.self, let content = try untag(CBORByte.uuidTag, at: index, codingPath()) {
            let bytes = try string(.bytes, at: content, codingPath(), as: type)
            guard bytes.readableBytes == 16 else {
                throw DecodingError.dataCorrupted(
                    DecodingError.Context(
                        codingPath: codingPath(),
                        debugDescription: "a UUID (tag 37) of \(bytes.readableBytes) bytes, not 16"
                    )
                )
            }
            let b = Array(bytes.readableBytesView)
            return UUID(
                uuid: (
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]
                )
            ) as! Value
        }
        if type == URL.self {
            let content = try untag(CBORByte.uriTag, at: index, codingPath()) ?? index
            let text = try text(at: content, codingPath())
            guard let url = URL(string: text) else {
                throw DecodingError.dataCorrupted(
                    DecodingError.Context(codingPath: codingPath(), debugDescription: "not a URL: \(text)")
                )
            }
            return url as! Value
        }
        return try Value(from: CBORValueDecoder(reader: self, index: index, codingPath: codingPath()))
    }
}

/// The value of IEEE 754 half-precision bits (CBOR's shortest float), as a Float.
private func halfPrecision(_ bits: UInt16) -> Float {
    let sign: Float = bits & 0x8000 == 0 ? 1 : -1
    let exponent = Int(bits >> 10 & 0x1F)
    let fraction = Float(bits & 0x3FF)
    switch exponent {
    case 0: return sign * fraction * 0x1p-24
    case 31: return fraction == 0 ? sign * .infinity : .nan
    default: return sign * (1 + fraction / 1024) * Float(sign: .plus, exponent: exponent - 15, significand: 1)
    }
}
