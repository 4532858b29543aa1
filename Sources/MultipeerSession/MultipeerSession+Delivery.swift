public import Foundation
import MultipeerCore
import NIOCore

/// How a message is delivered.
public enum Delivery: Sendable {
    /// Kept in the peer's outbox until the peer acknowledges it, resent after a redial, delivered
    /// in order and exactly once per sender incarnation. The default.
    case reliable
    /// Sent only if the peer is active now; lost if the link fails on the way.
    case unreliable
}

extension MultipeerSession {
    /// Keeps `message` for `peerID` and sends it as soon as the peer's link can take it; returns
    /// its ticket in the peer's outbox (``OutboxStateMachine/latestTicket``). Waits while the outbox is full (or throws `outboxFull`): for as long
    /// as it takes while the peer is active, for at most `Limits.sendTimeout` of its absence
    /// while it is away (then throws `peerAway`).
    func enqueue(_ message: DataMessage, for peerID: UUID) async throws -> UInt64 {
        let size = message.payload.readableBytes
        while true {
            guard lifecycle != .stopped else { throw MultipeerError(.sessionState, "the session has stopped") }
            guard outboxes[peerID] != nil || presence[peerID] != nil || activeLink(for: peerID) != nil else {
                throw MultipeerError(.peerNotActive, forgotten.contains(peerID)
                    ? "peer \(peerID) was forgotten (forget(peer:)); it can be sent to again once it joins again"
                    : "peer \(peerID) has not been active in this session: reliable messages go only to peers this session has met")
            }
            var outbox = outboxes[peerID] ?? newOutbox(for: peerID)
            if outbox.hasRoom(for: size) {
                _ = try outbox.enqueue(typeName: message.typeName, payload: message.payload)
                outboxes[peerID] = outbox
                return outbox.latestTicket
            }
            let held = "its outbox holds \(outbox.count) unacknowledged messages (\(outbox.bytes) bytes); its limit is \(configuration.limits.outbox.maximumCount) messages, \(configuration.limits.outbox.maximumBytes) bytes (Limits.outbox)"
            guard !configuration.limits.failWhenOutboxFull else {
                throw MultipeerError(.outboxFull, "peer \(peerID) has not acknowledged enough to take this message: \(held)")
            }
            guard activeLink(for: peerID) == nil, let since = away[peerID] else {
                await senders.wait(for: peerID, until: nil)  // active: as long as it reads, however slowly
                continue
            }
            let deadline = since + configuration.limits.sendTimeout
            guard ContinuousClock.now < deadline else {
                throw MultipeerError(
                    .peerAway,
                    "peer \(peerID) left \(Self.format(ContinuousClock.now - since)) ago and \(held): the send gave up after Limits.sendTimeout (\(configuration.limits.sendTimeout)). What is queued goes if the peer comes back; forget(peer:) drops it")
            }
            await senders.wait(for: peerID, until: deadline)
        }
    }

    private static func format(_ duration: Duration) -> String {
        String(format: "%.1f s", duration.seconds)
    }

    /// Drops what is queued for a peer that has left for good: its outbox (the messages it never
    /// acknowledged are not sent), and its place among the peers reliable messages and
    /// broadcasts go to, until it joins again. A send waiting for room in its outbox, or for its
    /// acknowledgement, throws `peerAway`.
    ///
    /// - Throws: `sessionState` if the peer is active now: forget a peer only once it has left.
    public func forget(peer peerID: UUID) throws {
        guard activeLink(for: peerID) == nil else {
            throw MultipeerError(.sessionState, "peer \(peerID) is active: forget(peer:) is for a peer that has left")
        }
        if outboxes.removeValue(forKey: peerID) != nil { forgotten.insert(peerID) }
        presence[peerID] = nil
        away[peerID] = nil
        frameLimits[peerID] = nil
        flushing[peerID] = nil
        let error = MultipeerError(.peerAway, "peer \(peerID) was forgotten (forget(peer:)) before it acknowledged the message")
        for waiter in acknowledgementWaiters.removeValue(forKey: peerID) ?? [] { waiter.continuation.resume(throwing: error) }
        senders.wake(peerID)
    }

    /// Peers that have an outbox: active now or earlier in this session.
    func knownPeerIDs() -> [UUID] {
        Array(outboxes.keys)
    }

    /// Whether a message of `bytes` fits the peer's outbox now (an active peer without one yet
    /// gets an empty one).
    func hasOutboxRoom(for peerID: UUID, bytes: Int) -> Bool {
        outboxes[peerID]?.hasRoom(for: bytes) ?? (activeLink(for: peerID) != nil)
    }

