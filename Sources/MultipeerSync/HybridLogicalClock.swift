/// A hybrid logical clock timestamp: milliseconds of wall-clock time in the upper 48 bits and a
/// logical counter in the lower 16. It orders every write in the group: it never runs backwards
/// on one station (a wall clock stepped back included), it follows causality (a write made after
/// seeing another is later), and it stays close to real time.
public struct HLCTimestamp: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The milliseconds shifted left by 16, or-ed with the counter.
    public var rawValue: UInt64

    /// The timestamp whose 64 bits are `rawValue`.
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// The timestamp of `milliseconds` since 1970 (at most 2^48 - 1) and `counter`.
    public init(milliseconds: UInt64, counter: UInt16) {
        rawValue = milliseconds << 16 | UInt64(counter)
    }

    /// Wall-clock milliseconds since 1970.
    public var milliseconds: UInt64 { rawValue >> 16 }
    /// Writes within the same millisecond, or ahead of this station's clock.
    public var counter: UInt16 { UInt16(truncatingIfNeeded: rawValue) }

    /// Earlier: the smaller 64-bit value.
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// `milliseconds.counter`.
    public var description: String { "\(milliseconds).\(counter)" }
}

/// The clock itself (Kulkarni et al., "Logical Physical Clocks", 2014), with time as an input.
/// A station keeps ``latest`` with what it wrote, so a station whose wall clock was stepped back
/// (or that restarted with it behind) still stamps its next write after every earlier one.
package struct HybridLogicalClock: Sendable {
    /// The latest timestamp issued or observed.
    package private(set) var latest: HLCTimestamp

    package init(latest: HLCTimestamp = HLCTimestamp(rawValue: 0)) {
        self.latest = latest
    }

    /// A timestamp for a local write made at `now` (wall-clock milliseconds): later than every
    /// timestamp issued or observed so far.
    package mutating func tick(now: UInt64) -> HLCTimestamp {
        if now > latest.milliseconds {
            latest = HLCTimestamp(milliseconds: now, counter: 0)
        } else {
            latest = latest.successor
        }
        return latest
    }

    /// How far ahead of this station's wall clock a timestamp from another may be, in
    /// milliseconds: a day. Clocks of stations on one aircraft differ by seconds; a timestamp
    /// further ahead comes from a clock that is wrong (or a peer that is), and taking it in
    /// would drag every later write of this station (and of every station it syncs with) along
    /// to it, up to the end of the clock's range.
    package static let maximumLead: UInt64 = 24 * 60 * 60 * 1000

    /// Takes in a timestamp from another station, so that later local writes order after it, and
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
