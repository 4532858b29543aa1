import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// Delivery towards one peer (``PeerDeliveryStateMachine``) behind one lock, with the senders
/// waiting on it: a send offers its message here from its own task, not through the session's
/// actor; the link's reader applies the peer's ACKs here, waking the senders they free; a flush
/// writes what waits to the attached link. The session's actor only attaches and detaches links
/// (``SessionStateMachine/Action/attach(_:_:)``), so a message for a known peer costs this
/// lock, not a hop onto the actor.
///
/// A sender that finds no room waits off the lock, so a wake can come in between: the wakes are
/// counted, and a wait for a count already passed returns at once instead of sleeping through
/// the wake it missed.
final class PeerDelivery: Sendable {
    private struct State {
        var machine: PeerDeliveryStateMachine
        /// The link delivery goes on, and its channel.
        var link: (id: LinkID, channel: any Channel)?
        /// The session's run ended: nothing is taken or waited for any more.
        var stopped = false
        var waiting: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter: UInt64 = 0
        var wakes: UInt64 = 0

        mutating func wake() -> [CheckedContinuation<Void, Never>] {
            wakes &+= 1
            defer { waiting.removeAll() }
            return Array(waiting.values)
        }
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
    private let state: NIOLockedValueBox<State>
    private let metrics: SessionMetrics

    init(peerID: UUID, policy: PeerDeliveryStateMachine.Policy, metrics: SessionMetrics) {
        self.peerID = peerID
        self.metrics = metrics
        state = NIOLockedValueBox(State(machine: PeerDeliveryStateMachine(peerID: peerID, policy: policy)))
    }

    // MARK: Sending

    /// Offers `message` to the outbox (`reliably`) or the unreliable queue; starts a flush if
    /// the attached link has none.
    func offer(_ message: DataMessage, reliably: Bool, now: ContinuousClock.Instant) -> Offer {
        let (offer, actions) = state.withLockedValue { state -> (Offer, [PeerDeliveryStateMachine.Action]) in
            guard !state.stopped else { return (.refused(MultipeerError(.sessionState, "the session has stopped"), wakes: state.wakes), []) }
            let outcome = reliably
                ? state.machine.enqueue(typeName: message.typeName, payload: message.payload, now: now)
                : state.machine.enqueueUnreliable(message)
            switch outcome {
            case .queued(let ticket, let actions): return (.queued(ticket: ticket), actions)
            case .wait(let deadline): return (.wait(until: deadline, wakes: state.wakes), [])
            case .refused(let error): return (.refused(error, wakes: state.wakes), [])
            }
        }
        _ = perform(actions)
        return offer
    }

    /// How many wakes there have been: what a sender about to look again passes to ``wait(after:until:)``.
    var wakes: UInt64 { state.withLockedValue { $0.wakes } }

    /// Returns when woken (at once if a wake came since `wakes`), when `deadline` has passed (if
    /// there is one) or when the task is cancelled.
    func wait(after wakes: UInt64, until deadline: ContinuousClock.Instant?) async {
        guard let deadline else { return await wait(after: wakes) }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.wait(after: wakes) }
            group.addTask { try? await Task.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    private func wait(after wakes: UInt64) async {
        let id = state.withLockedValue { state in
            state.nextWaiter &+= 1
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let done = state.withLockedValue { state in
                    guard !Task.isCancelled, !state.stopped, state.wakes == wakes else { return true }
                    state.waiting[id] = continuation
                    return false
                }
                if done { continuation.resume() }
            }
        } onCancel: {
            state.withLockedValue { $0.waiting.removeValue(forKey: id) }?.resume()
        }
    }

    /// Wakes every sender waiting: room may have come, or the peer joined or left.
    func wake() {
        for waiter in state.withLockedValue({ $0.wake() }) { waiter.resume() }
    }

