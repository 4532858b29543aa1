import Foundation
import MultipeerCore
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// The receiving side of a link's delivery, by its actions: what waits, what breaks the
/// protocol, where ACKs go, when the link acknowledges and when it reads.
@Suite struct LinkDeliveryTests {
    typealias Machine = LinkDeliveryStateMachine
    let peer = UUID()
    /// The peer's window the link follows once adopted.
    let window: ReceiveWindows.Window
    /// The sender's delivery its ACKs go to, once bound.
    let delivery: LinkDeliveryStateMachine.Binding

    init() {
        // (The windows and their embedded loop go here, on the thread that made them.)
        let windows = ReceiveWindows(on: EmbeddedEventLoop())
        _ = windows.adopt(peer, incarnation: 7, on: LinkID(1))
        window = windows.window(of: peer)!
        let limits = BufferLimits(maximumCount: 8, maximumBytes: 1 << 20)
        delivery = .init(
            delivery: PeerDelivery(
                peerID: peer,
                policy: .init(limits: limits, unreliableLimits: limits, failWhenFull: false, sendTimeout: .seconds(30)),
                metrics: SessionMetrics(localName: "test")
            ),
            link: LinkID(1)
        )
    }

    static func data(_ sequence: UInt64, _ payload: String = "x") -> DataMessage {
        try! DataMessage(sequence: sequence, typeName: "Note", payload: ByteBuffer(string: payload))
    }

    /// A machine whose link is adopted (``window``) and, if `admitted`, delivering.
    func machine(admitted: Bool = true) -> Machine {
        var machine = Machine(limit: 1 << 20)
        machine.helloCompleted(peerID: peer)
        machine.linkAdopted(window: window)
        if admitted { _ = machine.messagesAdmitted() }
        return machine
    }

    @Test func theFirstAckIsTheResumePointReportedOnceAndTheLaterOnesGoToTheDeliveryOnceBound() {
        var machine = machine()
        guard case .reportResumePoint(4, nil) = machine.received(.ack(4, partial: nil)) else {
            Issue.record("the resume point, reported")
            return
        }
        guard case .none = machine.received(.ack(5, partial: nil)), case .none = machine.received(.ack(6, partial: nil))
        else {
            Issue.record("ACKs before the delivery is bound wait")
            return
        }
        guard case .acknowledge(6, nil, let bound) = machine.deliveryBound(delivery),
            bound.delivery === delivery.delivery
        else {
            Issue.record("the latest waiting ACK goes to the delivery")
            return
        }
        guard case .acknowledge(9, nil, let bound) = machine.received(.ack(9, partial: nil)),
            bound.link == LinkID(1)
        else {
            Issue.record("later ACKs go straight to the delivery")
            return
        }
    }

    @Test func reliableDataBeforeTheLinkIsKeptBreaksTheProtocol() {
        var machine = Machine(limit: 1 << 20)
        machine.helloCompleted(peerID: peer)
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
        machine.helloCompleted(peerID: peer)
        guard case .deliver(let message) = machine.received(.data(Self.data(0))) else {
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

    /// The link's one router: a file's frames to the resources, a stream's to the streams, each
    /// typed; the frames of the handlers above pass on, an unknown one among them (dropped there).
    @Test func everyFrameHasOnePlaceAFilesToTheResourcesAStreamsToTheStreams() throws {
        var machine = machine()
        let id = UUID()
        let resourceWant = ResourceWant(id: id, received: 0, granted: 10)
        guard case .route(.resource(.want(let want))) = machine.received(.resourceWant(resourceWant)) else {
            Issue.record("a file's frame, to the resources")
            return
        }
        #expect(want == resourceWant)
        let streamData = StreamData(id: id, offset: 0, end: true, bytes: ByteBuffer())
        guard case .route(.stream(.data(let data))) = machine.received(.streamData(streamData)) else {
            Issue.record("a stream's frame, to the streams")
            return
        }
        #expect(data == streamData)
        let passing: [LinkMessage] = [
            .ping(Probe(nonce: 1, timestamp: 1)), .flow(reading: true), .goodbye(.shutdown, ""), .types(.every),
            .reject(Rejection(sequence: 1, typeName: "Note", reason: "")), .unknown(FrameType(rawValue: 4_096)),
        ]
        for frame in passing {
            guard case .forward = machine.received(frame) else {
                Issue.record("\(frame.frameType) passes on up the pipeline")
                continue
            }
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
            guard case .window(_, let sequence, let into) = machine.received(frame), into === window else {
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
        guard case .acknowledgeDelivered(let into, thenRead: true) = machine.replayed(), into === window else {
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
        guard case .acknowledgeDelivered(let into, thenRead: false) = machine.readComplete(), into === window else {
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
        #expect(machine.followsWindow, "the window it followed is still released when it goes")
        #expect(error.message.contains("\(peer)"), "the peer named")
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
        let message = try DataMessage(sequence: 0, typeName: "Chart", payload: payload)
        var fragments: [Fragment] = []
        while fragments.reduce(0, { $0 + $1.bytes.readableBytes }) < payload.readableBytes {
            fragments.append(
                message.fragment(from: fragments.reduce(0) { $0 + $1.bytes.readableBytes }, frameLimit: 1 << 20)
            )
        }
        #expect(fragments.count > 1)
        var delivered: DataMessage?
        for fragment in fragments {
            switch machine.received(.fragment(fragment)) {
            case .deliver(let message): delivered = message
            case .none: break
            default: Issue.record("a fragment is kept or completes the message")
            }
        }
        #expect(delivered?.payload == payload)
    }
}

extension LinkDeliveryStateMachine.Action {
    /// Whether the machine decided nothing to do.
    var isNone: Bool { if case .none = self { true } else { false } }
}

/// The receive windows are their event loop's alone (every link of a session runs on one): a
/// call on the loop is answered, a call from another thread stops the process.
@Suite struct ReceiveWindowsLoopTests {
    @Test func theReceiveWindowsAnswerOnlyOnTheirLoop() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let windows = ReceiveWindows(on: loop)
        let peer = UUID()
        let adopted = try await loop.submit {
            _ = windows.adopt(peer, incarnation: 1, on: LinkID(1))
            return windows.window(of: peer) != nil
        }.get()
        #expect(adopted)
        await loop.shutdownGracefully()
        await #expect(processExitsWith: .failure) {
            _ = ReceiveWindows(on: NIOAsyncTestingEventLoop()).window(of: UUID())
        }
    }
}
