import NIOConcurrencyHelpers
import Testing

@testable import MultipeerSession

/// The one way the session waits (`NIOLockedValueBox.wait(in:unless:until:)`): until woken, its
/// deadline or its cancellation, leaving no waiter behind either way.
@Suite struct WaitersTests {
    struct State {
        var ready = false
        var waiting = Waiters()
    }

    /// Returns once the waiter is among the state's waiters.
    static func waiting(in box: NIOLockedValueBox<State>) async {
        while box.withLockedValue({ $0.waiting.isEmpty }) { await Task.yield() }
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaiterIsResumedByTheChangeItWaitsFor() async {
        let box = NIOLockedValueBox(State())
        let waiter = Task { await box.wait(in: \.waiting, unless: \.ready) }
        await Self.waiting(in: box)
        let woken = box.withLockedValue { state in
            state.ready = true
            return state.waiting.takeAll()
        }
        #expect(woken.count == 1)
        for continuation in woken { continuation.resume() }
        await waiter.value
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaiterWhoseStateIsReadyDoesNotWait() async {
        let box = NIOLockedValueBox(State(ready: true))
        await box.wait(in: \.waiting, unless: \.ready)
        #expect(box.withLockedValue { $0.waiting.isEmpty })
    }

    @Test(.timeLimit(.minutes(1)))
    func aCancelledWaiterReturnsAndLeavesNoWaiter() async {
        let box = NIOLockedValueBox(State())
        let waiter = Task { await box.wait(in: \.waiting, unless: \.ready) }
        await Self.waiting(in: box)
        waiter.cancel()
        await waiter.value
        #expect(box.withLockedValue { $0.waiting.isEmpty }, "its cancellation took it out")
        #expect(!box.withLockedValue { $0.ready })
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaiterReturnsAtItsDeadlineAndLeavesNoWaiter() async {
        let box = NIOLockedValueBox(State())
        let clock = SystemClock()
        let deadline = clock.now + .milliseconds(50)
        await box.wait(in: \.waiting, unless: \.ready, until: (deadline, clock))
        #expect(clock.now >= deadline)
        #expect(box.withLockedValue { $0.waiting.isEmpty }, "the deadline took it out")
    }

    @Test(.timeLimit(.minutes(1)))
    func aDeadlinePassedBeforeTheWaitEndsItAtOnce() async {
        let box = NIOLockedValueBox(State())
        let clock = SystemClock()
        await box.wait(in: \.waiting, unless: \.ready, until: (clock.now - .seconds(1), clock))
        #expect(box.withLockedValue { $0.waiting.isEmpty })
    }
}
