package import NIOCore

/// The reliable messages sent to one peer and not yet acknowledged, bounded in count and bytes.
/// Sans-IO: the shell enqueues, writes what ``sendable()`` hands out, and reports ACKs and
/// reconnects; it holds senders back while ``hasRoom(for:)`` is false.
///
/// Sequence numbers count from 1 for each pair of sender and receiver incarnations and never
/// repeat within it, so the receiver delivers in order exactly once. When the receiver turns
/// out to be a new incarnation (it restarted), what it never acknowledged is numbered afresh.
package struct OutboxStateMachine: Sendable {
    package typealias Limits = BufferLimits

    package let limits: Limits
    private var pending: [DataMessage] = []
    /// How many of `pending` (from the front) were written on the current link.
    private var written = 0
    private var nextSequence: UInt64 = 1
    package private(set) var bytes = 0
    /// Everything up to here was acknowledged.
    package private(set) var acknowledged: UInt64 = 0
    /// The greatest sequence number handed out to be written in the current numbering: the
    /// receiver cannot have more, so an acknowledgement beyond it is ignored.
    private var highestWritten: UInt64 = 0
    /// The ticket of each pending message. A ticket names a message for the life of this
    /// outbox: unlike its sequence number it never changes when the pending messages are
    /// numbered afresh (a receiver that restarted, a resume point), so a sender waiting for a
    /// message's acknowledgement waits for its ticket. Tickets count from 1, in order.
    private var tickets: [UInt64] = []
    private var nextTicket: UInt64 = 1
    /// Every message whose ticket is at most this left the outbox (acknowledged, or dropped).
    package private(set) var acknowledgedTicket: UInt64 = 0
    /// The receiver incarnation the numbering belongs to, once a link has told it.
    package private(set) var receiverIncarnation: UInt64?
    /// Whether the numbering is provisional until the receiver says where it stands (its resume
    /// ACK): true for an outbox made after an earlier one was dropped (the peer was forgotten),
    /// whose receiver may have delivered any number of that one's messages.
    package private(set) var numberingFollowsReceiver: Bool

    /// - Parameter numberingFollowsReceiver: Number from the receiver's resume point, not from 1
    ///   (see ``numberingFollowsReceiver``).
    package init(limits: Limits = BufferLimits(maximumCount: 1024, maximumBytes: 8 << 20), numberingFollowsReceiver: Bool = false) {
        self.limits = limits
        self.numberingFollowsReceiver = numberingFollowsReceiver
    }

    /// Messages waiting for an acknowledgement.
    package var count: Int { pending.count }

    /// Whether a message of `payloadBytes` fits now. An empty outbox takes any one message, so a
    /// message larger than the byte bound still goes (alone).
    package func hasRoom(for payloadBytes: Int) -> Bool {
        pending.isEmpty || (pending.count < limits.maximumCount && bytes + payloadBytes <= limits.maximumBytes)
    }

    /// The ticket of the latest message enqueued (0 before any).
    package var latestTicket: UInt64 { nextTicket - 1 }

    /// Numbers and keeps a message; returns it with its sequence number (its ticket is
    /// ``latestTicket`` from now).
    package mutating func enqueue(typeName: String, payload: ByteBuffer) throws -> DataMessage {
        let message = try DataMessage(sequence: nextSequence, typeName: typeName, payload: payload)
        nextSequence += 1
        pending.append(message)
        tickets.append(nextTicket)
        nextTicket += 1
        bytes += payload.readableBytes
        return message
    }

    /// The messages not yet written on the current link, in order; they count as written now.
    package mutating func sendable() -> ArraySlice<DataMessage> {
        defer {
            written = pending.count
            if let last = pending.last { highestWritten = max(highestWritten, last.sequence) }
        }
        return pending[written...]
    }

    /// The peer acknowledged everything up to `sequence`; returns how many messages that freed.
    /// An acknowledgement of more than was ever written in this numbering is ignored: it is not
    /// the receiver's to give (a broken or hostile peer), and believing it would report as
    /// delivered messages that never left.
    @discardableResult
    package mutating func acknowledge(through sequence: UInt64) -> Int {
        guard sequence > acknowledged, sequence <= highestWritten else { return 0 }
        acknowledged = sequence
        let freed = pending.prefix { $0.sequence <= acknowledged }
        bytes -= freed.reduce(0) { $0 + $1.payload.readableBytes }
        pending.removeFirst(freed.count)
        if freed.count > 0 { acknowledgedTicket = tickets[freed.count - 1] }
        tickets.removeFirst(freed.count)
        written = max(0, written - freed.count)
        return freed.count
    }

    /// A link to the receiver resumed, and its HELLO named this incarnation. A new incarnation
    /// knows nothing of the old numbering: what is pending is numbered from 1 again.
    package mutating func receiver(incarnation: UInt64) {
        defer { receiverIncarnation = incarnation }
        guard let current = receiverIncarnation, current != incarnation else { return }
        pending = pending.enumerated().map { index, message in
            var renumbered = message
            renumbered.sequence = UInt64(index + 1)
            return renumbered
        }
        acknowledged = 0
        highestWritten = 0
        nextSequence = UInt64(pending.count + 1)
        written = 0
    }

    /// A link resumed and the receiver said (its first ACK) that it has everything through
    /// `sequence`. A provisional numbering (``numberingFollowsReceiver``) continues from there:
    /// what is pending is numbered from `sequence + 1`, so the receiver sees neither a gap nor a
    /// duplicate. Otherwise it is an acknowledgement like any other.
    package mutating func resumed(at sequence: UInt64) {
        guard numberingFollowsReceiver else {
            acknowledge(through: sequence)
            return
        }
        numberingFollowsReceiver = false
        pending = pending.enumerated().map { index, message in
            var renumbered = message
            renumbered.sequence = sequence + UInt64(index + 1)
            return renumbered
        }
        acknowledged = sequence
        highestWritten = sequence
        nextSequence = sequence + UInt64(pending.count + 1)
        written = 0
    }

    /// Takes out the pending messages whose frame is larger than `frameLimit` (a receiver that
    /// came back taking smaller frames than when they were queued) and numbers the rest afresh
    /// after what was acknowledged, so the receiver sees no gap. Call it before anything is
    /// written on the link (it starts writing over). Returns the messages taken out, with their tickets.
    package mutating func removeLarger(than frameLimit: Int) -> [(ticket: UInt64, message: DataMessage)] {
        guard pending.contains(where: { $0.frameLength > frameLimit }) else { return [] }
        var removed: [(ticket: UInt64, message: DataMessage)] = []
        var kept: [DataMessage] = []
        var keptTickets: [UInt64] = []
        for (message, ticket) in zip(pending, tickets) {
            if message.frameLength > frameLimit {
                removed.append((ticket, message))
                bytes -= message.payload.readableBytes
            } else {
                var renumbered = message
                renumbered.sequence = acknowledged + UInt64(kept.count + 1)
                kept.append(renumbered)
                keptTickets.append(ticket)
            }
        }
        pending = kept
        tickets = keptTickets
        highestWritten = acknowledged
        nextSequence = acknowledged + UInt64(kept.count + 1)
        written = 0
        return removed
    }

    /// The link is gone: everything unacknowledged goes again on the next one.
    package mutating func linkLost() {
        written = 0
    }
}

