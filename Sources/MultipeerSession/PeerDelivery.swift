import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// Delivery towards one peer (``PeerDeliveryStateMachine``) behind one lock, with the senders
/// waiting on it: a send offers its message here from its own task, not through the session's
/// actor; the link's reader applies the peer's ACKs here, waking the senders they free; the
/// bound link's writer takes what waits in its turns (``LinkSource``). The session's actor
/// only binds links to it and unbinds them (``SessionStateMachine/Action/bind(_:_:reads:)``),
/// so a message for a known peer costs this lock, not a hop onto the actor.
///
/// A sender that finds no room waits off the lock, so a wake can come in between: the wakes are
/// counted, and a wait for a count already passed returns at once instead of sleeping through
/// the wake it missed.
final class PeerDelivery: LinkSource {
    private struct State {
        var machine: PeerDeliveryStateMachine
        /// The link the peer is active on: delivery goes on it. The peer's one record of it.
        var link: LinkHandle?
        /// The HELLO of the peer's latest link (kept while it is away, and once forgotten).
        var hello: Hello?
        /// The senders waiting for room, for the peer to join, or for an acknowledgement.
        var waiting = Waiters()
        /// How many times they were woken: a sender that looked before a wake does not wait.
        var wakes: UInt64 = 0

        /// Carries out the machine's actions under the lock: wakes take the waiters, and a
        /// flush its first batch; returns what to do once the lock is let go.
        mutating func apply(_ actions: [PeerDeliveryStateMachine.Action]) -> Effects {
            var effects = Effects()
            for action in actions {
                switch action {
                case .wakeSenders:
                    effects.woken += wake()
                case .flush(let id):
                    // (The link's writer read in place: nothing of the link, its HELLO with it,
                    // is copied for a flush, which every message makes.)
                    guard link?.id == id, let writer = link?.writer else {
                        machine.flushAbandoned(id)  // closed: the next link resends
                        continue
                    }
                    effects.ready = writer
                case .dropped, .unreliableLost:
                    effects.dropped.append(action)
                }
            }
            return effects
        }

        mutating func wake() -> [UnsafeContinuation<Void, Never>] {
            wakes &+= 1
            return waiting.takeAll()
        }
    }

    /// What is left to do once the lock is let go.
    private struct Effects {
        var woken: [UnsafeContinuation<Void, Never>] = []
        /// The link's writer, to tell that the peer's messages are ready for it.
        var ready: LinkWriter?
        /// Messages dropped unsent, for the session to report.
        var dropped: [PeerDeliveryStateMachine.Action] = []
    }

    /// What ``offer(_:reliably:now:)`` did with a message.
    enum Offer: Sendable {
        /// In the outbox (`ticket`; 0 for an unreliable message).
        case queued(ticket: UInt64)
        /// No room: ``wait(after:until:)`` with these wakes, then offer again.
        case wait(until: ContinuousClock.Instant?, wakes: UInt64)
        /// Refused; the wakes so far, for a sender that waits for the peer to join.
        case refused(MultipeerError, wakes: UInt64)
    }

    let peerID: UUID
    private let state: OrderedLock<State>
    private let metrics: SessionMetrics
    /// The session's clock: acknowledgement deadlines and send timeouts.
    private let clock: any SessionClock
    /// Whether the session's run has ended: nothing is taken or waited for then.
    private let end: SessionEnd

    init(
        peerID: UUID,
        policy: PeerDeliveryStateMachine.Policy,
        metrics: SessionMetrics,
        clock: any SessionClock = SystemClock(),
        end: SessionEnd = SessionEnd()
    ) {
        self.clock = clock
        self.end = end
        self.peerID = peerID
        self.metrics = metrics
        state = OrderedLock(
            State(machine: PeerDeliveryStateMachine(peerID: peerID, policy: policy)),
            rank: .peerDelivery
        )
    }

    /// Runs `body` under the lock, then what it left to do; returns its result and the drops.
    private func withState<Result>(
        _ body: (inout State) -> (Result, [PeerDeliveryStateMachine.Action])
    ) -> (Result, [PeerDeliveryStateMachine.Action]) {
        let (result, effects) = state.withLockedValue { state in
            let (result, actions) = body(&state)
            return (result, state.apply(actions))
        }
        for waiter in effects.woken { waiter.resume() }
        effects.ready?.ready(self)
        return (result, effects.dropped)
    }

    // MARK: Sending

