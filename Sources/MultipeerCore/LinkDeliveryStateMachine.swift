package import struct Foundation.UUID

/// Who a link's peer is, as the receiving side's delivery needs it.
package protocol LinkPeer: Sendable {
    var id: UUID { get }
    var incarnation: UInt64 { get }
}

/// Delivery on the receiving side of one link, sans-IO: what happens to each frame the peer
/// sends after its HELLO, when the link acknowledges, when it stops reading and reads again, and
/// where the peer's ACKs go. The link's handler feeds it events and carries out its actions
/// (``Action``); the peer's receive window (``ReceiveWindow``, one per sender across its links)
/// and the application's streams stay with their owners, and the machine says when to use them.
///
/// - Before the session keeps the link as its peer's (``linkAdopted(window:)``), reliable DATA and
///   every RESOURCE_ and STREAM_ frame break the protocol: the peer has not heard where to resume.
/// - Once kept, what the peer sends waits unread (the link stops reading) until the session has
///   told the application of the join (``messagesAdmitted()``), then goes in order.
/// - The peer's first ACK is its resume point, reported once (``Action/reportResumePoint(_:_:)``);
///   the session admits the link with it and attaches the peer's delivery
///   (``deliveryAttached(_:)``); the ACKs between wait (the latest says all), the later ones go to
///   the delivery.
/// - A reliable message delivered in a read batch is acknowledged at the batch's end, once.
/// - A full stream stops the link reading (FLOW off) until every stream it filled has room.
///
/// Generic over what the shell holds: the peer (`Peer`), its receive window (`Window`) and the
/// sender's delivery it applies ACKs to (`Delivery`).
package struct LinkDeliveryStateMachine<Peer: LinkPeer, Window, Delivery> {
    package enum Action {
        case none
        /// Not delivery's: pass the frame on up the pipeline.
        case forward
        /// The peer's resume point (its first ACK): to the session, which admits the link with it.
        case reportResumePoint(UInt64, PartialMessage?)
        /// An ACK after the resume point: apply it to the sender's delivery.
        case acknowledge(UInt64, PartialMessage?, Delivery)
        /// A reliable message or fragment: put it through the peer's window and tell the verdict
        /// (``windowed(_:sequence:)``).
        case window(LinkMessage, sequence: UInt64, Peer, Window)
        /// A whole message: hand it to the application's streams and tell how many it filled
        /// (``delivered(filling:)``).
        case deliver(DataMessage, Peer)
        /// A RESOURCE_ or STREAM_ frame: to the session's resources or streams, whichever owns it.
        case route(LinkMessage, Peer)
        /// What waited for the application, in order: receive each (``received(_:)``) while the
        /// link delivers, then ``replayed()``.
        case replay([LinkMessage])
        /// Write the ACK of what the peer's window delivered since the last one; then, if
        /// `thenRead`, ask for the read withheld meanwhile.
        case acknowledgeDelivered(Peer, Window, thenRead: Bool)
        /// Tell the peer the link stopped reading (false) or reads again (FLOW).
        case announce(reading: Bool)
        /// Tell the peer the link reads again, and ask for the read withheld meanwhile.
        case announceAndRead
        /// Ask the channel for the read withheld.
        case read
        /// The peer broke the protocol: GOODBYE (protocol error), the error, the link closed.
        case fail(MultipeerError)
    }

    private enum Stage {
        /// Before the peer's HELLO: frames are not delivery's.
        case awaitingHello
        /// The peer is known; the session has not kept the link as its own.
        case open(Peer)
        /// The session keeps the link as the peer's; what the peer sends waits (`early`) until the
        /// application has heard of the join.
        case adopted(Peer, Window, early: [LinkMessage])
        /// Delivering what the link brings.
        case delivering(Peer, Window)
        /// The peer broke the protocol: the link reads nothing more (`adopted`: the peer whose
        /// window it followed).
        case broken(adopted: Peer?)
    }

    private enum Acknowledgements {
        /// The resume point has not come.
        case awaitingResumePoint
        /// It went to the session; the latest ACK since waits for the delivery.
        case admitting(latest: (sequence: UInt64, partial: PartialMessage?)?)
        case attached(Delivery)
    }

    /// Whether the link reads, or why not.
    private enum Reading {
        case on
        /// Streams this link filled are full (`full` of them); `pending`: a read was asked for meanwhile.
        case withheld(full: Int, pending: Bool)
    }

    private var stage = Stage.awaitingHello
    private var acknowledgements = Acknowledgements.awaitingResumePoint
    private var reading = Reading.on
    /// A reliable message was delivered in this read batch: acknowledge at its end.
    private var deliveredInBatch = false
    /// The unreliable message arriving in fragments on this link (lost with it).
    private var unreliableAssembly: MessageAssembly?
    /// This side's Limits.maximumMessageLength.
    private let limit: Int

    package init(limit: Int) {
        self.limit = limit
    }

    /// The peer whose window the link follows (or followed until it broke): the shell tells the
    /// windows when the link goes.
    package var adoptedPeer: Peer? {
        switch stage {
        case .adopted(let peer, _, _), .delivering(let peer, _), .broken(adopted: let peer?): peer
        case .awaitingHello, .open, .broken: nil
        }
    }

    /// The peer, if the session may keep the link as its own now (it has not, and it did not break).
    package var adoptable: Peer? {
        if case .open(let peer) = stage { peer } else { nil }
    }

    package mutating func helloCompleted(_ peer: Peer) {
        guard case .awaitingHello = stage else { preconditionFailure("one HELLO a link") }
        stage = .open(peer)
    }

    /// The session keeps the link as the peer's, whose window it follows from now on (the
    /// shell has written the resume point the window gave).
    package mutating func linkAdopted(window: Window) {
        guard case .open(let peer) = stage else { preconditionFailure("a link is adopted once, while open") }
        stage = .adopted(peer, window, early: [])
    }

    /// The application has heard of the join: what waited goes first.
    package mutating func messagesAdmitted() -> Action {
        guard case .adopted(let peer, let window, let early) = stage else { return .none }
        stage = .delivering(peer, window)
        return early.isEmpty ? replayed() : .replay(early)
    }

    /// What waited has been received again: acknowledge it, and read again unless a stream is full.
    package mutating func replayed() -> Action {
        var read = false
        if case .withheld(0, true) = reading {
            reading = .on
            read = true
        }
        if case .delivering(let peer, let window) = stage, deliveredInBatch {
            deliveredInBatch = false
            return .acknowledgeDelivered(peer, window, thenRead: read)
        }
        return read ? .read : .none
    }

    /// The session attached the peer's delivery to the link: the ACK that waited goes to it.
    package mutating func deliveryAttached(_ delivery: Delivery) -> Action {
        let waiting: Action
        if case .admitting(let latest?) = acknowledgements {
            waiting = .acknowledge(latest.sequence, latest.partial, delivery)
        } else {
            waiting = .none
        }
        acknowledgements = .attached(delivery)
        return waiting
    }

    /// A frame from below.
    package mutating func received(_ frame: LinkMessage) -> Action {
        if case .broken = stage { return .none }
        if case .ack(let sequence, let partial) = frame { return acknowledgement(sequence, partial) }
        let peer: Peer
        switch stage {
        case .awaitingHello, .broken: return .forward
        case .open(let open): peer = open
        case .adopted(let adopted, let window, var early):
            guard frame.isDelivery else { return .forward }
            stage = .awaitingHello  // (not a copy of `early` to append to)
            early.append(frame)
            stage = .adopted(adopted, window, early: early)
            return .none
        case .delivering(let delivering, _): peer = delivering
        }
        switch frame {
        case .data(let message) where message.sequence == 0:
            return .deliver(message, peer)
        case .fragment(let fragment) where fragment.sequence == 0:
            return unreliable(fragment, from: peer)
        case .data(let message):
            return reliable(frame, sequence: message.sequence, from: peer)
        case .fragment(let fragment):
            return reliable(frame, sequence: fragment.sequence, from: peer)
        case _ where frame.isDelivery:
            guard case .delivering = stage else {
                return fail(
                    "peer \(peer.id) sent \(frame.frameType) before this side said where to resume; the link is closed"
                )
            }
            return .route(frame, peer)
        default:
            return .forward
        }
    }

    private mutating func acknowledgement(_ sequence: UInt64, _ partial: PartialMessage?) -> Action {
        switch acknowledgements {
        case .awaitingResumePoint:
            acknowledgements = .admitting(latest: nil)
            return .reportResumePoint(sequence, partial)
        case .admitting:
            acknowledgements = .admitting(latest: (sequence, partial))
            return .none
        case .attached(let delivery):
            return .acknowledge(sequence, partial, delivery)
        }
    }

    private mutating func reliable(_ frame: LinkMessage, sequence: UInt64, from peer: Peer) -> Action {
        guard case .delivering(_, let window) = stage else {
            return fail(
                "peer \(peer.id) sent reliable message \(sequence) before this side said where to resume; the link is closed"
            )
        }
        return .window(frame, sequence: sequence, peer, window)
    }

    /// One unreliable message is put together at a time on a link.
    private mutating func unreliable(_ fragment: Fragment, from peer: Peer) -> Action {
        do {
            if var assembly = unreliableAssembly {
                unreliableAssembly = nil  // not a copy of its buffer to append to
                if let message = try assembly.append(fragment, from: "peer \(peer.id)") {
                    return .deliver(message, peer)
                }
                unreliableAssembly = assembly
                return .none
            }
            switch try MessageAssembly.begin(with: fragment, limit: limit, from: "peer \(peer.id)") {
            case .whole(let message): return .deliver(message, peer)
            case .partial(let assembly):
                unreliableAssembly = assembly
                return .none
            }
        } catch {
            return protocolError(error as? MultipeerError ?? MultipeerError(.malformedMessage, "\(error)"))
        }
    }

    /// The peer's window judged reliable frame `sequence` (nil: the window follows a newer
    /// incarnation of the peer, whose link replaced this one).
    package mutating func windowed(_ verdict: ReceiveWindow.Verdict?, sequence: UInt64) -> Action {
        guard case .delivering(let peer, _) = stage, let verdict else { return .none }
        switch verdict {
        case .deliver(let message):
            deliveredInBatch = true
            return .deliver(message, peer)
        case .pending, .duplicate:
            return .none
        case .gap:
            return fail(
                "peer \(peer.id) sent reliable message \(sequence) with an earlier one missing; the link is closed so that it resends"
            )
        case .invalid(let error):
            return protocolError(error)
        }
    }

    /// A message went to the application's streams, filling `filled` of them: the first full
    /// one stops the link reading.
    package mutating func delivered(filling filled: Int) -> Action {
        guard filled > 0 else { return .none }
        switch reading {
        case .on:
            reading = .withheld(full: filled, pending: false)
            return .announce(reading: false)
        case .withheld(let full, let pending):
            reading = .withheld(full: full + filled, pending: pending)
            return full == 0 ? .announce(reading: false) : .none
        }
    }

    /// A stream the link filled has room again: with none full left, it reads again.
    package mutating func streamHasRoom() -> Action {
        guard case .withheld(let full, let pending) = reading, full > 0 else {
            preconditionFailure("room in a stream the link did not fill")
        }
        guard full == 1 else {
            reading = .withheld(full: full - 1, pending: pending)
            return .none
        }
        guard pending, !isHolding else {
            reading = pending ? .withheld(full: 0, pending: true) : .on
            return .announce(reading: true)
        }
        reading = .on
        return .announceAndRead
    }

    /// Whether frames wait for the application (the link reads nothing more meanwhile).
    private var isHolding: Bool {
        if case .adopted(_, _, let early) = stage { !early.isEmpty } else { false }
    }

    /// The channel asks for the next read: withheld while a stream is full or frames wait.
    package mutating func readRequested() -> Action {
        switch reading {
        case .on where !isHolding:
            return .read
        case .on:
            reading = .withheld(full: 0, pending: true)
            return .none
        case .withheld(let full, _):
            reading = .withheld(full: full, pending: true)
            return .none
        }
    }

    /// A read batch ended: the reliable messages delivered in it are acknowledged once.
    package mutating func readComplete() -> Action {
        guard deliveredInBatch, case .delivering(let peer, let window) = stage else { return .none }
        deliveredInBatch = false
        return .acknowledgeDelivered(peer, window, thenRead: false)
    }

    /// What a resource's or stream's owner found wrong with a frame, or another break of the protocol.
    package mutating func protocolError(_ error: MultipeerError) -> Action {
        stage = .broken(adopted: adoptedPeer)
        return .fail(error)
    }

    private mutating func fail(_ message: String) -> Action {
        protocolError(MultipeerError(.outOfSequence, message))
    }
}

extension LinkMessage {
    /// A frame of delivery's: a message, a fragment, or a file's or stream's.
    package var isDelivery: Bool {
        switch self {
        case .data, .fragment, .resourceOffer, .resourceWant, .resourceChunk, .resourceEnd, .streamOpen, .streamWant,
            .streamData, .streamEnd:
            true
        case .hello, .ping, .pong, .ack, .goodbye, .flow, .reject, .types, .unknown:
            false
        }
    }
}
