import Foundation
package import NIOCore

/// Encodes `Encodable` values as CBOR (RFC 8949), the binary message encoding of PROTOCOL.md
/// section 2a: keyed containers as maps with text keys, unkeyed ones as arrays (both of
/// indefinite length, so the encoder writes as it goes, with no tree and no second pass), `Data`
/// and `[UInt8]` as byte strings, `Date` as tag 1 (seconds since 1970, float64), `UUID` as tag
/// 37 (16 bytes), `URL` as tag 32 (its absolute string).
///
/// A container must be finished before its parent is written to again, as every synthesized
/// and almost every hand-written `encode(to:)` does; one written to after that throws
/// `EncodingError.invalidValue` rather than produce bytes in the wrong place.
package struct CBOREncoder {
    package init() {}

    /// Appends `value`, as one CBOR data item, to `buffer`.
    package func encode<Value: Encodable>(_ value: Value, into buffer: inout ByteBuffer) throws {
        let writer = CBORWriter(buffer: buffer)
        buffer = ByteBuffer()  // (the writer holds the only reference: no copy on write)
        defer { buffer = writer.buffer }
        try writer.encodeValue(value, codingPath: [])
    }
}

/// CBOR's major types (RFC 8949 section 3.1).
enum CBORMajor: UInt8 {
    case unsigned = 0
    case negative = 1
    case bytes = 2
    case text = 3
    case array = 4
    case map = 5
    case tag = 6
    case simple = 7
}

/// The few fixed bytes and tags this encoding uses.
enum CBORByte {
    static let `false`: UInt8 = 0xF4
    static let `true`: UInt8 = 0xF5
    static let null: UInt8 = 0xF6
    static let float32: UInt8 = 0xFA
    static let float64: UInt8 = 0xFB
    static let indefiniteArray: UInt8 = 0x9F
    static let indefiniteMap: UInt8 = 0xBF
    static let emptyMap: UInt8 = 0xA0
    static let `break`: UInt8 = 0xFF
    static let epochDateTag: UInt64 = 1
    static let uriTag: UInt64 = 32
    static let uuidTag: UInt64 = 37
}

/// Writes one value's CBOR. Containers are written as they are used: the writer keeps the
/// stack of those still open and closes (a break byte) every one above a container written to.
///
/// Its state is `@exclusivity(unchecked)`: only its own methods touch it (and ``CBOREncoder``
/// takes the buffer once they are done), and none of them calls out (to a value's
/// `encode(to:)`) while it holds an access, so accesses cannot overlap. The runtime check took
/// a quarter of the time to encode a small message.
final class CBORWriter {
    @exclusivity(unchecked) var buffer: ByteBuffer
    /// The containers open, innermost last; `nil` marks a value promised to a key (a nested
    /// encoder handed out) and not yet begun.
    @exclusivity(unchecked) private var open: [Int?] = []
    @exclusivity(unchecked) private var nextContainer = 0

    init(buffer: ByteBuffer) {
        self.buffer = buffer
    }

    // MARK: Heads and scalars

    /// Writes a data item's first byte (and the bytes of its argument): the value promised to
    /// a key, if one is, has begun.
    func writeHead(_ major: CBORMajor, _ argument: UInt64) {
        resolvePromise()
        let high = major.rawValue << 5
        switch argument {
        case ..<24:
            buffer.writeInteger(high | UInt8(argument))
        case ...UInt64(UInt8.max):
            buffer.writeInteger(high | 24)
            buffer.writeInteger(UInt8(argument))
        case ...UInt64(UInt16.max):
            buffer.writeInteger(high | 25)
            buffer.writeInteger(UInt16(argument))
        case ...UInt64(UInt32.max):
            buffer.writeInteger(high | 26)
            buffer.writeInteger(UInt32(argument))
        default:
            buffer.writeInteger(high | 27)
            buffer.writeInteger(argument)
        }
    }

    func write<Integer: FixedWidthInteger>(integer value: Integer) {
        if value < 0 {
            // -1 - value, which is ~value in two's complement (no overflow at .min).
            writeHead(.negative, UInt64(~value))
        } else {
            writeHead(.unsigned, UInt64(value))
        }
    }

