import Foundation
@testable import MultipeerSession
import Synchronization
import Testing

/// A stream's reader cancelled while the session hands it something: the cancellation ends the
/// stream under the reader task's own lock and then leaves the session's subscriptions, while
/// the session, holding those, wakes the reader, which needs the task's lock. Both at once
/// deadlocked two threads, and with them the session (found by MeshBenchmark, whose event
/// readers are cancelled while the sessions still report). Its two threads run flat out for
/// seconds, enough to delay the keepalives of tests beside it: scripts/run-tests.sh runs it alone.
@Suite(.enabled(if: runningAlone, "spins two threads: scripts/run-tests.sh runs it alone"))
struct StreamCancellationTests {
    /// Events emitted flat out on one thread; on another, readers of fresh event streams,
    /// each cancelled once it has had an event. Every cancellation ends its reader.
    @Test(.timeLimit(.minutes(2)))
    func aReaderCancelledAsAnEventReachesItEndsAndTheEmitterGoesOn() async throws {
        let subscriptions = Subscriptions(limits: .init(), metrics: SessionMetrics(localName: "test"))
        let rounds = 500
        let done = Atomic<Int>(0)
        let stop = Atomic<Bool>(false)
        // Threads of their own, not the cooperative pool's: a deadlock holds them, and this
        // test's task is still free to report it.
        let emitter = Thread {
            while !stop.load(ordering: .relaxed) { subscriptions.emit(.listening(port: 1)) }
        }
        let canceller = Thread {
            for _ in 0..<rounds {
                let events = subscriptions.events()
                let received = Atomic<Bool>(false)
                let ended = Atomic<Bool>(false)
                let reader = Task {
                    for await _ in events { received.store(true, ordering: .relaxed) }
                    ended.store(true, ordering: .relaxed)
                }
                while !received.load(ordering: .relaxed) && !stop.load(ordering: .relaxed) { usleep(20) }
                reader.cancel()
                while !ended.load(ordering: .relaxed) && !stop.load(ordering: .relaxed) { usleep(20) }
                done.add(1, ordering: .relaxed)
            }
        }
        emitter.start()
        canceller.start()
        defer { stop.store(true, ordering: .relaxed) }
        var progress = (count: 0, at: ContinuousClock.now)
        while done.load(ordering: .relaxed) < rounds {
            try await Task.sleep(for: .milliseconds(20))
            let count = done.load(ordering: .relaxed)
            if count != progress.count {
                progress = (count, .now)
            } else if ContinuousClock.now - progress.at > .seconds(30) {
                Issue.record("no reader ended for 30 s after \(count) of \(rounds) rounds: the emitter and a cancellation hold each other")
                return
            }
        }
    }
}
