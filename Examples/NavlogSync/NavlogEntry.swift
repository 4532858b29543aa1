public import Foundation
import MultipeerCore

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
        leg: Int? = nil, waypoint: String, planned: String? = nil, actual: String? = nil, fuel: Int? = nil,
        altitude: Int? = nil, remarks: String? = nil
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

/// One navigation-log entry as a last-writer-wins register: every edit replaces the whole
/// entry with a version stamped by a hybrid logical clock and its author; a delete is such a
/// version too (a tombstone), so it wins over older edits and loses to newer ones.
public struct NavlogEntry: Hashable, Sendable, Codable, Identifiable {
    public var id: UUID
    public var fields: NavlogFields
    /// Who made this version: the author's display name.
    public var author: String
    /// The host that made this version (its peer id): display names need not be unique, and a
    /// host never issues one timestamp twice, so (timestamp, origin) names a version.
    public var origin: UUID
    public var timestamp: HLCTimestamp
    public var deleted: Bool

    public init(id: UUID, fields: NavlogFields, author: String, origin: UUID, timestamp: HLCTimestamp, deleted: Bool = false) {
        self.id = id
        self.fields = fields
        self.author = author
        self.origin = origin
        self.timestamp = timestamp
        self.deleted = deleted
    }

    /// What a version's author must be, for hosts to take the version in: a display name the
    /// session accepts, without control characters (a terminal would obey them).
    public static let authorRule = "1 to \(Hello.maximumDisplayNameLength) bytes of UTF-8 without control characters"

    /// Whether `name` may author versions (``authorRule``).
    public static func isAuthor(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= Hello.maximumDisplayNameLength && !name.unicodeScalars.contains(where: \.isControl)
    }

    /// The version's identity, all that anti-entropy compares.
    public var version: Version { Version(timestamp: timestamp, author: author, origin: origin) }

    /// Which version of an entry wins: the later timestamp, then the greater author, then the
    /// greater origin.
    public struct Version: Hashable, Comparable, Sendable, Codable {
        public var timestamp: HLCTimestamp
        public var author: String
        public var origin: UUID

        public init(timestamp: HLCTimestamp, author: String, origin: UUID) {
            self.timestamp = timestamp
            self.author = author
            self.origin = origin
        }

        public static func < (lhs: Self, rhs: Self) -> Bool {
            (lhs.timestamp, lhs.author, lhs.origin.uuidString) < (rhs.timestamp, rhs.author, rhs.origin.uuidString)
        }
    }

    /// Whether this version replaces `other` (a version of the same entry). Two different
    /// versions with the same timestamp and origin cannot come from correct hosts, but the
    /// order stays total even then (by the bytes of their content: Swift's String order would
    /// call two canonically equivalent spellings of a remark equal, and neither would win), so
    /// merging never depends on arrival order.
    public func wins(over other: NavlogEntry) -> Bool {
        if version != other.version { return version > other.version }
        return other.contentKey.utf8.lexicographicallyPrecedes(contentKey.utf8)
    }

    private var contentKey: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return (try? String(decoding: encoder.encode(self), as: UTF8.self)) ?? ""
    }
}
