/// One send refused because its peer is not active, looked at again while the peer may be
/// joining: a message the peer's new link brought can reach the application before the peer's
/// resume point reaches the session (``SessionStateMachine/isJoining(_:)``), and a reply to it
/// would be refused. So such a send waits for the join, at most `patience` from its first
/// refusal, and is refused only if the peer is neither joining nor was let in since it looked.
/// Without I/O: the shell offers the message again when this says.
package struct JoinWait: Sendable {
    package enum Decision: Equatable, Sendable {
        /// Wait until the peer's delivery is woken (the peer joined, or its joining link
        /// closed) or until the deadline, then offer the message again.
        case wait(until: ContinuousClock.Instant)
        /// Refused for good: the offer's refusal stands.
        case refuse
    }

    private let patience: Duration
    /// When the first refusal's wait ends: later looks do not extend it.
    private var deadline: ContinuousClock.Instant?

    package init(patience: Duration) {
        self.patience = patience
    }

    /// The offer was refused, its peer not active. `joining`: the session keeps a link for the
    /// peer that the peer has not admitted yet; `woken`: the peer's delivery was woken since the
    /// offer looked (it may be active now).
    package mutating func refused(joining: Bool, woken: Bool, now: ContinuousClock.Instant) -> Decision {
        guard joining || woken else { return .refuse }
        let deadline = self.deadline ?? now + patience
        guard deadline > now else { return .refuse }
        self.deadline = deadline
        return .wait(until: deadline)
    }
}
