public import struct Foundation.UUID

/// Which of two writes came last: the later hybrid-logical-clock timestamp, then the greater
/// origin (the peer ID of the station that wrote it, compared byte by byte), so that two writes of
/// one instant by two stations still have an order, the same on every station. A station never
/// issues one timestamp twice, so a stamp names one write (docs/SYNC.md, 2).
public struct VersionStamp: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// When, by the origin's clock.
    public var timestamp: HLCTimestamp
    /// The station that wrote it: its peer ID.
    public var origin: UUID

    /// The stamp of a write made by `origin` at `timestamp`.
    public init(timestamp: HLCTimestamp, origin: UUID) {
        self.timestamp = timestamp
        self.origin = origin
    }

    /// Earlier: the earlier timestamp, then the smaller origin, byte by byte.
    public static func < (lhs: Self, rhs: Self) -> Bool {
        if lhs.timestamp != rhs.timestamp { return lhs.timestamp < rhs.timestamp }
        return withUnsafeBytes(of: lhs.origin.uuid) { left in
            withUnsafeBytes(of: rhs.origin.uuid) { right in left.lexicographicallyPrecedes(right) }
        }
    }

    /// `timestamp@origin`.
    public var description: String { "\(timestamp)@\(origin)" }
}