/// What one receiver has delivered from one sender, per sender incarnation: in order, exactly
/// once, duplicates (resent after a reconnect) dropped. Sans-IO.
package struct ReceiveWindow: Sendable, Equatable {
    package enum Verdict: Equatable, Sendable {
        /// Deliver the message to the application.
        case deliver
        /// Already delivered: drop it (and acknowledge again).
        case duplicate
        /// A message is missing before it: drop it; the sender resends from the gap.
        case gap
    }

    /// The sender incarnation this window belongs to.
    package private(set) var incarnation: UInt64
    /// Everything up to here was delivered.
    package private(set) var delivered: UInt64 = 0
    /// Delivered since the last acknowledgement was sent.
    package private(set) var unacknowledged = 0

    package init(incarnation: UInt64) {
        self.incarnation = incarnation
    }

    /// The sender's link said HELLO with `incarnation`: a new incarnation starts over.
    package mutating func sender(incarnation: UInt64) {
        guard incarnation != self.incarnation else { return }
        self = ReceiveWindow(incarnation: incarnation)
    }

    /// A reliable DATA message arrived.
    package mutating func receive(sequence: UInt64) -> Verdict {
        if sequence <= delivered { return .duplicate }
        guard sequence == delivered + 1 else { return .gap }
        delivered = sequence
        unacknowledged += 1
        return .deliver
    }

    /// An ACK for everything delivered is being sent.
    package mutating func acknowledged() {
        unacknowledged = 0
    }
}
