package import NIOCore

/// The message types a peer's application reads: the DATA type names it takes, as its HELLO or
/// a later TYPES frame announced them (docs/PROTOCOL.md, 3e). A peer that announces a list is
/// sent no message of another type: the sender refuses it to its own application instead.
///
/// A list is read as ``MessageTypesRead``: only these types, or every type but these.
package struct MessageTypeList: Hashable, Sendable, CustomStringConvertible {
    /// The most bytes the list takes on the wire, its count included: it travels in HELLO,
    /// whose value is at most 16,384 bytes in all (``Hello/maximumLength``).
    package static let maximumEncodedLength = 6_144

    /// The type names, each 1 to 255 bytes of UTF-8.
    package private(set) var names: Set<String>

    /// A list of `names`, checked against the limits a receiver enforces.
    /// - Throws: `invalidArgument` for an empty name, a name longer than 255 bytes, or a list
    ///   that takes more than ``maximumEncodedLength`` bytes.
    package init<Names: Sequence<String>>(_ names: Names) throws {
        self.names = Set(names)
        for name in self.names where !(1...DataMessage.maximumTypeNameLength).contains(name.utf8.count) {
            throw MultipeerError(
                .invalidArgument,
                "the message type name \"\(name.prefix(40))\" is \(name.utf8.count) bytes of UTF-8; a name is 1 to \(DataMessage.maximumTypeNameLength)"
            )
        }
        guard encodedLength <= Self.maximumEncodedLength else {
            throw MultipeerError(
                .invalidArgument,
                "the \(self.names.count) message types read take \(encodedLength) bytes in HELLO; the limit is \(Self.maximumEncodedLength)"
            )
        }
    }

    /// No type.
    package static let empty = try! MessageTypeList([])

    package func contains(_ name: String) -> Bool { names.contains(name) }

    /// The same list with `name` added, if it still fits.
    package func adding(_ name: String) throws -> MessageTypeList {
        try MessageTypeList(names.union([name]))
    }

    /// The same list without `name`.
    package func removing(_ name: String) -> MessageTypeList {
        var list = self
        list.names.remove(name)
        return list
    }

    /// The bytes the list takes on the wire: a count, then each name as a String8.
    package var encodedLength: Int { 2 + names.reduce(0) { $0 + 1 + $1.utf8.count } }

    /// The names in the order they travel: ascending by their UTF-8 bytes.
    package var sorted: [String] { names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) } }

    package var description: String { sorted.joined(separator: ", ") }

    /// Writes the count, then the names in ascending byte order.
    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt16(names.count))
        for name in sorted { buffer.writeShortString(name) }
    }

    /// Reads a list as ``encode(into:)`` writes it, from a frame of type `message` (for errors).
    /// - Throws: `malformedMessage` for a list cut short, an empty name, names out of order or
    ///   twice, or a list longer than ``maximumEncodedLength``.
    package init(decoding buffer: inout ByteBuffer, in message: FrameType) throws {
        let start = buffer.readerIndex
        let count = try buffer.readField(UInt16.self, "message type count", in: message)
        var names: [String] = []
        names.reserveCapacity(Int(count))
        for _ in 0..<count {
            let name = try buffer.readShortString("message type name", in: message)
            guard !name.isEmpty else {
                throw MultipeerError(.malformedMessage, "\(message) is malformed: an empty message type name")
            }
            if let previous = names.last, !previous.utf8.lexicographicallyPrecedes(name.utf8) {
                throw MultipeerError(
                    .malformedMessage,
                    "\(message) is malformed: message type \"\(name)\" comes after \"\(previous)\"; names are sorted and each appears once"
                )
            }
            names.append(name)
        }
        let length = buffer.readerIndex - start
        guard length <= Self.maximumEncodedLength else {
            throw MultipeerError(
                .malformedMessage,
                "\(message) is malformed: its message types take \(length) bytes; the limit is \(Self.maximumEncodedLength)"
            )
        }
        self.names = Set(names)
    }
}
