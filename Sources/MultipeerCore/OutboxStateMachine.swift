package import NIOCore

/// The reliable messages sent to one peer and not yet acknowledged, bounded in count and bytes.
/// Sans-IO: the shell enqueues, writes what ``nextFrames(frameLimit:fragments:)`` hands out,
/// and reports ACKs and reconnects; it holds senders back while ``hasRoom(for:)`` is false.
///
/// Sequence numbers count from 1 for each pair of sender and receiver incarnations and never
/// repeat within it, so the receiver delivers in order exactly once. When the receiver turns
/// out to be a new incarnation (it restarted), what it never acknowledged is numbered afresh.
///
/// A message larger than a fragment (``DataMessage/fragmentLength``) goes in fragments, one a
/// batch, to a peer that takes them; the messages after it go between its fragments, up to one
/// of the same type name or another message in fragments, which waits for it to be complete
/// (docs/PROTOCOL.md, 2b). Per message, the bookkeeping is O(1): a deque, no copies.
package struct OutboxStateMachine: Sendable {
    package typealias Limits = BufferLimits

    private struct Entry: Sendable {
        var message: DataMessage
        /// Names the message for the life of this outbox: unlike its sequence number it never
        /// changes when the pending messages are numbered afresh (a receiver that restarted, a
        /// resume point), so a sender waiting for a message's acknowledgement waits for its
        /// ticket. Tickets count from 1, in order.
        let ticket: UInt64
    }

    /// The message going out in fragments on the current link, and how much of it was handed out.
    private struct Partial: Sendable {
        var sequence: UInt64
        var typeName: String
        var sent: Int
    }

    package let limits: Limits
    private var pending = CircularBuffer<Entry>()
    /// How many of `pending` (from the front) were handed out on the current link: whole, or
    /// (``partial``) begun.
    private var written = 0
    private var partial: Partial?
    private var nextSequence: UInt64 = 1
    package private(set) var bytes = 0
    /// The bytes of the pending message larger than the byte bound, if there is one: the outbox
    /// keeps one such message beyond the bound, so a large message does not stop small ones.
    private var oversizeBytes = 0
    /// Every message up to here was acknowledged (except one in fragments still pending).
    package private(set) var acknowledged: UInt64 = 0
    /// The greatest sequence number handed out to be written in the current numbering: the
    /// receiver cannot have more, so an acknowledgement beyond it is ignored.
    private var highestWritten: UInt64 = 0
    private var nextTicket: UInt64 = 1
    /// The receiver incarnation the numbering belongs to, once a link has told it.
    package private(set) var receiverIncarnation: UInt64?
    /// Whether the numbering is provisional until the receiver says where it stands (its resume
    /// ACK): true for an outbox made after an earlier one was dropped (the peer was forgotten),
    /// whose receiver may have delivered any number of that one's messages.
    package private(set) var numberingFollowsReceiver: Bool

    /// - Parameter numberingFollowsReceiver: Number from the receiver's resume point, not from 1
    ///   (see ``numberingFollowsReceiver``).
    package init(
        limits: Limits = BufferLimits(maximumCount: 1024, maximumBytes: 8 << 20),
        numberingFollowsReceiver: Bool = false
    ) {
        self.limits = limits
        self.numberingFollowsReceiver = numberingFollowsReceiver
    }

    /// Whether the message numbered `sequence` in the current numbering was handed out to be
    /// written (so the receiver may have it).
    package func hasWritten(_ sequence: UInt64) -> Bool {
        sequence >= 1 && sequence <= highestWritten
    }

    /// Messages waiting for an acknowledgement.
    package var count: Int { pending.count }

    /// Whether ``nextFrames(frameLimit:fragments:)`` has more to hand out on the current link.
    package var hasUnwritten: Bool { partial != nil || written < pending.count }

    /// Whether a message of `payloadBytes` fits now: within the count and byte bounds, or, for a
    /// message larger than the byte bound, as the one such message (an empty outbox takes any
    /// message). So the outbox holds at most its bounds plus one larger message.
    package func hasRoom(for payloadBytes: Int) -> Bool {
        guard !pending.isEmpty else { return true }
        guard pending.count < limits.maximumCount else { return false }
        if payloadBytes > limits.maximumBytes { return oversizeBytes == 0 }
        return bytes - oversizeBytes + payloadBytes <= limits.maximumBytes
    }

    /// The ticket of the latest message enqueued (0 before any).
    package var latestTicket: UInt64 { nextTicket - 1 }

    /// Whether the message with `ticket` left the outbox (acknowledged, or dropped). A message
    /// acknowledged while an earlier one in fragments is still pending has left too.
    package func hasLeft(ticket: UInt64) -> Bool {
        guard ticket < nextTicket else { return false }
        // Tickets increase along the deque: a binary search.
        var low = 0
        var high = pending.count
        while low < high {
            let middle = (low + high) / 2
            let found = pending[pending.index(pending.startIndex, offsetBy: middle)].ticket
            if found == ticket { return false }
            if found < ticket { low = middle + 1 } else { high = middle }
        }
        return true
    }

    /// Numbers and keeps a message; returns it with its sequence number (its ticket is
    /// ``latestTicket`` from now).
    package mutating func enqueue(
        typeName: String,
        payload: ByteBuffer,
        context: TraceContext? = nil
    ) throws -> DataMessage {
        let message = try DataMessage(sequence: nextSequence, typeName: typeName, payload: payload, context: context)
        nextSequence += 1
        pending.append(Entry(message: message, ticket: nextTicket))
        nextTicket += 1
        account(message, +1)
        return message
    }

    /// What to write next on the current link, in order: the next fragment of the message going
    /// out in fragments, then the messages not handed out yet, up to one that must wait for that
    /// message (the same type name, or another that goes in fragments). They count as written.
    /// Empty when there is nothing to write.
    ///
    /// - Parameters:
    ///   - frameLimit: The largest frame the peer takes.
    ///   - fragments: Whether the peer takes fragments (else every message goes whole).
    package mutating func nextFrames(frameLimit: Int, fragments: Bool) -> [LinkMessage] {
        var frames: [LinkMessage] = []
        if let partial, let entry = pending.first(where: { $0.message.sequence == partial.sequence }) {
            frames.append(.fragment(handOut(entry.message, from: partial.sent, frameLimit: frameLimit)))
        }
        while written < pending.count {
            let message = pending[pending.index(pending.startIndex, offsetBy: written)].message
            if fragments, message.travelsInFragments(frameLimit: frameLimit) {
                guard partial == nil else { break }
                frames.append(.fragment(handOut(message, from: 0, frameLimit: frameLimit)))
            } else {
                guard partial?.typeName != message.typeName else { break }
                frames.append(.data(message))
            }
            written += 1
            highestWritten = max(highestWritten, message.sequence)
        }
        return frames
    }

    /// The fragment of `message` from `offset`; keeps track of the message until its last one.
    private mutating func handOut(_ message: DataMessage, from offset: Int, frameLimit: Int) -> Fragment {
        let fragment = message.fragment(from: offset, frameLimit: frameLimit)
        partial =
            fragment.isLast
            ? nil
            : Partial(
                sequence: message.sequence,
                typeName: message.typeName,
                sent: offset + fragment.bytes.readableBytes
            )
        return fragment
    }

    /// The peer acknowledged everything up to `sequence` except the message in fragments
    /// `partial` names; returns how many messages that freed. An acknowledgement of more than
    /// was ever written in this numbering is ignored: it is not the receiver's to give (a broken
    /// or hostile peer), and believing it would report as delivered messages that never left.
    @discardableResult
    package mutating func acknowledge(through sequence: UInt64, except partial: PartialMessage? = nil) -> Int {
        guard sequence >= acknowledged, sequence <= highestWritten else { return 0 }
        acknowledged = sequence
        var kept: Entry?
        var freed = 0
        while let first = pending.first, first.message.sequence <= sequence {
            let entry = pending.removeFirst()
            if entry.message.sequence == partial?.sequence {
                kept = entry
            } else {
                account(entry.message, -1)
                freed += 1
            }
        }
        if let kept { pending.prepend(kept) }
        written = max(0, written - freed)
        if let going = self.partial, going.sequence <= sequence, going.sequence != partial?.sequence {
            self.partial = nil  // the receiver has it whole: nothing more of it goes
        }
        return freed
    }

    /// A link to the receiver resumed, and its HELLO named this incarnation. A new incarnation
    /// knows nothing of the old numbering: what is pending is numbered from 1 again.
    package mutating func receiver(incarnation: UInt64) {
        defer { receiverIncarnation = incarnation }
        guard let current = receiverIncarnation, current != incarnation else { return }
        renumber(from: 1)
        acknowledged = 0
        highestWritten = 0
    }

    /// A link resumed and the receiver said (its first ACK) that it has everything through
    /// `sequence`, and the first bytes of the message in fragments `partial`, which then goes on
    /// from there. A provisional numbering (``numberingFollowsReceiver``) continues from
    /// `sequence`: what is pending is numbered from `sequence + 1`, so the receiver sees neither
    /// a gap nor a duplicate (and gives up the message it has a part of: this outbox never had
    /// it). Otherwise it is an acknowledgement like any other.
    package mutating func resumed(at sequence: UInt64, partial: PartialMessage? = nil) {
        guard numberingFollowsReceiver else {
            acknowledge(through: sequence, except: partial)
            // The message in fragments goes on where the receiver stands, before anything else.
            if let partial, let first = pending.first, first.message.sequence == partial.sequence,
                partial.received < first.message.payload.readableBytes
            {
                written = 1
                self.partial = Partial(
                    sequence: partial.sequence,
                    typeName: first.message.typeName,
                    sent: partial.received
                )
            }
            return
        }
        numberingFollowsReceiver = false
        renumber(from: sequence + 1)
        acknowledged = sequence
        highestWritten = sequence
    }

    /// Takes out the pending messages the receiver would refuse (`fits` false: it came back
    /// taking smaller frames or messages than when they were queued) and numbers the rest afresh
    /// after what was acknowledged, so the receiver sees no gap. Call it on a new receiver
    /// incarnation, before anything is written on the link. Returns the messages taken out, with
    /// their tickets.
    package mutating func removeUnfit(_ fits: (DataMessage) -> Bool) -> [(ticket: UInt64, message: DataMessage)] {
        guard pending.contains(where: { !fits($0.message) }) else { return [] }
        var removed: [(ticket: UInt64, message: DataMessage)] = []
        var kept = CircularBuffer<Entry>(initialCapacity: pending.count)
        for entry in pending {
            if fits(entry.message) {
                kept.append(entry)
            } else {
                removed.append((entry.ticket, entry.message))
                account(entry.message, -1)
            }
        }
        pending = kept
        renumber(from: acknowledged + 1)
        highestWritten = acknowledged
        return removed
    }

    /// The link is gone: everything unacknowledged goes again on the next one.
    package mutating func linkLost() {
        written = 0
        partial = nil
    }

    /// Numbers every pending message afresh from `first`, in order; none is written yet.
    private mutating func renumber(from first: UInt64) {
        var sequence = first
        for index in pending.indices {
            pending[index].message.sequence = sequence
            sequence += 1
        }
        nextSequence = first + UInt64(pending.count)
        written = 0
        partial = nil
    }

    private mutating func account(_ message: DataMessage, _ sign: Int) {
        let size = message.payload.readableBytes
        bytes += sign * size
        if size > limits.maximumBytes { oversizeBytes += sign * size }
    }
}

