import MultipeerCore
import NIOCore
import Testing

@Suite struct OutboxStateMachineTests {
    static func payload(_ size: Int) -> ByteBuffer { ByteBuffer(repeating: 7, count: size) }

    @Test func messagesAreNumberedFromOneAndWrittenOnce() throws {
        var outbox = OutboxStateMachine()
        for _ in 0..<3 { _ = try outbox.enqueue(typeName: "T", payload: Self.payload(10)) }
        #expect(outbox.sendable().map(\.sequence) == [1, 2, 3])
        #expect(outbox.sendable().isEmpty, "written messages are not handed out again on the same link")
        _ = try outbox.enqueue(typeName: "T", payload: Self.payload(10))
        #expect(outbox.sendable().map(\.sequence) == [4])
    }

    @Test func acknowledgementsFreeAndALostLinkResendsTheRest() throws {
        var outbox = OutboxStateMachine()
        for _ in 0..<5 { _ = try outbox.enqueue(typeName: "T", payload: Self.payload(10)) }
        _ = outbox.sendable()
        #expect(outbox.acknowledge(through: 2) == 2)
        #expect(outbox.count == 3)
        #expect(outbox.bytes == 30)
        #expect(outbox.acknowledge(through: 1) == 0, "a stale ACK changes nothing")
        outbox.linkLost()
        #expect(outbox.sendable().map(\.sequence) == [3, 4, 5])
        #expect(outbox.acknowledge(through: 99) == 0, "an ACK of more than was ever written is ignored")
        #expect(outbox.acknowledged == 2)
        #expect(outbox.acknowledge(through: 5) == 3)
        #expect(outbox.count == 0 && outbox.bytes == 0)
    }

    @Test func aRestartedReceiverGetsWhatItNeverAcknowledgedNumberedAfresh() throws {
        var outbox = OutboxStateMachine()
        outbox.receiver(incarnation: 1)
        for _ in 0..<5 { _ = try outbox.enqueue(typeName: "T", payload: Self.payload(1)) }
        _ = outbox.sendable()
        outbox.acknowledge(through: 3)
        outbox.linkLost()
        outbox.receiver(incarnation: 2)  // restarted: its window starts at 0
        outbox.acknowledge(through: 0)
        #expect(outbox.sendable().map(\.sequence) == [1, 2], "messages 4 and 5, numbered 1 and 2 for the new receiver")
        #expect(try outbox.enqueue(typeName: "T", payload: Self.payload(1)).sequence == 3)
        outbox.receiver(incarnation: 2)
        #expect(outbox.count == 3, "the same incarnation changes nothing")
    }

    /// A receiver cannot acknowledge what was never written to it: such an ACK (from a broken or
    /// hostile peer) must not free messages or report them delivered.
    @Test func anAcknowledgementBeyondWhatWasWrittenIsIgnored() throws {
        var outbox = OutboxStateMachine()
        for _ in 0..<3 { _ = try outbox.enqueue(typeName: "T", payload: Self.payload(1)) }
        #expect(outbox.acknowledge(through: 1) == 0, "nothing was written yet")
        #expect(outbox.acknowledge(through: .max) == 0)
        #expect(outbox.acknowledgedTicket == 0)
        _ = outbox.sendable()
        _ = try outbox.enqueue(typeName: "T", payload: Self.payload(1))
        #expect(outbox.acknowledge(through: 4) == 0, "message 4 is queued, not written")
        #expect(outbox.acknowledge(through: 3) == 3)
        #expect(outbox.acknowledgedTicket == 3)
    }

    @Test func boundsHoldInCountAndBytes() throws {
        var outbox = OutboxStateMachine(limits: .init(maximumCount: 3, maximumBytes: 100))
        #expect(outbox.hasRoom(for: 500), "an empty outbox takes one oversize message")
        _ = try outbox.enqueue(typeName: "T", payload: Self.payload(60))
        #expect(!outbox.hasRoom(for: 50))
        #expect(outbox.hasRoom(for: 40))
        _ = try outbox.enqueue(typeName: "T", payload: Self.payload(20))
        _ = try outbox.enqueue(typeName: "T", payload: Self.payload(10))
        #expect(!outbox.hasRoom(for: 1), "three messages is the count bound")
        _ = outbox.sendable()
        outbox.acknowledge(through: 1)
        #expect(outbox.hasRoom(for: 70))
    }

