public import struct Foundation.UUID

/// The members a group admits, by key or by peer ID: with a roster, a peer holding the group key
/// but not listed is refused after its HELLO (`notInRoster`), so one lost or rogue device is
/// removed without re-keying the others. Without one, any holder of the group key is admitted.
///
/// A roster file lists one member per line, as the 64 hexadecimal digits of its public key
/// (`PeerKey.description`) or as its peer ID (which the key derives); `#` starts a comment:
///
/// ```
/// # navlog crew
/// d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a  # captain
/// 21fe31df-a154-8261-a26b-f854046fd227                              # first officer
/// ```
///
/// `Roster(contentsOfFile:)` reads such a file.
public struct Roster: Hashable, Sendable, CustomStringConvertible {
    /// Members listed by key.
    public var keys: Set<PeerKey>
    /// Members listed by peer ID.
    public var peerIDs: Set<UUID>

    /// A roster of these members. An empty roster admits nobody.
    public init(keys: some Sequence<PeerKey> = [], peerIDs: some Sequence<UUID> = []) {
        self.keys = Set(keys)
        self.peerIDs = Set(peerIDs)
    }

    /// Reads a roster from its text form (the file's contents).
    /// - Parameters:
    ///   - text: One member per line, with `#` comments.
    ///   - source: Names the text in errors.
    public init(parsing text: String, source: String = "the roster") throws {
        var keys: [PeerKey] = []
        var peerIDs: [UUID] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let content = line.prefix { $0 != "#" }
            let words = content.split(whereSeparator: \.isWhitespace)
            guard let entry = words.first else { continue }
            guard words.count == 1 else {
                throw MultipeerError(
                    .invalidArgument,
                    "line \(index + 1) of \(source) holds more than one entry; write one member per line, and comments after '#'"
                )
            }
            if let peerID = UUID(uuidString: String(entry)) {
                peerIDs.append(peerID)
            } else {
                do {
                    keys.append(try PeerKey(hex: entry))
                } catch let error as MultipeerError {
                    throw MultipeerError(
                        .invalidArgument,
                        "line \(index + 1) of \(source) is neither a peer ID nor a peer key: \(error.message)"
                    )
                }
            }
        }
        self.init(keys: keys, peerIDs: peerIDs)
    }

    /// Whether the peer proving `key` is a member.
    public func admits(_ key: PeerKey) -> Bool {
        keys.contains(key) || peerIDs.contains(key.peerID)
    }

    /// How many members it lists.
    public var description: String { "Roster(\(keys.count + peerIDs.count) members)" }
}
