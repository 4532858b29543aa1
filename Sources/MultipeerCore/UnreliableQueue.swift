import NIOCore

/// The unreliable messages waiting for one link, bounded in count and bytes. Sans-IO: the
/// shell enqueues while ``hasRoom(for:)``, writes what ``nextFrames(frameLimit:fragments:)``
/// hands out (in the same batches as the outbox's, so a burst of messages costs the link's
/// event loop one task a batch, not one a message) and empties it when the link goes: what it
/// held is lost with the link, as unreliable messages may be.
///
/// A message larger than a fragment goes in fragments, one a batch, to a peer that takes them;
/// the messages after it pass between its fragments, up to one of the same type name or another
/// message in fragments, which waits for it to be complete: the receiver puts one unreliable
/// message together at a time per link (docs/PROTOCOL.md, 2b).
package struct UnreliableQueue: Sendable {
    package let limits: BufferLimits
    private var waiting = CircularBuffer<DataMessage>()
    /// The message going out in fragments, and how much of it was handed out.
    private var partial: (message: DataMessage, sent: Int)?
    /// The payload bytes of the messages not handed out whole yet (the one in fragments included).
    package private(set) var bytes = 0

    package init(limits: BufferLimits) {
        self.limits = limits
    }

    /// Messages not handed out whole yet (the one in fragments included).
    package var count: Int { waiting.count + (partial == nil ? 0 : 1) }

    package var isEmpty: Bool { count == 0 }

    /// Whether a message of `payloadBytes` fits now: within both bounds, or into an empty queue
    /// (which takes any message). So the queue holds at most its bounds, or one larger message.
    package func hasRoom(for payloadBytes: Int) -> Bool {
        isEmpty || (count < limits.maximumCount && bytes + payloadBytes <= limits.maximumBytes)
    }

    /// Keeps `message` (sequence 0) until it is handed out. Check ``hasRoom(for:)`` first.
    package mutating func enqueue(_ message: DataMessage) {
        precondition(message.sequence == 0, "an unreliable message has no sequence number")
        waiting.append(message)
        bytes += message.payload.readableBytes
    }

    /// What to write next, in order: the next fragment of the message going out in fragments,
    /// then the messages waiting, up to one that must wait for that message. They leave the
    /// queue. Empty when there is nothing to write.
    ///
    /// - Parameters:
    ///   - frameLimit: The largest frame the peer takes.
    ///   - fragments: Whether the peer takes fragments (else every message goes whole).
    package mutating func nextFrames(frameLimit: Int, fragments: Bool) -> [LinkMessage] {
        var frames: [LinkMessage] = []
        if let (message, sent) = partial {
            frames.append(.fragment(handOut(message, from: sent, frameLimit: frameLimit)))
        }
        while let message = waiting.first {
            if fragments, message.travelsInFragments(frameLimit: frameLimit) {
                guard partial == nil else { break }
                waiting.removeFirst()
                frames.append(.fragment(handOut(message, from: 0, frameLimit: frameLimit)))
            } else {
                guard partial?.message.typeName != message.typeName else { break }
                waiting.removeFirst()
                bytes -= message.payload.readableBytes
                frames.append(.data(message))
            }
        }
        return frames
    }

    /// The fragment of `message` from `offset`; keeps the message as ``partial`` until its last one.
    private mutating func handOut(_ message: DataMessage, from offset: Int, frameLimit: Int) -> Fragment {
        let fragment = message.fragment(from: offset, frameLimit: frameLimit)
        if fragment.isLast {
            partial = nil
            bytes -= message.payload.readableBytes
        } else {
            partial = (message, offset + fragment.bytes.readableBytes)
        }
        return fragment
    }

    /// The link was replaced by another to the same peer: the message in fragments begins
    /// again on it (the receiver puts it together per link); the rest goes on the new link.
    package mutating func linkReplaced() {
        guard let (message, _) = partial else { return }
        partial = nil
        waiting.prepend(message)
    }

    /// The link went: everything waiting is dropped. Returns the dropped messages' type names,
    /// one entry each (one in fragments included, whatever part of it was written).
    package mutating func removeAll() -> [String] {
        defer { self = UnreliableQueue(limits: limits) }
        return (partial.map { [$0.message.typeName] } ?? []) + waiting.map(\.typeName)
    }
}