    /// Writes a one-byte item (null, a Boolean, an empty map) or the first byte of a float.
    func write(simple byte: UInt8) {
        resolvePromise()
        buffer.writeInteger(byte)
    }

    func write(_ value: Bool) {
        write(simple: value ? CBORByte.true : CBORByte.false)
    }

    func write(_ value: Double) {
        write(simple: CBORByte.float64)
        buffer.writeInteger(value.bitPattern)
    }

    func write(_ value: Float) {
        write(simple: CBORByte.float32)
        buffer.writeInteger(value.bitPattern)
    }

    func write(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            // Room for all of it at once: a long string otherwise regrows the buffer, copying
            // what it holds, once per doubling.
            buffer.reserveCapacity(minimumWritableBytes: 9 + utf8.count)
            writeHead(.text, UInt64(utf8.count))
            buffer.writeBytes(utf8)
        }
    }

    func write<Bytes: Collection<UInt8>>(bytes: Bytes) {
        buffer.reserveCapacity(minimumWritableBytes: 9 + bytes.count)
        writeHead(.bytes, UInt64(bytes.count))
        buffer.writeBytes(bytes)
    }

    // MARK: Containers

    /// Opens a container: an indefinite map or array, ended by ``close(_:)``.
    func openContainer(array: Bool) -> Int {
        resolvePromise()
        buffer.writeInteger(array ? CBORByte.indefiniteArray : CBORByte.indefiniteMap)
        nextContainer += 1
        open.append(nextContainer)
        return nextContainer
    }

    /// Makes `container` the innermost open one (closing those opened inside it since), before
    /// something is written to it.
    func prepare(_ container: Int, codingPath: @autoclosure () -> [any CodingKey]) throws {
        guard let position = open.lastIndex(of: container) else {
            throw EncodingError.invalidValue(
                container,
                EncodingError.Context(
                    codingPath: codingPath(),
                    debugDescription:
                        "a container was written to after its parent had gone on; the binary encoding writes as it goes"
                )
            )
        }
        while open.count > position + 1 { closeInnermost() }
    }

    /// Closes `container` and any still open inside it.
    func close(_ container: Int) {
        guard let position = open.lastIndex(of: container) else { return }
        while open.count > position { closeInnermost() }
    }

    /// Promises a value (a nested encoder was handed out for a key): if nothing is written for
    /// it before its parent goes on, it is an empty map, as a value that encodes nothing is.
    func promiseValue() {
        open.append(nil)
    }

    private func resolvePromise() {
        if let last = open.last, last == nil { open.removeLast() }
    }

    private func closeInnermost() {
        if open.removeLast() == nil {
            buffer.writeInteger(CBORByte.emptyMap)
        } else {
            buffer.writeInteger(CBORByte.break)
        }
    }

    // MARK: Values

    /// Writes `value` as one data item, with this encoding's special cases.
    func encodeValue<Value: Encodable>(_ value: Value, codingPath: @autoclosure () -> [any CodingKey]) throws {
        // By static type, not by cast: an empty array of any element type casts to [UInt8].
        if Value.self == Data.self {
            write(bytes: value as! Data)
        } else if Value.self == [UInt8].self {
            write(bytes: value as! [UInt8])
        } else if Value.self == Date.self {
            writeHead(.tag, CBORByte.epochDateTag)
            write((value as! Date).timeIntervalSince1970)
        } else if Value.self == UUID.self {
            writeHead(.tag, CBORByte.uuidTag)
            writeHead(.bytes, 16)
            _ = withUnsafeBytes(of: (value as! UUID).uuid) { buffer.writeBytes($0) }
        } else if Value.self == URL.self {
            writeHead(.tag, CBORByte.uriTag)
            write((value as! URL).absoluteString)
        } else {
            let encoder = CBORValueEncoder(writer: self, codingPath: codingPath())
            try value.encode(to: encoder)
            try encoder.finish()
        }
    }
}
