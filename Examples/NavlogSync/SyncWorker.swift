import Foundation
import MultipeerSession

/// One peer's anti-entropy requests (docs/NAVLOG.md, section 3), and the start of this host's
/// own exchanges with it, handled in the order they came by a task of their own: answering
/// sends, and a send may wait for room in the peer's outbox. The loop that reads every peer's messages only hands requests over, so it never
/// waits for one peer, and two hosts answering each other never wait for each other for good.
///
/// At most ``maximumWaiting`` requests wait; an honest peer never has that many (it asks only
/// in answer to replies, a few at a time), so one that does is reported and ignored until it
/// joins again.
final class SyncWorker: Sendable {
    enum Work: Sendable {
        /// Begin this host's exchange as the asker.
        case start
        case ask(exchange: UInt64, [NavlogRanges])
        case reply(exchange: UInt64, expand: [NavlogPrefix], versions: NavlogDigest)
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
            // The peer's exchange under way (as its asks name it), and the versions sent in it so
            // far, reported when its final `need` is answered.
            var holding: (exchange: UInt64?, sent: Int) = (nil, 0)
            for await work in stream {
                do {
                    try await Self.perform(work, node: node, peer: peer, holding: &holding)
                } catch  where !Task.isCancelled {
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

    /// Drops what waits and stops sending (the peer sent too much, or the host stops).
    func stop() {
        inbox.finish()
        task.cancel()
    }

    /// Answers one request.
    private static func perform(
        _ work: Work,
        node: NavlogNode,
        peer: Peer,
        holding: inout (exchange: UInt64?, sent: Int)
    ) async throws {
        let session = node.session
        switch work {
        case .start:
            for message in await node.startPull(with: peer.id) { try await session.send(message, to: peer.id) }
        case .ask(let exchange, let ranges):
            if holding.exchange != exchange { holding = (exchange, 0) }
            let answer = await node.answer(ranges)
            holding.sent += try await sendEntries(answer.entries, final: false, node: node, to: peer)
            try await session.send(
                NavlogMessage.reply(exchange: exchange, expand: answer.expand, versions: answer.versions),
                to: peer.id
            )
        case .reply(let exchange, let expand, let versions):
            for message in await node.pulled(exchange: exchange, expand: expand, versions: versions, from: peer) {
                try await session.send(message, to: peer.id)
            }
        case .need(let ids, let final):
            holding.sent += try await sendEntries(ids, final: final, node: node, to: peer)
            guard final else { return }
            await node.answered(peer, sending: holding.sent)
            holding.sent = 0
        case .digest(let digest):
            let answer = await node.answer(legacy: digest)
            await node.answered(peer, sending: try await sendEntries(answer.missing, final: true, node: node, to: peer))
            for (index, part) in answer.digest.enumerated() {
                try await session.send(
                    NavlogMessage.digest(versions: part, final: index == answer.digest.count - 1),
                    to: peer.id
                )
            }
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
                try await node.session.send(
                    NavlogMessage.entries(versions: versions, final: final && end == ids.count),
                    to: peer.id
                )
            }
            count += versions.count
            start = end
        } while start < ids.count
        return count
    }
}
