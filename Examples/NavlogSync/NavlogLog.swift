public import Foundation

/// The whole log as a state-based CRDT: a map from entry id to its winning version. Merging is
/// commutative, associative and idempotent, so hosts that have seen the same versions, in any
/// order and any number of times, hold the same log.
public struct NavlogLog: Hashable, Sendable {
    public private(set) var entries: [UUID: NavlogEntry]

    public init(_ entries: some Sequence<NavlogEntry> = []) {
        self.entries = [:]
        for entry in entries { merge(entry) }
    }

    /// Takes in one version; returns whether it changed the log.
    @discardableResult
    public mutating func merge(_ entry: NavlogEntry) -> Bool {
        if let current = entries[entry.id], !entry.wins(over: current) { return false }
        entries[entry.id] = entry
        return true
    }

    /// The log with every version of `other` merged in.
    public func merging(_ other: NavlogLog) -> NavlogLog {
        var merged = self
        for entry in other.entries.values { merged.merge(entry) }
        return merged
    }

    /// The entries that are not deleted, in log order.
    public var live: [NavlogEntry] {
        entries.values.filter { !$0.deleted }.sorted(by: NavlogLog.logOrder)
    }

    /// The version of every entry, tombstones included: what a host tells a peer it has.
    package var digest: NavlogDigest {
        NavlogDigest(
            versions: entries.mapValues { NavlogDigest.Held(version: $0.version, contentHash: $0.contentHash) }
        )
    }

    /// The entries whose version here is newer than in `digest`, or that it lacks, or holds
    /// with other content under the same version (the receiver keeps one of the two, the same
    /// one as this host: docs/NAVLOG.md, section 1).
    package func newer(than digest: NavlogDigest) -> [NavlogEntry] {
        entries.values.filter { entry in
            NavlogDigest.Held(version: entry.version, contentHash: entry.contentHash).replaces(
                digest.versions[entry.id]
            )
        }.sorted { $0.timestamp < $1.timestamp }
    }

    /// Leg, then planned time, then waypoint, then id: the same order on every host.
    public static func logOrder(_ a: NavlogEntry, _ b: NavlogEntry) -> Bool {
        let left = (a.fields.leg ?? Int.max, a.fields.planned ?? "~", a.fields.waypoint, a.id.uuidString)
        let right = (b.fields.leg ?? Int.max, b.fields.planned ?? "~", b.fields.waypoint, b.id.uuidString)
        return left < right
    }
}

/// Which version of every entry a host holds: ids, versions and content hashes, no content.
package struct NavlogDigest: Hashable, Sendable, Codable {
    /// One entry's version as held, and the hash of its content (``NavlogEntry/contentHash``).
    package struct Held: Hashable, Sendable {
        /// The version's stamp: timestamp, author, origin.
        package var version: NavlogEntry.Version
        /// ``NavlogEntry/contentHash`` of the version held.
        package var contentHash: String

        /// An entry's version as held.
        package init(version: NavlogEntry.Version, contentHash: String) {
            self.version = version
            self.contentHash = contentHash
        }

        /// Whether a host holding `other` of the entry (or nothing) should take this one: it
        /// is newer, or has the same version with other content (of which both hosts then keep
        /// the same one: docs/NAVLOG.md, section 1).
        package func replaces(_ other: Held?) -> Bool {
            guard let other else { return true }
            return version > other.version || (version == other.version && contentHash != other.contentHash)
        }
    }

    /// By entry id.
    package var versions: [UUID: Held]

    /// A digest of these versions.
    package init(versions: [UUID: Held]) {
        self.versions = versions
    }

    /// The digest in parts of at most `size` versions (at least one part, maybe empty), to send
    /// as `digest` messages.
    package func batches(of size: Int) -> [NavlogDigest] {
        let all = Array(versions)
        return stride(from: 0, to: max(all.count, 1), by: size).map { start in
            NavlogDigest(
                versions: Dictionary(
                    uniqueKeysWithValues: all[start..<min(start + size, all.count)].map { ($0.key, $0.value) }
                )
            )
        }
    }

    /// Adds the versions of another part of a peer's digest.
    package mutating func add(_ part: NavlogDigest) {
        versions.merge(part.versions) { _, new in new }
    }

    // On the wire, one string per entry, "ID TIMESTAMP ORIGIN HASH AUTHOR": about 130 bytes each.
    package init(from decoder: any Decoder) throws {
        var versions: [UUID: Held] = [:]
        for line in try decoder.singleValueContainer().decode([String].self) {
            let parts = line.split(separator: " ", maxSplits: 4, omittingEmptySubsequences: false)
            guard parts.count == 5, let id = UUID(uuidString: String(parts[0])), let raw = UInt64(parts[1]),
                let origin = UUID(uuidString: String(parts[2])), parts[3].utf8.count == 32,
                parts[3].utf8.allSatisfy({
                    (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                        || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0)
                })
            else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: decoder.codingPath, debugDescription: "bad digest line \(line)")
                )
            }
            versions[id] = Held(
                version: NavlogEntry.Version(
                    timestamp: HLCTimestamp(rawValue: raw),
                    author: String(parts[4]),
                    origin: origin
                ),
                contentHash: String(parts[3])
            )
        }
        self.versions = versions
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(
            versions.map { id, held in
                "\(id.uuidString) \(held.version.timestamp.rawValue) \(held.version.origin.uuidString) \(held.contentHash) \(held.version.author)"
            }
        )
    }
}
