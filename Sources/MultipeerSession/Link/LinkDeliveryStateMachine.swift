import MultipeerCore

import struct Foundation.UUID

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
///   the session admits the link with it and binds the peer's delivery to it
///   (``deliveryBound(_:)``); the ACKs between wait (the latest says all), the later ones go to
///   the delivery.
/// - A reliable message delivered in a read batch is acknowledged at the batch's end, once.
/// - A full stream stops the link reading (FLOW off) until every stream it filled has room.
///
/// The shell holds the peer (its HELLO is the link's for good); the machine knows its ID, for
/// what it says of it. In this module, beside its shell, and not generic over the window's and
/// the delivery's handles: it runs for every frame, where a generic machine across modules is
/// not specialized (Benchmarks/README.md, SessionBenchmark, says what that cost).
struct LinkDeliveryStateMachine {
    typealias Window = ReceiveWindows.Window

    /// The sender's delivery the link's ACKs go to, and the link it is bound to.
    struct Binding {
        var delivery: PeerDelivery
        var link: LinkID
    }

    enum Action {
        case none
        /// Not delivery's: pass the frame on up the pipeline.
        case forward
        /// The peer's resume point (its first ACK): to the session, which admits the link with it.
        case reportResumePoint(UInt64, PartialMessage?)
        /// An ACK after the resume point: apply it to the sender's delivery.
        case acknowledge(UInt64, PartialMessage?, Binding)
        /// A reliable message or fragment: put it through the peer's window and tell the verdict
        /// (``windowed(_:sequence:)``).
        case window(ReliableFrame, sequence: UInt64, Window)
        /// A whole message: hand it to the application's streams and tell how many it filled
        /// (``delivered(filling:)``).
        case deliver(DataMessage)
        /// A RESOURCE_ or STREAM_ frame: to the session's resources or streams.
        case route(Routed)
        /// What waited for the application, in order: receive each (``received(_:)``) while the
        /// link delivers, then ``replayed()``.
        case replay([LinkMessage])
        /// Write the ACK of what the peer's window delivered since the last one; then, if
        /// `thenRead`, ask for the read withheld meanwhile.
        case acknowledgeDelivered(Window, thenRead: Bool)
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
        case open
        /// The session keeps the link as the peer's; what the peer sends waits (`early`) until the
        /// application has heard of the join.
        case adopted(Window, early: [LinkMessage])
        /// Delivering what the link brings.
        case delivering(Window)
        /// The peer broke the protocol: the link reads nothing more (`adopted`: it followed the
        /// peer's window until then).
        case broken(adopted: Bool)
    }

    private enum Acknowledgements {
        /// The resume point has not come.
        case awaitingResumePoint
        /// It went to the session; the latest ACK since waits for the delivery.
        case admitting(latest: Acknowledgement?)
        case bound(Binding)
    }

    private struct Acknowledgement {
        var sequence: UInt64
        var partial: PartialMessage?
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
    /// The peer's ID, once its HELLO came: for what the machine says of it.
    private var peerID: UUID?
    /// This side's Limits.maximumMessageLength.
    private let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    /// Whether the link follows (or followed until it broke) the peer's window: the shell tells
    /// the windows when the link goes.
    var followsWindow: Bool {
        switch stage {
        case .adopted, .delivering, .broken(adopted: true): true
        case .awaitingHello, .open, .broken(adopted: false): false
        }
    }

    /// Whether the session may keep the link as the peer's now (it has not, and it did not break).
    var isAdoptable: Bool {
        if case .open = stage { true } else { false }
    }

    mutating func helloCompleted(peerID: UUID) {
        guard case .awaitingHello = stage else { preconditionFailure("one HELLO a link") }
        self.peerID = peerID
        stage = .open
    }

    /// The session keeps the link as the peer's, whose window it follows from now on (the
    /// shell has written the resume point the window gave).
    mutating func linkAdopted(window: Window) {
        guard case .open = stage else { preconditionFailure("a link is adopted once, while open") }
        stage = .adopted(window, early: [])
    }