    /// A receiver that came back taking smaller frames: what it cannot take leaves, the rest
    /// is numbered on without a gap, and tickets keep naming the same messages.
    @Test func messagesTooLargeForTheReceiverLeaveAndTheRestCloseTheGap() throws {
        var outbox = OutboxStateMachine()
        _ = try outbox.enqueue(typeName: "T", payload: Self.payload(10))
        _ = try outbox.enqueue(typeName: "T", payload: Self.payload(5_000))
        _ = try outbox.enqueue(typeName: "T", payload: Self.payload(20))
        _ = outbox.sendable()
        outbox.acknowledge(through: 1)
        let removed = outbox.removeLarger(than: 1_000)
        #expect(removed.map(\.ticket) == [2])
        #expect(outbox.sendable().map(\.sequence) == [2], "message 3 is number 2 now")
        #expect(outbox.bytes == 20)
        outbox.acknowledge(through: 2)
        #expect(outbox.acknowledgedTicket == 3, "ticket 3 was the one acknowledged")
        #expect(outbox.removeLarger(than: 1_000).isEmpty)
    }

    /// After a peer was forgotten, the receiver may have delivered any number of the old
    /// outbox's messages: a new outbox numbers from its resume point, so nothing it sends is
    /// taken for a duplicate (dropped) or leaves a gap.
    @Test func aProvisionalNumberingContinuesFromTheReceiversResumePoint() throws {
        var outbox = OutboxStateMachine(numberingFollowsReceiver: true)
        for _ in 0..<2 { _ = try outbox.enqueue(typeName: "T", payload: Self.payload(1)) }
        outbox.resumed(at: 41)
        #expect(!outbox.numberingFollowsReceiver)
        #expect(outbox.sendable().map(\.sequence) == [42, 43])
        #expect(try outbox.enqueue(typeName: "T", payload: Self.payload(1)).sequence == 44)
        outbox.resumed(at: 43)
        #expect(outbox.count == 1, "from then on a resume point is an acknowledgement")
    }
}

@Suite struct ReceiveWindowTests {
    @Test func deliversInOrderOnceAndDropsDuplicatesAndGaps() {
        var window = ReceiveWindow(incarnation: 7)
        #expect(window.receive(sequence: 1) == .deliver)
        #expect(window.receive(sequence: 2) == .deliver)
        #expect(window.receive(sequence: 2) == .duplicate)
        #expect(window.receive(sequence: 1) == .duplicate)
        #expect(window.receive(sequence: 4) == .gap)
        #expect(window.receive(sequence: 3) == .deliver)
        #expect(window.delivered == 3)
        #expect(window.unacknowledged == 3)
        window.acknowledged()
        #expect(window.unacknowledged == 0)
    }

    @Test func aNewSenderIncarnationStartsOver() {
        var window = ReceiveWindow(incarnation: 7)
        _ = window.receive(sequence: 1)
        window.sender(incarnation: 7)
        #expect(window.receive(sequence: 1) == .duplicate, "the same incarnation keeps its place")
        window.sender(incarnation: 8)
        #expect(window.delivered == 0)
        #expect(window.receive(sequence: 1) == .deliver)
    }

    /// Messages through a link that drops at random: resending from the ACK gives each exactly once, in order.
    @Test func resendingAfterRandomLossDeliversEverythingExactlyOnceInOrder() throws {
        var generator = SystemRandomNumberGenerator()
        var outbox = OutboxStateMachine()
        var window = ReceiveWindow(incarnation: 1)
        var delivered: [UInt64] = []
        for _ in 0..<1000 { _ = try outbox.enqueue(typeName: "T", payload: ByteBuffer()) }
        var rounds = 0
        while outbox.count > 0 && rounds < 10_000 {
            rounds += 1
            let batch = outbox.sendable()
            // The link dies somewhere in the batch; what got through is delivered.
            let survives = batch.isEmpty ? 0 : Int.random(in: 0...batch.count, using: &generator)
            for message in batch.prefix(survives) where window.receive(sequence: message.sequence) == .deliver {
                delivered.append(message.sequence)
            }
            // Sometimes the ACK makes it, sometimes not.
            if Bool.random(using: &generator) {
                outbox.acknowledge(through: window.delivered)
                window.acknowledged()
            }
            outbox.linkLost()
            outbox.acknowledge(through: window.delivered)  // the receiver's ACK after the new HELLO
        }
        #expect(delivered == Array(1...1000))
    }
}
