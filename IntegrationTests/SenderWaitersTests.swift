import Foundation
@testable import MultipeerSession
import Testing

/// A sender looks at its peer's outbox on the session's actor and waits for room off it: a
/// wake in between must not be slept through.
@Suite struct SenderWaitersTests {
    @Test(.timeLimit(.minutes(1)))
    func aWakeBetweenLookingAndWaitingIsNotMissed() async {
        let waiters = SenderWaiters()
        let peer = UUID()
        let seen = waiters.wakes(for: peer)
        waiters.wake(peer)  // room came after the look, before the wait
        await waiters.wait(for: peer, after: seen, until: nil)
        #expect(waiters.wakes(for: peer) == seen + 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaitEndsWithTheNextWakeOfItsPeerOrOfAll() async {
        let waiters = SenderWaiters()
        let (peer, other) = (UUID(), UUID())
        let seen = waiters.wakes(for: peer)
        let waiting = Task { await waiters.wait(for: peer, after: seen, until: nil) }
        waiters.wake(peer)
        await waiting.value
        let again = waiters.wakes(for: other)
        let waitingOther = Task { await waiters.wait(for: other, after: again, until: nil) }
        waiters.wakeAll()
        await waitingOther.value
        #expect(waiters.wakes(for: other) == again + 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaitWithADeadlineEndsAtIt() async {
        let waiters = SenderWaiters()
        let peer = UUID()
        await waiters.wait(for: peer, after: waiters.wakes(for: peer), until: .now + .milliseconds(50))
        #expect(waiters.wakes(for: peer) == 0, "nobody woke it: the deadline did")
    }
}
