import Foundation
import MultipeerCore
import NIOCore
import Testing

/// Reliable delivery towards one peer, driven by its events alone (time is a value).
@Suite struct PeerDeliveryStateMachineTests {
    static let start = ContinuousClock.now
    static let policy = PeerDeliveryStateMachine.Policy(
        limits: BufferLimits(maximumCount: 2, maximumBytes: 1 << 20),
        unreliableLimits: BufferLimits(maximumCount: 2, maximumBytes: 1 << 20),
        failWhenFull: false,
        sendTimeout: .seconds(30)
    )

    static func delivery(_ policy: PeerDeliveryStateMachine.Policy = policy) -> PeerDeliveryStateMachine {
        PeerDeliveryStateMachine(peerID: UUID(), policy: policy)
    }

    static func enqueue(
        _ delivery: inout PeerDeliveryStateMachine,
        at seconds: Int = 0
    ) -> PeerDeliveryStateMachine.Enqueued {
        delivery.enqueue(typeName: "Note", payload: ByteBuffer(string: "{}"), now: start + .seconds(seconds))
    }

    @Test func whatWaitsForTheResumePointIsFlushedFromIt() {
        var delivery = Self.delivery()
        guard case .refused(let error) = Self.enqueue(&delivery), error.code == .peerNotActive else {
            Issue.record("a peer never met is not sent to")
            return
        }
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        #expect(Self.enqueue(&delivery) == .queued(ticket: 1, []), "no flush before the link says where to resume")
        #expect(delivery.acknowledged(through: 0, on: LinkID(1)) == [.flush(LinkID(1)), .wakeSenders])
        #expect(delivery.nextBatch(for: LinkID(1))?.frames.map(\.sequence) == [1])
        #expect(delivery.nextBatch(for: LinkID(1)) == nil, "all written")
        #expect(Self.enqueue(&delivery) == .queued(ticket: 2, [.flush(LinkID(1))]), "the flush had ended: a new one")
        #expect(Self.enqueue(&delivery) == .wait(until: nil), "full, and the peer is active: wait as long as it reads")
    }

    @Test func anAcknowledgementOnALinkThatIsNoLongerThePeersIsIgnored() {
        var delivery = Self.delivery()
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        _ = delivery.acknowledged(through: 0, on: LinkID(1))
        _ = Self.enqueue(&delivery)
        delivery.linkUp(LinkID(2), incarnation: 8, frameLimit: 1 << 20)  // the peer restarted
        #expect(delivery.acknowledged(through: 1, on: LinkID(1)).isEmpty, "the old incarnation's numbering")
        #expect(delivery.outbox?.count == 1)
        #expect(delivery.nextBatch(for: LinkID(1)) == nil, "the old link's flush ends")
        #expect(delivery.acknowledged(through: 0, on: LinkID(2)) == [.flush(LinkID(2)), .wakeSenders])
        #expect(delivery.nextBatch(for: LinkID(2))?.frames.map(\.sequence) == [1])
    }

    @Test func aSenderWaitsForAnAbsentPeerAtMostTheSendTimeout() {
        var delivery = Self.delivery()
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        _ = Self.enqueue(&delivery)
        _ = Self.enqueue(&delivery)
        #expect(delivery.linkDown(LinkID(9), now: Self.start).isEmpty, "another link")
        #expect(delivery.linkDown(LinkID(1), now: Self.start + .seconds(10)) == [.wakeSenders])
        #expect(Self.enqueue(&delivery, at: 20) == .wait(until: Self.start + .seconds(40)))
        guard case .refused(let error) = Self.enqueue(&delivery, at: 40) else {
            Issue.record("refused once the peer has been away for the send timeout")
            return
        }
        #expect(error.code == .peerAway)
        var failing = Self.delivery(
            .init(
                limits: Self.policy.limits,
                unreliableLimits: Self.policy.unreliableLimits,
                failWhenFull: true,
                sendTimeout: .seconds(30)
            )
        )
        failing.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        _ = Self.enqueue(&failing)
        _ = Self.enqueue(&failing)
        guard case .refused(let full) = Self.enqueue(&failing) else {
            Issue.record("outboxFull at once")
            return
        }
        #expect(full.code == .outboxFull)
    }

