import MultipeerSession
import NIOConcurrencyHelpers

/// A host's ``SessionClock`` in a simulated world: the world's simulated time, its sleeps
/// timers of the host (they wait while the host is frozen, as a stopped process's do).
struct SimulatedClock: SessionClock {
    let scheduler: SimulationScheduler
    let host: SimulationScheduler.HostID
    /// The instant simulated time 0 stands for.
    let origin: ContinuousClock.Instant

    var now: ContinuousClock.Instant { origin + .nanoseconds(scheduler.now) }

    func sleep(until deadline: ContinuousClock.Instant) async throws {
        let nanoseconds = (deadline - origin).nanoseconds
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
