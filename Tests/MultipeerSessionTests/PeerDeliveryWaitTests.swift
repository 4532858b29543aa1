import Foundation
import MultipeerCore
import Testing

@testable import MultipeerSession

/// A sender looks at its peer's delivery under its lock and waits for room off it: a wake in
/// between must not be slept through.
@Suite struct PeerDeliveryWaitTests {
    static func delivery(end: SessionEnd = SessionEnd()) -> PeerDelivery {
        let limits = BufferLimits(maximumCount: 1, maximumBytes: 1 << 20)
        return PeerDelivery(
            peerID: UUID(),
            policy: .init(limits: limits, unreliableLimits: limits, failWhenFull: false, sendTimeout: .seconds(30)),
            metrics: SessionMetrics(localName: "test"),
            end: end
        )
    }

    @Test(.timeLimit(.minutes(1)))
    func aWakeBetweenLookingAndWaitingIsNotMissed() async {
        let delivery = Self.delivery()
        let seen = delivery.wakes
        delivery.wake()  // room came after the look, before the wait
        await delivery.wait(after: seen, until: nil)
        #expect(delivery.wakes == seen + 1)
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaitEndsWithTheNextWakeOrWhenTheSessionStops() async {
        let end = SessionEnd()
        let delivery = Self.delivery(end: end)
        let seen = delivery.wakes
        let waiting = Task { await delivery.wait(after: seen, until: nil) }
        delivery.wake()
        await waiting.value
        let again = delivery.wakes
        let waitingAgain = Task { await delivery.wait(after: again, until: nil) }
        end.end()
        delivery.wake()  // (what the session's end does to every peer's delivery)
        await waitingAgain.value
        let message = try! DataMessage(sequence: 0, typeName: "Note", payload: .init())
        guard
            case .refused(let error, _) = delivery.offer(
                message,
                reliably: true,
                localLimits: (Frame.defaultMaximumLength, 128 << 20),
                now: .now
            )
        else {
            Issue.record("a stopped session takes nothing")
            return
        }
        #expect(error.code == .sessionState)
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaitBegunOnceTheSessionEndedReturnsAtOnce() async {
        let end = SessionEnd()
        let delivery = Self.delivery(end: end)
        end.end()
        await delivery.wait(after: delivery.wakes, until: nil)
        #expect(delivery.wakes == 0, "nobody woke it: the session's end did")
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaitWithADeadlineEndsAtIt() async {
        let delivery = Self.delivery()
        await delivery.wait(after: delivery.wakes, until: .now + .milliseconds(50))
        #expect(delivery.wakes == 0, "nobody woke it: the deadline did")
    }
}
