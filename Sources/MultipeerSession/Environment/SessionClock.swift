/// The clock every timer of a session reads above its links: the core's `now`, dial backoff,
/// send timeouts, GOODBYE, stats. (The links read their event loop's `now`, which is the same
/// time in a simulation.) ``SystemClock`` in production; a simulated world's virtual time in
/// the MultipeerSessionTesting product.
package protocol SessionClock: Sendable {
    var now: ContinuousClock.Instant { get }
    /// Returns at `deadline`, or throws `CancellationError` if the task is cancelled first.
    func sleep(until deadline: ContinuousClock.Instant) async throws
}

extension SessionClock {
    /// Returns after `duration`, or throws `CancellationError` if the task is cancelled first.
    func sleep(for duration: Duration) async throws {
        try await sleep(until: now + duration)
    }
}

/// The system's continuous clock.
package struct SystemClock: SessionClock {
    package init() {}

    package var now: ContinuousClock.Instant { .now }

    package func sleep(until deadline: ContinuousClock.Instant) async throws {
        try await Task.sleep(until: deadline, clock: .continuous)
    }
}
