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
        case .nothing: writer.write(simple: CBORByte.emptyMap)
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

    mutating func encode(_ value: Int, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }
    mutating func encode(_ value: Int8, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }
    mutating func encode(_ value: Int16, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }
    mutating func encode(_ value: Int32, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }
    mutating func encode(_ value: Int64, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt8, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt16, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt32, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt64, forKey key: Key) throws {
        try begin(key)
        writer.write(integer: value)
    }

    mutating func encode<Value: Encodable>(_ value: Value, forKey key: Key) throws {
        try begin(key)
        try writer.encodeValue(value, codingPath: codingPath + [key])
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type,
        forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
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

    mutating func encode(_ value: String) throws {
        _ = try begin()
        writer.write(value)
    }
    mutating func encode(_ value: Double) throws {
        _ = try begin()
        writer.write(value)
    }
    mutating func encode(_ value: Float) throws {
        _ = try begin()
        writer.write(value)
    }
    mutating func encode(_ value: Int) throws {
        _ = try begin()
        writer.write(integer: value)
    }
    mutating func encode(_ value: Int8) throws {
        _ = try begin()
        writer.write(integer: value)
    }
    mutating func encode(_ value: Int16) throws {
        _ = try begin()
        writer.write(integer: value)
    }
    mutating func encode(_ value: Int32) throws {
        _ = try begin()
        writer.write(integer: value)
    }
    mutating func encode(_ value: Int64) throws {
        _ = try begin()
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt) throws {
        _ = try begin()
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt8) throws {
        _ = try begin()
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt16) throws {
        _ = try begin()
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt32) throws {
        _ = try begin()
        writer.write(integer: value)
    }
    mutating func encode(_ value: UInt64) throws {
        _ = try begin()
        writer.write(integer: value)
    }

    mutating func encode<Value: Encodable>(_ value: Value) throws {
        let path = try begin()
        try writer.encodeValue(value, codingPath: path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type
    ) -> KeyedEncodingContainer<NestedKey> {
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
    mutating func encode<Value: Encodable>(_ value: Value) throws {
        try writer.encodeValue(value, codingPath: codingPath)
    }
}
