import Foundation
import MultipeerCore
import NIOCore
import NIOConcurrencyHelpers

/// What this session has delivered from each sender, across that sender's links: one window
/// per sender, following the incarnation of the link the session keeps for it.
///
/// The incomplete messages of all senders together hold at most twice the largest message this
/// side takes (``budget(limit:)``): a message that begins beyond that first takes the memory of
/// incomplete messages whose senders have no link now (their place is kept, and they begin
/// again when their senders come back), and is refused if the rest all belong to senders
/// sending now. So no number of identities minted with the group key makes this side hold more.
final class ReceiveWindows: Sendable {
    private struct State {
        var windows: [UUID: ReceiveWindow] = [:]
        /// What every window's incomplete message holds, in all.
        var reserved = 0
        /// Adopted links open, per sender (a replaced link may close after its successor came).
        var links: [UUID: Int] = [:]

        /// Applies `change` to the sender's window, keeping ``reserved`` in step.
        mutating func update<Result>(_ peerID: UUID, _ change: (inout ReceiveWindow) -> Result) -> Result {
            let before = windows[peerID]?.reservedBytes ?? 0
            defer { reserved += (windows[peerID]?.reservedBytes ?? 0) - before }
            return change(&windows[peerID]!)
        }
    }

    private let state = NIOLockedValueBox(State())

    /// All incomplete messages together, for a side that takes messages of at most `limit`.
    static func budget(limit: Int) -> Int { 2 * limit }

    /// The session keeps a link of the sender's `incarnation` as its one link to it: the window
    /// follows that incarnation from now on (a new incarnation starts over). Returns what was
    /// delivered from it: where the sender resumes.
    func adopt(_ peerID: UUID, incarnation: UInt64) -> LinkMessage {
        state.withLockedValue { state in
            if state.windows[peerID] == nil { state.windows[peerID] = ReceiveWindow(incarnation: incarnation) }
            state.links[peerID, default: 0] += 1
            return state.update(peerID) { window in
                window.sender(incarnation: incarnation)
                window.linkAdopted()
                let (sequence, partial) = window.acknowledgement
                return .ack(sequence, partial: partial)
            }
        }
    }

    /// An adopted link of the sender closed.
    func linkClosed(_ peerID: UUID) {
        state.withLockedValue { state in
            state.links[peerID, default: 1] -= 1
            if state.links[peerID] == 0 { state.links[peerID] = nil }
        }
    }

    /// A reliable message, or a fragment of one, from the sender's `incarnation`; nil if the
    /// window follows another incarnation (the link it came on was replaced and is closing).
    /// `limit` is this side's Limits.maximumMessageLength.
    func receive(
        _ message: LinkMessage, from peerID: UUID, incarnation: UInt64, limit: Int
    ) -> (verdict: ReceiveWindow.Verdict, abandoned: String?)? {
        state.withLockedValue { state in
            guard state.windows[peerID]?.incarnation == incarnation else { return nil }
            switch message {
            case .data(let data):
                // (The name is made only for an error: formatting a UUID for every message was 2 % of a small one's cost.)
                return state.update(peerID) { $0.receive(data, from: "peer \(peerID)") }
            case .fragment(let fragment):
                let needed = state.windows[peerID]!.reservation(for: fragment)
                if needed > 0, let refusal = Self.makeRoom(needed, for: peerID, limit: limit, in: &state) {
                    return (.invalid(refusal), nil)
                }
                return state.update(peerID) { $0.receive(fragment, limit: limit, from: "peer \(peerID)") }
            default:
                return nil
            }
        }
    }

    /// Frees the memory of incomplete messages whose senders have no link, until `needed` more
    /// fits the budget; the error to refuse the message with if it still does not.
    private static func makeRoom(_ needed: Int, for peerID: UUID, limit: Int, in state: inout State) -> MultipeerError? {
        let budget = budget(limit: limit)
        guard state.reserved + needed > budget else { return nil }
        for (other, window) in state.windows where other != peerID && state.links[other] == nil && window.reservedBytes > 0 {
            _ = state.update(other) { $0.releasePartialBytes() }
            if state.reserved + needed <= budget { return nil }
        }
        return MultipeerError(
            .messageTooLarge,
            "peer \(peerID) began a message of \(needed) bytes while this side holds \(state.reserved) bytes of incomplete messages from peers sending now; all together may hold \(budget) (twice Limits.maximumMessageLength): the link is closed, and the peer sends it again on its next link")
    }

    /// The ACK for the sender's `incarnation`, if anything was delivered since the last one.
    func acknowledgement(for peerID: UUID, incarnation: UInt64) -> LinkMessage? {
        state.withLockedValue { state in
            guard let window = state.windows[peerID], window.incarnation == incarnation, window.unacknowledged > 0 else { return nil }
            state.windows[peerID]!.acknowledged()
            return .ack(window.acknowledgement.sequence, partial: window.acknowledgement.partial)
        }
    }

