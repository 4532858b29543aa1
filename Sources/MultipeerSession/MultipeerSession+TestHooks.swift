import MultipeerCore
import MultipeerDiscovery

import struct Foundation.UUID

// What this package's tests and benchmarks ask of a session, beyond its public API: `package`,
// so an application never sees them. Kept here, together, so that the session's own files
// hold only what it does.
extension MultipeerSession {
    /// Sends `message` under another type name (for tests of what a receiver does with it).
    package func sendRaw<Message: Codable & Sendable>(
        _ message: Message,
        as typeName: String,
        to peerID: UUID
    ) async throws {
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

    /// The messages of `type` this session acknowledged and its application has not read yet
    /// (in its streams, or held for a first subscriber), oldest first: what the application
    /// loses if its process is killed now (for the simulator's ledger). One still being
    /// decoded is left out.
    package nonisolated func unreadMessages<Message: Decodable & Sendable>(of type: Message.Type) -> [Message] {
        subscriptions.unread(named: Self.wireName(of: type)).compactMap { message in
            switch message {
            case .encoded(let payload): try? MessageEncoding.decode(Message.self, from: payload)
            case .value(let value): value as? Message
            case .pending(let pending): pending.decoded as? Message
            }
        }
    }

    /// What the session holds in memory of what its peers sent and it sends: for the
    /// application to read, in incomplete messages, in byte streams and in incoming files (for
    /// the simulator's check of `Limits.receiveBuffer`, `Limits.unsubscribedMessages`,
    /// `Limits.eventBuffer`, `Limits.maximumMessageLength` and the streams' and files' windows
    /// at every step). Read from each holder (under its lock, or the receive windows' atomic), without
    /// waiting for the session.
    package nonisolated var heldInMemory: HeldInMemory {
        var held = subscriptions.held
        held.incompleteBytes = inbox.windows.reserved
        held.byteStreams = inbox.streams.held.map { (Int($0.reading), Int($0.writing)) }
        held.unwrittenResources = inbox.resources.unwritten.map { Int($0) }
        return held
    }
}

/// What a session holds in memory: for its application (in each stream of `messages(of:)`, for
/// first subscribers per type name, in each stream of `events`), in reliable messages arriving in
/// fragments, in each byte stream, and in each incoming file.
package struct HeldInMemory: Sendable {
    package struct Messages: Sendable {
        package var typeName: String
        package var count: Int
        /// The memory the messages keep alive (a stream counts each read buffer once, at its capacity).
        package var bytes: Int
    }

    package var streams: [Messages]
    package var holds: [Messages]
    /// Each events stream's events.
    package var events: [Int]
    /// What the incomplete reliable messages of all senders hold.
    package var incompleteBytes = 0
    /// Each byte stream's bytes arrived and not yet read, and written and not yet held by the
    /// reader (each at most ``byteStreamWindow``).
    package var byteStreams: [(reading: Int, writing: Int)] = []
    package static let byteStreamWindow = Int(Streams.window)
    /// Each incoming file's bytes arrived and not yet written (each at most ``resourceWindow``).
    package var unwrittenResources: [Int] = []
    package static let resourceWindow = Int(Resources.window)
}

/// What a session holds queued for one peer, as messages and payload bytes.
package struct QueuedMessages: Sendable {
    package var peerID: UUID
    package var outbox: (count: Int, bytes: Int)
    package var unreliable: (count: Int, bytes: Int)
}
