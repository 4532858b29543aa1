import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// Every peer's ``PeerDelivery``, by peer: a peer gets one when the session first keeps a link
/// for it, and keeps it for the session's life (bounded by the peers that proved the group key
/// and, with a roster, their place in it). Each holds the peer's link (``LinkHandle``), bound and
/// unbound here only: the peer's resources and streams read it from there.
final class Deliveries: Sendable {
    private let peers = OrderedLock<[UUID: PeerDelivery]>([:], rank: .deliveries)
    private let policy: PeerDeliveryStateMachine.Policy
    private let metrics: SessionMetrics
    private let clock: any SessionClock
    /// Whether the session's run has ended, read by every part of the session that holds a peer's
    /// things: these deliveries, the peers' transfers and streams.
    let end: SessionEnd

    init(policy: PeerDeliveryStateMachine.Policy, metrics: SessionMetrics, clock: any SessionClock, end: SessionEnd) {
        self.policy = policy
        self.clock = clock
        self.metrics = metrics
        self.end = end
    }

    /// Deliveries with a session's default limits, on the system's clock: for links outside a
    /// session (the pipeline's tests).
    convenience init(metrics: SessionMetrics) {
        self.init(policy: .init(MultipeerSession.Limits()), metrics: metrics, clock: SystemClock(), end: SessionEnd())
    }

    subscript(peerID: UUID) -> PeerDelivery? {
        peers.withLockedValue { $0[peerID] }
    }

    /// The peer's delivery, made if it has none yet.
    func make(for peerID: UUID) -> PeerDelivery {
        peers.withLockedValue { peers in
            if let delivery = peers[peerID] { return delivery }
            let delivery = PeerDelivery(peerID: peerID, policy: policy, metrics: metrics, clock: clock, end: end)
            peers[peerID] = delivery
            return delivery
        }
    }

    /// The peer is active on `link` (both sides admitted it), reading the message types `reads`.
    func bind(_ link: LinkHandle, reads: MessageTypesRead) {
        make(for: link.peerID).bind(link, reads: reads)
    }

    /// The peer's link `id` closed or was replaced (nil: whatever link it had). Returns the
    /// link it had, if that was the one, and the unreliable messages lost with it.
    func unbind(
        _ peerID: UUID,
        link id: LinkID?,
        now: ContinuousClock.Instant
    ) -> (unbound: LinkHandle?, dropped: [PeerDeliveryStateMachine.Action]) {
        self[peerID]?.unbind(id, now: now) ?? (nil, [])
    }

    /// The peer's link now (nil while it is away or never met), and the HELLO of its latest
    /// link (nil if it never had one).
    func binding(of peerID: UUID) -> (link: LinkHandle?, hello: Hello?) {
        self[peerID]?.binding ?? (nil, nil)
    }

    /// Why `message` is refused for a peer without a delivery: it was never met.
    func refusal(of message: DataMessage, reliably: Bool, for peerID: UUID) -> MultipeerError {
        guard !end.hasEnded else { return MultipeerError(.sessionState, "the session has stopped") }
        var unmet = PeerDeliveryStateMachine(peerID: peerID, policy: policy)
        let outcome =
            reliably
            ? unmet.enqueue(typeName: message.typeName, payload: message.payload, now: clock.now)
            : unmet.enqueueUnreliable(message)
        guard case .refused(let error) = outcome else { preconditionFailure("a peer never met took a message") }
        return error
    }

    /// Every peer's delivery.
    var all: [PeerDelivery] { peers.withLockedValue { Array($0.values) } }

    /// Peers that have an outbox: active now or earlier in this session.
    var known: [UUID] {
        all.filter(\.hasOutbox).map(\.peerID)
    }

    /// The session's run has ended (``end`` is set): every sender waiting wakes to find it so.
    func sessionEnded() {
        for delivery in all { delivery.wake() }
    }
}

extension PeerDeliveryStateMachine.Policy {
    /// The policy `limits` set.
    init(_ limits: MultipeerSession.Limits) {
        self.init(
            limits: limits.outbox,
            unreliableLimits: limits.unreliableQueue,
            failWhenFull: limits.failWhenOutboxFull,
            sendTimeout: limits.sendTimeout
        )
    }
}