    /// The application has heard of the join: what waited goes first.
    mutating func messagesAdmitted() -> Action {
        guard case .adopted(let window, let early) = stage else { return .none }
        stage = .delivering(window)
        return early.isEmpty ? replayed() : .replay(early)
    }

    /// What waited has been received again: acknowledge it, and read again unless a stream is full.
    mutating func replayed() -> Action {
        var read = false
        if case .withheld(0, true) = reading {
            reading = .on
            read = true
        }
        if case .delivering(let window) = stage, deliveredInBatch {
            deliveredInBatch = false
            return .acknowledgeDelivered(window, thenRead: read)
        }
        return read ? .read : .none
    }

    /// The session bound the peer's delivery to the link: the ACK that waited goes to it.
    mutating func deliveryBound(_ delivery: Binding) -> Action {
        let waiting: Action
        if case .admitting(let latest?) = acknowledgements {
            waiting = .acknowledge(latest.sequence, latest.partial, delivery)
        } else {
            waiting = .none
        }
        acknowledgements = .bound(delivery)
        return waiting
    }

    /// A frame from below.
    mutating func received(_ frame: LinkMessage) -> Action {
        let window: Window?
        switch stage {
        case .broken:
            return .none
        case .awaitingHello:
            if case .ack(let sequence, let partial) = frame { return acknowledgement(sequence, partial) }
            return .forward
        case .open:
            window = nil
        case .adopted(let adopted, var early):
            guard frame.isDelivery else {
                if case .ack(let sequence, let partial) = frame { return acknowledgement(sequence, partial) }
                return .forward
            }
            stage = .open  // (not a copy of `early` to append to)
            early.append(frame)
            stage = .adopted(adopted, early: early)
            return .none
        case .delivering(let delivering):
            window = delivering
        }
        // The link's one router: every frame named, so a frame added to LinkMessage does not
        // compile until it is routed here.
        switch frame {
        case .data(let message):
            guard message.sequence > 0 else { return .deliver(message) }
            return reliable(.data(message), sequence: message.sequence, window: window)
        case .fragment(let fragment):
            guard fragment.sequence > 0 else { return unreliable(fragment) }
            return reliable(.fragment(fragment), sequence: fragment.sequence, window: window)
        case .ack(let sequence, let partial):
            return acknowledgement(sequence, partial)
        case .resourceOffer(let offer): return route(.resource(.offer(offer)), of: frame, window: window)
        case .resourceWant(let want): return route(.resource(.want(want)), of: frame, window: window)
        case .resourceChunk(let chunk): return route(.resource(.chunk(chunk)), of: frame, window: window)
        case .resourceEnd(let end): return route(.resource(.end(end)), of: frame, window: window)
        case .streamOpen(let open): return route(.stream(.open(open)), of: frame, window: window)
        case .streamWant(let want): return route(.stream(.want(want)), of: frame, window: window)
        case .streamData(let data): return route(.stream(.data(data)), of: frame, window: window)
        case .streamEnd(let end): return route(.stream(.end(end)), of: frame, window: window)
        case .hello, .ping, .pong, .goodbye, .flow, .reject, .types, .unknown:
            return .forward  // (the handlers above take what is theirs, and drop the unknown)
        }
    }

    /// A file's or stream's frame goes to its owner once the peer may send them.
    private mutating func route(_ routed: Routed, of frame: LinkMessage, window: Window?) -> Action {
        guard window != nil else {
            return fail("sent \(frame.frameType) before this side said where to resume; the link is closed")
        }
        return .route(routed)
    }

    private mutating func acknowledgement(_ sequence: UInt64, _ partial: PartialMessage?) -> Action {
        switch acknowledgements {
        case .awaitingResumePoint:
            acknowledgements = .admitting(latest: nil)
            return .reportResumePoint(sequence, partial)
        case .admitting:
            acknowledgements = .admitting(latest: Acknowledgement(sequence: sequence, partial: partial))
            return .none
        case .bound(let delivery):
            return .acknowledge(sequence, partial, delivery)
        }
    }

