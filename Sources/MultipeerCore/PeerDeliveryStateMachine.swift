package import NIOCore

package import struct Foundation.UUID

/// Delivery towards one peer, without I/O: its outbox across links, the unreliable messages
/// waiting for its link now, the link it is reached on and whether that link has said where to
/// resume, the flush under way, how long the peer has been away, and who waits for what. The
/// session keeps one per peer it has met; the receiving half (``ReceiveWindow``) lives with each
/// link, on its event loop.
///
/// One flush per link writes both: reliable messages once the link has said where to resume,
/// unreliable ones from the start, in the same batches. So every message, of either kind, costs
/// the link's event loop a share of one task a batch.
///
/// Events: a link up or down, a message to enqueue, an acknowledgement (the first on a link is
/// its resume point), a flush asking for its next batch, a sender waiting for an
/// acknowledgement, the peer forgotten. Actions: start a flush on a link, wake the senders
/// waiting (for room, or for an acknowledgement: each looks again), report messages dropped.
/// Time is an input (`now`).
package struct PeerDeliveryStateMachine: Sendable {
    package enum Action: Equatable, Sendable {
        /// Tell this link's writer that messages wait for it (the unreliable messages, the
        /// outbox): it takes them in batches (``nextBatch(for:)``) until the flush is done.
        case flush(LinkID)
        /// Senders waiting for room in the outbox, or for an acknowledgement, may look again
        /// (``acknowledgement(for:now:)``).
        case wakeSenders
        /// Queued messages the peer no longer takes (it came back with a smaller frame or message
        /// limit, or reading fewer types) were dropped: report them (their type names, one entry
        /// each), and why. Their acknowledgement waits fail with the error ``checkFits(_:localLimits:)`` throws.
        case dropped(typeNames: [String], Unfit)
        /// Unreliable messages waiting for a link that went were dropped unwritten: report them
        /// (their type names, one entry each).
        case unreliableLost(typeNames: [String])
    }

    /// Why the peer would refuse a message (``checkFits(_:localLimits:)``).
    package enum Unfit: Equatable, Sendable {
        /// Larger than the messages (or, without fragments, the frames) the peer takes.
        case tooLarge
        /// Of a type the peer's application does not read (it announced the types it reads).
        case notRead
    }

    /// Names one sender waiting for an acknowledgement.
    package struct WaiterID: Hashable, Sendable {
        package var rawValue: UInt64
    }

    /// Where a sender waiting for an acknowledgement stands.
    package enum AcknowledgementWait: Equatable, Sendable {
        /// The peer acknowledged the message: its application has it.
        case acknowledged
        /// Not yet: look again after ``Action/wakeSenders``, or at the deadline if there is one
        /// (the peer is away, and a sender waits for at most the send timeout of its absence).
        case wait(until: ContinuousClock.Instant?)
        /// It never will be: this error says why (the wait is over).
        case failed(MultipeerError)
    }

    /// A sender waiting for the acknowledgement of the message with `ticket`.
    private struct Waiter {
        var ticket: UInt64
        /// Why the acknowledgement will never come, once that is known.
        var failure: MultipeerError?
    }

    /// What becomes of a message offered to the outbox.
    package enum Enqueued: Equatable, Sendable {
        /// Kept, under this ticket (``OutboxStateMachine/latestTicket``; 0 for an unreliable
        /// message, which nobody waits to see acknowledged).
        case queued(ticket: UInt64, [Action])
        /// No room: wait for ``Action/wakeSenders`` (or until the deadline, if there is one),
        /// then offer it again.
        case wait(until: ContinuousClock.Instant?)
        /// Not taken: this error says why.
        case refused(MultipeerError)
    }

    /// How the session wants a full outbox handled.
    package struct Policy: Sendable {
        package var limits: BufferLimits
        /// What the unreliable messages waiting for the link may hold.
        package var unreliableLimits: BufferLimits
        /// Refuse reliable messages with `outboxFull` instead of waiting.
        package var failWhenFull: Bool
        /// How long of the peer's absence a sender waits for room.
        package var sendTimeout: Duration

        package init(limits: BufferLimits, unreliableLimits: BufferLimits, failWhenFull: Bool, sendTimeout: Duration) {
            self.limits = limits
            self.unreliableLimits = unreliableLimits
            self.failWhenFull = failWhenFull
            self.sendTimeout = sendTimeout
        }
    }

    /// Where the peer stands with this side. Each case carries what holds only in it; the
    /// peer's terms (``frameLimit``, ``messageLimit``, ``reads``) hold while it is active or away.
    package enum Presence: Equatable, Sendable {
        /// Not active in this session yet: reliable messages are refused.
        case unmet
        /// Active on link `id`, whose HELLO named `incarnation`; `resumed` once the link's first
        /// ACK said where to resume (the outbox flows on it from then).
        case active(LinkID, incarnation: UInt64, resumed: Bool)
        /// Left at `since`: what is queued waits for its return, a sender at most the send timeout.
        case away(since: ContinuousClock.Instant)
        /// The application forgot it (``forget()``): not sent to until it joins again.
        /// `gaveMessages`: it had an outbox, so a new one numbers from the peer's resume point.
        case forgotten(gaveMessages: Bool)
    }

    package let peerID: UUID
    private let policy: Policy
    /// Where the peer stands.
    package private(set) var presence = Presence.unmet
    /// Nil until the first message (a peer only met costs nothing), and after ``forget(now:)``.
    package private(set) var outbox: OutboxStateMachine?
    /// Unreliable messages for the current link, not written yet.
    package private(set) var unreliable: UnreliableQueue
    /// The link a flush is writing to: one at a time per link, so DATA goes out in order.
    private var flushingLink: LinkID?
    /// The largest frame the peer takes, as its latest HELLO said.
    package private(set) var frameLimit: Int?
    /// The largest message the peer takes in fragments, as its latest HELLO said; nil if it
    /// takes no fragments (then a message must fit one frame).
    package private(set) var messageLimit: Int?
    /// The message types the peer reads, as its latest HELLO or TYPES said.
    package private(set) var reads = MessageTypesRead.every
    /// The type names a broadcast skipped since the peer's link came up or went, with why (the
    /// error's code), each reported once.
    private var skipsReported: Set<Skip> = []
    private var waiters: [WaiterID: Waiter] = [:]
    private var nextWaiter: UInt64 = 1

    package init(peerID: UUID, policy: Policy) {
        self.peerID = peerID
        self.policy = policy
        unreliable = UnreliableQueue(limits: policy.unreliableLimits)
    }

    /// The link the peer is active on, and the incarnation its HELLO named.
    private var link: (id: LinkID, incarnation: UInt64)? {
        if case .active(let id, let incarnation, _) = presence { (id, incarnation) } else { nil }
    }

    /// Whether the peer is active now.
    package var isActive: Bool {
        if case .active = presence { true } else { false }
    }

    /// Whether the peer has been active in this session (and not forgotten since): reliable
    /// messages go only to such a peer.
    package var met: Bool {
        switch presence {
        case .active, .away: true
        case .unmet, .forgotten: false
        }
    }

    /// Where delivery stands, in one line: for a benchmark or test that stalls to say why.
    package var summary: String {
        let presence =
            switch presence {
            case .unmet: "not met"
            case .active(let id, let incarnation, let resumed):
                "\(id) (incarnation \(incarnation)), \(resumed ? "resumed" : "no resume point")"
            case .away: "away"
            case .forgotten: "forgotten"
            }
        let flushing = flushingLink.map { "flushing \($0)" } ?? "no flush"
        return
            "\(presence), \(flushing), \(outbox?.count ?? 0) messages in the outbox, \(unreliable.count) unreliable waiting"
    }

    // MARK: Links

    /// The peer is active on `id` now (its HELLO named `incarnation`, `frameLimit` and, if it
    /// takes fragments, `messageLimit`; the link said the peer `reads` those message types).
    package mutating func linkUp(
        _ id: LinkID,
        incarnation: UInt64,
        frameLimit: Int,
        messageLimit: Int? = nil,
        reads: MessageTypesRead = .every
    ) {
        if case .forgotten(gaveMessages: true) = presence {
            // A forgotten peer's resume point is kept even with nothing to send: the next
            // message numbers from it.
            outbox = OutboxStateMachine(limits: policy.limits, numberingFollowsReceiver: true)
        }
        presence = .active(id, incarnation: incarnation, resumed: false)
        self.frameLimit = frameLimit
        self.messageLimit = messageLimit
        self.reads = reads
        skipsReported = []
        outbox?.linkLost()  // everything unacknowledged goes again, once the link says where from
        unreliable.linkReplaced()
    }

    /// The peer left (its link `id` closed or was replaced; nil: whatever link it had).
    package mutating func linkDown(_ id: LinkID? = nil, now: ContinuousClock.Instant) -> [Action] {
        guard let current = link, id == nil || id == current.id else { return [] }
        presence = .away(since: now)
        skipsReported = []  // (what a broadcast skips while the peer is away is reported once more)
        outbox?.linkLost()
        // A wait for room in the outbox has a deadline from now on; one for the link fails.
        let lost = unreliable.removeAll()
        return lost.isEmpty ? [.wakeSenders] : [.wakeSenders, .unreliableLost(typeNames: lost)]
    }

    /// The peer's application reads the message types `reads` from now on (a TYPES frame on
    /// link `id`, which replaces what the link said before). Ignored on a link that is not the
    /// peer's. What the outbox holds goes as it is: a message the peer no longer reads is
    /// refused there, where its sender hears of it (REJECT).
    package mutating func peerReads(_ reads: MessageTypesRead, on id: LinkID) -> [Action] {
        guard link?.id == id else { return [] }
        self.reads = reads
        return [.wakeSenders]
    }

    /// The peer acknowledged everything through `sequence` on link `id`, except the message in
    /// fragments `partial` names, of which it has the first bytes. The first ACK on a link is its
    /// resume point: what the outbox holds after it goes again, from there (that message from
    /// where the peer stands). An ACK on a link that is no longer the peer's is ignored: it may
    /// number another incarnation's messages.
    package mutating func acknowledged(
        through sequence: UInt64,
        partial: PartialMessage? = nil,
        on id: LinkID
    ) -> [Action] {
        guard case .active(id, let incarnation, let resumed) = presence else { return [] }
        var actions: [Action] = []
        if !resumed {
            presence = .active(id, incarnation: incarnation, resumed: true)
            guard outbox != nil else { return [] }
            outbox!.linkLost()
            outbox!.receiver(incarnation: incarnation)
            outbox!.resumed(at: sequence, partial: partial)
            // Queued when the peer took larger frames or messages, or read other types: never
            // sent, or it would refuse them after every redial.
            let (reads, frameLimit, messageLimit) = (reads, frameLimit, messageLimit)
            let removed = outbox!.removeUnfit {
                Self.unfit($0, reads: reads, frameLimit: frameLimit, messageLimit: messageLimit) == nil
            }
            for unfit in [Unfit.notRead, .tooLarge] {
                let these = removed.filter {
                    Self.unfit($0.message, reads: reads, frameLimit: frameLimit, messageLimit: messageLimit) == unfit
                }
                guard !these.isEmpty else { continue }
                let tickets = Set(these.map(\.ticket))
                for (id, waiter) in waiters where tickets.contains(waiter.ticket) {
                    waiters[id]!.failure = droppedFromOutbox(unfit)
                }
                actions.append(.dropped(typeNames: these.map(\.message.typeName), unfit))
            }
            if let flush = startFlush() { actions.append(flush) }
        } else {
            outbox?.acknowledge(through: sequence, except: partial)
        }
        actions.append(.wakeSenders)
        return actions
    }

    // MARK: Sending

    /// Offers a message to the outbox (with the trace context it was sent in, if any).
    package mutating func enqueue(
        typeName: String,
        payload: ByteBuffer,
        context: TraceContext? = nil,
        now: ContinuousClock.Instant
    ) -> Enqueued {
        let since: ContinuousClock.Instant?
        switch presence {
        case .active: since = nil
        case .away(let away): since = away
        case .unmet, .forgotten:
            return .refused(
                MultipeerError(
                    .peerNotActive,
                    presence != .unmet
                        ? "peer \(peerID) was forgotten (forget(peer:)); it can be sent to again once it joins again"
                        : "peer \(peerID) has not been active in this session: reliable messages go only to peers this session has met"
                )
            )
        }
        // Mutated in place (`outbox!`): a copy taken out and put back would copy every message
        // the outbox holds, on every send.
        if outbox == nil { outbox = newOutbox() }
        if outbox!.hasRoom(for: payload.readableBytes) {
            do {
                _ = try outbox!.enqueue(typeName: typeName, payload: payload, context: context)
            } catch {
                return .refused(error as? MultipeerError ?? MultipeerError(.invalidArgument, "\(error)"))
            }
            return .queued(ticket: outbox!.latestTicket, startFlush().map { [$0] } ?? [])
        }
        let held =
            "its outbox holds \(outbox!.count) unacknowledged messages (\(outbox!.bytes) bytes); its limit is \(policy.limits.maximumCount) messages, \(policy.limits.maximumBytes) bytes (Limits.outbox)"
        if policy.failWhenFull {
            return .refused(
                MultipeerError(.outboxFull, "peer \(peerID) has not acknowledged enough to take this message: \(held)")
            )
        }
        guard let awaySince = since else { return .wait(until: nil) }  // active: as long as it reads, however slowly
        let deadline = awaySince + policy.sendTimeout
        guard now < deadline else {
            let away = String(format: "%.1f s", (now - awaySince).seconds)
            return .refused(
                MultipeerError(
                    .peerAway,
                    "peer \(peerID) left \(away) ago and \(held): the send gave up after Limits.sendTimeout (\(policy.sendTimeout)). What is queued goes if the peer comes back; forget(peer:) drops it"
                )
            )
        }
        return .wait(until: deadline)
    }

    /// Offers an unreliable message for the link the peer is active on now: refused if it has
    /// none, kept if there is room (``Policy/unreliableLimits``), else to wait for
    /// ``Action/wakeSenders`` (written messages make room; a link that goes refuses it).
    package mutating func enqueueUnreliable(_ message: DataMessage) -> Enqueued {
        guard link != nil else {
            return .refused(
                MultipeerError(.peerNotActive, "peer \(peerID) is not active: it has no authenticated link now")
            )
        }
        guard unreliable.hasRoom(for: message.payload.readableBytes) else { return .wait(until: nil) }
        unreliable.enqueue(message)
        return .queued(ticket: 0, startFlush().map { [$0] } ?? [])
    }

    /// Whether an unreliable message of `bytes` fits now, for a peer active now.
    package func hasUnreliableRoom(for bytes: Int) -> Bool {
        isActive && unreliable.hasRoom(for: bytes)
    }

    /// Whether a message of `bytes` fits the outbox now (a peer active now gets one if it has none).
    package func hasRoom(for bytes: Int) -> Bool {
        outbox?.hasRoom(for: bytes) ?? isActive
    }

    /// Throws if the peer would refuse `message`, as its latest HELLO (or TYPES) said:
    /// `messageTypeNotRead` for a type its application does not read; `messageTooLarge` for a
    /// message larger than it takes in fragments, or, from a peer that takes no fragments, a
    /// frame larger than it takes. `localLimits` are this side's, for the error.
    package func checkFits(_ message: DataMessage, localLimits: (frame: Int, message: Int)) throws(MultipeerError) {
        switch Self.unfit(message, reads: reads, frameLimit: frameLimit, messageLimit: messageLimit) {
        case nil: return
        case .notRead: throw notRead(message.typeName)
        case .tooLarge: break
        }
        if let messageLimit {
            throw MultipeerError(
                .messageTooLarge,
                "a \(message.typeName) encodes to \(message.payload.readableBytes) bytes; peer \(peerID) takes messages of at most \(messageLimit) bytes (its Limits.maximumMessageLength; this side's is \(localLimits.message)). The receiver must raise its limit to take it"
            )
        }
        throw MultipeerError(
            .messageTooLarge,
            "a \(message.typeName) encodes to a \(message.plainFrameLength)-byte frame; peer \(peerID) takes frames of at most \(frameLimit ?? 0) bytes (its Limits.maximumFrameLength; this side's is \(localLimits.frame)) and no fragments (an earlier release). Both sides must raise the limit to send it"
        )
    }

    /// Why the peer would refuse `message`, if it would (``checkFits(_:localLimits:)``).
    private static func unfit(
        _ message: DataMessage,
        reads: MessageTypesRead,
        frameLimit: Int?,
        messageLimit: Int?
    ) -> Unfit? {
        if !reads.contains(message.typeName) { return .notRead }
        if let messageLimit { return message.payload.readableBytes <= messageLimit ? nil : .tooLarge }
        // (A peer that takes no fragments is of a release before trace contexts: it gets DATA.)
        return frameLimit.map { message.plainFrameLength <= $0 } ?? true ? nil : .tooLarge
    }

    /// Why a message of `typeName` is refused: the peer said which types it reads.
    private func notRead(_ typeName: String) -> MultipeerError {
        switch reads {
        case .only:
            MultipeerError(
                .messageTypeNotRead,
                "peer \(peerID) does not read messages of type \"\(typeName)\" (it reads: \(reads.description.prefix(400))): it runs a build of the application that does not know them. Send it what it reads, or upgrade it"
            )
        case .allBut:
            MultipeerError(
                .messageTypeNotRead,
                "peer \(peerID) does not read messages of type \"\(typeName)\": nothing there subscribes to the type, and it refused those beyond what it holds for a first subscriber. It is sent them again once its application subscribes to the type (a build that reads it)"
            )
        }
    }

    /// Whether a broadcast that skips the peer for a message of `typeName`, for `reason`, is
    /// the first to since the peer's link came up or went: the session reports each skipped
    /// type and reason once while the peer is active and once while it is away, not once per
    /// message.
    package mutating func firstSkip(of typeName: String, because reason: MultipeerError.Code) -> Bool {
        skipsReported.insert(Skip(typeName: typeName, reason: reason)).inserted
    }

    private struct Skip: Hashable {
        var typeName: String
        var reason: MultipeerError.Code
    }

    /// A flush's batch: its frames, what follows from handing them out, and whether more waits.
    package struct Batch: Equatable, Sendable {
        package var frames: [LinkMessage]
        package var actions: [Action]
        /// More waits to be written after these (the next fragment of a message, a message
        /// that waits for one of its type in fragments); if not, the flush is done, and a
        /// message enqueued from now on starts the next.
        package var more: Bool
    }

    /// The next frames a flush on `id` writes: the unreliable messages waiting, then the
    /// outbox's, once the link has said where to resume; and what follows from handing them out
    /// (senders waiting for room in the unreliable queue may look again). Nil when the flush is
    /// done (nothing left, or the link is no longer the peer's: a new link gets a flush of its own).
    package mutating func nextBatch(for id: LinkID) -> Batch? {
        guard link?.id == id, let frameLimit else {
            if flushingLink == id { flushingLink = nil }
            return nil
        }
        let fragments = messageLimit != nil
        let waiting = unreliable.count
        let resumed: Bool
        if case .active(_, _, true) = presence, outbox != nil { resumed = true } else { resumed = false }
        var frames = unreliable.nextFrames(frameLimit: frameLimit, fragments: fragments)
        if resumed { frames += outbox!.nextFrames(frameLimit: frameLimit, fragments: fragments) }
        let more = !unreliable.isEmpty || (resumed && outbox!.hasUnwritten)
        if !more, flushingLink == id { flushingLink = nil }
        guard !frames.isEmpty else { return nil }
        return Batch(frames: frames, actions: unreliable.count < waiting ? [.wakeSenders] : [], more: more)
    }

    /// The flush on `id` stopped before ``nextBatch(for:)`` said it was done (its link went).
    package mutating func flushAbandoned(_ id: LinkID) {
        if flushingLink == id { flushingLink = nil }
    }

    /// Waits for the acknowledgement of the message with `ticket`: nil if it came already,
    /// else an ID to look with (``acknowledgement(for:now:)``) until the wait is over.
    package mutating func waitForAcknowledgement(of ticket: UInt64) -> WaiterID? {
        if let outbox, outbox.hasLeft(ticket: ticket) { return nil }
        let id = WaiterID(rawValue: nextWaiter)
        nextWaiter += 1
        waiters[id] = Waiter(ticket: ticket)
        return id
    }

    /// Where the acknowledgement wait `id` stands at `now`; once acknowledged or failed, the wait
    /// is over and `id` is not asked about again. A sender waits as long as the peer is active,
    /// and for at most the send timeout of its absence (as for room in the outbox): then it
    /// fails with `peerAway`, and the message stays queued for the peer's return.
    package mutating func acknowledgement(for id: WaiterID, now: ContinuousClock.Instant) -> AcknowledgementWait {
        guard let waiter = waiters[id] else {
            preconditionFailure("acknowledgement wait \(id.rawValue) is over or was never made")
        }
        if let failure = waiter.failure {
            waiters[id] = nil
            return .failed(failure)
        }
        if let outbox, outbox.hasLeft(ticket: waiter.ticket) {
            waiters[id] = nil
            return .acknowledged
        }
        guard case .away(let awaySince) = presence else { return .wait(until: nil) }
        let deadline = awaySince + policy.sendTimeout
        guard now >= deadline else { return .wait(until: deadline) }
        waiters[id] = nil
        let away = String(format: "%.1f s", (now - awaySince).seconds)
        return .failed(
            MultipeerError(
                .peerAway,
                "peer \(peerID) left \(away) ago without acknowledging the message: the wait gave up after Limits.sendTimeout (\(policy.sendTimeout)). The message stays queued and goes if the peer comes back; forget(peer:) drops it"
            )
        )
    }

    /// The sender gave up waiting (its task was cancelled); the message stays queued.
    package mutating func cancelWait(_ id: WaiterID) {
        waiters[id] = nil
    }

    /// Why messages queued for the peer were dropped when it came back taking smaller ones, or
    /// reading other types.
    private func droppedFromOutbox(_ unfit: Unfit) -> MultipeerError {
        if unfit == .notRead {
            return MultipeerError(
                .messageTypeNotRead,
                "peer \(peerID) came back reading other message types (\(reads.description.prefix(400))), not this message's; it was dropped from the outbox"
            )
        }
        let limits =
            messageLimit.map { "messages of at most \($0) bytes (its Limits.maximumMessageLength)" }
            ?? "frames of at most \(frameLimit ?? 0) bytes (its Limits.maximumFrameLength) and no fragments"
        return MultipeerError(
            .messageTooLarge,
            "peer \(peerID) came back taking \(limits), smaller than this message needs; it was dropped from the outbox"
        )
    }

    /// Drops what is queued for a peer that has left for good; the acknowledgement waits fail
    /// (`peerAway`) when they look again. Until the peer joins again, it is not sent to.
    /// - Throws: `sessionState` if the peer is active.
    package mutating func forget() throws {
        guard !isActive else {
            throw MultipeerError(.sessionState, "peer \(peerID) is active: forget(peer:) is for a peer that has left")
        }
        switch presence {
        case .active: preconditionFailure("checked above")
        case .unmet, .forgotten(gaveMessages: true): break
        case .away, .forgotten(gaveMessages: false): presence = .forgotten(gaveMessages: outbox != nil)
        }
        outbox = nil
        frameLimit = nil
        messageLimit = nil
        reads = .every
        flushingLink = nil
        let forgotten = MultipeerError(
            .peerAway,
            "peer \(peerID) was forgotten (forget(peer:)) before it acknowledged the message"
        )
        for id in waiters.keys { waiters[id]!.failure = forgotten }
    }

    // MARK: Helpers

    private func newOutbox() -> OutboxStateMachine {
        var outbox = OutboxStateMachine(limits: policy.limits, numberingFollowsReceiver: false)
        if let link { outbox.receiver(incarnation: link.incarnation) }
        return outbox
    }

    /// A flush on the current link, unless one runs already or there is nothing it may write
    /// (reliable messages wait for the link's resume point).
    private mutating func startFlush() -> Action? {
        guard case .active(let id, _, let resumed) = presence, flushingLink != id, resumed || !unreliable.isEmpty
        else { return nil }
        flushingLink = id
        return .flush(id)
    }
}
