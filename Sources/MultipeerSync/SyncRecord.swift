public import MultipeerSession

import struct Foundation.UUID

/// A record the store keeps and keeps in sync: a `Codable & Sendable` value with a stable id.
///
/// ```swift
/// struct ChecklistItem: SyncRecord {
///     static var merge: SyncMerge { .fieldByField }
///     var id: String          // stable: "before-start/fuel"
///     var title: String
///     var done: Bool
/// }
/// ```
///
/// A record's bytes are its `Codable` encoding in the session's binary message encoding
/// (`MessageEncoding.binary`), kept as its writer signed them: a station
/// whose build does not know a field still keeps and passes it on, intact.
public protocol SyncRecord: Codable, Sendable, Identifiable where ID == String {
    /// The collection's name, the same on every station: 1 to 255 bytes of UTF-8. By default
    /// the bare type name (`ChecklistItem`); give one to rename or move the type freely.
    static var collectionName: String { get }
    /// How two stations' concurrent writes of one record merge; by default
    /// ``SyncMerge/wholeRecord``.
    static var merge: SyncMerge { get }
    /// Who may write the collection; by default ``SyncWriters/anyMember``. Every station that
    /// opens the collection (or carries it, ``SyncStore/carry(_:writers:attachments:)``) checks every version of it
    /// it takes against this, so declare the same on every station.
    static var writers: SyncWriters { get }
    /// When a station fetches the files of the collection's records (``SyncAttachment``); by
    /// default ``SyncAttachmentPolicy/atOnce``.
    static var attachments: SyncAttachmentPolicy { get }
    /// The version of the record's shape this build reads and writes, 1 to 2^32 - 1; by default
    /// 1. Raise it when a build adds or changes fields: stations announce it to each other, and
    /// one that meets a newer says so (``SyncEvent/newerSchema(collection:theirs:ours:from:)``),
    /// and names it when a record does not read. It changes nothing of what is kept or passed
    /// on: every station carries every version whole.
    static var schemaVersion: Int { get }
    /// The record's id, 1 to 1,024 bytes of UTF-8, never reused for another record.
    var id: String { get }
}

extension SyncRecord {
    /// The bare type name.
    public static var collectionName: String { String(describing: Self.self) }
    /// ``SyncMerge/wholeRecord``.
    public static var merge: SyncMerge { .wholeRecord }
    /// ``SyncWriters/anyMember``.
    public static var writers: SyncWriters { .anyMember }
    /// ``SyncAttachmentPolicy/atOnce``.
    public static var attachments: SyncAttachmentPolicy { .atOnce }
    /// 1.
    public static var schemaVersion: Int { 1 }
}

/// How concurrent writes of one record merge (docs/SYNC.md 1). Either way every station that
/// took the same writes holds the same record: the merge is commutative, associative and
/// idempotent, and its order (the later hybrid-logical-clock stamp, then the greater origin) is
/// the same on every station.
public enum SyncMerge: Hashable, Sendable {
    /// The last write of the record wins, whole: a record is what one writer put.
    case wholeRecord
    /// The last write of each field wins: two stations that changed different fields of a
    /// record both keep their change. Each top-level property (each key of the record's
    /// keyed container, as synthesized `Codable` writes it) is a field, and a `put` writes only
    /// the fields that changed: an optional set to nil is written (as null), and a field the
    /// record's type does not have (a newer build's) keeps its value. The record's type must
    /// encode into one keyed container, each property with `encode(_:forKey:)` or
    /// `encodeIfPresent(_:forKey:)`.
    case fieldByField
}

/// Who may write a collection (``SyncRecord/writers``): a version by anyone else is refused by
/// every station that knows the collection, wherever it came from, with `notPermitted`, never
/// stored or relayed.
public struct SyncWriters: Hashable, Sendable, CustomStringConvertible {
    /// The peer IDs that may write; nil: any member of the group.
    let peerIDs: Set<UUID>?

    /// Any member the session admits (the group key, and the roster if there is one).
    public static let anyMember = SyncWriters(peerIDs: nil)

    /// The devices whose keys these are, and no one else.
    public static func only(_ keys: some Sequence<PeerKey>) -> SyncWriters {
        SyncWriters(peerIDs: Set(keys.map(\.peerID)))
    }

    /// Whether the device with `peerID` may write.
    public func allows(_ peerID: UUID) -> Bool {
        peerIDs?.contains(peerID) ?? true
    }

    public var description: String {
        peerIDs.map { "only \($0.map(\.uuidString).sorted().joined(separator: ", "))" } ?? "any member"
    }
}
