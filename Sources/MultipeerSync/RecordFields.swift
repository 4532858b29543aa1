import MultipeerSession

/// A record's fields as the merge takes them (docs/SYNC.md 1): for a whole-record collection
/// one field, the empty name, holding the record's payload in the session's binary message
/// encoding; field by field, each top-level property's payload under its key.
enum RecordFields {
    /// A field set to nothing (an optional property that is nil): the payload of CBOR's null.
    static let null: [UInt8] = (try? MessageEncoding.binary.encode(Int?.none)) ?? []

    /// `record`'s fields.
    /// - Throws: `invalidWrite` if the record does not encode.
    static func fields<Record: SyncRecord>(of record: Record) throws(SyncError) -> [String: [UInt8]] {
        try encoded(record).fields
    }

    /// `record`'s fields, and the attachments (docs/SYNC.md 9) each field's value holds (a
    /// field that holds none is left out).
    /// - Throws: `invalidWrite` if the record does not encode.
    static func encoded<Record: SyncRecord>(
        _ record: Record
    ) throws(SyncError) -> (fields: [String: [UInt8]], attachments: [String: Set<SyncAttachment>]) {
        do {
            switch Record.merge {
            case .wholeRecord:
                let (payload, found) = try AttachmentCollector.collecting { try MessageEncoding.binary.encode(record) }
                return (
                    [RecordRegisters.wholeRecord: payload],
                    found.isEmpty ? [:] : [RecordRegisters.wholeRecord: found]
                )
            case .fieldByField:
                let encoder = FieldsEncoder()
                try record.encode(to: encoder)
                return (encoder.fields.fields, encoder.fields.attachments)
            }
        } catch {
            throw SyncError(
                .invalidWrite,
                "record \(record.id) of \(Record.collectionName) did not encode: \(error)"
            )
        }
    }

    /// The record these fields make.
    /// - Throws: `undecodableRecord`, naming the field that did not read.
    static func record<Record: SyncRecord>(
        _ type: Record.Type,
        id: String,
        from fields: [String: [UInt8]]
    ) throws(SyncError) -> Record {
        do {
            switch Record.merge {
            case .wholeRecord:
                guard let payload = fields[RecordRegisters.wholeRecord] else {
                    throw DecodingError.dataCorrupted(
                        .init(codingPath: [], debugDescription: "no whole record: written field by field")
                    )
                }
                return try MessageEncoding.decode(Record.self, from: payload)
            case .fieldByField:
                return try Record(from: FieldsDecoder(fields: fields))
            }
        } catch {
            throw SyncError(
                .undecodableRecord,
                "record \(id) of \(Record.collectionName) does not read as a \(Record.self): \(error)"
            )
        }
    }
}

// MARK: - Field by field: encoding

/// The fields written so far (a class: the encoder and its containers share it).
private final class FieldBox {
    var fields: [String: [UInt8]] = [:]
    /// The attachments each field's value holds, for the fields that hold any.
    var attachments: [String: Set<SyncAttachment>] = [:]
}

/// Encodes a record's top-level properties one by one, each as its own payload.
private struct FieldsEncoder: Encoder {
    let fields = FieldBox()
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(FieldsContainer<Key>(box: fields))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        preconditionFailure(Self.unsupported)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        preconditionFailure(Self.unsupported)
    }

    static let unsupported =
        "a SyncRecord merged field by field encodes into one keyed container, each property with encode(_:forKey:) (as synthesized Codable does)"
}

private struct FieldsContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let box: FieldBox
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws { box.fields[key.stringValue] = RecordFields.null }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { try put(value, key) }

    private func put(_ value: some Encodable, _ key: Key) throws {
        let (payload, found) = try AttachmentCollector.collecting { try MessageEncoding.binary.encode(value) }
        box.fields[key.stringValue] = payload
        box.attachments[key.stringValue] = found.isEmpty ? nil : found
    }

    mutating func encode(_ value: Bool, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: String, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: Float, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: Int, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try put(value, key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try put(value, key) }

    // An optional property that is nil is written as null, not left out as synthesized Codable
    // does elsewhere: a field left out of a put keeps its value (a newer build's field, which
    // this build does not know), while one set to nil is a write of it.
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: Float?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int8?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int16?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: UInt?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: UInt8?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { try putOptional(value, key) }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { try putOptional(value, key) }

    private func putOptional(_ value: (some Encodable)?, _ key: Key) throws {
        guard let value else {
            box.fields[key.stringValue] = RecordFields.null
            return
        }
        try put(value, key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type,
        forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        preconditionFailure(FieldsEncoder.unsupported)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        preconditionFailure(FieldsEncoder.unsupported)
    }

    mutating func superEncoder() -> any Encoder { preconditionFailure(FieldsEncoder.unsupported) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { preconditionFailure(FieldsEncoder.unsupported) }
}

// MARK: - Field by field: decoding

/// Decodes a record's top-level properties each from its own payload.
private struct FieldsDecoder: Decoder {
    let fields: [String: [UInt8]]
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(FieldsReader<Key>(fields: fields))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch(
            [Any].self,
            .init(codingPath: [], debugDescription: FieldsEncoder.unsupported)
        )
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw DecodingError.typeMismatch(
            Any.self,
            .init(codingPath: [], debugDescription: FieldsEncoder.unsupported)
        )
    }
}

private struct FieldsReader<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let fields: [String: [UInt8]]
    var codingPath: [any CodingKey] { [] }
    var allKeys: [Key] { fields.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { fields[key.stringValue] != nil }

    func decodeNil(forKey key: Key) throws -> Bool { try payload(key) == RecordFields.null }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try value(type, key) }

    private func value<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T {
        let payload = try payload(key)
        do {
            return try MessageEncoding.decode(type, from: payload)
        } catch {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: [key],
                    debugDescription: "field \(key.stringValue) is no \(type)",
                    underlyingError: error
                )
            )
        }
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try value(type, key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try value(type, key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try value(type, key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try value(type, key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try value(type, key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try value(type, key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try value(type, key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try value(type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try value(type, key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try value(type, key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try value(type, key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try value(type, key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try value(type, key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try value(type, key) }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type,
        forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        throw DecodingError.typeMismatch(
            Any.self,
            .init(codingPath: [key], debugDescription: FieldsEncoder.unsupported)
        )
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch(
            Any.self,
            .init(codingPath: [key], debugDescription: FieldsEncoder.unsupported)
        )
    }

    func superDecoder() throws -> any Decoder {
        throw DecodingError.typeMismatch(Any.self, .init(codingPath: [], debugDescription: FieldsEncoder.unsupported))
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        throw DecodingError.typeMismatch(
            Any.self,
            .init(codingPath: [key], debugDescription: FieldsEncoder.unsupported)
        )
    }

    private func payload(_ key: Key) throws -> [UInt8] {
        guard let payload = fields[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: [], debugDescription: "no field \(key.stringValue)"))
        }
        return payload
    }
}
