import Foundation
import MultipeerCore
import MultipeerTLS
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// Delivery on a link, on an EmbeddedChannel: reliable DATA only once the session kept the link,
/// the resume point and the ACKs it writes, and the peer's ACKs applied to the sender's delivery.
@Suite struct DeliveryHandlerTests {
    struct Note: Codable, Sendable, Equatable {
        var text: String
    }

    /// A DeliveryHandler on a channel whose peer's HELLO has come.
    struct Link {
        let channel = EmbeddedChannel()

        /// Ends the channel, whatever state it is in (its pipeline and handlers hold each other until then).
        func finish() { _ = try? channel.finish(acceptAlreadyClosed: true) }
        let inbox: Inbox
        let remote: Hello

        init() throws {
            let metrics = SessionMetrics(localName: "test")
            inbox = Inbox(
                windows: ReceiveWindows(on: channel.eventLoop),
                subscriptions: Subscriptions(limits: MultipeerSession.Limits(), metrics: metrics),
                metrics: metrics
            )
            remote = try Hello(
                identity: PeerIdentity(),
                incarnation: 7,
                displayName: "remote",
                maximumMessageLength: 1 << 20
            )
            try channel.pipeline.syncOperations.addHandler(DeliveryHandler(inbox: inbox))
            try channel.connect(to: SocketAddress(ipAddress: "198.18.0.2", port: 7000)).wait()
            channel.pipeline.fireUserInboundEventTriggered(HelloCompleted(remote: remote))
        }

        func adopt() throws -> LinkMessage? {
            channel.pipeline.triggerUserOutboundEvent(LinkAdopted(link: LinkID(1)), promise: nil)
            return try channel.readOutbound(as: LinkMessage.self)
        }

        /// The session has told of the peer's joining: the application may have what the link brings.
        func admitMessages() {
            channel.pipeline.triggerUserOutboundEvent(MessagesAdmitted(), promise: nil)
        }

        /// A probe after the handler: whether it asks the channel to read.
        final class ReadProbe: ChannelOutboundHandler, @unchecked Sendable {
            typealias OutboundIn = Any
            var reads = 0
            func read(context: ChannelHandlerContext) {
                reads += 1
                context.read()
            }
        }

    }

    static func note(_ sequence: UInt64, _ text: String) throws -> LinkMessage {
        var payload = ByteBuffer()
        try MessageEncoding.binary.encode(Note(text: text), into: &payload)
        return .data(try DataMessage(sequence: sequence, typeName: "Note", payload: payload))
    }

