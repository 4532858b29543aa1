/// A hybrid logical clock timestamp: milliseconds of wall-clock time in the upper 48 bits and a
/// logical counter in the lower 16. It orders every edit in the group: it never runs backwards
/// on one host, it follows causality (an edit made after seeing another is later), and it stays
/// close to real time.
public struct HLCTimestamp: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: UInt64

    public init(rawValue: UInt64) { self.rawValue = rawValue }

    public init(milliseconds: UInt64, counter: UInt16) {
        rawValue = milliseconds << 16 | UInt64(counter)
    }

    /// Wall-clock milliseconds since 1970.
    public var milliseconds: UInt64 { rawValue >> 16 }
    /// Edits within the same millisecond, or ahead of this host's clock.
    public var counter: UInt16 { UInt16(truncatingIfNeeded: rawValue) }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String { "\(milliseconds).\(counter)" }
}

/// The clock itself (Kulkarni et al., "Logical Physical Clocks", 2014), with time as an input.
package struct HybridLogicalClock: Sendable {
    /// The latest timestamp issued or observed.
    package private(set) var latest: HLCTimestamp

    package init(latest: HLCTimestamp = HLCTimestamp(rawValue: 0)) {
        self.latest = latest
    }

    /// A timestamp for a local edit made at `now` (wall-clock milliseconds): later than every
    /// timestamp issued or observed so far.
    package mutating func tick(now: UInt64) -> HLCTimestamp {
        if now > latest.milliseconds {
            latest = HLCTimestamp(milliseconds: now, counter: 0)
        } else {
            latest = latest.successor
        }
        return latest
    }

    /// How far ahead of this host's wall clock a timestamp from another host may be, in
    /// milliseconds: a day. Clocks of hosts on one aircraft differ by seconds; a timestamp
    /// further ahead comes from a clock that is wrong (or a peer that is), and taking it in
    /// would drag every later edit of this host (and of every host it syncs with) along to it,
    /// up to the end of the clock's range.
    package static let maximumLead: UInt64 = 24 * 60 * 60 * 1000

    /// Takes in a timestamp from another host, so that later local edits order after it, and
    /// returns true; or, if it is more than ``maximumLead`` ahead of `now` (wall-clock
    /// milliseconds), refuses it, changing nothing, and returns false.
    package mutating func observe(_ remote: HLCTimestamp, now: UInt64) -> Bool {
        guard remote.milliseconds <= now + Self.maximumLead else { return false }
        if remote > latest { latest = remote }
        return true
    }
}

extension HLCTimestamp {
    /// The next timestamp: one more on the counter, carrying into the milliseconds when full.
    var successor: HLCTimestamp { HLCTimestamp(rawValue: rawValue &+ 1) }
}
