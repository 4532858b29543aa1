import Foundation
package import NIOCore

/// How a message's fields travel in its DATA payload: in the compact binary encoding, CBOR
/// (RFC 8949; the default), where `Data` and `[UInt8]` fields are raw bytes and numbers take a
/// few bytes each, or as JSON (PROTOCOL.md sections 2 and 2a).
///
/// A receiver reads either whatever it sends itself: a binary payload starts with CBOR's
/// self-describing tag (`D9 D9 F7`), which no JSON text does. So the choice is the sender's, per
/// message type (`MultipeerMessage.wireEncoding`) or per session
/// (`MultipeerSession.Configuration.messageEncoding`), and peers of either choice talk.
/// A peer of an earlier release reads JSON only.
public struct MessageEncoding: Hashable, Sendable, CustomStringConvertible {
    private let name: String
    private init(_ name: String) { self.name = name }

    /// JSON, as Foundation's `JSONEncoder` writes it: `Data` fields in base64.
    public static let json = MessageEncoding("json")
    /// CBOR: smaller and faster to write and read, `Data` and `[UInt8]` fields as raw bytes.
    public static let binary = MessageEncoding("binary")

    /// `json` or `binary`.
    public var description: String { name }

    /// The first bytes of every binary payload: CBOR tag 55799, "self-described CBOR".
    package static let binaryPrefix: [UInt8] = [0xD9, 0xD9, 0xF7]

    /// `value` as a payload of this encoding: the bytes a message of it carries on the wire
    /// (binary: CBOR's self-describing tag `D9 D9 F7`, then the CBOR). What an application keeps
    /// or signs in the session's own encoding, a record of MultipeerSync for one, it gets here.
    /// - Throws: Foundation's `EncodingError` if `value` does not encode (a `Double.nan` in
    ///   JSON, say).
    public func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        var buffer = ByteBuffer()
        try encode(value, into: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// Reads a payload of either encoding, as a receiving session does (a binary one starts with
    /// `D9 D9 F7`; anything else is read as JSON).
    /// - Throws: Foundation's `DecodingError`, which names the field it could not read.
    public static func decode<Value: Decodable>(_ type: Value.Type, from payload: some Sequence<UInt8>) throws -> Value
    {
        try decode(type, from: ByteBuffer(bytes: payload))
    }

    /// Appends `value`'s payload to `buffer`.
    package func encode<Value: Encodable>(_ value: Value, into buffer: inout ByteBuffer) throws {
        if self == .binary {
            buffer.writeBytes(Self.binaryPrefix)
            try CBOREncoder().encode(value, into: &buffer)
        } else {
            buffer.writeBytes(try JSONEncoder().encode(value))
        }
    }

    /// Decodes a payload of either encoding.
    package static func decode<Value: Decodable>(_ type: Value.Type, from payload: ByteBuffer) throws -> Value {
        var payload = payload
        if payload.readableBytesView.starts(with: binaryPrefix) {
            payload.moveReaderIndex(forwardBy: binaryPrefix.count)
            return try CBORDecoder().decode(type, from: payload)
        }
        return try JSONDecoder().decode(type, from: Data(payload.readableBytesView))
    }
}

extension MessageEncoding {
    /// Why a payload did not decode as `typeName`, in words a person and another
    /// implementation can act on: the type, the field (its path from the message, e.g.
    /// `entries.versions[3].fields.fuel`), what was expected and what was wrong. This is the
    /// reason REJECT carries (docs/PROTOCOL.md 3b) and the receiver's report shows.
    package static func reason(_ error: any Error, decoding typeName: String) -> String {
        guard let error = error as? DecodingError else { return "a \(typeName) did not decode: \(error)" }
        switch error {
        case .keyNotFound(let key, let context):
            return "a \(typeName) without its field \"\(path(context.codingPath + [key]))\""
        case .valueNotFound(let type, let context):
            return "a \(typeName) with null or nothing in \(place(context.codingPath)), where a \(type) is required"
        case .typeMismatch(let type, let context)
        where context.debugDescription.hasPrefix("Invalid number of keys found"):
            // (Swift's enums with associated values: one key, naming the case.)
            return
                "a \(typeName) whose \(place(context.codingPath)) is not an object with exactly one key naming a case of \(type)"
        case .typeMismatch(let type, let context):
            return "a \(typeName) whose \(place(context.codingPath)) is not of type \(type): \(said(context))"
        case .dataCorrupted(let context):
            return "a \(typeName) whose \(place(context.codingPath)) is invalid: \(said(context))"
        @unknown default:
            return "a \(typeName) did not decode: \(error)"
        }
    }

    /// `entries.versions[3].fields`: keys joined by dots, array positions in brackets.
    private static func path(_ keys: [any CodingKey]) -> String {
        var path = ""
        for key in keys {
            if let index = key.intValue, key.stringValue == "Index \(index)" || key.stringValue == "\(index)" {
                path += "[\(index)]"
            } else {
                path += path.isEmpty ? key.stringValue : ".\(key.stringValue)"
            }
        }
        return path
    }

    private static func place(_ keys: [any CodingKey]) -> String {
        keys.isEmpty ? "payload" : "field \"\(path(keys))\""
    }

    /// The decoder's own words, without the sentence's end.
    private static func said(_ context: DecodingError.Context) -> String {
        context.debugDescription.trimmingCharacters(in: CharacterSet(charactersIn: ". "))
    }
}
