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
    /// its ticket in the peer's outbox (0 for an unreliable message).
    ///
    /// A reliable message waits while the outbox is full (or throws `outboxFull`): for as long
    /// as it takes while the peer is active, for at most `Limits.sendTimeout` of its absence
    /// while it is away (then throws `peerAway`). An unreliable one goes only to a peer active
    /// now, and waits while its unreliable queue is full (`Limits.unreliableQueue`). A message
    /// for a peer that is joining waits for it (``SessionStateMachine/offer(_:reliably:to:since:now:)``).
    func enqueue(_ message: DataMessage, for peerID: UUID, delivery: Delivery = .reliable) async throws -> UInt64 {
        let since = ContinuousClock.now
        while true {
            // Before looking: a wake between the look and the wait (off the actor) is not missed.
            let wakes = senders.wakes(for: peerID)
            switch core.offer(message, reliably: delivery == .reliable, to: peerID, since: since, now: .now) {
            case .queued(let ticket, let actions):
                perform(actions)
                return ticket
            case .refused(let error):
                throw error
            case .wait(let deadline):
                await senders.wait(for: peerID, after: wakes, until: deadline)
                // A cancelled wait returns at once, every time: looking again would spin.
                try Task.checkCancellation()
            }
        }
    }

    /// Drops what is queued for a peer that has left for good: its outbox (the messages it never
    /// acknowledged are not sent), and its place among the peers reliable messages and
    /// broadcasts go to, until it joins again. A send waiting for room in its outbox, or for its
    /// acknowledgement, throws `peerAway`.
    ///
    /// - Throws: `sessionState` if the peer is active now: forget a peer only once it has left.
    public func forget(peer peerID: UUID) throws {
        perform(try core.forget(peerID))
    }

    /// Writes the unreliable messages waiting and the outbox to `link` until nothing is left to
    /// send, the link is replaced or it closes; run by the run loop, one per link at a time
    /// (``PeerDeliveryStateMachine``). Two flushes writing at once could reach the link in either
    /// order, putting a later DATA before an earlier one (the receiver drops it as a gap). A flush
    /// still waiting on a link that has since been replaced never holds up the new link: that one
    /// gets a flush of its own. Never run by a caller: a peer that reads slowly, or not at all,
    /// holds up only its own flush, not a send, a broadcast to every peer or the link's reader.
    ///
    /// One batch is in the link at a time: the next is taken once it is written, and the socket
    /// takes at most a fragment's length beyond what TCP has sent
    /// (``LinkConfiguration/unsentBytesLowWater``). So a message sent while a large one goes in
    /// fragments waits behind about one fragment, not behind every fragment a writer's buffer,
    /// or the kernel's, would take before the link pushed back (measured through NIO's async
    /// writer: up to 100 ms of them; in the socket, 4 MB). And the link's event loop finds its
    /// task queue empty between batches, and reads its sockets: it runs its tasks until none is
    /// left before it looks at them, and with a batch always queued (two in the link, or one task
    /// per message) a sender whose peer kept up never read again, and its keepalive timed the
    /// link out.
    func flush(_ peerID: UUID, on link: LinkID) async {
        while let (batch, actions) = core.nextBatch(to: peerID, for: link) {
            perform(actions)
            guard let channel = links[link]?.channel else {
                core.flushAbandoned(peerID, on: link)  // closed: the next link resends
                return
            }
            let written = channel.write(batch)
            for message in batch {
                switch message {
                case .data(let message): metrics.sent(bytes: message.payload.readableBytes)
                case .fragment(let fragment) where fragment.isLast: metrics.sent(bytes: fragment.length)
                default: break
                }
            }
            // The link is closing if this fails; the outbox resends on the next one.
            try? await written.get()
        }
    }

    /// The peer acknowledged everything through `sequence` on link `id`, except the message in
    /// fragments `partial` names; its first ACK on a link is the resume point.
    func acknowledged(through sequence: UInt64, partial: PartialMessage?, by peerID: UUID, on id: LinkID) {
        perform(core.acknowledged(through: sequence, partial: partial, by: peerID, on: id, now: .now))
    }

    /// Reports messages dropped unsent (their type names, one entry each): per name, a metric and an event.
    func report(dropped typeNames: [String], reason: MessageDropReason) {
        for (typeName, count) in Dictionary(typeNames.map { ($0, 1) }, uniquingKeysWith: +).sorted(by: { $0.key < $1.key }) {
            metrics.dropped(reason: reason, count: count)
            subscriptions.emit(.messagesDropped(typeName: typeName, count: count, reason: reason))
        }
    }

    /// Waits until the peer acknowledged the message with this ticket: as long as the peer is
    /// active, and at most `Limits.sendTimeout` of its absence (then throws `peerAway`; the
    /// message stays queued). A sender is woken with those waiting for room, and looks again.
    func waitForAcknowledgement(of ticket: UInt64, by peerID: UUID) async throws {
        guard let waiter = core.waitForAcknowledgement(of: ticket, by: peerID) else { return }
        while true {
            // Before looking: a wake between the look and the wait (off the actor) is not missed.
            let wakes = senders.wakes(for: peerID)
            switch core.acknowledgement(for: waiter, by: peerID, now: .now) {
            case .acknowledged:
                return
            case .failed(let error):
                throw error
            case .wait(let deadline):
                await senders.wait(for: peerID, after: wakes, until: deadline)
                if Task.isCancelled {
                    core.cancelWait(waiter, by: peerID)
                    throw CancellationError()
                }
            }
        }
    }

    /// Where delivery to `peerID` stands, in one line (for benchmarks and tests that stall).
    package func deliverySummary(for peerID: UUID) -> String {
        core.deliverySummary(for: peerID)
    }

    /// Unacknowledged reliable messages for `peerID` (for tests).
    package func outboxCount(for peerID: UUID) -> Int {
        core.outboxCount(for: peerID)
    }
}

extension Channel {
    /// Writes `batch` into the pipeline in one event-loop turn and flushes it; the future
    /// completes once the last of it is written to the socket (or fails with the link).
    fileprivate func write(_ batch: [LinkMessage]) -> EventLoopFuture<Void> {
        let written = eventLoop.makePromise(of: Void.self)
        eventLoop.execute {
            for (index, message) in batch.enumerated() {
                self.write(message, promise: index == batch.count - 1 ? written : nil)
            }
            self.flush()
        }
        return written.futureResult
    }
}

extension MultipeerSession {
    /// A reliable message from `peer` did not decode here (the application was told): tells its
    /// sender with REJECT, on the peer's link if the incarnation that sent it is still there.
    func reject(_ rejection: Rejection, from peer: Peer) {
        metrics.rejected(direction: "in")
        perform(core.reject(rejection, from: peer.id, incarnation: peer.incarnation))
    }

    /// The peer says a reliable message this side sent it, numbered `rejection.sequence`, did
    /// not decode there: reported as an event (``SessionStateMachine/rejected(_:by:on:)``).
    func rejected(_ rejection: Rejection, by peerID: UUID, on id: LinkID) {
        perform(core.rejected(rejection, by: peerID, on: id))
    }
}
