import Foundation
import MultipeerSession

/// One peer's anti-entropy requests (docs/NAVLOG.md, section 3), answered in the order they
/// came by a task of their own: answering sends, and a send may wait for room in the peer's
/// outbox. The loop that reads every peer's messages only hands requests over, so it never
/// waits for one peer, and two hosts answering each other never wait for each other for good.
///
/// At most ``maximumWaiting`` requests wait; an honest peer never has that many (it asks only
/// in answer to replies, a few at a time), so one that does is reported and ignored until it
/// joins again.
final class SyncWorker: Sendable {
    enum Work: Sendable {
        /// Begin this host's exchange as the asker.
        case start
        case ask([NavlogRanges])
        case reply(expand: [NavlogPrefix], versions: NavlogDigest)
        case need([UUID], final: Bool)
        /// A whole digest of a host of an earlier release.
        case digest(NavlogDigest)
    }

    static let maximumWaiting = 1_024

    private let inbox: AsyncStream<Work>.Continuation
    private let task: Task<Void, Never>

    init(node: NavlogNode, peer: Peer) {
        let (stream, inbox) = AsyncStream<Work>.makeStream(bufferingPolicy: .bufferingOldest(Self.maximumWaiting))
        self.inbox = inbox
        task = Task {
            // Versions sent in answer to this exchange's requests, reported when the final `need` is answered.
            var sent = 0
            for await work in stream {
                do {
                    sent = try await Self.perform(work, node: node, peer: peer, sent: sent)
                } catch where !Task.isCancelled {
                    await node.report(error, "syncing with \(peer.displayName) failed")
                } catch {
                    return
                }
            }
        }
    }

    /// Hands a request over; false if ``maximumWaiting`` are waiting already.
    func enqueue(_ work: Work) -> Bool {
        if case .enqueued = inbox.yield(work) { return true }
        return false
    }

    /// Drops what waits and stops sending (the peer left, or a new exchange begins).
    func stop() {
        inbox.finish()
        task.cancel()
    }

    /// Answers one request; returns the versions sent so far in this exchange.
    private static func perform(_ work: Work, node: NavlogNode, peer: Peer, sent: Int) async throws -> Int {
        let session = node.session
        switch work {
        case .start:
            for message in await node.startPull(with: peer.id) { try await session.send(message, to: peer.id) }
            return sent
        case .ask(let ranges):
            let answer = await node.answer(ranges)
            let count = try await sendEntries(answer.entries, final: false, node: node, to: peer)
            try await session.send(NavlogMessage.reply(expand: answer.expand, versions: answer.versions), to: peer.id)
            return sent + count
        case .reply(let expand, let versions):
            for message in await node.pulled(expand: expand, versions: versions, from: peer) { try await session.send(message, to: peer.id) }
            return sent
        case .need(let ids, let final):
            let total = sent + (try await sendEntries(ids, final: final, node: node, to: peer))
            guard final else { return total }
            await node.answered(peer, sending: total)
            return 0
        case .digest(let digest):
            let answer = try await node.answer(legacy: digest)
            let count = try await sendEntries(answer.missing.map(\.id), final: true, node: node, to: peer)
            await node.answered(peer, sending: count)
            for (index, part) in answer.digest.enumerated() {
                try await session.send(NavlogMessage.digest(versions: part, final: index == answer.digest.count - 1), to: peer.id)
            }
            return 0
        }
    }

    /// Sends the versions held of `ids` in `entries` batches (one, empty, if none and `final`),
    /// the last one `final`; returns how many.
    private static func sendEntries(_ ids: [UUID], final: Bool, node: NavlogNode, to peer: Peer) async throws -> Int {
        var count = 0
        var start = 0
        repeat {
            let end = min(start + NavlogMessage.batchSize, ids.count)
            let versions = try node.store.versions(of: ids[start..<end]).sorted { $0.timestamp < $1.timestamp }
            if !versions.isEmpty || (final && end == ids.count) {
                try await node.session.send(NavlogMessage.entries(versions: versions, final: final && end == ids.count), to: peer.id)
            }
            count += versions.count
            start = end
        } while start < ids.count
        return count
    }
}
