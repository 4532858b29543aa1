import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// Delivery on the receiving side, on the link's event loop: hands DATA to the application's
/// streams (``Subscriptions``), drops reliable duplicates (``ReceiveWindow``), and acknowledges
/// what was handed over once per read batch, so an ACK means the application's stream has the
/// message (or holds it for a first subscriber). Once the session keeps the link as its peer's
/// (``LinkAdopted``), never before, it tells the sender where to resume with an ACK of
/// everything already delivered from its incarnation: a link the session refuses, or has not
/// decided on, cannot disturb what another link delivers.
///
/// The sender's side of delivery takes the peer's ACKs here too: the first, the peer's resume
/// point, goes to the session (which admits the link with it); once the session has attached
/// the peer's delivery to the link (``DeliveryAttached``), the later ones go straight to it,
/// waking the senders they free.
///
/// The application has nothing a link brings before it has heard of the link's peer joining:
/// until the session says so (``MessagesAdmitted``, sent once it has told of the join), the
/// peer's messages, files' and streams' frames wait unread on the link, and the link stops
/// reading meanwhile, so they are at most what one read brought. (They are not taken into the
/// receive window either: the link has acknowledged none of them, and if it fails first, the
/// peer sends them again on the next.)
///
/// When a stream is full the link stops reading (it withholds `read`) until the stream is half
/// empty: TCP then pushes back on the sender. A gap (a sequence number skipped) cannot happen on
/// one in-order TCP stream from a correct sender; it closes the link with `outOfSequence`, so
/// that the sender resends from the gap on the next link instead of the stream stalling.
final class DeliveryHandler: ChannelDuplexHandler {
    typealias InboundIn = LinkMessage
    typealias InboundOut = LinkMessage
    typealias OutboundIn = LinkMessage
    typealias OutboundOut = LinkMessage

    private let inbox: Inbox
    private var stage = Stage.awaitingHello
    private var context: ChannelHandlerContext?
    /// The unreliable message arriving in fragments on this link.
    private var unreliableAssembly: MessageAssembly?
    /// A reliable message was delivered in this read batch (only then is there anything to
    /// acknowledge: a batch of PINGs alone costs no look-up).
    private var deliveredInBatch = false
    /// Full streams this link waits on; it reads again when none is left.
    private var fullStreams = 0
    /// What the peer sent before the application may have it (``Stage/adopted(_:_:)``), in order.
    private var early: [LinkMessage] = []
    /// A read was asked for while paused: it is made on resuming.
    private var readPending = false
    /// Given to a stream this link fills: brings its room back to this handler, on its event
    /// loop. Made once, not per message.
    private var whenRoom: (@Sendable () -> Void)?
    /// Where the peer's ACKs go.
    private var acknowledgements = Acknowledgements.awaitingResumePoint
    /// The subscribers of the types this link brought (``Subscriptions/Cache``).
    private var subscribers = Subscriptions.Cache()

    private enum Stage {
        /// Before the peer's HELLO: frames pass on (the HELLO is LinkHandler's).
        case awaitingHello
        /// The peer is known, and the session has not kept the link as its own yet: reliable
        /// DATA breaks the protocol.
        case open(Peer)
        /// The session keeps the link as the peer's: it follows the peer's receive window, and
        /// reliable DATA may come; what the peer sends waits (``early``) until the session has
        /// told the application of the peer's joining.
        case adopted(Peer, ReceiveWindows.Window)
        /// As `adopted`, and the application may have what the link brings.
        case delivering(Peer, ReceiveWindows.Window)
        /// The peer broke the protocol: the link is closing and reads nothing more (`adopted`:
        /// the peer whose receive window it followed until then).
        case broken(adopted: Peer?)

        var peer: Peer? {
            switch self {
            case .open(let peer), .adopted(let peer, _), .delivering(let peer, _): peer
            case .awaitingHello, .broken: nil
            }
        }

        /// The peer's receive window, while the link follows it.
        var window: ReceiveWindows.Window? {
            switch self {
            case .adopted(_, let window), .delivering(_, let window): window
            case .awaitingHello, .open, .broken: nil
            }
        }

        /// The peer whose receive window the link follows, or followed until it broke.
        var adoptedPeer: Peer? {
            switch self {
            case .adopted(let peer, _), .delivering(let peer, _), .broken(adopted: let peer?): peer
            case .awaitingHello, .open, .broken: nil
            }
        }
    }

    private enum Acknowledgements {
        /// The resume point has not come: the first ACK goes on to the session.
        case awaitingResumePoint
        /// The resume point went to the session; the latest ACK since waits for the delivery
        /// (an ACK says all that the ones before it said).
        case admitting(latest: (sequence: UInt64, partial: PartialMessage?)?)
        case attached(PeerDelivery, LinkID)
    }

