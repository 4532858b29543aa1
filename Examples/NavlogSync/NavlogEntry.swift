import Crypto
public import Foundation
import MultipeerCore
public import MultipeerSession

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

/// One navigation-log entry as a last-writer-wins register: every edit replaces the whole
/// entry with a version stamped by a hybrid logical clock and its author; a delete is such a
/// version too (a tombstone), so it wins over older edits and loses to newer ones.
///
/// Each version is signed by the host that made it (its origin), with the key its origin's peer
/// ID derives from, and carries that key: any host can check who wrote a version it is relayed,
/// with nothing else (docs/NAVLOG.md, section 1).
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
    /// The files attached to the entry (docs/NAVLOG.md 1a), sorted by name; nil when there are none.
    public var attachments: [NavlogAttachment]?
    /// The origin's public key (``signed(by:)``); nil on a version not signed yet.
    public var key: PeerKey?
    /// The origin's Ed25519 signature of ``signedBytes``, 128 hexadecimal digits.
    public var signature: String?

    public init(
        id: UUID,
        fields: NavlogFields,
        author: String,
        origin: UUID,
        timestamp: HLCTimestamp,
        deleted: Bool = false,
        attachments: [NavlogAttachment]? = nil
    ) {
        self.id = id
        self.fields = fields
        self.author = author
        self.origin = origin
        self.timestamp = timestamp
        self.deleted = deleted
        self.attachments = attachments?.isEmpty == true ? nil : attachments
    }

    /// What a version's author must be, for hosts to take the version in: a display name the
    /// session accepts, without control characters (a terminal would obey them).
    public static let authorRule = "1 to \(Hello.maximumDisplayNameLength) bytes of UTF-8 without control characters"

    /// Whether `name` may author versions (``authorRule``).
    public static func isAuthor(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= Hello.maximumDisplayNameLength
            && !name.unicodeScalars.contains(where: \.isControl)
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
    /// versions with the same version stamp cannot come from correct hosts, but the order stays
    /// total even then (by their ``signedBytes``: Swift's String order would call two canonically
    /// equivalent spellings of a remark equal, and neither would win), so merging never depends
    /// on arrival order.
    public func wins(over other: NavlogEntry) -> Bool {
        if version != other.version { return version > other.version }
        return other.signedBytes.lexicographicallyPrecedes(signedBytes)
    }

    // MARK: Authorship

    /// What the origin signs (docs/NAVLOG.md, section 1): every field of the version, in a fixed
    /// binary form, so that two implementations sign and hash the same bytes; the attachments
    /// (section 1a) follow only when there are any, so a version without them signs what it did
    /// before they existed.
    public var signedBytes: [UInt8] {
        var bytes = Array("navlog version v1".utf8)
        bytes.reserveCapacity(128)
        func append(_ uuid: UUID) { withUnsafeBytes(of: uuid.uuid) { bytes += $0 } }
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.bigEndian) { bytes += $0 } }
        func append(_ string: String) {
            append(UInt16(truncatingIfNeeded: string.utf8.count))
            bytes += string.utf8
        }
        func append(optional string: String?) {
            guard let string else { return bytes.append(0) }
            bytes.append(1)
            append(string)
        }
        func append(optional number: Int?) {
            guard let number else { return bytes.append(0) }
            bytes.append(1)
            append(Int64(number))
        }
        append(id)
        append(timestamp.rawValue)
        append(origin)
        bytes.append(deleted ? 1 : 0)
        append(author)
        append(fields.waypoint)
        append(optional: fields.leg)
        append(optional: fields.planned)
        append(optional: fields.actual)
        append(optional: fields.fuel)
        append(optional: fields.altitude)
        append(optional: fields.remarks)
        if let attachments, !attachments.isEmpty {
            bytes.append(UInt8(truncatingIfNeeded: attachments.count))
            for attachment in attachments {
                append(attachment.name)
                append(UInt64(bitPattern: attachment.length))
                bytes += Hex.decode(attachment.sha256.utf8) ?? []
            }
        }
        return bytes
    }

    /// The first 16 bytes of the SHA-256 of ``signedBytes``, in lowercase hexadecimal: what a
    /// digest names the content by, so two hosts never keep different content under one version.
    public var contentHash: String {
        Hex.encode(SHA256.hash(data: signedBytes).prefix(16))
    }

    /// This version signed by `identity`, which must be its origin's.
    public func signed(by identity: PeerIdentity) throws -> NavlogEntry {
        precondition(identity.peerID == origin, "a version is signed by its origin")
        var signed = self
        signed.key = identity.key
        signed.signature = Hex.encode(try identity.protocolSignature(for: signedBytes))
        return signed
    }

    /// Checks that the version was written by its origin: it carries a key from which the
    /// origin's ID derives, and that key's signature of ``signedBytes``.
    /// - Throws: `badSignature`, saying which check failed.
    public func verify() throws(NavlogError) {
        guard let key, let signature else {
            throw NavlogError(.badSignature, "version \(timestamp.rawValue) of entry \(id) is not signed")
        }
        guard key.peerID == origin else {
            throw NavlogError(
                .badSignature,
                "version \(timestamp.rawValue) of entry \(id) names origin \(origin) but carries the key of \(key.peerID)"
            )
        }
        guard let bytes = Hex.decode(signature.utf8), bytes.count == 64,
            key.isValidProtocolSignature(bytes, for: signedBytes)
        else {
            throw NavlogError(
                .badSignature,
                "the signature of version \(timestamp.rawValue) of entry \(id) does not verify: it was altered, or not written by \(origin)"
            )
        }
    }
}