    /// What all incomplete messages hold now (for tests).
    var reservedBytes: Int { state.withLockedValue { $0.reserved } }
}

/// The session keeps this link as its peer's one link (sent down the pipeline by the session):
/// the link adopts the peer's receive window and says where the peer resumes.
struct LinkAdopted {}

/// The session moved its peer's delivery onto this link, link `link`, and applied the peer's
/// resume point to it (sent down the pipeline by the session): the link's later ACKs go to the
/// delivery from here, on the event loop, not through the session.
struct DeliveryAttached: Sendable {
    var delivery: PeerDelivery
    var link: LinkID
}

/// Where a session's links hand what they receive.
struct Inbox: Sendable {
    /// What was delivered from each sender, for reliable delivery.
    var windows: ReceiveWindows
    /// The application's streams.
    var subscriptions: Subscriptions
    var metrics: SessionMetrics
    /// The largest message this side takes (Limits.maximumMessageLength).
    var maximumMessageLength = MultipeerSession.Limits().maximumMessageLength
}

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
        /// reliable DATA may come.
        case adopted(Peer)
        /// The peer broke the protocol: the link is closing and reads nothing more (`adopted`:
        /// the peer whose receive window it followed until then).
        case broken(adopted: Peer?)

        var peer: Peer? {
            switch self {
            case .open(let peer), .adopted(let peer): peer
            case .awaitingHello, .broken: nil
            }
        }

        /// The peer whose receive window the link follows, or followed until it broke.
        var adoptedPeer: Peer? {
            switch self {
            case .adopted(let peer), .broken(adopted: let peer?): peer
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
                report(attached.delivery.acknowledged(through: latest.sequence, partial: latest.partial, on: attached.link))
            }
            acknowledgements = .attached(attached.delivery, attached.link)
            promise?.succeed()
            return
        }
        guard event is LinkAdopted else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        if case .open(let peer) = stage {
            stage = .adopted(peer)
            context.writeAndFlush(wrapOutboundOut(inbox.windows.adopt(peer.id, incarnation: peer.incarnation)), promise: nil)
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
                report(delivery.acknowledged(through: sequence, partial: partial, on: link))
            }
            return
        }
        guard let peer = stage.peer, whenRoom != nil else {
            context.fireChannelRead(data)
            return
        }
        let sequence: UInt64
        switch frame {
        case .data(let message): sequence = message.sequence
        case .fragment(let fragment): sequence = fragment.sequence
        default:
            context.fireChannelRead(data)
            return
        }
        guard sequence > 0 else {
            receiveUnreliable(frame, from: peer, context: context)
            return
        }
        guard case .adopted = stage else {
            fail(MultipeerError(
                .outOfSequence, "peer \(peer.id) sent reliable message \(sequence) before this side said where to resume; the link is closed"),
                context: context)
            return
        }
        // nil: a newer incarnation's link replaced this one, which is closing.
        guard let (verdict, abandoned) = inbox.windows.receive(
            frame, from: peer.id, incarnation: peer.incarnation, limit: inbox.maximumMessageLength) else { return }
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
            fail(MultipeerError(
                .outOfSequence, "peer \(peer.id) sent reliable message \(sequence) with an earlier one missing; the link is closed so that it resends"),
                context: context)
        case .invalid(let error):
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
                    switch try MessageAssembly.begin(with: fragment, limit: inbox.maximumMessageLength, from: "peer \(peer.id)") {
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

    /// Messages the sender's delivery dropped on an ACK (only a resume point drops any, and the
    /// session applies that one): reported all the same, never in silence.
    private func report(_ dropped: [PeerDeliveryStateMachine.Action]) {
        for case .dropped(let typeNames) in dropped {
            for typeName in typeNames {
                inbox.metrics.dropped(reason: .tooLargeForPeer)
                inbox.subscriptions.emit(.messagesDropped(typeName: typeName, count: 1, reason: .tooLargeForPeer))
            }
        }
    }

    /// The peer broke the protocol: the link closes (with GOODBYE, protocol error) and reads nothing more.
    private func fail(_ error: MultipeerError, context: ChannelHandlerContext) {
        stage = .broken(adopted: stage.adoptedPeer)
        context.writeAndFlush(wrapOutboundOut(.goodbye(.protocolError, error.message)), promise: nil)
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if deliveredInBatch, let peer = stage.peer {
            deliveredInBatch = false
            if let ack = inbox.windows.acknowledgement(for: peer.id, incarnation: peer.incarnation) {
                context.writeAndFlush(wrapOutboundOut(ack), promise: nil)
            }
        }
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        if fullStreams > 0 {
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
