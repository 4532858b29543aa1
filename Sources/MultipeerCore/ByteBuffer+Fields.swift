import NIOCore

import struct Foundation.UUID

// Field readers shared by the message decoders: each names the field it failed on, so a
// malformed frame is reported as e.g. "HELLO is malformed: it ends before the incarnation".
extension ByteBuffer {
    mutating func readField<T: FixedWidthInteger>(_ type: T.Type, _ field: String, in message: FrameType) throws -> T {
        guard let value = readInteger(as: T.self) else { throw Self.truncated(field, in: message) }
        return value
    }

    mutating func readFieldBytes(length: Int, _ field: String, in message: FrameType) throws -> ByteBuffer {
        guard let slice = readSlice(length: length) else { throw Self.truncated(field, in: message) }
        return slice
    }

    /// A UUID's 16 bytes, in RFC 4122 byte order.
    mutating func readUUIDField(_ field: String, in message: FrameType) throws -> UUID {
        var bytes = try readFieldBytes(length: 16, field, in: message)
        let b = bytes.readBytes(length: 16)!
        return UUID(
            uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15])
        )
    }

    mutating func writeUUID(_ uuid: UUID) {
        withUnsafeBytes(of: uuid.uuid) { _ = writeBytes($0) }
    }

    /// A UTF-8 string preceded by its length in one byte.
    mutating func readShortString(_ field: String, in message: FrameType) throws -> String {
        let length = try readField(UInt8.self, "length of the \(field)", in: message)
        var bytes = try readFieldBytes(length: Int(length), field, in: message)
        guard let string = try? bytes.readUTF8ValidatedString(length: bytes.readableBytes) else {
            throw MultipeerError(.malformedMessage, "\(message) is malformed: the \(field) is not valid UTF-8")
        }
        return string
    }

    /// Writes `string` as ``writeShortString(_:)`` does, cut (at a character's end) to the
    /// 255 bytes a short string holds: for text meant for logs, such as a GOODBYE's or a REJECT's.
    mutating func writeShortText(_ string: String) {
        var bytes = 0
        writeShortString(
            String(
                string.prefix { character in
                    bytes += character.utf8.count
                    return bytes <= Int(UInt8.max)
                }
            )
        )
    }

    /// Writes a UTF-8 string preceded by its length in one byte; the caller has checked the length.
    mutating func writeShortString(_ string: String) {
        let utf8 = string.utf8
        precondition(utf8.count <= Int(UInt8.max))
        writeInteger(UInt8(utf8.count))
        writeString(string)
    }

    /// Metadata as HELLO carries it: a count byte, then each key and value as short strings,
    /// keys in ascending byte order, each once. (Its limits are checked where it is taken in.)
    mutating func readMetadata(in message: FrameType) throws -> [String: String] {
        let count = try readField(UInt8.self, "metadata count", in: message)
        var metadata: [String: String] = [:]
        var previousKey: String?
        for _ in 0..<count {
            let key = try readShortString("metadata key", in: message)
            let value = try readShortString("metadata value", in: message)
            if let previousKey, !previousKey.utf8.lexicographicallyPrecedes(key.utf8) {
                throw MultipeerError(
                    .malformedMessage,
                    "\(message) is malformed: metadata key \"\(key)\" comes after \"\(previousKey)\"; keys are sorted and each appears once"
                )
            }
            previousKey = key
            metadata[key] = value
        }
        return metadata
    }

    /// Writes metadata as ``readMetadata(in:)`` reads it; the caller has checked its limits.
    mutating func writeMetadata(_ metadata: [String: String]) {
        writeInteger(UInt8(metadata.count))
        for key in metadata.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            writeShortString(key)
            writeShortString(metadata[key]!)
        }
    }

    static func truncated(_ field: String, in message: FrameType) -> MultipeerError {
        MultipeerError(.malformedMessage, "\(message) is malformed: it ends before the \(field)")
    }
}