    init(inbox: Inbox) {
        self.inbox = inbox
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let loop = NIOLoopBound(self, eventLoop: context.eventLoop)
        whenRoom = { loop.eventLoop.execute { loop.value.streamHasRoom() } }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        whenRoom = nil  // it holds this handler
        if let peer = stage.adoptedPeer { inbox.windows.linkClosed(peer.id) }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let hello = event as? HelloCompleted {
            stage = .open(Peer(hello.remote))
        }
        context.fireUserInboundEventTriggered(event)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        if let attached = event as? DeliveryAttached {
            if case .admitting(let latest) = acknowledgements, let latest {
                acknowledge(latest.sequence, latest.partial, to: attached.delivery, on: attached.link)
            }
            acknowledgements = .attached(attached.delivery, attached.link)
            promise?.succeed()
            return
        }
        if event is MessagesAdmitted {
            if case .adopted(let peer, let window) = stage { startDelivering(peer, window, context: context) }
            promise?.succeed()
            return
        }
        guard event is LinkAdopted else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        if case .open(let peer) = stage {
            let resume = inbox.windows.adopt(peer.id, incarnation: peer.incarnation)
            stage = .adopted(peer, inbox.windows.window(of: peer.id)!)  // (made by the adoption)
            context.writeAndFlush(wrapOutboundOut(resume), promise: nil)
        }
        promise?.succeed()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .broken = stage { return }
        let frame = unwrapInboundIn(data)
        if case .ack(let sequence, let partial) = frame {
            switch acknowledgements {
            case .awaitingResumePoint:
                acknowledgements = .admitting(latest: nil)
                context.fireChannelRead(data)
            case .admitting:
                acknowledgements = .admitting(latest: (sequence, partial))
            case .attached(let delivery, let link):
                acknowledge(sequence, partial, to: delivery, on: link)
            }
            return
        }
        guard let peer = stage.peer, whenRoom != nil else {
            context.fireChannelRead(data)
            return
        }
        switch frame {
        case .data, .fragment, .resourceOffer, .resourceWant, .resourceChunk, .resourceEnd, .streamOpen, .streamWant,
            .streamData, .streamEnd:
            if case .adopted = stage {
                early.append(frame)  // (and the link reads no more until the application may have it)
            } else {
                receive(frame, from: peer, context: context)
            }
        default:
            context.fireChannelRead(data)
        }
    }

    /// The application may have what the link brings: what waited goes first, then the link
    /// reads again (unless that filled a stream).
    private func startDelivering(_ peer: Peer, _ window: ReceiveWindows.Window, context: ChannelHandlerContext) {
        stage = .delivering(peer, window)
        let waiting = early
        early = []
        for frame in waiting {
            guard case .delivering = stage else { break }  // it broke the protocol
            receive(frame, from: peer, context: context)
        }
        acknowledgeDelivered(context: context)
        if fullStreams == 0, readPending {
            readPending = false
            context.read()
        }
    }

    /// A message, or a file's or a stream's frame, of the link's peer.
    private func receive(_ frame: LinkMessage, from peer: Peer, context: ChannelHandlerContext) {
        let sequence: UInt64
        switch frame {
        case .data(let message): sequence = message.sequence
        case .fragment(let fragment): sequence = fragment.sequence
        default:
            receiveOutsideSequence(frame, from: peer, context: context)
            return
        }
        guard sequence > 0 else {
            receiveUnreliable(frame, from: peer, context: context)
            return
        }
        guard let window = stage.window else {
            fail(
                MultipeerError(
                    .outOfSequence,
                    "peer \(peer.id) sent reliable message \(sequence) before this side said where to resume; the link is closed"
                ),
                context: context
            )
            return
        }
        // nil: a newer incarnation's link replaced this one, which is closing.
        guard
            let (verdict, abandoned) = inbox.windows.receive(
                frame,
                in: window,
                from: peer.id,
                incarnation: peer.incarnation,
                limit: inbox.maximumMessageLength
            )
        else { return }
        if let abandoned {
            // The sender no longer has the rest (it forgot this peer): never dropped in silence.
            inbox.metrics.dropped(reason: .abandonedBySender)
            inbox.subscriptions.emit(.messagesDropped(typeName: abandoned, count: 1, reason: .abandonedBySender))
        }
        switch verdict {
        case .deliver(let message):
            deliveredInBatch = true
            deliver(message, from: peer, context: context)
        case .pending, .duplicate:
            return
        case .gap:
            fail(
                MultipeerError(
                    .outOfSequence,
                    "peer \(peer.id) sent reliable message \(sequence) with an earlier one missing; the link is closed so that it resends"
                ),
                context: context
            )
        case .invalid(let error):
            fail(error, context: context)
        }
    }