    /// An empty outbox whose numbering belongs to the peer's current incarnation (and, for a
    /// forgotten peer, continues from where its receiver says it stands).
    private func newOutbox(for peerID: UUID) -> OutboxStateMachine {
        var outbox = OutboxStateMachine(limits: configuration.limits.outbox, numberingFollowsReceiver: forgotten.contains(peerID))
        if let incarnation = activeIncarnation(of: peerID) { outbox.receiver(incarnation: incarnation) }
        return outbox
    }

    /// Makes sure what the peer's outbox has not yet written goes out on its current link, once
    /// that link has said where to resume: starts a flush there, unless one runs already. Never
    /// waits for the link: a peer that reads slowly, or not at all, holds up only its own flush,
    /// not the caller (a send, a broadcast to every peer, the link's reader). What the caller
    /// waits for, if anything, is room in the outbox.
    func startFlush(_ peerID: UUID) {
        guard let link = activeLink(for: peerID), resumed.contains(link), flushing[peerID] != link else { return }
        flushing[peerID] = link
        work.yield(.flush(peerID, link))
    }

    /// Writes the outbox to `link` until nothing is left to send, the link is replaced or it
    /// closes; run by the run loop, one per link at a time (``startFlush(_:)``). Each write
    /// suspends while the link pushes back, and two flushes writing at once could reach the
    /// link in either order, putting a later DATA before an earlier one (the receiver drops it
    /// as a gap). A flush still waiting on a link that has since been replaced never holds up
    /// the new link: that one gets a flush of its own.
    func flush(_ peerID: UUID, on link: LinkID) async {
        defer { if flushing[peerID] == link { flushing[peerID] = nil } }
        while activeLink(for: peerID) == link, let writer = writer(for: link), var outbox = outboxes[peerID] {
            let batch = outbox.sendable()
            outboxes[peerID] = outbox
            guard !batch.isEmpty else { return }
            do {
                try await writer.write(contentsOf: batch.map { LinkMessage.data($0) })
                for message in batch { metrics.sent(bytes: message.payload.readableBytes) }
            } catch {
                // The link is closing; the outbox resends on the next one.
            }
        }
    }

    /// The peer acknowledged everything through `sequence` on link `id`. Its first ACK on a link
    /// is the resume point: everything after it is sent again on that link.
    func acknowledged(through sequence: UInt64, by peerID: UUID, on id: LinkID) {
        let resuming = !resumed.contains(id) && activeLink(for: peerID) == id
        if resuming { resumed.insert(id) }
        // A forgotten peer's resume point is kept even with nothing to send: the next message numbers from it.
        guard var outbox = outboxes[peerID] ?? (resuming && forgotten.contains(peerID) ? newOutbox(for: peerID) : nil) else { return }
        if resuming {
            outbox.linkLost()
            if let incarnation = activeIncarnation(of: peerID) { outbox.receiver(incarnation: incarnation) }
            outbox.resumed(at: sequence)
            forgotten.remove(peerID)
        } else {
            outbox.acknowledge(through: sequence)
        }
        outboxes[peerID] = outbox
        senders.wake(peerID)
        var waiting: [(ticket: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []
        for waiter in acknowledgementWaiters.removeValue(forKey: peerID) ?? [] {
            if waiter.ticket <= outbox.acknowledgedTicket { waiter.continuation.resume() } else { waiting.append(waiter) }
        }
        if !waiting.isEmpty { acknowledgementWaiters[peerID] = waiting }
        // Written by a task of its own: the link's reader must never wait on the link's writer,
        // or both ends can stall, each blocked writing while neither reads.
        if resuming { startFlush(peerID) }
    }

    /// Waits until the peer acknowledged the message with this ticket.
    func waitForAcknowledgement(of ticket: UInt64, by peerID: UUID) async throws {
        guard (outboxes[peerID]?.acknowledgedTicket ?? 0) < ticket else { return }
        try await withCheckedThrowingContinuation { continuation in
            acknowledgementWaiters[peerID, default: []].append((ticket, continuation))
        }
    }

    /// Unacknowledged reliable messages for `peerID` (for tests).
    package func outboxCount(for peerID: UUID) -> Int {
        outboxes[peerID]?.count ?? 0
    }

    /// The session stopped: nobody waits for room or acknowledgements any more.
    func releaseWaiters() {
        lifecycle = .stopped
        senders.wakeAll()
        let error = MultipeerError(.sessionState, "the session stopped before the peer acknowledged the message")
        for waiter in acknowledgementWaiters.values.flatMap({ $0 }) { waiter.continuation.resume(throwing: error) }
        acknowledgementWaiters.removeAll()
    }
}
