package import NIOCore

/// Which message types a peer's application reads, as its HELLO and its latest TYPES frame say
/// (docs/PROTOCOL.md, 3e): only the types of a list (an application that declared what it
/// reads), or every type but those of a list (one that declared nothing, and has refused the
/// types it found nothing subscribed to past what it holds for a first subscriber). A sender
/// sends a peer no message of a type it does not read: it refuses it to its own application.
package enum MessageTypesRead: Hashable, Sendable, CustomStringConvertible {
    /// Only these types.
    case only(MessageTypeList)
    /// Every type but these.
    case allBut(MessageTypeList)

    /// Every type: what a peer that says nothing of what it reads reads.
    package static let every = MessageTypesRead.allBut(.empty)

    package func contains(_ name: String) -> Bool {
        switch self {
        case .only(let list): list.contains(name)
        case .allBut(let list): !list.contains(name)
        }
    }

    /// What a HELLO's `message types` field says: the list, or every type without one.
    package init(hello list: MessageTypeList?) {
        self = list.map(MessageTypesRead.only) ?? .every
    }

    /// The list a HELLO carries for it: nil for every type but some (a HELLO says that as every
    /// type, and a TYPES after it says the rest).
    package var helloList: MessageTypeList? {
        if case .only(let list) = self { list } else { nil }
    }

    package var description: String {
        switch self {
        case .only(let list): list.names.isEmpty ? "none" : list.description
        case .allBut(let list): list.names.isEmpty ? "every type" : "every type but \(list)"
        }
    }

    /// TYPES's value: the mode (0: only these, 1: every type but these), then the list as HELLO carries it.
    package func encode(into buffer: inout ByteBuffer) {
        switch self {
        case .only(let list):
            buffer.writeInteger(UInt8(0))
            list.encode(into: &buffer)
        case .allBut(let list):
            buffer.writeInteger(UInt8(1))
            list.encode(into: &buffer)
        }
    }

    /// Reads TYPES's value as ``encode(into:)`` writes it.
    /// - Throws: `malformedMessage` for a mode other than 0 or 1, or a malformed list.
    package init(decoding buffer: inout ByteBuffer) throws {
        let mode = try buffer.readField(UInt8.self, "mode", in: .types)
        let list = try MessageTypeList(decoding: &buffer, in: .types)
        switch mode {
        case 0: self = .only(list)
        case 1: self = .allBut(list)
        default:
            throw MultipeerError(
                .malformedMessage,
                "TYPES is malformed: mode \(mode); 0 (only these types) and 1 (every type but these) are defined"
            )
        }
    }
}
