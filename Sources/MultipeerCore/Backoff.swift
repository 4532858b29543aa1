import Foundation

/// Exponential backoff with jitter for redials, without I/O or randomness of its own: the
/// caller passes a random number in 0..<1 for the jitter, so tests are exact.
package struct Backoff: Sendable, Equatable {
    package struct Parameters: Sendable, Equatable {
        /// The first delay. Default 100 ms.
        package var initial: Duration
        /// Each delay is the previous one times this. Default 1.6.
        package var multiplier: Double
        /// Each delay is moved at random by up to this fraction either way. Default 0.2.
        package var jitter: Double
        /// No delay is longer than this (before jitter). Default 10 s.
        package var maximum: Duration

        package init(initial: Duration = .milliseconds(100), multiplier: Double = 1.6, jitter: Double = 0.2, maximum: Duration = .seconds(10)) {
            self.initial = initial
            self.multiplier = multiplier
            self.jitter = jitter
            self.maximum = maximum
        }
    }

    package let parameters: Parameters
    /// How many delays were taken since the last reset.
    package private(set) var attempts = 0

    package init(parameters: Parameters = Parameters()) {
        self.parameters = parameters
    }

    /// The next delay; `random` is uniform in 0..<1 and picks the jitter.
    package mutating func next(random: Double) -> Duration {
        let base = min(
            Double(parameters.initial.nanoseconds) * pow(parameters.multiplier, Double(min(attempts, 64))),
            Double(parameters.maximum.nanoseconds))
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
