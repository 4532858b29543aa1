import Dispatch
import Foundation
import Synchronization
import Testing

@testable import MultipeerSession

/// A stream's reader cancelled while the session hands it something: the cancellation ends the
/// stream under the reader task's own lock and then leaves the session's subscriptions, while
/// the session, holding those, wakes the reader, which needs the task's lock. Both at once
/// deadlocked two threads, and with them the session (found by MeshBenchmark, whose event
/// readers are cancelled while the sessions still report). Its two threads run flat out for
/// a moment, enough to delay the keepalives of tests beside it: scripts/run-tests.sh runs it alone.
@Suite(.enabled(if: runningAlone, "spins two threads: scripts/run-tests.sh runs it alone"))
struct StreamCancellationTests {
    /// Events emitted flat out on one thread; on another, readers of fresh event streams,
    /// each cancelled once it has had an event. Every cancellation ends its reader.
    @Test(.timeLimit(.minutes(2)))
    func aReaderCancelledAsAnEventReachesItEndsAndTheEmitterGoesOn() async throws {
        let subscriptions = Subscriptions(limits: .init(), metrics: SessionMetrics(localName: "test"))
        let rounds = 500
        let stop = Atomic<Bool>(false)
        let (finished, finish) = AsyncStream<Int>.makeStream()
        // Threads of their own, not the cooperative pool's: a deadlock holds them, and this
        // test's task is still free to report it.
        let emitter = Thread {
            while !stop.load(ordering: .relaxed) { subscriptions.emit(.listening(port: 1)) }
        }
        let canceller = Thread {
            var ended = 0
            defer { finish.yield(ended) }
            for _ in 0..<rounds {
                let events = subscriptions.events()
                let (received, end) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
                let reader = Task {
                    var first = true
                    for await _ in events where first {
                        first = false
                        received.signal()
                    }
                    end.signal()
                }
                guard received.wait(timeout: .now() + 30) == .success else { return }
                reader.cancel()
                guard end.wait(timeout: .now() + 30) == .success else { return }
                ended += 1
            }
        }
        emitter.start()
        canceller.start()
        defer { stop.store(true, ordering: .relaxed) }
        var outcome = finished.makeAsyncIterator()
        let ended = await outcome.next()
        #expect(
            ended == rounds,
            "a reader that did not end within 30 s: the emitter and a cancellation hold each other"
        )
    }
}
