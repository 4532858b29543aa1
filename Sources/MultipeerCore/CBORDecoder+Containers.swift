import NIOCore

/// The `Decoder` of one data item (checked well-formed by ``CBORReader/skip(at:depth:codingPath:)``).
struct CBORValueDecoder: Decoder {
    let reader: CBORReader
    let index: Int
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(try CBORKeyedDecoder<Key>(reader: reader, index: index, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try CBORUnkeyedDecoder(reader: reader, index: index, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        CBORSingleValueDecoder(reader: reader, index: index, codingPath: codingPath)
    }
}

/// A map's entries, found once; looked up in the order they were written (the usual case,
/// one comparison a key), else by a search. Keys are compared as bytes where they are plain
/// ASCII text of one chunk (always, in what this package writes), and made into strings only
/// otherwise.
///
/// Not generic: the keyed decoder of every key type reads through it, and its code is compiled
/// for it alone, so decoding a map looks up no generic metadata at run time (which, with the
/// entries as a generic class's nested type, took a quarter of the time to decode a small
/// message). A class: the protocol's lookups do not mutate, and `next` moves.
final class CBORMap {
    /// One entry: where its key's bytes are (or the key itself, when it is not plain ASCII
    /// text of one chunk), and where its value is.
    private struct Entry {
        var keyStart: Int
        var keyLength: Int
        var key: String?
        var value: Int
    }

    let reader: CBORReader
    let codingPath: [any CodingKey]
    private let entries: [Entry]
    /// The entry after the last one looked up. (Unchecked exclusivity: only `value(for:)`
    /// touches it, and no access to it stays open across a call.)
    @exclusivity(unchecked) private var next = 0

    init(reader: CBORReader, index: Int, codingPath: [any CodingKey]) throws {
        self.reader = reader
        self.codingPath = codingPath
        let head = try reader.head(at: index, codingPath)
        guard head.major == .map else { throw reader.mismatch([String: Any].self, at: index, codingPath, found: head) }
        var entries: [Entry] = []
        entries.reserveCapacity(head.isIndefinite ? 8 : Int(min(head.argument, 64)))
        var position = head.end
        var remaining = head.isIndefinite ? Int.max : Int(head.argument)
        while remaining > 0 {
            if head.isIndefinite, try reader.isBreak(at: position, codingPath) { break }
            let keyHead = try reader.head(at: position, codingPath)
            guard keyHead.major == .text else {
                throw reader.corrupted(
                    at: position,
                    codingPath,
                    "a map key that is \(CBORReader.describe(keyHead)), not a text string"
                )
            }
            let value = try reader.skip(at: position, depth: 0, codingPath: codingPath)
            var entry = Entry(keyStart: keyHead.end, keyLength: value - keyHead.end, key: nil, value: value)
            if keyHead.isIndefinite || !reader.isASCII(from: entry.keyStart, length: entry.keyLength) {
                entry.key = try reader.text(at: position, codingPath)
            }
            entries.append(entry)
            position = try reader.skip(at: value, depth: 0, codingPath: codingPath)
            remaining -= 1
        }
        self.entries = entries
        // A struct's few keys are compared pairwise; a dictionary's many, by a set.
        if entries.count <= 16 {
            for later in 1..<max(entries.count, 1) {
                for earlier in 0..<later where sameKey(entries[earlier], entries[later]) {
                    throw twice(entries[later], at: index)
                }
            }
        } else {
            var seen = Set<String>(minimumCapacity: entries.count)
            for entry in entries where !seen.insert(name(of: entry)).inserted {
                throw twice(entry, at: index)
            }
        }
    }

    private func twice(_ entry: Entry, at index: Int) -> DecodingError {
        reader.corrupted(at: index, codingPath, "the map has the key \"\(name(of: entry))\" twice")
    }

    private func name(of entry: Entry) -> String {
        entry.key ?? reader.buffer.getString(at: entry.keyStart, length: entry.keyLength) ?? ""
    }

    private func sameKey(_ a: Entry, _ b: Entry) -> Bool {
        if a.key != nil || b.key != nil { return name(of: a) == name(of: b) }
        return a.keyLength == b.keyLength && reader.bytesEqual(a.keyStart, b.keyStart, length: a.keyLength)
    }

    /// Whether `entry`'s key is `name`.
    private func entry(_ entry: Entry, is name: String) -> Bool {
        if let key = entry.key { return key == name }
        var name = name
        return name.withUTF8 { utf8 in utf8.count == entry.keyLength && reader.bytes(at: entry.keyStart, equal: utf8) }
    }

    /// The keys, as text.
    var names: [String] { entries.map(name(of:)) }

    func contains(_ name: String) -> Bool {
        entries.contains { entry($0, is: name) }
    }

    /// Where the value of `key` is.
    func value(for key: any CodingKey) throws -> Int {
        let name = key.stringValue
        if next < entries.count, entry(entries[next], is: name) {
            next += 1
            return entries[next - 1].value
        }
        guard let found = entries.firstIndex(where: { entry($0, is: name) }) else {
            throw DecodingError.keyNotFound(
                key,
                DecodingError.Context(codingPath: codingPath, debugDescription: "no value for the key \"\(name)\"")
            )
        }
        next = found + 1
        return entries[found].value
    }

    /// Where the value of `key` is, which must not be null.
    func present(_ key: any CodingKey, _ type: Any.Type) throws -> Int {
        let index = try value(for: key)
        guard !reader.isNull(at: index) else {
            throw DecodingError.valueNotFound(
                type,
                DecodingError.Context(
                    codingPath: codingPath + [key],
                    debugDescription: "null where a \(type) was expected"
                )
            )
        }
        return index
    }

    func integer<Integer: FixedWidthInteger>(_ type: Integer.Type, _ key: any CodingKey) throws -> Integer {
        try reader.integer(type, at: try present(key, type), codingPath + [key])
    }
}

/// A keyed container over a ``CBORMap``: the protocol's requirements, by key type.
struct CBORKeyedDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let map: CBORMap

    init(reader: CBORReader, index: Int, codingPath: [any CodingKey]) throws {
        map = try CBORMap(reader: reader, index: index, codingPath: codingPath)
    }

    var codingPath: [any CodingKey] { map.codingPath }
    private var reader: CBORReader { map.reader }

    var allKeys: [Key] { map.names.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { map.contains(key.stringValue) }

    func decodeNil(forKey key: Key) throws -> Bool {
        reader.isNull(at: try map.value(for: key))
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool {
        try reader.bool(at: try map.present(key, type), codingPath + [key])
    }

    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        try reader.text(at: try map.present(key, type), codingPath + [key])
    }

    func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
        try reader.double(at: try map.present(key, type), codingPath + [key])
    }

    func decode(_ type: Float.Type, forKey key: Key) throws -> Float {
        try reader.float(at: try map.present(key, type), codingPath + [key])
    }

    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try map.integer(type, key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try map.integer(type, key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try map.integer(type, key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try map.integer(type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try map.integer(type, key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try map.integer(type, key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try map.integer(type, key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try map.integer(type, key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try map.integer(type, key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try map.integer(type, key) }

    /// (Null is left to `Value`: an `Optional` takes it.)
    func decode<Value: Decodable>(_ type: Value.Type, forKey key: Key) throws -> Value {
        try reader.decode(type, at: try map.value(for: key), codingPath: codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type,
        forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        KeyedDecodingContainer(
            try CBORKeyedDecoder<NestedKey>(
                reader: reader,
                index: try map.value(for: key),
                codingPath: codingPath + [key]
            )
        )
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try CBORUnkeyedDecoder(reader: reader, index: try map.value(for: key), codingPath: codingPath + [key])
    }

    func superDecoder() throws -> any Decoder {
        try superDecoder(for: CBORSuperKey())
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        try superDecoder(for: key)
    }

    private func superDecoder(for key: some CodingKey) throws -> any Decoder {
        CBORValueDecoder(reader: reader, index: try map.value(for: key), codingPath: codingPath + [key])
    }
}

/// An array's items, read in order.
struct CBORUnkeyedDecoder: UnkeyedDecodingContainer {
    let reader: CBORReader
    let codingPath: [any CodingKey]
    let count: Int?
    private(set) var currentIndex = 0
    /// Where the current item is.
    private var position: Int

    init(reader: CBORReader, index: Int, codingPath: [any CodingKey]) throws {
        self.reader = reader
        self.codingPath = codingPath
        let head = try reader.head(at: index, codingPath)
        guard head.major == .array else { throw reader.mismatch([Any].self, at: index, codingPath, found: head) }
        position = head.end
        if head.isIndefinite {
            var count = 0
            var next = head.end
            while try !reader.isBreak(at: next, codingPath) {
                next = try reader.skip(at: next, depth: 0, codingPath: codingPath)
                count += 1
            }
            self.count = count
        } else {
            count = Int(head.argument)
        }
    }

    var isAtEnd: Bool { currentIndex >= count! }

    private var path: [any CodingKey] { codingPath + [CBORIndexKey(intValue: currentIndex)] }

    /// The current item's index, moving past it.
    private mutating func take(_ type: Any.Type, allowingNull: Bool = false) throws -> Int {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                type,
                DecodingError.Context(codingPath: path, debugDescription: "the array has no more items")
            )
        }
        let item = position
        if !allowingNull, reader.isNull(at: item) {
            throw DecodingError.valueNotFound(
                type,
                DecodingError.Context(codingPath: path, debugDescription: "null where a \(type) was expected")
            )
        }
        position = try reader.skip(at: item, depth: 0, codingPath: path)
        currentIndex += 1
        return item
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, reader.isNull(at: position) else { return false }
        _ = try take(Never.self, allowingNull: true)
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool {
        let path = self.path
        return try reader.bool(at: try take(type), path)
    }

    mutating func decode(_ type: String.Type) throws -> String {
        let path = self.path
        return try reader.text(at: try take(type), path)
    }

    mutating func decode(_ type: Double.Type) throws -> Double {
        let path = self.path
        return try reader.double(at: try take(type), path)
    }

    mutating func decode(_ type: Float.Type) throws -> Float {
        let path = self.path
        return try reader.float(at: try take(type), path)
    }

    mutating func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }

    private mutating func integer<Integer: FixedWidthInteger>(_ type: Integer.Type) throws -> Integer {
        let path = self.path
        return try reader.integer(type, at: try take(type), path)
    }

    mutating func decode<Value: Decodable>(_ type: Value.Type) throws -> Value {
        let path = self.path
        return try reader.decode(type, at: try take(type, allowingNull: true), codingPath: path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type
    ) throws -> KeyedDecodingContainer<NestedKey> {
        let path = self.path
        return KeyedDecodingContainer(
            try CBORKeyedDecoder<NestedKey>(reader: reader, index: try take(type), codingPath: path)
        )
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let path = self.path
        return try CBORUnkeyedDecoder(reader: reader, index: try take([Any].self), codingPath: path)
    }

    mutating func superDecoder() throws -> any Decoder {
        let path = self.path
        return CBORValueDecoder(reader: reader, index: try take(Any.self, allowingNull: true), codingPath: path)
    }
}

struct CBORSingleValueDecoder: SingleValueDecodingContainer {
    let reader: CBORReader
    let index: Int
    let codingPath: [any CodingKey]

    private func present(_ type: Any.Type) throws -> Int {
        guard !reader.isNull(at: index) else {
            throw DecodingError.valueNotFound(
                type,
                DecodingError.Context(codingPath: codingPath, debugDescription: "null where a \(type) was expected")
            )
        }
        return index
    }

    func decodeNil() -> Bool { reader.isNull(at: index) }
    func decode(_ type: Bool.Type) throws -> Bool { try reader.bool(at: try present(type), codingPath) }
    func decode(_ type: String.Type) throws -> String { try reader.text(at: try present(type), codingPath) }
    func decode(_ type: Double.Type) throws -> Double { try reader.double(at: try present(type), codingPath) }
    func decode(_ type: Float.Type) throws -> Float { try reader.float(at: try present(type), codingPath) }
    func decode(_ type: Int.Type) throws -> Int { try reader.integer(type, at: try present(type), codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try reader.integer(type, at: try present(type), codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try reader.integer(type, at: try present(type), codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try reader.integer(type, at: try present(type), codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try reader.integer(type, at: try present(type), codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try reader.integer(type, at: try present(type), codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try reader.integer(type, at: try present(type), codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try reader.integer(type, at: try present(type), codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try reader.integer(type, at: try present(type), codingPath) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try reader.integer(type, at: try present(type), codingPath) }
    func decode<Value: Decodable>(_ type: Value.Type) throws -> Value {
        try reader.decode(type, at: index, codingPath: codingPath)
    }
}
