import NIOConcurrencyHelpers
import NIOPosix

/// The order in which the session's nested locks are taken: a lock of a later rank may be taken
/// while one of an earlier rank is held, never the reverse, and never two of one rank at once.
/// docs/DEVELOPING.md ("Locks") writes the same order down; debug builds check it at every
/// acquisition (``OrderedLock``), so a change that takes them the other way round fails the first
/// test that runs it, instead of deadlocking one day under load.
enum LockRank: Int, Comparable, Sendable, CustomStringConvertible {
    /// The registries of files and of streams (`Resources`, `Streams`): they look up a peer's
    /// link in its delivery while they decide.
    case registry = 1
    /// Every peer's delivery, by peer (`Deliveries`).
    case deliveries
    /// One peer's delivery: its outbox and its link (`PeerDelivery`).
    case peerDelivery

    static func < (lhs: LockRank, rhs: LockRank) -> Bool { lhs.rawValue < rhs.rawValue }

    var description: String {
        switch self {
        case .registry: "a registry of files or streams"
        case .deliveries: "the deliveries"
        case .peerDelivery: "a peer's delivery"
        }
    }
}

/// A lock of the session's order (``LockRank``): a `NIOLockedValueBox`, as every lock in the
/// package is, whose acquisitions a debug build checks against the ranks the thread holds.
struct OrderedLock<Value>: @unchecked Sendable {
    // (@unchecked: the box is Sendable for a Sendable value, and only the lock reaches the value.)
    let box: NIOLockedValueBox<Value>
    let rank: LockRank

    init(_ value: Value, rank: LockRank) {
        box = NIOLockedValueBox(value)
        self.rank = rank
    }

    func withLockedValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        #if DEBUG
        LockOrder.taking(rank)
        defer { LockOrder.released(rank) }
        #endif
        return try box.withLockedValue(body)
    }
}

extension OrderedLock where Value: Sendable {
    /// ``NIOLockedValueBox/wait(in:unless:until:)`` on this lock (taken with nothing else held).
    func wait(
        in waiters: any WritableKeyPath<Value, Waiters> & Sendable,
        unless ready: (Value) -> Bool,
        until deadline: (instant: ContinuousClock.Instant, clock: any SessionClock)? = nil
    ) async {
        await box.wait(in: waiters, unless: ready, until: deadline)
    }
}

#if DEBUG
/// The ranks each thread holds, checked as it takes another (debug builds only).
enum LockOrder {
    /// One thread's ranks. (@unchecked: reached only through that thread's variable.)
    final class Held: @unchecked Sendable {
        var ranks: [LockRank] = []
    }

    private static let held = ThreadSpecificVariable<Held>()

    static func taking(_ rank: LockRank) {
        let thread = held.currentValue ?? Held()
        if held.currentValue == nil { held.currentValue = thread }
        if let innermost = thread.ranks.last, rank <= innermost {
            assertionFailure(
                "lock order broken: \(rank) taken while holding \(innermost) (docs/DEVELOPING.md, Locks: \(thread.ranks.map(\.description).joined(separator: ", ")) held)"
            )
        }
        thread.ranks.append(rank)
    }

    static func released(_ rank: LockRank) {
        let thread = held.currentValue!
        assert(thread.ranks.last == rank, "locks released out of order")
        thread.ranks.removeLast()
    }
}
#endif