    @Test func acknowledgementWaitsEndWhenTheirMessageIsAcknowledged() {
        var delivery = Self.delivery()
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        _ = delivery.acknowledged(through: 0, on: LinkID(1))
        _ = Self.enqueue(&delivery)
        _ = Self.enqueue(&delivery)
        let first = delivery.waitForAcknowledgement(of: 1)!
        let second = delivery.waitForAcknowledgement(of: 2)!
        #expect(first != second)
        #expect(delivery.nextBatch(for: LinkID(1))?.frames.count == 2, "written")
        #expect(delivery.acknowledged(through: .max, on: LinkID(1)) == [.wakeSenders], "more than was written: ignored")
        #expect(
            delivery.acknowledgement(for: first, now: Self.start) == .wait(until: nil),
            "active: as long as it takes"
        )
        #expect(delivery.acknowledged(through: 1, on: LinkID(1)) == [.wakeSenders])
        #expect(delivery.acknowledgement(for: first, now: Self.start) == .acknowledged)
        #expect(delivery.acknowledgement(for: second, now: Self.start) == .wait(until: nil))
        #expect(delivery.acknowledged(through: 2, on: LinkID(1)) == [.wakeSenders])
        #expect(delivery.acknowledgement(for: second, now: Self.start) == .acknowledged)
        #expect(delivery.waitForAcknowledgement(of: 2) == nil, "acknowledged already")
    }

    /// A sender waiting for the acknowledgement of a peer that went away waits the send
    /// timeout of its absence, as one waiting for room does; the message stays queued.
    @Test func anAcknowledgementWaitForAnAbsentPeerEndsAfterTheSendTimeout() {
        var delivery = Self.delivery()
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        _ = delivery.acknowledged(through: 0, on: LinkID(1))
        _ = Self.enqueue(&delivery)
        let waiting = delivery.waitForAcknowledgement(of: 1)!
        #expect(
            delivery.linkDown(LinkID(1), now: Self.start + .seconds(10)) == [.wakeSenders],
            "the waiter looks again"
        )
        #expect(
            delivery.acknowledgement(for: waiting, now: Self.start + .seconds(20))
                == .wait(until: Self.start + .seconds(40))
        )
        guard case .failed(let error) = delivery.acknowledgement(for: waiting, now: Self.start + .seconds(40)) else {
            Issue.record("the wait ends once the peer has been away for the send timeout")
            return
        }
        #expect(error.code == .peerAway)
        #expect(error.message.contains("Limits.sendTimeout"))
        #expect(delivery.outbox?.count == 1, "still queued for the peer's return")
        // A wait begun while the peer is away has the same deadline; one cancelled is forgotten.
        let late = delivery.waitForAcknowledgement(of: 1)!
        #expect(
            delivery.acknowledgement(for: late, now: Self.start + .seconds(11))
                == .wait(until: Self.start + .seconds(40))
        )
        delivery.cancelWait(late)
    }

    /// A forgotten peer's receiver may have delivered some of what it was sent: when it comes
    /// back, what is sent now continues from its resume point.
    @Test func aForgottenPeerIsSentToAgainFromItsResumePoint() throws {
        var delivery = Self.delivery()
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        #expect(throws: MultipeerError.self) { _ = try delivery.forget() }
        _ = delivery.acknowledged(through: 0, on: LinkID(1))
        _ = Self.enqueue(&delivery)
        let waiting = delivery.waitForAcknowledgement(of: 1)!
        _ = delivery.linkDown(now: Self.start)
        try delivery.forget()
        guard case .failed(let abandoned) = delivery.acknowledgement(for: waiting, now: Self.start) else {
            Issue.record("a wait for a forgotten peer's acknowledgement fails")
            return
        }
        #expect(abandoned.code == .peerAway && abandoned.message.contains("forgotten"))
        guard case .refused(let error) = Self.enqueue(&delivery) else {
            Issue.record("not sent to until it joins again")
            return
        }
        #expect(error.message.contains("forgotten"))
        delivery.linkUp(LinkID(2), incarnation: 7, frameLimit: 1 << 20)
        #expect(delivery.acknowledged(through: 5, on: LinkID(2)) == [.flush(LinkID(2)), .wakeSenders])
        #expect(Self.enqueue(&delivery) == .queued(ticket: 1, []), "the flush started on resuming writes it")
        #expect(delivery.nextBatch(for: LinkID(2))?.frames.map(\.sequence) == [6])
    }

    /// Where the peer stands is one value: each event moves it, and only the link it names.
    @Test func thePeersPresenceFollowsItsLinksAndTheApplication() throws {
        var delivery = Self.delivery()
        #expect(delivery.presence == .unmet && !delivery.met)
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        #expect(delivery.presence == .active(LinkID(1), incarnation: 7, resumed: false) && delivery.met)
        _ = delivery.acknowledged(through: 0, on: LinkID(1))
        #expect(delivery.presence == .active(LinkID(1), incarnation: 7, resumed: true))
        #expect(delivery.linkDown(LinkID(2), now: Self.start).isEmpty && delivery.isActive, "another link")
        _ = delivery.linkDown(LinkID(1), now: Self.start)
        #expect(delivery.presence == .away(since: Self.start) && delivery.met && !delivery.isActive)
        try delivery.forget()
        #expect(delivery.presence == .forgotten(gaveMessages: false), "it had no outbox")
        delivery.linkUp(LinkID(3), incarnation: 7, frameLimit: 1 << 20)
        _ = delivery.acknowledged(through: 0, on: LinkID(3))
        _ = Self.enqueue(&delivery)
        _ = delivery.linkDown(now: Self.start)
        try delivery.forget()
        #expect(
            delivery.presence == .forgotten(gaveMessages: true),
            "it had messages: a new outbox numbers from its resume point"
        )
        try delivery.forget()
        #expect(delivery.presence == .forgotten(gaveMessages: true), "forgotten again, it still had them")
    }

    static func unreliable(_ typeName: String = "Note", bytes: Int = 2) -> DataMessage {
        try! DataMessage(sequence: 0, typeName: typeName, payload: ByteBuffer(repeating: 0x7B, count: bytes))
    }

    /// Unreliable messages go from the link's first moment (no resume point to wait for), in
    /// the flush's batches before the reliable ones; the queue's bound holds senders back until
    /// a batch takes messages out; a link that goes drops and reports what waited.
    @Test func unreliableMessagesShareTheFlushAndItsBound() {
        var delivery = Self.delivery()
        guard case .refused(let error) = delivery.enqueueUnreliable(Self.unreliable()), error.code == .peerNotActive
        else {
            Issue.record("only to a peer active now")
            return
        }
        delivery.linkUp(LinkID(1), incarnation: 7, frameLimit: 1 << 20)
        #expect(
            delivery.enqueueUnreliable(Self.unreliable()) == .queued(ticket: 0, [.flush(LinkID(1))]),
            "before the resume point"
        )
        #expect(Self.enqueue(&delivery) == .queued(ticket: 1, []), "a reliable one waits for the resume point")
        #expect(delivery.enqueueUnreliable(Self.unreliable()) == .queued(ticket: 0, []), "the flush runs")
        #expect(delivery.enqueueUnreliable(Self.unreliable()) == .wait(until: nil), "two at most")
        #expect(delivery.hasUnreliableRoom(for: 2) == false)
        let first = delivery.nextBatch(for: LinkID(1))
        #expect(first?.frames.map(\.sequence) == [0, 0], "the unreliable ones alone")
        #expect(first?.actions == [.wakeSenders], "room again")
        #expect(delivery.nextBatch(for: LinkID(1)) == nil, "the flush ends: the reliable one waits")
        #expect(delivery.acknowledged(through: 0, on: LinkID(1)) == [.flush(LinkID(1)), .wakeSenders])
        #expect(delivery.enqueueUnreliable(Self.unreliable()) == .queued(ticket: 0, []))
        let second = delivery.nextBatch(for: LinkID(1))
        #expect(second?.frames.map(\.sequence) == [0, 1], "unreliable first, then reliable, in one batch")
        _ = delivery.enqueueUnreliable(Self.unreliable("Chart"))
        _ = delivery.enqueueUnreliable(Self.unreliable("Note"))
        #expect(
            delivery.linkDown(LinkID(1), now: Self.start) == [
                .wakeSenders, .unreliableLost(typeNames: ["Chart", "Note"]),
            ]
        )
        #expect(delivery.unreliable.isEmpty)
        guard case .refused(let gone) = delivery.enqueueUnreliable(Self.unreliable()), gone.code == .peerNotActive
        else {
            Issue.record("a sender waiting for room is refused once the link went")
            return
        }
    }
}

extension LinkMessage {
    /// The sequence number of a DATA or FRAGMENT.
    var sequence: UInt64? {
        switch self {
        case .data(let message): message.sequence
        case .fragment(let fragment): fragment.sequence
        default: nil
        }
    }
}
