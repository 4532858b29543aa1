import MultipeerCore
import NIOConcurrencyHelpers
import Testing

/// The messages of a type nobody subscribes to yet, held for the first subscriber.
@Suite struct MessageHoldTests {
    static let limits = BufferLimits(maximumCount: 3, maximumBytes: 100)

    /// Holds `message` of `cost` bytes in `hold`; `resumed` counts the link's calls for room.
    static func hold(
        _ message: Int,
        cost: Int = 1,
        in hold: inout MessageHold<Int>,
        read: Bool = true,
        holds: MessageTypesStateMachine.Hold = .holding(count: 0, isFull: false),
        resumed: NIOLockedValueBox<Int>
    ) -> (full: Bool, reports: [MessageHold<Int>.Report]) {
        hold.hold(
            message,
            cost: cost,
            stopsWhenFull: read,
            hold: holds,
            limits: limits,
            maximumHeldNames: 2,
            whenRoom: { resumed.withLockedValue { $0 += 1 } }
        )
    }

    @Test func aReadTypesHoldFillsAtItsCountStopsItsLinksAndHandsThemToTheFirstSubscriber() {
        var hold = MessageHold<Int>()
        let resumed = NIOLockedValueBox(0)
        #expect(Self.hold(1, in: &hold, resumed: resumed) == (false, [.held]), "the first: reported once")
        #expect(Self.hold(2, in: &hold, resumed: resumed) == (false, []))
        #expect(Self.hold(3, in: &hold, resumed: resumed) == (true, [.full]), "at its count: the link stops")
        #expect(Self.hold(4, in: &hold, resumed: resumed) == (true, []), "still full: the next link stops, unreported")
        #expect(hold.bytes == 4)

        let (messages, stopped) = hold.take()
        #expect(Array(messages) == [1, 2, 3, 4], "oldest first, none dropped")
        stopped.forEach { $0() }
        #expect(resumed.withLockedValue { $0 } == 2, "both stopped links' calls for room")
        #expect(hold.isEmpty && hold.bytes == 0 && !hold.isFull(Self.limits))
        #expect(hold.take().stopped.isEmpty, "taken once")
    }

    @Test func oneMessageLargerThanTheBytesIsNoReasonToStopTheNextIs() {
        var hold = MessageHold<Int>()
        let resumed = NIOLockedValueBox(0)
        #expect(Self.hold(1, cost: 500, in: &hold, resumed: resumed).full == false)
        #expect(Self.hold(2, cost: 1, in: &hold, resumed: resumed).full == true)
    }

    @Test func aTypeOnTrialIsNeverFullToItsLinks() {
        var hold = MessageHold<Int>()
        let resumed = NIOLockedValueBox(0)
        for message in 1...5 {
            #expect(Self.hold(message, in: &hold, read: false, resumed: resumed).full == false)
        }
        #expect(hold.isFull(Self.limits), "full: what comes beyond is refused (the verdict's)")
        #expect(hold.take().stopped.isEmpty)
    }

    @Test func aNameBeyondTheNamesLimitIsFullFromItsFirstMessageUntilTaken() {
        var hold = MessageHold<Int>()
        let resumed = NIOLockedValueBox(0)
        #expect(
            Self.hold(1, in: &hold, holds: .none(heldNames: 2), resumed: resumed) == (true, [.held, .full]),
            "held all the same, and its link stops"
        )
        _ = hold.take()
        #expect(!hold.isFull(Self.limits), "a subscriber came: a hold like any other")
        #expect(Self.hold(2, in: &hold, holds: .none(heldNames: 1), resumed: resumed).full == false)
    }
}
