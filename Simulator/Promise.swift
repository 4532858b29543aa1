import MultipeerSessionTesting

/// A promise the documentation makes about the simulator's applications that a world checks
/// (Simulator/README.md, "What it checks"; the explorer checks the session's own,
/// ``ExplorationPromise``): every broken one names its promise, so that a smaller world that
/// fails is known to fail the same way (``SimulationExplorer/shrink(_:for:jobs:application:)``).
enum Promise: String, CaseIterable, Sendable, CustomStringConvertible {
    case exactlyOnceInOrder = "a reliable message reaches the application once, in order"
    case nothingAcknowledgedLost = "a queued or acknowledged message is never lost"
    case filesWhole = "a file arrives whole, and every transfer completes"
    case resentAfterABreak = "what a file sends again after a break is bounded"
    case streamsInOrder = "a stream's bytes arrive in order, each once, and it ends"
    case rotationRefusesNone = "members rotating their group key refuse none of each other"
    case rosterCloses = "a host left out of a roster is closed and refused"
    case sendersBounded = "what a sender holds stays within its limits"
    case receiversBounded = "what a session holds for its application stays within its limits"
    case callsReturn = "every send, completion, write and finish returns"
    case storesConverge = "the stores converge, losing nothing acknowledged and refusing nothing"
    case deterministic = "one seed, one run"
    /// Not the session's, broken on purpose (`--plant`): it shows the shrinker at work.
    case planted = "a planted defect: nothing of 1 KiB or more is sent to a frozen host"
    /// Not the session's: the simulator could not do what its world needed (write a file).
    case simulator = "the simulator's own work"

    var description: String { rawValue }

    /// As the explorer reports it.
    var exploration: ExplorationPromise { ExplorationPromise(rawValue) }
}

/// A promise broken: which, and what happened.
struct Violation: Sendable, CustomStringConvertible {
    var promise: Promise
    var text: String

    var description: String { text }
}
