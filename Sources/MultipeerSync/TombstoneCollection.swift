package import struct Foundation.UUID

/// When a station may collect its deletes (docs/SYNC.md 8): below a *horizon*, a timestamp
/// every delete under which it lets go of. Sans-IO: the store gives it what it knows.
///
/// In a group with a roster, the horizon is the earliest timestamp at which every other member
/// was last known to hold all this station held (an exchange with it completed): a delete
/// below it is held by every member, so none can bring back what it deleted. A member this
/// station never completed an exchange with holds the horizon at zero. Without a roster,
/// nobody knows who the members are, and the horizon is the wall clock less the tombstone
/// lifetime: a station away longer than that may bring back, at a station that never saw the
/// delete, a record that was deleted (never at one that collected the delete, which keeps its
/// stamp).
package enum TombstoneCollection {
    /// The horizon for station `own`: with `members` (the roster's peer IDs) from `held`,
    /// otherwise (or with no other member) `lifetime` milliseconds before `now`.
    package static func horizon(
        members: Set<UUID>?,
        own: UUID,
        held: [UUID: HLCTimestamp],
        now: UInt64,
        lifetime: UInt64
    ) -> HLCTimestamp {
        if let others = members?.subtracting([own]), !others.isEmpty {
            return others.map { held[$0] ?? HLCTimestamp(rawValue: 0) }.min()!
        }
        return HLCTimestamp(milliseconds: now > lifetime ? now - lifetime : 0, counter: 0)
    }
}
