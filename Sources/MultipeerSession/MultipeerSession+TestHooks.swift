import struct Foundation.UUID
import MultipeerCore
import MultipeerDiscovery

// What this package's tests and benchmarks ask of a session, beyond its public API: `package`,
// so an application never sees them. Kept here, together, so that the session's own files
// hold only what it does.
extension MultipeerSession {
    /// Sends `message` under another type name (for tests of what a receiver does with it).
    package func sendRaw<Message: Codable & Sendable>(_ message: Message, as typeName: String, to peerID: UUID) async throws {
        _ = try await enqueue(try encode(message, as: typeName), for: peerID, delivery: .unreliable)
    }

    /// Asks for a suspend and, before the run loop sees it, discovers `endpoint`: the dial that
    /// discovery asks for reaches the run loop after the suspend (for a test of that race).
    package func suspend(discoveringMeanwhile endpoint: String) throws {
        runLoop.continuation.yield(.suspend)
        for advert in try StaticPeers([endpoint]).adverts { discovered(.found(advert)) }
    }

    /// Established links, counting any duplicate not yet closed (for tests).
    package var linkCount: Int { running?.links.count ?? 0 }

    /// Where delivery to `peerID` stands, in one line (for benchmarks and tests that stall).
    package func deliverySummary(for peerID: UUID) -> String {
        deliveries[peerID]?.summary ?? "never met"
    }

    /// Unacknowledged reliable messages for `peerID` (for tests).
    package func outboxCount(for peerID: UUID) -> Int {
        deliveries[peerID]?.outboxCount ?? 0
    }

    /// What is queued for each peer met now (for the simulator's check of `Limits.outbox` and
    /// `Limits.unreliableQueue` at every step). Read under the deliveries' locks, without
    /// waiting for the session.
    package nonisolated var queuedForPeers: [QueuedMessages] {
        deliveries.all.map(\.queued)
    }
}

/// What a session holds queued for one peer, as messages and payload bytes.
package struct QueuedMessages: Sendable {
    package var peerID: UUID
    package var outbox: (count: Int, bytes: Int)
    package var unreliable: (count: Int, bytes: Int)
}
