import MultipeerSession
import NIOConcurrencyHelpers

/// A host's ``SessionClock`` in a simulated world: the host's time (``HostTime``), its sleeps
/// timers of the host (they wait while the host is frozen, as a stopped process's do).
struct SimulatedClock: SessionClock {
    let scheduler: SimulationScheduler
    let host: SimulationScheduler.HostID
    let time: HostTime
    /// The instant simulated time 0 stands for.
    let origin: ContinuousClock.Instant

    var now: ContinuousClock.Instant { origin + .nanoseconds(time.host(atWorld: scheduler.now)) }

    func sleep(until deadline: ContinuousClock.Instant) async throws {
        let nanoseconds = time.world(atHost: (deadline - origin).nanoseconds)
        let sleep = NIOLockedValueBox<
            (continuation: CheckedContinuation<Void, any Error>?, timer: UInt64?, cancelled: Bool)
        >((nil, nil, false))
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelled = sleep.withLockedValue { sleep in
                    if sleep.cancelled { return true }
                    sleep.continuation = continuation
                    return false
                }
                guard !cancelled else { return continuation.resume(throwing: CancellationError()) }
                let timer = scheduler.schedule(host, at: nanoseconds) {
                    sleep.withLockedValue { $0.continuation.take() }?.resume()
                }
                sleep.withLockedValue { $0.timer = timer }
            }
        } onCancel: {
            let (continuation, timer) = sleep.withLockedValue { sleep in
                sleep.cancelled = true
                return (sleep.continuation.take(), sleep.timer)
            }
            if let timer { scheduler.cancel(timer) }
            continuation?.resume(throwing: CancellationError())
        }
    }
}

/// How a host's clocks read the world's time: the same, until ``drift(by:at:)`` makes them run
/// fast or slow from an instant on (``SimulatedHost/driftClock(by:)``). Its monotonic clock
/// (the sessions' timers and deadlines, its event loop's) and its wall clock both read it.
final class HostTime: Sendable {
    private struct Anchor {
        var world: Int64 = 0
        var host: Int64 = 0
        /// Host nanoseconds a world nanosecond.
        var rate = 1.0
    }
    private let anchor = NIOLockedValueBox(Anchor())

    /// The host's time (nanoseconds since the world began, as it reads them) at world time `world`.
    func host(atWorld world: Int64) -> Int64 {
        let anchor = anchor.withLockedValue { $0 }
        return anchor.host + Int64((Double(world - anchor.world) * anchor.rate).rounded(.down))
    }

    /// The world time at which the host's time reads `host` (or a past instant, for a time
    /// already gone): where a timer the host sets for `host` goes in the world's.
    func world(atHost host: Int64) -> Int64 {
        let anchor = anchor.withLockedValue { $0 }
        guard anchor.rate != 1 else {
            let (world, overflow) = anchor.world.addingReportingOverflow(host - anchor.host)
            return overflow ? .max : world
        }
        let world = Double(anchor.world) + (Double(host) - Double(anchor.host)) / anchor.rate
        // (A deadline of never, NIODeadline.distantFuture, stays never.)
        return world >= 0x1p63 ? .max : Int64(world.rounded(.up))
    }

    /// From world time `now` on, the host's time runs `1 + fraction` as fast as the world's.
    /// Timers set before keep the world time they were set for.
    func drift(by fraction: Double, at now: Int64) {
        anchor.withLockedValue { anchor in
            let host = anchor.host + Int64((Double(now - anchor.world) * anchor.rate).rounded(.down))
            anchor = Anchor(world: now, host: host, rate: 1 + fraction)
        }
    }
}