    /// Offers `message` to the outbox (`reliably`) or the unreliable queue, refusing it with
    /// `messageTooLarge` or `messageTypeNotRead` if the peer would refuse it (``PeerDeliveryStateMachine/checkFits(_:localLimits:)``, under the
    /// same lock); a flush it starts writes its first batch from here (a lone message goes out
    /// without waiting for a task).
    func offer(
        _ message: DataMessage,
        reliably: Bool,
        localLimits: (frame: Int, message: Int),
        now: ContinuousClock.Instant
    ) -> Offer {
        withState { state -> (Offer, [PeerDeliveryStateMachine.Action]) in
            guard !end.hasEnded else {
                return (.refused(MultipeerError(.sessionState, "the session has stopped"), wakes: state.wakes), [])
            }
            do throws(MultipeerError) {
                try state.machine.checkFits(message, localLimits: localLimits)
            } catch {
                return (.refused(error, wakes: state.wakes), [])
            }
            let outcome =
                reliably
                ? state.machine.enqueue(
                    typeName: message.typeName,
                    payload: message.payload,
                    context: message.context,
                    now: now
                )
                : state.machine.enqueueUnreliable(message)
            switch outcome {
            case .queued(let ticket, let actions): return (.queued(ticket: ticket), actions)
            case .wait(let deadline): return (.wait(until: deadline, wakes: state.wakes), [])
            case .refused(let error): return (.refused(error, wakes: state.wakes), [])
            }
        }.0
    }

    /// How many wakes there have been: what a sender about to look again passes to ``wait(after:until:)``.
    var wakes: UInt64 { state.withLockedValue { $0.wakes } }

    /// Returns when woken (at once if a wake came since `wakes`), when `deadline` has passed (if
    /// there is one) or when the task is cancelled.
    func wait(after wakes: UInt64, until deadline: ContinuousClock.Instant?) async {
        await state.wait(
            in: \.waiting,
            unless: { [end] state in end.hasEnded || state.wakes != wakes },
            until: deadline.map { ($0, clock) }
        )
    }

    /// Wakes every sender waiting: room may have come, or the peer joined or left.
    func wake() {
        _ = withState { _ in ((), [.wakeSenders]) }
    }

    /// Waits until the peer acknowledged the message with this ticket: as long as the peer is
    /// active, and at most `Limits.sendTimeout` of its absence (then throws `peerAway`; the
    /// message stays queued).
    func waitForAcknowledgement(of ticket: UInt64) async throws {
        guard let id = state.withLockedValue({ $0.machine.waitForAcknowledgement(of: ticket) }) else { return }
        while true {
            let (outcome, wakes) = state.withLockedValue {
                state -> (PeerDeliveryStateMachine.AcknowledgementWait, UInt64) in
                guard !end.hasEnded else {
                    return (
                        .failed(
                            MultipeerError(
                                .sessionState,
                                "the session stopped before the peer acknowledged the message"
                            )
                        ), state.wakes
                    )
                }
                return (state.machine.acknowledgement(for: id, now: self.clock.now), state.wakes)
            }
            switch outcome {
            case .acknowledged:
                return
            case .failed(let error):
                throw error
            case .wait(let deadline):
                await wait(after: wakes, until: deadline)
                if Task.isCancelled {
                    state.withLockedValue { $0.machine.cancelWait(id) }
                    throw CancellationError()
                }
            }
        }
    }

    // MARK: The link

    /// The peer is active on `link` (both sides admitted it): delivery goes on it once its
    /// resume point is applied (``acknowledged(through:partial:on:)``). The peer reads the
    /// message types `reads` (as the link last said).
    func bind(_ link: LinkHandle, reads: MessageTypesRead) {
        let hello = link.hello
        _ = withState { state in
            state.link = link
            state.hello = hello
            state.machine.linkUp(
                link.id,
                incarnation: hello.incarnation,
                frameLimit: hello.maximumFrameLength,
                messageLimit: hello.maximumMessageLength,
                reads: reads
            )
            return ((), [.wakeSenders])  // those waiting for the peer to join
        }
    }

    /// The peer reads the message types `reads` from now on, as its link `id` said (TYPES).
    func peerReads(_ reads: MessageTypesRead, on id: LinkID) {
        _ = withState { ((), $0.machine.peerReads(reads, on: id)) }
    }

    /// Whether delivery goes on link `id`.
    func isBound(to id: LinkID) -> Bool {
        state.withLockedValue { $0.link?.id == id }
    }

    /// The peer's link now (nil while it is away), and the HELLO of its latest link (nil if it
    /// never had one).
    var binding: (link: LinkHandle?, hello: Hello?) { state.withLockedValue { ($0.link, $0.hello) } }

    /// The peer's link `id` closed or was replaced (nil: whatever link it had). Returns the
    /// link it had, if that was the one, and the unreliable messages lost with it.
    func unbind(
        _ id: LinkID?,
        now: ContinuousClock.Instant
    ) -> (unbound: LinkHandle?, dropped: [PeerDeliveryStateMachine.Action]) {
        withState { state -> (LinkHandle?, [PeerDeliveryStateMachine.Action]) in
            guard let link = state.link, id == nil || link.id == id else { return (nil, []) }
            state.link = nil
            return (link, state.machine.linkDown(id, now: now))
        }
    }

