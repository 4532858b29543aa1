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
    public var digest: NavlogDigest {
        NavlogDigest(versions: entries.mapValues(\.version))
    }

    /// The entries whose version here is newer than in `digest`, or that it lacks.
    public func newer(than digest: NavlogDigest) -> [NavlogEntry] {
        entries.values.filter { entry in
            guard let theirs = digest.versions[entry.id] else { return true }
            return entry.version > theirs
        }.sorted { $0.timestamp < $1.timestamp }
    }

    /// Leg, then planned time, then waypoint, then id: the same order on every host.
    public static func logOrder(_ a: NavlogEntry, _ b: NavlogEntry) -> Bool {
        let left = (a.fields.leg ?? Int.max, a.fields.planned ?? "~", a.fields.waypoint, a.id.uuidString)
        let right = (b.fields.leg ?? Int.max, b.fields.planned ?? "~", b.fields.waypoint, b.id.uuidString)
        return left < right
    }
}

/// Which version of every entry a host holds: ids and versions, no content.
public struct NavlogDigest: Hashable, Sendable, Codable {
    public var versions: [UUID: NavlogEntry.Version]

    public init(versions: [UUID: NavlogEntry.Version]) {
        self.versions = versions
    }

    // On the wire, one string per entry, "ID TIMESTAMP ORIGIN AUTHOR": about 100 bytes each.
    public init(from decoder: any Decoder) throws {
        var versions: [UUID: NavlogEntry.Version] = [:]
        for line in try decoder.singleValueContainer().decode([String].self) {
            let parts = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
            guard parts.count == 4, let id = UUID(uuidString: String(parts[0])), let raw = UInt64(parts[1]),
                let origin = UUID(uuidString: String(parts[2]))
            else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "bad digest line \(line)"))
            }
            versions[id] = NavlogEntry.Version(timestamp: HLCTimestamp(rawValue: raw), author: String(parts[3]), origin: origin)
        }
        self.versions = versions
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(versions.map { id, version in
            "\(id.uuidString) \(version.timestamp.rawValue) \(version.origin.uuidString) \(version.author)"
        })
    }
}
