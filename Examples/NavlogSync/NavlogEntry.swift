public import Foundation
import MultipeerCore
public import MultipeerSession
public import MultipeerSync

/// What a crew member types about one leg of the flight. Every field may be empty but the waypoint.
public struct NavlogFields: Hashable, Sendable, Codable {
    /// The leg number, from 1.
    public var leg: Int?
    /// The waypoint that ends the leg, e.g. `TESAT`.
    public var waypoint: String
    /// Planned time over the waypoint, `HH:MM` UTC.
    public var planned: String?
    /// Actual time over the waypoint, `HH:MM` UTC.
    public var actual: String?
    /// Fuel remaining at the waypoint, kilograms.
    public var fuel: Int?
    /// Altitude, feet.
    public var altitude: Int?
    public var remarks: String?

    public init(
        leg: Int? = nil,
        waypoint: String,
        planned: String? = nil,
        actual: String? = nil,
        fuel: Int? = nil,
        altitude: Int? = nil,
        remarks: String? = nil
    ) {
        self.leg = leg
        self.waypoint = waypoint
        self.planned = planned
        self.actual = actual
        self.fuel = fuel
        self.altitude = altitude
        self.remarks = remarks
    }
}

/// One navigation-log entry as a host shows it: the latest version of its record in the store
/// (``NavlogRecord``, collection `navlog.entries`), and who wrote that version. Every edit
/// replaces the whole entry (the last writer wins, by the store's hybrid-logical-clock order); a
/// delete is such a version too, whose `deleted` is true, kept for ever as 0.9 kept it.
///
/// Each version is signed by the host that made it (its origin), with the key its origin's peer
/// ID derives from; every host checks the signature of every version it takes, however it came
/// (docs/SYNC.md 3), so ``origin`` and ``key`` say who wrote it, whatever ``author`` says.
public struct NavlogEntry: Hashable, Sendable, Identifiable {
    /// The entry's id.
    public var id: UUID
    /// What the crew typed.
    public var fields: NavlogFields
    /// Who made this version: the display name its writer's station ran under (which proves
    /// nothing: ``origin`` and ``key`` do).
    public var author: String
    /// The host that made this version (its peer ID), whose key signed it.
    public var origin: UUID
    /// When it was made, by the store's hybrid logical clock.
    public var timestamp: HLCTimestamp
    /// Whether this version deletes the entry.
    public var deleted: Bool
    /// The files attached to the entry (docs/NAVLOG.md 1a), sorted by name; nil when there are none.
    public var attachments: [NavlogAttachment]?
    /// The origin's public key, if this host has it.
    public var key: PeerKey?

    public init(
        id: UUID,
        fields: NavlogFields,
        author: String,
        origin: UUID,
        timestamp: HLCTimestamp,
        deleted: Bool = false,
        attachments: [NavlogAttachment]? = nil,
        key: PeerKey? = nil
    ) {
        self.id = id
        self.fields = fields
        self.author = author
        self.origin = origin
        self.timestamp = timestamp
        self.deleted = deleted
        self.attachments = attachments?.isEmpty == true ? nil : attachments
        self.key = key
    }

    /// What a version's author must be, for hosts to show the version: a display name the
    /// session accepts, without control characters (a terminal would obey them).
    public static let authorRule = "1 to \(Hello.maximumDisplayNameLength) bytes of UTF-8 without control characters"

    /// Whether `name` may author versions (``authorRule``).
    public static func isAuthor(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= Hello.maximumDisplayNameLength
            && !name.unicodeScalars.contains(where: \.isControl)
    }

    /// Leg, then planned time, then waypoint, then id: the same order on every host.
    public static func logOrder(_ a: NavlogEntry, _ b: NavlogEntry) -> Bool {
        let left = (a.fields.leg ?? Int.max, a.fields.planned ?? "~", a.fields.waypoint, a.id.uuidString)
        let right = (b.fields.leg ?? Int.max, b.fields.planned ?? "~", b.fields.waypoint, b.id.uuidString)
        return left < right
    }
}

/// An entry as the store keeps it (docs/NAVLOG.md 1): one record of the collection
/// `navlog.entries`, whole (the last writer wins), its id the entry's UUID in upper case.
/// navlog-sync 0.9's versions read as the same shape (docs/SYNC.md 11).
public struct NavlogRecord: SyncRecord, Hashable {
    /// `navlog.entries`, on every host (and in docs/SYNC.md 11).
    public static var collectionName: String { "navlog.entries" }

    /// The entry's UUID in upper case.
    public var id: String
    public var fields: NavlogFields
    /// The display name of the station that wrote the version (which proves nothing).
    public var author: String
    /// Whether the entry is deleted: a version like an edit, kept for ever.
    public var deleted: Bool
    /// The files attached (docs/NAVLOG.md 1a), sorted by name; nil when there are none.
    public var attachments: [NavlogAttachment]?

    /// The record of entry `id`.
    public init(id: UUID, fields: NavlogFields, author: String, deleted: Bool, attachments: [NavlogAttachment]?) {
        self.id = id.uuidString
        self.fields = fields
        self.author = author
        self.deleted = deleted
        self.attachments = attachments?.isEmpty == true ? nil : attachments
    }

    /// Checks what a peer's version holds as a host checks what a user types
    /// (docs/NAVLOG.md 3): an id that is a UUID, an author that is a display name, fields a
    /// user could have typed (``NavlogFields/validate()``), attachments by their rules
    /// (``NavlogAttachment``). A record that breaks them is carried (the store carries every
    /// version whole) but not shown.
    /// - Throws: `badVersion`, saying which rule.
    public func validate() throws(NavlogError) {
        guard UUID(uuidString: id)?.uuidString == id else {
            throw NavlogError(.badVersion, "its id is not a UUID in upper case")
        }
        guard NavlogEntry.isAuthor(author) else {
            throw NavlogError(.badVersion, "its author is not \(NavlogEntry.authorRule)")
        }
        do {
            try fields.validate()
        } catch {
            throw NavlogError(.badVersion, error.message)
        }
        try NavlogAttachment.validate(attachments)
    }

    /// The entry as a host shows it, written at `stamp` by the origin whose key is `key`.
    func entry(stamp: VersionStamp, key: PeerKey?) -> NavlogEntry? {
        guard let id = UUID(uuidString: id) else { return nil }
        return NavlogEntry(
            id: id,
            fields: fields,
            author: author,
            origin: stamp.origin,
            timestamp: stamp.timestamp,
            deleted: deleted,
            attachments: attachments,
            key: key
        )
    }
}