    @Test func reliableDataBeforeTheSessionKeptTheLinkBreaksTheProtocol() throws {
        let link = try Link()
        defer { link.finish() }
        let error = try #require(throws: MultipeerError.self) {
            try link.channel.writeInbound(try Self.note(1, "early"))
        }
        #expect(error.code == .outOfSequence)
        guard case .goodbye(.protocolError, _)? = try link.channel.readOutbound(as: LinkMessage.self) else {
            Issue.record("GOODBYE, protocol error")
            return
        }
        #expect(!link.channel.isActive)
    }

    @Test func aKeptLinkSaysWhereToResumeDeliversInOrderAndAcknowledgesEachReadOnce() async throws {
        let link = try Link()
        let notes = link.inbox.subscriptions.messages(of: Note.self, named: "Note")
        // The link's part, on this thread (an embedded channel's is the thread that made it).
        do {
            defer { link.finish() }
            guard case .ack(0, nil)? = try link.adopt() else {
                Issue.record("the resume point: nothing delivered yet")
                return
            }
            link.admitMessages()
            // One read of three frames (writeInbound would make each a read of its own).
            // the last a duplicate: dropped
            for frame in [try Self.note(1, "one"), try Self.note(2, "two"), try Self.note(2, "two again")] {
                link.channel.pipeline.fireChannelRead(frame)
            }
            link.channel.pipeline.fireChannelReadComplete()
            guard case .ack(2, nil)? = try link.channel.readOutbound(as: LinkMessage.self) else {
                Issue.record("one ACK for the read")
                return
            }
            #expect(try link.channel.readOutbound(as: LinkMessage.self) == nil)
        }
        var received: [String] = []
        for await (_, note, _) in notes {
            received.append(note.text)
            if received.count == 2 { break }
        }
        #expect(received == ["one", "two"])
    }

    /// What the peer sends before the session has told the application of its joining waits,
    /// unread, unacknowledged and outside the receive window (the link reads no more meanwhile);
    /// once the session admits it, it is delivered first, in order, and acknowledged, and the
    /// link reads again.
    @Test func messagesWaitUnacknowledgedUntilTheApplicationHasHeardOfTheJoin() async throws {
        let link = try Link()
        let notes = link.inbox.subscriptions.messages(of: Note.self, named: "Note")
        // The link's part, on this thread (an embedded channel's is the thread that made it).
        do {
            defer { link.finish() }
            let probe = Link.ReadProbe()
            try link.channel.pipeline.syncOperations.addHandler(probe, position: .first)
            _ = try link.adopt()
            for frame in [try Self.note(1, "one"), try Self.note(2, "two")] {
                link.channel.pipeline.fireChannelRead(frame)
            }
            link.channel.pipeline.fireChannelReadComplete()
            #expect(
                try link.channel.readOutbound(as: LinkMessage.self) == nil,
                "nothing acknowledged before the application may have it"
            )
            let readsBefore = probe.reads
            link.channel.pipeline.read()
            #expect(probe.reads == readsBefore, "the link reads no more while messages wait")
            let window = try #require(link.inbox.windows.window(of: link.remote.peerID))
            #expect(
                link.inbox.windows.acknowledgement(in: window, incarnation: link.remote.incarnation) == nil,
                "not in the receive window: a link that fails now has taken nothing"
            )

            link.admitMessages()
            guard case .ack(2, nil)? = try link.channel.readOutbound(as: LinkMessage.self) else {
                Issue.record("both delivered and acknowledged once admitted")
                return
            }
            #expect(probe.reads == readsBefore + 1, "and the read withheld is made")
        }
        var received: [String] = []
        for await (_, note, _) in notes {
            received.append(note.text)
            if received.count == 2 { break }
        }
        #expect(received == ["one", "two"])
    }

    @Test func thePeersFirstAckGoesToTheSessionAndTheLaterOnesToTheBoundDelivery() throws {
        let link = try Link()
        defer { link.finish() }
        let limits = BufferLimits(maximumCount: 8, maximumBytes: 1 << 20)
        let delivery = PeerDelivery(
            peerID: link.remote.peerID,
            policy: .init(limits: limits, unreliableLimits: limits, failWhenFull: false, sendTimeout: .seconds(30)),
            metrics: link.inbox.metrics
        )
        delivery.bind(LinkHandle(id: LinkID(1), channel: link.channel, hello: link.remote), reads: .every)
        #expect(
            delivery.acknowledged(through: 0, partial: nil, on: LinkID(1)).isEmpty,
            "the resume point, applied by the session"
        )
        for text in ["a", "b"] {
            guard case .data(let message) = try Self.note(0, text) else { return }
            _ = delivery.offer(message, reliably: true, localLimits: (Frame.defaultMaximumLength, 128 << 20), now: .now)
        }
        link.channel.embeddedEventLoop.run()
        #expect(delivery.outboxCount == 2)

        let resumePoints = ResumePoints()
        try link.channel.pipeline.syncOperations.addHandler(resumePoints)
        try link.channel.writeInbound(LinkMessage.ack(0, partial: nil))
        #expect(resumePoints.seen == [0], "the first ACK goes on, to the session, as the resume point")
        #expect(try link.channel.readInbound(as: LinkMessage.self) == nil)
        try link.channel.writeInbound(LinkMessage.ack(1, partial: nil))
        try link.channel.writeInbound(LinkMessage.ack(2, partial: nil))
        #expect(try link.channel.readInbound(as: LinkMessage.self) == nil, "held for the delivery")
        #expect(delivery.outboxCount == 2, "not applied before the session bound the delivery")
        link.channel.pipeline.triggerUserOutboundEvent(
            DeliveryBound(delivery: delivery, link: LinkID(1)),
            promise: nil
        )
        #expect(delivery.outboxCount == 0, "the latest held ACK, applied")
        #expect(resumePoints.seen == [0], "one resume point")
    }

    /// After the handler: the resume points it hands up.
    final class ResumePoints: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = LinkMessage
        var seen: [UInt64] = []
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let resume = event as? ResumePointReceived { seen.append(resume.sequence) }
        }
    }
}
