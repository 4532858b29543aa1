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
    /// its ticket in the peer's outbox (0 for an unreliable message). Offered to the peer's
    /// delivery from the caller's task (``PeerDelivery``), not through the actor.
    ///
    /// A reliable message waits while the outbox is full (or throws `outboxFull`): for as long
    /// as it takes while the peer is active, for at most `Limits.sendTimeout` of its absence
    /// while it is away (then throws `peerAway`). An unreliable one goes only to a peer active
    /// now, and waits while its unreliable queue is full (`Limits.unreliableQueue`).
    ///
    /// A peer this side keeps a link for, whose resume point has not been taken in yet, is
    /// about to join (``SessionStateMachine/isJoining(_:)``): a message its link brought may
    /// reach the application before the resume point reaches the actor. A message the peer
    /// would be refused for not being active waits for that admission (for at most
    /// `Limits.sendTimeout`), and is refused only if the link closes first (``JoinWait`` decides).
    ///
    /// Returns the ticket with the peer's delivery, where its acknowledgement is awaited. Throws
    /// `messageTooLarge`, checked with the offer, if the peer takes no message that large.
    nonisolated func enqueue(
        _ message: DataMessage,
        for peerID: UUID,
        delivery: Delivery = .reliable
    ) async throws -> (ticket: UInt64, delivery: PeerDelivery) {
        var join = JoinWait(patience: configuration.limits.sendTimeout)
        // A peer's delivery, once made, is its delivery for the session's life.
        guard let peer = deliveries[peerID] else {
            throw deliveries.refusal(of: message, reliably: delivery == .reliable, for: peerID)
        }
        let localLimits = (configuration.limits.maximumFrameLength, configuration.limits.maximumMessageLength)
        while true {
            switch peer.offer(message, reliably: delivery == .reliable, localLimits: localLimits, now: clock.now) {
            case .queued(let ticket):
                return (ticket, peer)
            case .wait(let deadline, let wakes):
                await peer.wait(after: wakes, until: deadline)
                // A cancelled wait returns at once, every time: looking again would spin.
                try Task.checkCancellation()
            case .refused(let error, let wakes) where error.code == .peerNotActive:
                // Admitted since the look (a wake came), or joining: look again once it joins.
                switch join.refused(joining: await isJoining(peerID), woken: peer.wakes != wakes, now: clock.now) {
                case .refuse:
                    throw error
                case .wait(let deadline):
                    await peer.wait(after: wakes, until: deadline)
                    try Task.checkCancellation()
                }
            case .refused(let error, _):
                throw error
            }
        }
    }

    private func isJoining(_ peerID: UUID) -> Bool {
        core.isJoining(peerID)
    }

    /// Drops what is queued for a peer that has left for good: its outbox (the messages it never
    /// acknowledged are not sent), and its place among the peers reliable messages and
    /// broadcasts go to, until it joins again. A send waiting for room in its outbox, or for its
    /// acknowledgement, throws `peerAway`.
    ///
    /// - Throws: `sessionState` if the peer is active now: forget a peer only once it has left.
    public func forget(peer peerID: UUID) throws {
        try deliveries[peerID]?.forget()
    }

    /// The peer's first ACK on link `id`, its resume point: the peer admitted the link. If this
    /// side keeps it, the peer's delivery moves onto it from that point, and the link's
    /// DeliveryHandler takes its later ACKs (``DeliveryBound``).
    func admitted(_ id: LinkID, by peerID: UUID, through sequence: UInt64, partial: PartialMessage?) {
        perform(core.admitted(id, now: clock.now))
        guard let delivery = deliveries[peerID], delivery.isBound(to: id), let channel = running?.links[id]?.channel
        else { return }
        tell(dropped: delivery.acknowledged(through: sequence, partial: partial, on: id), for: peerID)
        channel.triggerUserOutboundEvent(DeliveryBound(delivery: delivery, link: id), promise: nil)
    }

    /// The peer is active on `link`: its delivery holds it from now on (the one record of it),
    /// and its files and streams go on it.
    func bind(_ link: LinkHandle, reads: MessageTypesRead) {
        deliveries.bind(link, reads: reads)
        tellFeatures(.up(link))
    }

    /// The peer's link `id` went (nil: whatever link it had): if it was the peer's, its files
    /// and streams wait for the next.
    func unbind(_ peerID: UUID, link id: LinkID?) {
        let (unbound, dropped) = deliveries.unbind(peerID, link: id, now: clock.now)
        tell(dropped: dropped, for: peerID)
        guard let unbound else { return }
        tellFeatures(.down(unbound))
    }

    /// A peer's link came or went, as the features hear it.
    enum LinkChange: Sendable {
        case up(LinkHandle)
        case down(LinkHandle)
    }

    /// Tells the features a link carries (``PeerLinkFeature``) that the peer's link came or
    /// went: on the link's event loop, after what the session queued there before (so before
    /// the frames it lets through after the join, ``Action/admitMessages(_:)``), at once if
    /// this is the loop.
    func tellFeatures(_ change: LinkChange) {
        let features: [any PeerLinkFeature] = [inbox.resources, inbox.streams]
        let tell: @Sendable () -> Void = {
            for feature in features {
                switch change {
                case .up(let link): feature.linkUp(link)
                case .down(let link): feature.linkDown(link)
                }
            }
        }
        let link =
            switch change {
            case .up(let link), .down(let link): link
            }
        if link.channel.eventLoop.inEventLoop { tell() } else { link.channel.eventLoop.execute(tell) }
    }

    /// Reports what a peer's delivery dropped unsent.
    func tell(dropped actions: [PeerDeliveryStateMachine.Action], for peerID: UUID) {
        for action in actions {
            switch action {
            case .unreliableLost(let typeNames):
                report(dropped: typeNames, reason: .linkLost)
            case .dropped(let typeNames, let unfit):
                let why = unfit == .notRead ? "reading other message types" : "taking smaller messages than they need"
                logger.debug(
                    "queued messages dropped: the peer came back \(why)",
                    metadata: [
                        "multipeer.peer.id": "\(peerID)", "multipeer.dropped": "\(typeNames.count)",
                    ]
                )
                report(dropped: typeNames, reason: unfit == .notRead ? .notReadByPeer : .tooLargeForPeer)
            case .flush, .wakeSenders:
                break  // the delivery's own
            }
        }
    }

    /// Reports messages dropped unsent (their type names, one entry each): per name, a metric and an event.
    func report(dropped typeNames: [String], reason: MessageDropReason) {
        for (typeName, count) in Dictionary(typeNames.map { ($0, 1) }, uniquingKeysWith: +).sorted(by: {
            $0.key < $1.key
        }) {
            metrics.dropped(reason: reason, count: count)
            subscriptions.emit(.messagesDropped(typeName: typeName, count: count, reason: reason))
        }
    }

}

extension MultipeerSession {
    /// Tells every link's peer that takes TYPES the message types this session reads, where
    /// they changed since it was last told (an application's subscription extended them, or a
    /// type was refused): on the actor, as links are taken in, so a link taken in after its
    /// HELLO was made hears of what changed in between.
    func announceMessageTypes() {
        guard running != nil else { return }
        perform(core.announce(subscriptions.reads))
    }
}

extension MultipeerSession {
    /// A reliable message from `peer` did not decode here (the application was told): tells its
    /// sender with REJECT, on the peer's link if the incarnation that sent it is still there.
    func reject(_ rejection: Rejection, from peer: Peer) {
        metrics.rejected(inbound: true)
        perform(core.reject(rejection, from: peer.id, incarnation: peer.incarnation))
    }

    /// The peer says a reliable message this side sent it, numbered `rejection.sequence`, did
    /// not decode there: reported as an event (``SessionStateMachine/rejected(_:by:on:)``).
    func rejected(_ rejection: Rejection, by peerID: UUID, on id: LinkID) {
        perform(
            core.rejected(
                rejection,
                by: peerID,
                on: id,
                written: deliveries[peerID]?.hasWritten(rejection.sequence) ?? false
            )
        )
    }
}