    /// A RESOURCE_ or STREAM_ frame: the session's resources or streams take it, once the session
    /// keeps the link (the peer sends none before: it counts this side active only after the
    /// resume point).
    private func receiveOutsideSequence(_ frame: LinkMessage, from peer: Peer, context: ChannelHandlerContext) {
        guard stage.window != nil else {
            fail(
                MultipeerError(
                    .outOfSequence,
                    "peer \(peer.id) sent \(frame.frameType) before this side said where to resume; the link is closed"
                ),
                context: context
            )
            return
        }
        do throws(MultipeerError) {
            switch frame {
            case .streamOpen, .streamWant, .streamData, .streamEnd:
                try inbox.streams.received(frame, from: peer, on: context.channel)
            default: try inbox.resources.received(frame, from: peer, on: context.channel)
            }
        } catch {
            fail(error, context: context)
        }
    }

    /// An unreliable DATA, or a fragment of an unreliable message: one is put together at a
    /// time on this link, and lost with it.
    private func receiveUnreliable(_ frame: LinkMessage, from peer: Peer, context: ChannelHandlerContext) {
        switch frame {
        case .data(let message):
            deliver(message, from: peer, context: context)
        case .fragment(let fragment):
            do {
                if var assembly = unreliableAssembly {
                    unreliableAssembly = nil  // not a copy of its buffer to append to
                    if let message = try assembly.append(fragment, from: "peer \(peer.id)") {
                        deliver(message, from: peer, context: context)
                    } else {
                        unreliableAssembly = assembly
                    }
                } else {
                    switch try MessageAssembly.begin(
                        with: fragment,
                        limit: inbox.maximumMessageLength,
                        from: "peer \(peer.id)"
                    ) {
                    case .whole(let message): deliver(message, from: peer, context: context)
                    case .partial(let assembly): unreliableAssembly = assembly
                    }
                }
            } catch {
                fail(error as? MultipeerError ?? MultipeerError(.malformedMessage, "\(error)"), context: context)
            }
        default:
            break
        }
    }

    /// Hands a whole message to the application's streams; stops reading if that fills one.
    private func deliver(_ message: DataMessage, from peer: Peer, context: ChannelHandlerContext) {
        guard let whenRoom else { return }
        inbox.metrics.received(bytes: message.payload.readableBytes)
        let filled = inbox.subscriptions.deliver(message, from: peer, cache: &subscribers, whenRoom: whenRoom)
        if filled > 0 {
            if fullStreams == 0 { announce(reading: false, context: context) }
            fullStreams += filled
        }
    }

    /// Applies an ACK after the resume point to the sender's delivery. Only a resume point drops
    /// messages (those the peer came back too small for), and the session applies that one.
    private func acknowledge(_ sequence: UInt64, _ partial: PartialMessage?, to delivery: PeerDelivery, on link: LinkID)
    {
        let dropped = delivery.acknowledged(through: sequence, partial: partial, on: link)
        assert(dropped.isEmpty, "an ACK after the resume point dropped messages")
    }

    /// The peer broke the protocol: the link closes (with GOODBYE, protocol error) and reads nothing more.
    private func fail(_ error: MultipeerError, context: ChannelHandlerContext) {
        stage = .broken(adopted: stage.adoptedPeer)
        context.writeAndFlush(wrapOutboundOut(.goodbye(.protocolError, error.message)), promise: nil)
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        acknowledgeDelivered(context: context)
        context.fireChannelReadComplete()
    }

    /// Acknowledges the reliable messages handed to the application since the last ACK.
    private func acknowledgeDelivered(context: ChannelHandlerContext) {
        guard deliveredInBatch, case .delivering(let peer, let window) = stage else { return }
        deliveredInBatch = false
        if let ack = inbox.windows.acknowledgement(in: window, incarnation: peer.incarnation) {
            context.writeAndFlush(wrapOutboundOut(ack), promise: nil)
        }
    }

    func read(context: ChannelHandlerContext) {
        if fullStreams > 0 || !early.isEmpty {
            readPending = true
        } else {
            context.read()
        }
    }

    /// Tells the peer (FLOW) that this link stopped reading or reads again. (This side's
    /// keepalive sees the reads withheld by itself.)
    private func announce(reading: Bool, context: ChannelHandlerContext) {
        context.writeAndFlush(wrapOutboundOut(.flow(reading: reading)), promise: nil)
    }

    /// A stream this link filled has room again (on the event loop).
    private func streamHasRoom() {
        fullStreams -= 1
        guard fullStreams == 0, let context else { return }
        announce(reading: true, context: context)
        if readPending {
            readPending = false
            context.read()
        }
    }
}

@available(*, unavailable)
extension DeliveryHandler: Sendable {}
