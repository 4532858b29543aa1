// What the documentation's samples take for granted: a message type of the application's.
// scripts/consumer.sh writes the samples themselves into Samples.swift, each in a function
// of its own that nothing calls: they are compiled, not run.
import MultipeerSession

/// The application's message in the samples.
struct Note: Codable, Sendable {
    var text: String
}
