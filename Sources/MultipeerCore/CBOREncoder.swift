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
    case unsigned = 0, negative = 1, bytes = 2, text = 3, array = 4, map = 5, tag = 6, simple = 7
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
final class CBORWriter {
    var buffer: ByteBuffer
    /// The containers open, innermost last; `nil` marks a value promised to a key (a nested
    /// encoder handed out) and not yet begun.
    private var open: [Int?] = []
    private var nextContainer = 0

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

    /// Writes a one-byte item (null, a Boolean) or the first byte of a float.
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
            writeHead(.text, UInt64(utf8.count))
            buffer.writeBytes(utf8)
        }
    }

    func write<Bytes: Collection<UInt8>>(bytes: Bytes) {
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
    func prepare(_ container: Int, codingPath: [any CodingKey]) throws {
        guard let position = open.lastIndex(of: container) else {
            throw EncodingError.invalidValue(container, EncodingError.Context(
                codingPath: codingPath,
                debugDescription: "a container was written to after its parent had gone on; the binary encoding writes as it goes"))
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
    func encodeValue<Value: Encodable>(_ value: Value, codingPath: [any CodingKey]) throws {
        resolvePromise()
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
            let encoder = CBORValueEncoder(writer: self, codingPath: codingPath)
            try value.encode(to: encoder)
            try encoder.finish()
        }
    }
}

/// The `Encoder` of one value: at most one kind of container (asked for again, the same one).
final class CBORValueEncoder: Encoder {
    let writer: CBORWriter
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    private enum Kind {
        case nothing
        case keyed(Int)
        case unkeyed(Int)
        case single
    }
    private var kind = Kind.nothing

    init(writer: CBORWriter, codingPath: [any CodingKey]) {
        self.writer = writer
        self.codingPath = codingPath
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let id: Int
        if case .keyed(let existing) = kind {
            id = existing
        } else {
            id = writer.openContainer(array: false)
            kind = .keyed(id)
        }
        return KeyedEncodingContainer(CBORKeyedEncoder<Key>(writer: writer, container: id, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let id: Int
        if case .unkeyed(let existing) = kind {
            id = existing
        } else {
            id = writer.openContainer(array: true)
            kind = .unkeyed(id)
        }
        return CBORUnkeyedEncoder(writer: writer, container: id, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        kind = .single
        return CBORSingleValueEncoder(writer: writer, codingPath: codingPath)
    }

    /// The value's `encode(to:)` returned: closes its container, or writes an empty map for a
    /// value that wrote nothing (as JSON writes `{}`).
    func finish() throws {
        switch kind {
        case .nothing: writer.buffer.writeInteger(CBORByte.emptyMap)
        case .keyed(let id), .unkeyed(let id): writer.close(id)
        case .single: break
        }
    }
}

/// One array element or map value's coding-path entry.
struct CBORIndexKey: CodingKey {
    var intValue: Int?
    var stringValue: String { "Index \(intValue ?? 0)" }
    init(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { nil }
}

struct CBORSuperKey: CodingKey {
    var stringValue: String { "super" }
    var intValue: Int? { nil }
    init() {}
    init?(stringValue: String) { nil }
    init?(intValue: Int) { nil }
}

struct CBORKeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let writer: CBORWriter
    let container: Int
    let codingPath: [any CodingKey]

    private func begin(_ key: some CodingKey) throws {
        try writer.prepare(container, codingPath: codingPath + [key])
        writer.write(key.stringValue)
    }

    mutating func encodeNil(forKey key: Key) throws {
        try begin(key)
        writer.write(simple: CBORByte.null)
    }

    mutating func encode(_ value: Bool, forKey key: Key) throws {
        try begin(key)
        writer.write(value)
    }

    mutating func encode(_ value: String, forKey key: Key) throws {
        try begin(key)
        writer.write(value)
    }

    mutating func encode(_ value: Double, forKey key: Key) throws {
        try begin(key)
        writer.write(value)
    }

    mutating func encode(_ value: Float, forKey key: Key) throws {
        try begin(key)
        writer.write(value)
    }

    mutating func encode(_ value: Int, forKey key: Key) throws { try begin(key); writer.write(integer: value) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try begin(key); writer.write(integer: value) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try begin(key); writer.write(integer: value) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try begin(key); writer.write(integer: value) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try begin(key); writer.write(integer: value) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try begin(key); writer.write(integer: value) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try begin(key); writer.write(integer: value) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try begin(key); writer.write(integer: value) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try begin(key); writer.write(integer: value) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try begin(key); writer.write(integer: value) }

    mutating func encode<Value: Encodable>(_ value: Value, forKey key: Key) throws {
        try begin(key)
        try writer.encodeValue(value, codingPath: codingPath + [key])
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        nestedEncoder(key).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        nestedEncoder(key).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        nestedEncoder(CBORSuperKey())
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        nestedEncoder(key)
    }

    /// An encoder for the value of `key`, written when it is used (the protocol's nested
    /// containers cannot throw: a misuse surfaces at the next write).
    private func nestedEncoder(_ key: some CodingKey) -> CBORValueEncoder {
        if (try? begin(key)) != nil { writer.promiseValue() }
        return CBORValueEncoder(writer: writer, codingPath: codingPath + [key])
    }
}

struct CBORUnkeyedEncoder: UnkeyedEncodingContainer {
    let writer: CBORWriter
    let container: Int
    let codingPath: [any CodingKey]
    private(set) var count = 0

    init(writer: CBORWriter, container: Int, codingPath: [any CodingKey]) {
        self.writer = writer
        self.container = container
        self.codingPath = codingPath
    }

    private mutating func begin() throws -> [any CodingKey] {
        let path = codingPath + [CBORIndexKey(intValue: count)]
        try writer.prepare(container, codingPath: path)
        count += 1
        return path
    }

    mutating func encodeNil() throws {
        _ = try begin()
        writer.write(simple: CBORByte.null)
    }

    mutating func encode(_ value: Bool) throws {
        _ = try begin()
        writer.write(value)
    }

    mutating func encode(_ value: String) throws { _ = try begin(); writer.write(value) }
    mutating func encode(_ value: Double) throws { _ = try begin(); writer.write(value) }
    mutating func encode(_ value: Float) throws { _ = try begin(); writer.write(value) }
    mutating func encode(_ value: Int) throws { _ = try begin(); writer.write(integer: value) }
    mutating func encode(_ value: Int8) throws { _ = try begin(); writer.write(integer: value) }
    mutating func encode(_ value: Int16) throws { _ = try begin(); writer.write(integer: value) }
    mutating func encode(_ value: Int32) throws { _ = try begin(); writer.write(integer: value) }
    mutating func encode(_ value: Int64) throws { _ = try begin(); writer.write(integer: value) }
    mutating func encode(_ value: UInt) throws { _ = try begin(); writer.write(integer: value) }
    mutating func encode(_ value: UInt8) throws { _ = try begin(); writer.write(integer: value) }
    mutating func encode(_ value: UInt16) throws { _ = try begin(); writer.write(integer: value) }
    mutating func encode(_ value: UInt32) throws { _ = try begin(); writer.write(integer: value) }
    mutating func encode(_ value: UInt64) throws { _ = try begin(); writer.write(integer: value) }

    mutating func encode<Value: Encodable>(_ value: Value) throws {
        let path = try begin()
        try writer.encodeValue(value, codingPath: path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        nestedEncoder().container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        nestedEncoder().unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        nestedEncoder()
    }

    private mutating func nestedEncoder() -> CBORValueEncoder {
        let path = codingPath + [CBORIndexKey(intValue: count)]
        if (try? begin()) != nil { writer.promiseValue() }
        return CBORValueEncoder(writer: writer, codingPath: path)
    }
}

struct CBORSingleValueEncoder: SingleValueEncodingContainer {
    let writer: CBORWriter
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { writer.write(simple: CBORByte.null) }
    mutating func encode(_ value: Bool) throws { writer.write(value) }
    mutating func encode(_ value: String) throws { writer.write(value) }
    mutating func encode(_ value: Double) throws { writer.write(value) }
    mutating func encode(_ value: Float) throws { writer.write(value) }
    mutating func encode(_ value: Int) throws { writer.write(integer: value) }
    mutating func encode(_ value: Int8) throws { writer.write(integer: value) }
    mutating func encode(_ value: Int16) throws { writer.write(integer: value) }
    mutating func encode(_ value: Int32) throws { writer.write(integer: value) }
    mutating func encode(_ value: Int64) throws { writer.write(integer: value) }
    mutating func encode(_ value: UInt) throws { writer.write(integer: value) }
    mutating func encode(_ value: UInt8) throws { writer.write(integer: value) }
    mutating func encode(_ value: UInt16) throws { writer.write(integer: value) }
    mutating func encode(_ value: UInt32) throws { writer.write(integer: value) }
    mutating func encode(_ value: UInt64) throws { writer.write(integer: value) }
    mutating func encode<Value: Encodable>(_ value: Value) throws { try writer.encodeValue(value, codingPath: codingPath) }
}
