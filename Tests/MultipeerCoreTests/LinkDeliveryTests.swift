import Foundation
import MultipeerCore
import NIOCore
import Testing

/// The receiving side of a link's delivery, by its actions: what waits, what breaks the
/// protocol, where ACKs go, when the link acknowledges and when it reads.
@Suite struct LinkDeliveryTests {
    struct Remote: LinkPeer, Equatable {
        var id = UUID()
        var incarnation: UInt64 = 7
    }

    typealias Machine = LinkDeliveryStateMachine<Remote, String, String>
    let peer = Remote()

    static func data(_ sequence: UInt64, _ payload: String = "x") -> DataMessage {
        try! DataMessage(sequence: sequence, typeName: "Note", payload: ByteBuffer(string: payload))
    }

    /// A machine whose link is adopted (window "w") and, if `admitted`, delivering.
    func machine(admitted: Bool = true) -> Machine {
        var machine = Machine(limit: 1 << 20)
        machine.helloCompleted(peer)
        machine.linkAdopted(window: "w")
        if admitted { _ = machine.messagesAdmitted() }
        return machine
    }

    @Test func theFirstAckIsTheResumePointReportedOnceAndTheLaterOnesGoToTheDeliveryOnceAttached() {
        var machine = machine()
        guard case .reportResumePoint(4, nil) = machine.received(.ack(4, partial: nil)) else {
            Issue.record("the resume point, reported")
            return
        }
        guard case .none = machine.received(.ack(5, partial: nil)), case .none = machine.received(.ack(6, partial: nil))
        else {
            Issue.record("ACKs before the delivery is attached wait")
            return
        }
        guard case .acknowledge(6, nil, "delivery") = machine.deliveryAttached("delivery") else {
            Issue.record("the latest waiting ACK goes to the delivery")
            return
        }
        guard case .acknowledge(9, nil, "delivery") = machine.received(.ack(9, partial: nil)) else {
            Issue.record("later ACKs go straight to the delivery")
            return
        }
    }

    @Test func reliableDataBeforeTheLinkIsKeptBreaksTheProtocol() {
        var machine = Machine(limit: 1 << 20)
        machine.helloCompleted(peer)
        guard case .fail(let error) = machine.received(.data(Self.data(1))) else {
            Issue.record("refused")
            return
        }
        #expect(error.code == .outOfSequence)
        #expect(error.message.contains("before this side said where to resume"))
        guard case .none = machine.received(.data(Self.data(0))) else {
            Issue.record("a broken link reads nothing more")
            return
        }
    }

    @Test func anUnreliableMessageIsDeliveredBeforeTheLinkIsKeptAndAResourceFrameIsNot() {
        var machine = Machine(limit: 1 << 20)
        machine.helloCompleted(peer)
        guard case .deliver(let message, peer) = machine.received(.data(Self.data(0))) else {
            Issue.record("delivered")
            return
        }
        #expect(message.sequence == 0)
        let end = StreamEnd(id: UUID(), reason: .closed, text: "")
        guard case .fail = machine.received(.streamEnd(end)) else {
            Issue.record("a stream's frame before the resume point is refused")
            return
        }
    }

    @Test func whatComesBeforeTheApplicationHeardOfTheJoinWaitsUnreadThenGoesInOrder() {
        var machine = machine(admitted: false)
        #expect(machine.received(.data(Self.data(1))).isNone)
        #expect(machine.received(.data(Self.data(2))).isNone)
        guard case .none = machine.readRequested() else {
            Issue.record("no read while frames wait")
            return
        }
        guard case .replay(let frames) = machine.messagesAdmitted() else {
            Issue.record("what waited is replayed")
            return
        }
        #expect(frames.count == 2)
        for (index, frame) in frames.enumerated() {
            guard case .window(_, let sequence, peer, "w") = machine.received(frame) else {
                Issue.record("through the window")
                return
            }
            #expect(sequence == UInt64(index + 1))
            guard case .deliver = machine.windowed(.deliver(Self.data(sequence)), sequence: sequence) else {
                Issue.record("delivered")
                return
            }
            #expect(machine.delivered(filling: 0).isNone)
        }
        guard case .acknowledgeDelivered(peer, "w", thenRead: true) = machine.replayed() else {
            Issue.record("acknowledged once, then the withheld read")
            return
        }
    }

    @Test func aBatchIsAcknowledgedOnceAtItsEndAndOnlyIfAReliableMessageWasDelivered() {
        var machine = machine()
        #expect(machine.readComplete().isNone)
        for sequence: UInt64 in 1...3 {
            _ = machine.received(.data(Self.data(sequence)))
            _ = machine.windowed(.deliver(Self.data(sequence)), sequence: sequence)
        }
        guard case .acknowledgeDelivered(peer, "w", thenRead: false) = machine.readComplete() else {
            Issue.record("one ACK for the batch")
            return
        }
        #expect(machine.readComplete().isNone)
        _ = machine.windowed(.duplicate, sequence: 2)
        #expect(machine.readComplete().isNone, "a duplicate alone is no delivery")
    }

    @Test func aGapBreaksTheProtocolNamingTheMessage() {
        var machine = machine()
        guard case .fail(let error) = machine.windowed(.gap, sequence: 5) else {
            Issue.record("a gap fails the link")
            return
        }
        #expect(error.code == .outOfSequence)
        #expect(error.message.contains("reliable message 5 with an earlier one missing"))
        #expect(machine.adoptedPeer == peer, "the window it followed is still released when it goes")
    }

    @Test func aFullStreamStopsTheLinkReadingUntilEveryStreamItFilledHasRoom() {
        var machine = machine()
        guard case .announce(reading: false) = machine.delivered(filling: 1) else {
            Issue.record("FLOW off at the first full stream")
            return
        }
        #expect(machine.delivered(filling: 1).isNone)
        #expect(machine.readRequested().isNone, "no read while a stream is full")
        #expect(machine.streamHasRoom().isNone, "one of two still full")
        guard case .announceAndRead = machine.streamHasRoom() else {
            Issue.record("FLOW on, and the withheld read made")
            return
        }
        guard case .read = machine.readRequested() else {
            Issue.record("reads again")
            return
        }
    }

    @Test func theWindowOfANewerIncarnationTakesNothingFromAReplacedLink() {
        var machine = machine()
        #expect(machine.windowed(nil, sequence: 3).isNone)
        #expect(machine.readComplete().isNone)
    }

    @Test func anUnreliableMessageInFragmentsIsPutTogetherOnTheLink() throws {
        var machine = machine()
        let payload = ByteBuffer(repeating: 7, count: 600 << 10)
        let fragments = try DataMessage(sequence: 0, typeName: "Chart", payload: payload).fragments(frameLimit: 1 << 20)
        #expect(fragments.count > 1)
        var delivered: DataMessage?
        for fragment in fragments {
            switch machine.received(.fragment(fragment)) {
            case .deliver(let message, _): delivered = message
            case .none: break
            default: Issue.record("a fragment is kept or completes the message")
            }
        }
        #expect(delivered?.payload == payload)
    }
}

extension LinkDeliveryStateMachine.Action {
    var isNone: Bool { if case .none = self { true } else { false } }
}
