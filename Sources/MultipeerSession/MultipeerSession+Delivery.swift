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
    /// The delivery state of a peer not met before.
    func newDelivery(for peerID: UUID) -> PeerDeliveryStateMachine {
        PeerDeliveryStateMachine(peerID: peerID, policy: .init(
            limits: configuration.limits.outbox, unreliableLimits: configuration.limits.unreliableQueue,
            failWhenFull: configuration.limits.failWhenOutboxFull,
            sendTimeout: configuration.limits.sendTimeout))
    }

    /// Keeps `message` for `peerID` and sends it as soon as the peer's link can take it; returns
    /// its ticket in the peer's outbox (0 for an unreliable message).
    ///
    /// A reliable message waits while the outbox is full (or throws `outboxFull`): for as long
    /// as it takes while the peer is active, for at most `Limits.sendTimeout` of its absence
    /// while it is away (then throws `peerAway`). An unreliable one goes only to a peer active
    /// now, and waits while its unreliable queue is full (`Limits.unreliableQueue`).
    ///
    /// A peer this side keeps a link for, whose resume point has not been taken in yet, is
    /// about to join: a message its link brought may reach the application before the resume
    /// point before it reaches this actor. A message the peer would be refused for not being
    /// active waits for that admission (for at most `Limits.sendTimeout`), and is refused
    /// only if the link closes first.
    func enqueue(_ message: DataMessage, for peerID: UUID, delivery: Delivery = .reliable) async throws -> UInt64 {
        var joining: ContinuousClock.Instant?
        while true {
            guard lifecycle != .stopped else { throw MultipeerError(.sessionState, "the session has stopped") }
            // Before looking: a wake between the look and the wait (off the actor) is not missed.
            let wakes = senders.wakes(for: peerID)
            let outcome: PeerDeliveryStateMachine.Enqueued
            if deliveries[peerID] != nil {
                // In place: a copy taken out of the dictionary would copy the whole outbox (so
                // would `deliveries[peerID]?.enqueue(...) ?? ...`: measured, 85k -> 50k msg/s).
                outcome = Self.offer(message, as: delivery, to: &deliveries[peerID]!)
            } else {
                // Never met: a new state says why it refuses the message, and is not kept.
                var unmet = newDelivery(for: peerID)
                outcome = Self.offer(message, as: delivery, to: &unmet)
            }
            switch outcome {
            case .queued(let ticket, let actions):
                perform(actions, for: peerID)
                return ticket
            case .refused(let error) where error.code == .peerNotActive && isJoining(peerID):
                let deadline = joining ?? .now + configuration.limits.sendTimeout
                guard deadline > .now else { throw error }
                joining = deadline
                await senders.wait(for: peerID, after: wakes, until: deadline)
                try Task.checkCancellation()
            case .refused(let error):
                throw error
            case .wait(let deadline):
                await senders.wait(for: peerID, after: wakes, until: deadline)
                // A cancelled wait returns at once, every time: looking again would spin.
                try Task.checkCancellation()
            }
        }
    }

    /// Offers `message` to a peer's delivery, to its outbox or its unreliable queue.
    private static func offer(
        _ message: DataMessage, as delivery: Delivery, to state: inout PeerDeliveryStateMachine
    ) -> PeerDeliveryStateMachine.Enqueued {
        switch delivery {
        case .reliable: state.enqueue(typeName: message.typeName, payload: message.payload, now: .now)
        case .unreliable: state.enqueueUnreliable(message)
        }
    }

    /// Drops what is queued for a peer that has left for good: its outbox (the messages it never
    /// acknowledged are not sent), and its place among the peers reliable messages and
    /// broadcasts go to, until it joins again. A send waiting for room in its outbox, or for its
    /// acknowledgement, throws `peerAway`.
    ///
    /// - Throws: `sessionState` if the peer is active now: forget a peer only once it has left.
    public func forget(peer peerID: UUID) throws {
        guard deliveries[peerID] != nil else { return }
        try deliveries[peerID]!.forget()
        senders.wake(peerID)
    }

    /// Peers that have an outbox: active now or earlier in this session.
    func knownPeerIDs() -> [UUID] {
        deliveries.compactMap { $0.value.outbox != nil ? $0.key : nil }
    }

    /// Whether a message of `bytes` fits the peer's outbox now (an active peer without one yet
    /// gets an empty one), or for `.unreliable`, its unreliable queue (an active peer's).
    func hasRoom(for peerID: UUID, bytes: Int, delivery: Delivery) -> Bool {
        switch delivery {
        case .reliable: deliveries[peerID]?.hasRoom(for: bytes) ?? false
        case .unreliable: deliveries[peerID]?.hasUnreliableRoom(for: bytes) ?? false
        }
    }

    /// Throws `messageTooLarge` if the peer would refuse `message` (as its latest HELLO said):
    /// refused here, it can never wedge the peer's outbox.
    func checkFits(_ message: DataMessage, to peerID: UUID) throws {
        try deliveries[peerID]?.checkFits(
            message, localLimits: (configuration.limits.maximumFrameLength, configuration.limits.maximumMessageLength))
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
        while let (batch, actions) = deliveries[peerID]?.nextBatch(for: link) {
            perform(actions, for: peerID)
            guard let channel = channel(for: link) else {
                deliveries[peerID]?.flushAbandoned(link)  // closed: the next link resends
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
        // The first on a link is the peer's admission of it: delivery moves onto it, and the
        // peer joins.
        admitted(id)
        guard deliveries[peerID] != nil else { return }
        // In place: a copy of the state would copy its whole outbox.
        let actions = deliveries[peerID]!.acknowledged(through: sequence, partial: partial, on: id)
        perform(actions, for: peerID)
    }

    /// Carries out what a peer's delivery asks for.
    func perform(_ actions: [PeerDeliveryStateMachine.Action], for peerID: UUID) {
        for action in actions {
            switch action {
            case .flush(let link):
                // Written by a task of its own: the link's reader must never wait on the link's
                // writer, or both ends can stall, each blocked writing while neither reads.
                work.yield(.flush(peerID, link))
            case .wakeSenders:
                senders.wake(peerID)
            case .unreliableLost(let typeNames):
                report(dropped: typeNames, reason: .linkLost)
            case .dropped(let typeNames):
                logger.notice("queued messages dropped: the peer came back taking smaller messages than they need", metadata: [
                    "multipeer.peer.id": "\(peerID)", "multipeer.dropped": "\(typeNames.count)"])
                report(dropped: typeNames, reason: .tooLargeForPeer)
            }
        }
    }

    /// Reports messages dropped unsent (their type names, one entry each): per name, a metric and an event.
    private func report(dropped typeNames: [String], reason: MessageDropReason) {
        for (typeName, count) in Dictionary(typeNames.map { ($0, 1) }, uniquingKeysWith: +).sorted(by: { $0.key < $1.key }) {
            metrics.dropped(reason: reason, count: count)
            subscriptions.emit(.messagesDropped(typeName: typeName, count: count, reason: reason))
        }
    }

    /// Waits until the peer acknowledged the message with this ticket: as long as the peer is
    /// active, and at most `Limits.sendTimeout` of its absence (then throws `peerAway`; the
    /// message stays queued). A sender is woken with those waiting for room, and looks again.
    func waitForAcknowledgement(of ticket: UInt64, by peerID: UUID) async throws {
        guard let id = deliveries[peerID]?.waitForAcknowledgement(of: ticket) else { return }
        while true {
            guard lifecycle != .stopped else {
                throw MultipeerError(.sessionState, "the session stopped before the peer acknowledged the message")
            }
            // Before looking: a wake between the look and the wait (off the actor) is not missed.
            let wakes = senders.wakes(for: peerID)
            switch deliveries[peerID]!.acknowledgement(for: id, now: .now) {
            case .acknowledged:
                return
            case .failed(let error):
                throw error
            case .wait(let deadline):
                await senders.wait(for: peerID, after: wakes, until: deadline)
                if Task.isCancelled {
                    deliveries[peerID]?.cancelWait(id)
                    throw CancellationError()
                }
            }
        }
    }

    /// Where delivery to `peerID` stands, in one line (for benchmarks and tests that stall).
    package func deliverySummary(for peerID: UUID) -> String {
        deliveries[peerID]?.summary ?? "never met"
    }

    /// Unacknowledged reliable messages for `peerID` (for tests).
    package func outboxCount(for peerID: UUID) -> Int {
        deliveries[peerID]?.outbox?.count ?? 0
    }

    /// The session stopped: nobody waits for room or acknowledgements any more.
    func releaseWaiters() {
        lifecycle = .stopped
        senders.wakeAll()
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
    /// The numbering it names is that incarnation's; a later one could not tell which message
    /// it was, so it is not told (and that is logged).
    func reject(_ rejection: Rejection, from peer: Peer) {
        metrics.rejected(direction: "in")
        guard let link = joinedLink(of: peer.id), link.hello.incarnation == peer.incarnation, let channel = channel(for: link.id) else {
            logger.notice("a message that did not decode here could not be reported to its sender: that incarnation of it is not active", metadata: [
                "multipeer.peer.id": "\(peer.id)", "multipeer.type": "\(rejection.typeName)", "multipeer.sequence": "\(rejection.sequence)"])
            return
        }
        channel.writeAndFlush(LinkMessage.reject(rejection), promise: nil)
    }

    /// The peer says a reliable message this side sent it, numbered `rejection.sequence`, did
    /// not decode there: reported as an event. Ignored (as an ACK would be) on a link that is
    /// not the peer's kept one, or for a number not sent yet in the current numbering.
    func rejected(_ rejection: Rejection, by peerID: UUID, on id: LinkID) {
        guard let link = joinedLink(of: peerID), link.id == id, deliveries[peerID]?.outbox?.hasWritten(rejection.sequence) == true else {
            logger.debug("REJECT ignored: not on the peer's link, or for a message not sent", metadata: [
                "multipeer.peer.id": "\(peerID)", "multipeer.sequence": "\(rejection.sequence)"])
            return
        }
        logger.notice("a message sent did not decode in the peer's application", metadata: [
            "multipeer.peer.id": "\(peerID)", "multipeer.type": "\(rejection.typeName)",
            "multipeer.sequence": "\(rejection.sequence)", "multipeer.reason": "\(rejection.reason)"])
        metrics.rejected(direction: "out")
        subscriptions.emit(.messageRejected(by: Peer(link.hello), typeName: rejection.typeName, sequence: rejection.sequence, reason: rejection.reason))
    }
}
