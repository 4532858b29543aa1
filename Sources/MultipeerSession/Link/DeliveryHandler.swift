import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// Delivery on the receiving side, on the link's event loop: the shell of
/// ``LinkDeliveryStateMachine``, which decides what becomes of each frame, when the link
/// acknowledges, stops reading and reads again, and where the peer's ACKs go. This handler
/// carries out its actions: it hands DATA to the application's streams (``Subscriptions``),
/// puts reliable messages through the peer's receive window (``ReceiveWindows``), gives files'
/// and streams' frames to the session's resources and streams, and writes ACK, FLOW and a
/// protocol error's GOODBYE.
///
/// The session steers it with outbound events: ``LinkAdopted`` (the link is the peer's now: it
/// adopts the peer's window and writes the resume point it gives), ``MessagesAdmitted`` (the
/// application has heard of the join: what the peer sent meanwhile goes), ``DeliveryBound``
/// (the peer's delivery is on this link: the later ACKs go to it here, waking the senders they
/// free). The peer's first ACK, its resume point, goes up once, as ``ResumePointReceived``.
final class DeliveryHandler: ChannelDuplexHandler {
    typealias InboundIn = LinkMessage
    typealias InboundOut = LinkMessage
    typealias OutboundIn = LinkMessage
    typealias OutboundOut = LinkMessage

    private let inbox: Inbox
    private var machine: LinkDeliveryStateMachine
    /// The link's peer, from its HELLO on.
    private var peer: Peer?
    /// Its incarnation, which its window follows (read apart from ``peer``: a copy of that, for
    /// every message, was a visible part of a small message's cost).
    private var incarnation: UInt64 = 0
    /// Its ID.
    private var peerID = UUID()
    /// The link's ID, once the session adopted it: the peer's window follows it until it closes.
    private var adopted: LinkID?
    private var context: ChannelHandlerContext?
    /// Given to a stream this link fills: brings its room back to this handler, on its event
    /// loop. Made once, not per message.
    private var whenRoom: (@Sendable () -> Void)?
    /// The subscribers of the types this link brought (``Subscriptions/Cache``).
    private var subscribers = Subscriptions.Cache()

    init(inbox: Inbox) {
        self.inbox = inbox
        self.machine = LinkDeliveryStateMachine(limit: inbox.maximumMessageLength)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let loop = NIOLoopBound(self, eventLoop: context.eventLoop)
        whenRoom = { loop.eventLoop.execute { loop.value.streamHasRoom() } }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        whenRoom = nil  // it holds this handler
        if let peer, let adopted, machine.followsWindow { inbox.windows.linkClosed(peer.id, link: adopted) }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let hello = event as? HelloCompleted {
            peer = Peer(hello.remote)
            (peerID, incarnation) = (hello.remote.peerID, hello.remote.incarnation)
            machine.helloCompleted(peerID: hello.remote.peerID)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        switch event {
        case let bound as DeliveryBound:
            run(
                machine.deliveryBound(.init(delivery: bound.delivery, link: bound.link)),
                context: context
            )
        case is MessagesAdmitted:
            run(machine.messagesAdmitted(), context: context)
        case let adoption as LinkAdopted:
            guard let peer, machine.isAdoptable else { break }
            adopted = adoption.link
            let resume = inbox.windows.adopt(peer.id, incarnation: peer.incarnation, on: adoption.link)
            machine.linkAdopted(window: inbox.windows.window(of: peer.id)!)  // (made by the adoption)
            context.writeAndFlush(wrapOutboundOut(resume), promise: nil)
        default:
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        promise?.succeed()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        run(machine.received(unwrapInboundIn(data)), context: context, data: data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        run(machine.readComplete(), context: context)
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        run(machine.readRequested(), context: context)
    }

    /// A stream this link filled has room again (on the event loop).
    private func streamHasRoom() {
        guard let context else { return }
        run(machine.streamHasRoom(), context: context)
    }

    /// Carries out what the machine decided. `data`: the frame read, for ``LinkDeliveryStateMachine/Action/forward``.
    private func run(
        _ action: LinkDeliveryStateMachine.Action,
        context: ChannelHandlerContext,
        data: NIOAny? = nil
    ) {
        switch action {
        case .none:
            break
        case .forward:
            if let data { context.fireChannelRead(data) }
        case .reportResumePoint(let sequence, let partial):
            context.fireUserInboundEventTriggered(ResumePointReceived(sequence: sequence, partial: partial))
        case .acknowledge(let sequence, let partial, let binding):
            // Only a resume point drops messages (those the peer came back too small for), and the
            // session applies that one.
            let dropped = binding.delivery.acknowledged(through: sequence, partial: partial, on: binding.link)
            assert(dropped.isEmpty, "an ACK after the resume point dropped messages")
        case .window(let frame, let sequence, let window):
            let received = inbox.windows.receive(
                frame,
                in: window,
                from: peerID,
                incarnation: incarnation,
                limit: inbox.maximumMessageLength
            )
            if let abandoned = received?.abandoned {
                // The sender no longer has the rest (it forgot this peer): never dropped in silence.
                inbox.metrics.dropped(reason: .abandonedBySender)
                inbox.subscriptions.emit(.messagesDropped(typeName: abandoned, count: 1, reason: .abandonedBySender))
            }
            run(machine.windowed(received?.verdict, sequence: sequence), context: context)
        case .deliver(let message):
            guard let whenRoom, let peer else { return }
            inbox.metrics.received(bytes: message.payload.readableBytes)
            let filled = inbox.subscriptions.deliver(message, from: peer, cache: &subscribers, whenRoom: whenRoom)
            run(machine.delivered(filling: filled), context: context)
        case .route(let routed):
            guard let peer else { return }
            do throws(MultipeerError) {
                switch routed {
                case .resource(let frame): try inbox.resources.received(frame, from: peer, on: context.channel)
                case .stream(let frame): try inbox.streams.received(frame, from: peer, on: context.channel)
                }
            } catch {
                run(machine.protocolError(error), context: context)
            }
        case .replay(let frames):
            for frame in frames { run(machine.received(frame), context: context) }
            run(machine.replayed(), context: context)
        case .acknowledgeDelivered(let window, let thenRead):
            if let ack = inbox.windows.acknowledgement(in: window, incarnation: incarnation) {
                context.writeAndFlush(wrapOutboundOut(ack), promise: nil)
            }
            if thenRead { context.read() }
        case .announce(let reading):
            // (This side's keepalive sees the reads withheld by itself.)
            context.writeAndFlush(wrapOutboundOut(.flow(reading: reading)), promise: nil)
        case .announceAndRead:
            context.writeAndFlush(wrapOutboundOut(.flow(reading: true)), promise: nil)
            context.read()
        case .read:
            context.read()
        case .fail(let error):
            context.writeAndFlush(wrapOutboundOut(.goodbye(.protocolError, error.message)), promise: nil)
            context.fireErrorCaught(error)
            context.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension DeliveryHandler: Sendable {}