    private mutating func reliable(_ frame: ReliableFrame, sequence: UInt64, window: Window?) -> Action {
        guard let window else {
            return fail("sent reliable message \(sequence) before this side said where to resume; the link is closed")
        }
        return .window(frame, sequence: sequence, window)
    }

    /// One unreliable message is put together at a time on a link.
    private mutating func unreliable(_ fragment: Fragment) -> Action {
        let from = "peer \(peerID.map { "\($0)" } ?? "?")"
        do {
            if var assembly = unreliableAssembly {
                unreliableAssembly = nil  // not a copy of its buffer to append to
                if let message = try assembly.append(fragment, from: from) { return .deliver(message) }
                unreliableAssembly = assembly
                return .none
            }
            switch try MessageAssembly.begin(with: fragment, limit: limit, from: from) {
            case .whole(let message): return .deliver(message)
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
    mutating func windowed(_ verdict: ReceiveWindow.Verdict?, sequence: UInt64) -> Action {
        guard case .delivering = stage, let verdict else { return .none }
        switch verdict {
        case .deliver(let message):
            deliveredInBatch = true
            return .deliver(message)
        case .pending, .duplicate:
            return .none
        case .gap:
            return fail(
                "sent reliable message \(sequence) with an earlier one missing; the link is closed so that it resends"
            )
        case .invalid(let error):
            return protocolError(error)
        }
    }

    /// A message went to the application's streams, filling `filled` of them: the first full
    /// one stops the link reading.
    mutating func delivered(filling filled: Int) -> Action {
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
    mutating func streamHasRoom() -> Action {
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
        if case .adopted(_, let early) = stage { !early.isEmpty } else { false }
    }

    /// The channel asks for the next read: withheld while a stream is full or frames wait.
    mutating func readRequested() -> Action {
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
    mutating func readComplete() -> Action {
        guard deliveredInBatch, case .delivering(let window) = stage else { return .none }
        deliveredInBatch = false
        return .acknowledgeDelivered(window, thenRead: false)
    }

    /// What a resource's or stream's owner found wrong with a frame, or another break of the protocol.
    mutating func protocolError(_ error: MultipeerError) -> Action {
        stage = .broken(adopted: followsWindow)
        return .fail(error)
    }

    /// The peer broke the protocol as `what` says.
    private mutating func fail(_ what: String) -> Action {
        protocolError(MultipeerError(.outOfSequence, "peer \(peerID.map { "\($0)" } ?? "?") " + what))
    }
}

/// A reliable message, whole or a fragment of one: what goes through its sender's window.
enum ReliableFrame: Sendable {
    case data(DataMessage)
    case fragment(Fragment)
}

/// A frame past the link's own, for its owner: a file's (docs/PROTOCOL.md 3c) to the session's
/// ``Resources``, a stream's (3d) to its ``Streams``.
enum Routed: Sendable {
    case resource(ResourceFrame)
    case stream(StreamFrame)
}

/// A RESOURCE_ frame.
enum ResourceFrame: Sendable {
    case offer(ResourceOffer)
    case want(ResourceWant)
    case chunk(ResourceChunk)
    case end(ResourceEnd)
}

/// A STREAM_ frame.
enum StreamFrame: Sendable {
    case open(StreamOpen)
    case want(StreamWant)
    case data(StreamData)
    case end(StreamEnd)
}

extension LinkMessage {
    /// A frame of delivery's: a message, a fragment, or a file's or stream's.
    fileprivate var isDelivery: Bool {
        switch self {
        case .data, .fragment, .resourceOffer, .resourceWant, .resourceChunk, .resourceEnd, .streamOpen, .streamWant,
            .streamData, .streamEnd:
            true
        case .hello, .ping, .pong, .ack, .goodbye, .flow, .reject, .types, .unknown:
            false
        }
    }
}