    /// The peer acknowledged everything through `sequence` on link `id`, except the message in
    /// fragments `partial` names; the first ACK on a link is the resume point. Returns what was
    /// dropped on resuming (messages the peer now takes no longer).
    func acknowledged(
        through sequence: UInt64,
        partial: PartialMessage?,
        on id: LinkID
    ) -> [PeerDeliveryStateMachine.Action] {
        withState { ((), $0.machine.acknowledged(through: sequence, partial: partial, on: id)) }.1
    }

    // MARK: The writer's turns

    /// The peer's messages' turn on its link `id` (``LinkSource``): the next batch of the flush
    /// under way, the unreliable messages waiting and then the outbox's (at most one fragment
    /// of a large message: the messages after it go between its fragments).
    ///
    /// One batch is in the link at a time (``LinkWriterStateMachine``), and the socket takes
    /// at most a fragment's length beyond what TCP has sent
    /// (``LinkConfiguration/unsentBytesLowWater``). So a message sent while a large one goes in
    /// fragments waits behind about one fragment, not behind every fragment a writer's buffer,
    /// or the kernel's, would take before the link pushed back.
    func turn(on id: LinkID, budget: Int) -> (frames: [LinkMessage], more: Bool) {
        let (batch, woken) = state.withLockedValue {
            state -> (PeerDeliveryStateMachine.Batch?, [UnsafeContinuation<Void, Never>]) in
            guard let batch = state.machine.nextBatch(for: id) else { return (nil, []) }
            return (batch, state.apply(batch.actions).woken)  // (a batch only wakes, it starts no flush)
        }
        for waiter in woken { waiter.resume() }
        guard let batch else { return ([], false) }
        for message in batch.frames {
            switch message {
            case .data(let message): metrics.sent(bytes: message.payload.readableBytes)
            case .fragment(let fragment) where fragment.isLast: metrics.sent(bytes: fragment.length)
            default: break
            }
        }
        return (batch.frames, batch.more)
    }

    // MARK: Looking

    /// Whether a message of `bytes` fits the outbox now (`reliably`), or the unreliable queue.
    func hasRoom(for bytes: Int, reliably: Bool) -> Bool {
        state.withLockedValue { reliably ? $0.machine.hasRoom(for: bytes) : $0.machine.hasUnreliableRoom(for: bytes) }
    }

    /// For a broadcast of `message` that the peer would refuse: why, with the peer to report
    /// it of if this is the first such message of its type on the peer's link (each skipped
    /// type is reported once per link); nil if the peer takes it.
    func skip(
        _ message: DataMessage,
        localLimits: (frame: Int, message: Int)
    ) -> (error: MultipeerError, report: Peer?)? {
        state.withLockedValue { state in
            do throws(MultipeerError) {
                try state.machine.checkFits(message, localLimits: localLimits)
                return nil
            } catch {
                return (error, Self.firstSkip(of: message.typeName, because: error.code, in: &state))
            }
        }
    }

    /// For a reliable broadcast of `typeName` that finds no room in the peer's outbox: the peer
    /// to report it of, if this is the first such skip of the type since its link came up.
    func skippedFull(_ typeName: String) -> Peer? {
        state.withLockedValue { Self.firstSkip(of: typeName, because: .outboxFull, in: &$0) }
    }

    /// The peer to report a skip of `typeName` for `reason` of, if it is the first since its
    /// link came up or went (``PeerDeliveryStateMachine/firstSkip(of:because:)``).
    private static func firstSkip(
        of typeName: String,
        because reason: MultipeerError.Code,
        in state: inout State
    ) -> Peer? {
        state.machine.firstSkip(of: typeName, because: reason) ? state.hello.map(Peer.init) : nil
    }

    /// Whether reliable message `sequence` of the current numbering has been written.
    func hasWritten(_ sequence: UInt64) -> Bool {
        state.withLockedValue { $0.machine.outbox?.hasWritten(sequence) ?? false }
    }

    /// Whether the peer has an outbox: it was active in this session, and not forgotten since.
    var hasOutbox: Bool { state.withLockedValue { $0.machine.outbox != nil } }

    /// Unacknowledged reliable messages.
    var outboxCount: Int { state.withLockedValue { $0.machine.outbox?.count ?? 0 } }

    /// What is queued now: unacknowledged reliable messages, and unreliable ones waiting for
    /// the link, each as messages and payload bytes.
    var queued: QueuedMessages {
        state.withLockedValue { state in
            QueuedMessages(
                peerID: peerID,
                outbox: (state.machine.outbox?.count ?? 0, state.machine.outbox?.bytes ?? 0),
                unreliable: (state.machine.unreliable.count, state.machine.unreliable.bytes)
            )
        }
    }

    /// Where delivery stands, in one line.
    var summary: String { state.withLockedValue { $0.machine.summary } }

    // MARK: Ending

    /// Drops what is queued for the peer (``PeerDeliveryStateMachine/forget()``).
    func forget() throws {
        try state.withLockedValue { try $0.machine.forget() }
        wake()
    }
}
