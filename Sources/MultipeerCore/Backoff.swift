import Foundation

/// When a lost peer is dialled again (by the side with the greater UUID): after a delay that
/// starts at ``initialDelay`` and grows by ``multiplier`` after each failed dial up to
/// ``maximumDelay``, each moved at random by up to ``jitter`` either way, so peers that lost
/// each other at one moment do not all dial at the next. A fresh announcement of the peer, or a
/// link that succeeds, starts again from the first delay. A peer refused for a reason retrying
/// cannot change (a roster, a key), or one that said GOODBYE because its session stopped, is
/// dialled only every ``maximumDelay`` until discovery announces it again.
public struct ReconnectParameters: Hashable, Sendable {
    /// The first delay. Default 100 ms.
    public var initialDelay: Duration
    /// Each delay is the previous one times this. Default 1.6.
    public var multiplier: Double
    /// Each delay is moved at random by up to this fraction either way. Default 0.2.
    public var jitter: Double
    /// No delay is longer than this (before jitter). Default 10 s.
    public var maximumDelay: Duration

    /// Redials after 100 ms growing by 1.6 to at most 10 s, each +-20 % at random, by default.
    public init(
        initialDelay: Duration = .milliseconds(100),
        multiplier: Double = 1.6,
        jitter: Double = 0.2,
        maximumDelay: Duration = .seconds(10)
    ) {
        self.initialDelay = initialDelay
        self.multiplier = multiplier
        self.jitter = jitter
        self.maximumDelay = maximumDelay
    }
}

/// Exponential backoff with jitter for redials (``ReconnectParameters``), without I/O or
/// randomness of its own: the caller passes a random number in 0..<1 for the jitter, so tests
/// are exact.
package struct Backoff: Sendable, Equatable {
    package let parameters: ReconnectParameters
    /// How many delays were taken since the last reset.
    package private(set) var attempts = 0

    package init(parameters: ReconnectParameters = ReconnectParameters()) {
        self.parameters = parameters
    }

    /// The next delay; `random` is uniform in 0..<1 and picks the jitter.
    package mutating func next(random: Double) -> Duration {
        let base = min(
            Double(parameters.initialDelay.nanoseconds) * pow(parameters.multiplier, Double(min(attempts, 64))),
            Double(parameters.maximumDelay.nanoseconds)
        )
        attempts += 1
        let factor = 1 + parameters.jitter * (2 * random - 1)
        return .nanoseconds(Int64(base * factor))
    }

    /// Straight to the longest delay: the peer refused in a way retrying soon cannot change.
    package mutating func exhaust() {
        attempts = 64
    }

    /// Back to the first delay: the peer was announced again, or a link succeeded.
    package mutating func reset() {
        attempts = 0
    }
}