/// What one receiver has delivered from one sender, per sender incarnation: in order, exactly
/// once, duplicates (resent after a reconnect) dropped, and the one reliable message that comes
/// in fragments put together, across links (docs/PROTOCOL.md, 2b and 3b). Sans-IO.
package struct ReceiveWindow: Sendable {
    package enum Verdict: Equatable, Sendable {
        /// Deliver this message (the DATA received, or a message in fragments now complete).
        case deliver(DataMessage)
        /// A fragment was kept; its message is not complete yet.
        case pending
        /// Already delivered: drop it (and acknowledge again).
        case duplicate
        /// A message is missing before it: drop it; the sender resends from the gap.
        case gap
        /// The sender broke the protocol, as this error says: close the link.
        case invalid(MultipeerError)
    }

    /// The sender incarnation this window belongs to.
    package private(set) var incarnation: UInt64
    /// Every message up to here was delivered, except ``partial``'s.
    package private(set) var delivered: UInt64 = 0
    /// Delivered since the last acknowledgement was sent.
    package private(set) var unacknowledged = 0
    /// The reliable message arriving in fragments, begun and not complete.
    package private(set) var assembly: MessageAssembly?
    /// A link was adopted while a message was incomplete: the sender's first reliable frame on
    /// it continues that message, or the sender no longer has it (it forgot this receiver).
    private var awaitingContinuation = false

    package init(incarnation: UInt64) {
        self.incarnation = incarnation
    }

    /// The sender's link said HELLO with `incarnation`: a new incarnation starts over.
    package mutating func sender(incarnation: UInt64) {
        guard incarnation != self.incarnation else { return }
        self = ReceiveWindow(incarnation: incarnation)
    }

    /// The memory the incomplete message holds (``MessageAssembly/reservedBytes``).
    package var reservedBytes: Int { assembly?.reservedBytes ?? 0 }

    /// The memory `fragment` would make this window hold from now on: the message's length, if
    /// it begins (or begins again) a message that is not complete with it; else nothing.
    package func reservation(for fragment: Fragment) -> Int {
        guard fragment.offset == 0, !fragment.isLast, reservedBytes == 0 else { return 0 }
        if let assembly { return assembly.contains(fragment) ? fragment.length : 0 }
        return fragment.sequence == delivered + 1 ? fragment.length : 0
    }

    /// Gives up the bytes of the incomplete message, keeping its place: the next ACK says none
    /// arrived, and the sender sends it again from its beginning. Returns the bytes freed.
    @discardableResult
    package mutating func releasePartialBytes() -> Int {
        let freed = reservedBytes
        assembly?.releaseBytes()
        return freed
    }

    /// What to acknowledge: everything delivered, and how much of the incomplete message came.
    package var acknowledgement: (sequence: UInt64, partial: PartialMessage?) {
        (delivered, assembly?.partial)
    }

    /// A link of the sender was adopted: the resume point (``acknowledgement``) goes out on it.
    package mutating func linkAdopted() {
        awaitingContinuation = assembly != nil
    }

    /// A reliable DATA message arrived. Returns the verdict, and the type name of an incomplete
    /// message the sender gave up (see ``linkAdopted()``), which the application is told of.
    package mutating func receive(
        _ message: DataMessage,
        from peer: @autoclosure () -> String
    ) -> (Verdict, abandoned: String?) {
        let abandoned = continuation(message.sequence)
        if message.sequence <= delivered { return (.duplicate, abandoned) }
        guard message.sequence == delivered + 1 else { return (.gap, abandoned) }
        if let assembly, assembly.typeName == message.typeName {
            return (
                .invalid(
                    MultipeerError(
                        .outOfSequence,
                        "\(peer()) sent \(message.typeName) \(message.sequence) before the \(message.typeName) \(assembly.sequence) it is sending in fragments was complete: messages of one type go in order"
                    )
                ), abandoned
            )
        }
        delivered = message.sequence
        unacknowledged += 1
        return (.deliver(message), abandoned)
    }

    /// A reliable FRAGMENT arrived. A message larger than `limit` (this side's
    /// Limits.maximumMessageLength) is refused from its first fragment.
    package mutating func receive(_ fragment: Fragment, limit: Int, from peer: String) -> (Verdict, abandoned: String?)
    {
        let abandoned = continuation(fragment.sequence)
        do {
            if assembly?.contains(fragment) == true {
                guard let message = try assembly!.append(fragment, from: peer) else { return (.pending, abandoned) }
                assembly = nil
                unacknowledged += 1
                return (.deliver(message), abandoned)
            }
            if fragment.sequence <= delivered { return (.duplicate, abandoned) }
            guard fragment.sequence == delivered + 1 else { return (.gap, abandoned) }
            if let assembly {
                throw MultipeerError(
                    .outOfSequence,
                    "\(peer) began \(fragment.typeName) \(fragment.sequence) in fragments before \(assembly.typeName) \(assembly.sequence) was complete: one message at a time goes in fragments"
                )
            }
            let beginning = try MessageAssembly.begin(with: fragment, limit: limit, from: peer)
            delivered = fragment.sequence
            switch beginning {
            case .partial(let begun):
                assembly = begun
                return (.pending, abandoned)
            case .whole(let message):
                unacknowledged += 1
                return (.deliver(message), abandoned)
            }
        } catch {
            return (.invalid(error as? MultipeerError ?? MultipeerError(.malformedMessage, "\(error)")), abandoned)
        }
    }

    /// The first reliable frame on an adopted link: if it does not continue the incomplete
    /// message, the sender no longer has it, and it is given up; returns its type name.
    private mutating func continuation(_ sequence: UInt64) -> String? {
        guard awaitingContinuation else { return nil }
        awaitingContinuation = false
        guard let assembly, sequence != assembly.sequence else { return nil }
        self.assembly = nil
        return assembly.typeName
    }

    /// An ACK for everything delivered is being sent.
    package mutating func acknowledged() {
        unacknowledged = 0
    }
}