    /// Waits until the peer acknowledged the message with this ticket: as long as the peer is
    /// active, and at most `Limits.sendTimeout` of its absence (then throws `peerAway`; the
    /// message stays queued).
    func waitForAcknowledgement(of ticket: UInt64) async throws {
        guard let id = state.withLockedValue({ $0.machine.waitForAcknowledgement(of: ticket) }) else { return }
        while true {
            let (outcome, wakes) = state.withLockedValue { state -> (PeerDeliveryStateMachine.AcknowledgementWait, UInt64) in
                guard !state.stopped else {
                    return (.failed(MultipeerError(.sessionState, "the session stopped before the peer acknowledged the message")), state.wakes)
                }
                return (state.machine.acknowledgement(for: id, now: .now), state.wakes)
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

    /// The peer is active on link `id` (both sides admitted it): delivery goes on it once its
    /// resume point is applied (``acknowledged(through:partial:on:)``).
    func attach(_ id: LinkID, channel: any Channel, hello: Hello) {
        state.withLockedValue { state in
            state.link = (id, channel)
            state.machine.linkUp(id, incarnation: hello.incarnation, frameLimit: hello.maximumFrameLength, messageLimit: hello.maximumMessageLength)
        }
        wake()  // senders waiting for the peer to join
    }

    /// The peer's link `id` closed or was replaced (nil: whatever link it had). Returns the
    /// unreliable messages lost with it.
    func detach(_ id: LinkID?, now: ContinuousClock.Instant) -> [PeerDeliveryStateMachine.Action] {
        let actions = state.withLockedValue { state in
            if id == nil || state.link?.id == id { state.link = nil }
            return state.machine.linkDown(id, now: now)
        }
        return perform(actions)
    }

    /// The peer acknowledged everything through `sequence` on link `id`, except the message in
    /// fragments `partial` names; the first ACK on a link is the resume point. Returns what was
    /// dropped on resuming (messages the peer now takes no longer).
    func acknowledged(through sequence: UInt64, partial: PartialMessage?, on id: LinkID) -> [PeerDeliveryStateMachine.Action] {
        perform(state.withLockedValue { $0.machine.acknowledged(through: sequence, partial: partial, on: id) })
    }

    /// Carries out the flushes and wakes; returns the rest (messages dropped) for the session to report.
    private func perform(_ actions: [PeerDeliveryStateMachine.Action]) -> [PeerDeliveryStateMachine.Action] {
        actions.filter { action in
            switch action {
            case .flush(let link):
                startFlush(on: link)
                return false
            case .wakeSenders:
                wake()
                return false
            case .dropped, .unreliableLost:
                return true
            }
        }
    }

    /// Writes what waits for `link` until nothing is left, the link is replaced or it closes
    /// (one flush per link at a time: ``PeerDeliveryStateMachine``). The first batch is written
    /// from the caller (the sender whose message started the flush, or the reader that applied
    /// the resume point): a lone message goes out without waiting for another task. Each next
    /// batch is taken once the last is written, and written from a task of its own: never from
    /// the link's event loop, whose reader must never wait on its writer.
    ///
    /// One batch is in the link at a time, and the socket takes at most a fragment's length
    /// beyond what TCP has sent (``LinkConfiguration/unsentBytesLowWater``). So a message sent
    /// while a large one goes in fragments waits behind about one fragment, not behind every
    /// fragment a writer's buffer, or the kernel's, would take before the link pushed back. And
    /// the link's event loop finds its task queue empty between batches, and reads its sockets:
    /// it runs its tasks until none is left before it looks at them, and with a batch always
    /// queued (a write scheduled on the loop from the last one's completion) a sender whose peer
    /// kept up never read again, and its keepalive timed the link out.
    private func startFlush(on link: LinkID) {
        guard let channel = state.withLockedValue({ $0.link?.id == link ? $0.link?.channel : nil }),
              let batch = nextBatch(for: link) else {
            state.withLockedValue { $0.machine.flushAbandoned(link) }  // closed: the next link resends
            return
        }
        write(batch, to: channel, link: link)
    }

    private func nextBatch(for link: LinkID) -> [LinkMessage]? {
        guard let (batch, actions) = state.withLockedValue({ $0.machine.nextBatch(for: link) }) else { return nil }
        _ = perform(actions)
        return batch
    }

    private func write(_ batch: [LinkMessage], to channel: any Channel, link: LinkID) {
        for message in batch {
            switch message {
            case .data(let message): metrics.sent(bytes: message.payload.readableBytes)
            case .fragment(let fragment) where fragment.isLast: metrics.sent(bytes: fragment.length)
            default: break
            }
        }
        channel.write(batch).whenComplete { result in
            guard case .success = result else {
                // The link is closing; the outbox resends on the next one.
                self.state.withLockedValue { $0.machine.flushAbandoned(link) }
                return
            }
            guard let next = self.nextBatch(for: link) else { return }
            Task { self.write(next, to: channel, link: link) }
        }
    }

    // MARK: Looking

    /// Whether a message of `bytes` fits the outbox now (`reliably`), or the unreliable queue.
    func hasRoom(for bytes: Int, reliably: Bool) -> Bool {
        state.withLockedValue { reliably ? $0.machine.hasRoom(for: bytes) : $0.machine.hasUnreliableRoom(for: bytes) }
    }

    /// Throws `messageTooLarge` if the peer would refuse `message` (as its latest HELLO said).
    func checkFits(_ message: DataMessage, localLimits: (frame: Int, message: Int)) throws {
        try state.withLockedValue { try $0.machine.checkFits(message, localLimits: localLimits) }
    }

    /// Whether reliable message `sequence` of the current numbering has been written.
    func hasWritten(_ sequence: UInt64) -> Bool {
        state.withLockedValue { $0.machine.outbox?.hasWritten(sequence) ?? false }
    }

    /// Whether the peer has an outbox: it was active in this session, and not forgotten since.
    var hasOutbox: Bool { state.withLockedValue { $0.machine.outbox != nil } }

    /// Unacknowledged reliable messages.
    var outboxCount: Int { state.withLockedValue { $0.machine.outbox?.count ?? 0 } }

    /// Where delivery stands, in one line.
    var summary: String { state.withLockedValue { $0.machine.summary } }

    // MARK: Ending

    /// Drops what is queued for the peer (``PeerDeliveryStateMachine/forget()``).
    func forget() throws {
        try state.withLockedValue { try $0.machine.forget() }
        wake()
    }

    /// The session's run ended: every sender finds it stopped.
    func stop() {
        let waiters = state.withLockedValue { state in
            state.stopped = true
            return state.wake()
        }
        for waiter in waiters { waiter.resume() }
    }
}

extension Channel {
    /// Writes `batch` into the pipeline in one event-loop turn and flushes it; the future
    /// completes once the last of it is written to the socket (or fails with the link).
    fileprivate func write(_ batch: [LinkMessage]) -> EventLoopFuture<Void> {
        let written = eventLoop.makePromise(of: Void.self)
        eventLoop.execute {
            for (index, message) in batch.enumerated() {
                self.write(message, promise: index == batch.count - 1 ? written : nil)
            }
            self.flush()
        }
        return written.futureResult
    }
}

/// Every peer's ``PeerDelivery``, by peer: a peer gets one when the session first keeps a link
/// for it, and keeps it for the session's life (bounded by the peers that proved the group key
/// and, with a roster, their place in it).
final class Deliveries: Sendable {
    private let peers = NIOLockedValueBox<(byID: [UUID: PeerDelivery], stopped: Bool)>(([:], false))
    private let policy: PeerDeliveryStateMachine.Policy
    private let metrics: SessionMetrics

    init(policy: PeerDeliveryStateMachine.Policy, metrics: SessionMetrics) {
        self.policy = policy
        self.metrics = metrics
    }

    subscript(peerID: UUID) -> PeerDelivery? {
        peers.withLockedValue { $0.byID[peerID] }
    }

    /// The peer's delivery, made if it has none yet.
    func make(for peerID: UUID) -> PeerDelivery {
        let (delivery, stopped) = peers.withLockedValue { peers in
            if let delivery = peers.byID[peerID] { return (delivery, false) }
            let delivery = PeerDelivery(peerID: peerID, policy: policy, metrics: metrics)
            peers.byID[peerID] = delivery
            return (delivery, peers.stopped)
        }
        if stopped { delivery.stop() }
        return delivery
    }

    /// Why `message` is refused for a peer without a delivery: it was never met.
    func refusal(of message: DataMessage, reliably: Bool, for peerID: UUID) -> MultipeerError {
        guard !peers.withLockedValue(\.stopped) else { return MultipeerError(.sessionState, "the session has stopped") }
        var unmet = PeerDeliveryStateMachine(peerID: peerID, policy: policy)
        let outcome = reliably
            ? unmet.enqueue(typeName: message.typeName, payload: message.payload, now: .now) : unmet.enqueueUnreliable(message)
        guard case .refused(let error) = outcome else { preconditionFailure("a peer never met took a message") }
        return error
    }

    /// Peers that have an outbox: active now or earlier in this session.
    var known: [UUID] {
        peers.withLockedValue { Array($0.byID.values) }.filter(\.hasOutbox).map(\.peerID)
    }

    /// The session's run ended: every sender finds it stopped.
    func stop() {
        let all = peers.withLockedValue { peers in
            peers.stopped = true
            return Array(peers.byID.values)
        }
        for delivery in all { delivery.stop() }
    }
}
