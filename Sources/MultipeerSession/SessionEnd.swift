import Synchronization

/// Whether the session's run has ended: the core's lifecycle (``SessionStateMachine/Lifecycle``)
/// as the parts that outlive a send or a link read it. Set once, when the shell carries out the
/// core's ``SessionStateMachine/Action/ended`` action, before it ends each part; a part (the
/// peers' deliveries, the transfers, the streams, the subscriptions) reads it under its own lock
/// when it takes something in, and refuses it once the run has ended.
///
/// So nothing slips in between: the flag is set before each part's lock is taken to end what it
/// holds, and a part reads it under that lock, so what it took in before is ended with the rest
/// and what comes after finds the flag set.
final class SessionEnd: Sendable {
    private let ended = Atomic<Bool>(false)

    init() {}

    /// Whether the run has ended: nothing is taken in any more.
    var hasEnded: Bool { ended.load(ordering: .acquiring) }

    /// The run has ended.
    func end() { ended.store(true, ordering: .releasing) }
}
