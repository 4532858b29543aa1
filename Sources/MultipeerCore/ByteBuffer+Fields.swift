import NIOCore

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
        writeShortString(String(string.prefix { character in
            bytes += character.utf8.count
            return bytes <= Int(UInt8.max)
        }))
    }

    /// Writes a UTF-8 string preceded by its length in one byte; the caller has checked the length.
    mutating func writeShortString(_ string: String) {
        let utf8 = string.utf8
        precondition(utf8.count <= Int(UInt8.max))
        writeInteger(UInt8(utf8.count))
        writeString(string)
    }

    static func truncated(_ field: String, in message: FrameType) -> MultipeerError {
        MultipeerError(.malformedMessage, "\(message) is malformed: it ends before the \(field)")
    }
}
