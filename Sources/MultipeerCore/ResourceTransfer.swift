package import NIOCore

package import struct Foundation.UUID

/// A file on offer from one peer to another: what a receiver needs to decide whether it wants
/// it, where to resume it, and how to check it when it is whole (RESOURCE_OFFER, docs/PROTOCOL.md 3c).
package struct ResourceOffer: Hashable, Sendable {
    /// Names this transfer, the same across links and restarts of either side (the sender makes
    /// it once per resource and peer).
    package var id: UUID
    /// The name the sender gave it, for the receiver's application and its file's name: 1 to 255
    /// bytes of UTF-8, no control character or `/`, not `.` or `..`.
    package var name: String
    /// Its length in bytes.
    package var length: UInt64
    /// The SHA-256 of its bytes: the receiver keeps it only if what it put together has this hash.
    package var sha256: [UInt8]
    /// The sender's application's own entries, with HELLO's limits (3): at most 32, each
    /// `key=value` at most 255 bytes, keys non-empty and without `=`.
    package var metadata: [String: String]

    /// An offer, checked against the limits a receiver enforces (`invalidArgument` otherwise).
    package init(id: UUID, name: String, length: UInt64, sha256: [UInt8], metadata: [String: String] = [:]) throws {
        guard (1...255).contains(name.utf8.count), name != ".", name != "..", !name.contains("/"),
            !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            throw MultipeerError(
                .invalidArgument,
                "a resource's name is 1 to 255 bytes of UTF-8 without a control character or '/', and not \".\" or \"..\"; \"\(name.debugDescription.dropFirst().dropLast())\" is not"
            )
        }
        guard length <= UInt64(Int64.max) else {
            throw MultipeerError(.invalidArgument, "a resource of \(length) bytes is longer than any file")
        }
        guard sha256.count == 32 else {
            throw MultipeerError(.invalidArgument, "a SHA-256 has 32 bytes, not \(sha256.count)")
        }
        try Hello.validate(metadata: metadata)
        self.id = id
        self.name = name
        self.length = length
        self.sha256 = sha256
        self.metadata = metadata
    }
}

/// The receiver of a resource holds its first `received` bytes, and the sender may send up to
/// byte `granted` (RESOURCE_WANT).
package struct ResourceWant: Hashable, Sendable {
    package var id: UUID
    package var received: UInt64
    package var granted: UInt64

    package init(id: UUID, received: UInt64, granted: UInt64) {
        self.id = id
        self.received = received
        self.granted = granted
    }
}

/// A resource's bytes from `offset` on (RESOURCE_CHUNK).
package struct ResourceChunk: Hashable, Sendable {
    package var id: UUID
    package var offset: UInt64
    package var bytes: ByteBuffer

    package init(id: UUID, offset: UInt64, bytes: ByteBuffer) {
        self.id = id
        self.offset = offset
        self.bytes = bytes
    }
}

/// A resource's transfer is over (RESOURCE_END): the reason, and a few words for logs (at most
/// 255 bytes of UTF-8).
package struct ResourceEnd: Hashable, Sendable {
    package var id: UUID
    package var reason: ResourceEndReason
    package var text: String

    package init(id: UUID, reason: ResourceEndReason, text: String) {
        self.id = id
        self.reason = reason
        self.text = text
    }
}

/// Why a transfer ended, as either side says it (RESOURCE_END). A reason this version does not
/// name is kept as its number, and ends the transfer like any failure.
package struct ResourceEndReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    package var rawValue: UInt16
    package init(rawValue: UInt16) { self.rawValue = rawValue }

    /// The receiver has the whole file, its hash checked, in place.
    package static let complete = ResourceEndReason(rawValue: 0)
    /// The side that says it cancelled the transfer.
    package static let cancelled = ResourceEndReason(rawValue: 1)
    /// What the receiver put together does not have the offered SHA-256 (its partial file is gone).
    package static let hashMismatch = ResourceEndReason(rawValue: 2)
    /// The receiver's disk is full.
    package static let diskFull = ResourceEndReason(rawValue: 3)
    /// The receiver cannot write where its application keeps resources.
    package static let unwritable = ResourceEndReason(rawValue: 4)
    /// The sender's file changed or went while it was being sent.
    package static let sourceChanged = ResourceEndReason(rawValue: 5)
    /// The receiver does not take resources (none is configured), or not this one.
    package static let refused = ResourceEndReason(rawValue: 6)

    package var description: String {
        switch self {
        case .complete: "complete"
        case .cancelled: "cancelled"
        case .hashMismatch: "hashMismatch"
        case .diskFull: "diskFull"
        case .unwritable: "unwritable"
        case .sourceChanged: "sourceChanged"
        case .refused: "refused"
        default: "reason \(rawValue)"
        }
    }
}

/// One resource's transfer on the sending side, without I/O: offered on each link to the peer,
/// sent in chunks as far as the receiver grants, ended by the receiver's word that it holds the
/// file whole (or by either side's cancel).
///
/// The receiver decides where to begin: its first WANT on a link says how many bytes it holds
/// already (after a reconnect, or a restart of either side, what it kept), and how far the sender
/// may send; later WANTs grant more as it writes. So what is sent is bounded by what the
/// receiver granted, and what the sender reads from disk at once by a chunk.
package struct ResourceSendStateMachine: Sendable {
    package enum State: Sendable, Equatable {
        /// No link to the peer: offered again when one comes.
        case awaitingLink
        /// Offered on the link; the receiver has not said where to begin.
        case offered
        /// Sending: `next` is the next byte to send, `granted` the end of what the receiver granted.
        case sending(next: UInt64, granted: UInt64)
        /// Every byte sent; the receiver has not said it holds them all.
        case awaitingEnd
        case ended(ResourceEndReason, bySender: Bool)
    }

    package enum Action: Sendable, Equatable {
        /// Send the offer on the link.
        case sendOffer(ResourceOffer)
        /// Tell the peer the transfer is over (an END saying why).
        case sendEnd(ResourceEndReason)
        /// The transfer is over: complete, or failed for this reason (said by the side named).
        case finish(ResourceEndReason, bySender: Bool)
        case none
    }

    package let offer: ResourceOffer
    package private(set) var state = State.awaitingLink
    /// What the receiver said it holds, the latest it said: the transfer's progress.
    package private(set) var received: UInt64 = 0

    package init(offer: ResourceOffer) {
        self.offer = offer
    }

    /// A link to the peer came up (or the transfer began on one): offer it.
    package mutating func linkUp() -> Action {
        switch state {
        case .awaitingLink, .offered, .sending, .awaitingEnd:
            state = .offered
            return .sendOffer(offer)
        case .ended:
            return .none
        }
    }

    /// The link went: what the receiver did not say it holds is sent again on the next one, from
    /// where it then says.
    package mutating func linkDown() {
        if case .ended = state { return }
        state = .awaitingLink
    }

    /// The receiver holds `received` bytes and grants up to `granted`. Throws
    /// `malformedMessage` for a WANT beyond the file or going back on what it said.
    package mutating func want(received: UInt64, granted: UInt64) throws(MultipeerError) -> Action {
        guard received <= offer.length, granted >= received else {
            throw MultipeerError(
                .malformedMessage,
                "the receiver of resource \(offer.id) said it holds \(received) bytes and grants up to \(granted), of \(offer.length)"
            )
        }
        switch state {
        case .awaitingLink, .ended:
            return .none  // (late, from a link gone or a transfer over)
        case .offered:
            self.received = received
            // The receiver has it all (a file kept from before): its END follows.
            state =
                received == offer.length ? .awaitingEnd : .sending(next: received, granted: min(granted, offer.length))
            return .none
        case .sending(let next, let before):
            self.received = max(self.received, received)
            state = .sending(next: next, granted: max(before, min(granted, offer.length)))
            return .none
        case .awaitingEnd:
            self.received = max(self.received, received)
            return .none
        }
    }

    /// The next chunk to read and send, of at most `maximum` bytes, if the receiver granted one
    /// (nil: wait for a WANT, or for the END).
    package mutating func nextChunk(maximum: UInt64) -> (offset: UInt64, count: UInt64)? {
        guard case .sending(let next, let granted) = state, next < granted else { return nil }
        let count = min(maximum, granted - next)
        let after = next + count
        state = after == offer.length ? .awaitingEnd : .sending(next: after, granted: granted)
        return (next, count)
    }

    /// The receiver ended the transfer.
    package mutating func ended(_ reason: ResourceEndReason) -> Action {
        if case .ended = state { return .none }
        if reason == .complete { received = offer.length }
        state = .ended(reason, bySender: false)
        return .finish(reason, bySender: false)
    }

    /// This side ends the transfer (its application cancelled it, or the file changed).
    package mutating func end(_ reason: ResourceEndReason) -> [Action] {
        if case .ended = state { return [] }
        let linked = state != .awaitingLink
        state = .ended(reason, bySender: true)
        return (linked ? [.sendEnd(reason)] : []) + [.finish(reason, bySender: true)]
    }
}

/// One resource's transfer on the receiving side, without I/O: from the offer (and what the
/// receiver already holds of it) through the chunks, written in order and granted a window at a
/// time, to the check of the whole against the offered hash.
///
/// At most ``window`` bytes are granted beyond what has been written, so what arrives and waits
/// to be written is bounded whatever the file's size. A chunk that does not follow on from the
/// last, or goes beyond what was granted or the file's length, is a protocol error.
package struct ResourceReceiveStateMachine: Sendable {
    package enum State: Sendable, Equatable {
        /// The offer arrived; the receiver has not said where to begin (it is looking at what it
        /// holds of the file). `linked`: the link the offer came on is still up.
        case preparing(linked: Bool)
        /// Receiving on a link: `next` is the next byte to arrive, `written` how many are
        /// written, `granted` how far the sender may send.
        case receiving(next: UInt64, written: UInt64, granted: UInt64)
        /// The link went; `written` bytes are kept for the next offer.
        case awaitingOffer(written: UInt64)
        /// Every byte written; the hash is being checked.
        case verifying
        case ended(ResourceEndReason, byReceiver: Bool)
    }

    package enum Action: Sendable, Equatable {
        /// Tell the sender where to begin and how far it may send (a WANT).
        case sendWant(received: UInt64, granted: UInt64)
        /// Write the chunk's bytes at this offset.
        case write(offset: UInt64, count: UInt64)
        /// Check the whole file against the offered SHA-256.
        case verify
        /// Tell the sender the transfer is over (an END saying why).
        case sendEnd(ResourceEndReason)
        /// The transfer is over: complete (the file is in place), or failed for this reason
        /// (said by the side named). `keepPartial`: what was written stays, to resume from.
        case finish(ResourceEndReason, byReceiver: Bool, keepPartial: Bool)
        case none
    }

    package let offer: ResourceOffer
    /// How many bytes may be granted beyond what is written.
    package let window: UInt64
    package private(set) var state = State.preparing(linked: true)

    package init(offer: ResourceOffer, window: UInt64) {
        precondition(window > 0)
        self.offer = offer
        self.window = window
    }

    /// The bytes arrived and not yet written to the file (at most ``window``).
    package var unwritten: UInt64 {
        if case .receiving(let next, let written, _) = state { next - written } else { 0 }
    }

    /// How many bytes are written: the transfer's progress.
    package var written: UInt64 {
        switch state {
        case .preparing: 0
        case .receiving(_, let written, _), .awaitingOffer(let written): written
        case .verifying: offer.length
        case .ended(let reason, _): reason == .complete ? offer.length : 0
        }
    }

    /// The receiver holds the first `held` bytes of the file already (0 for a new one; the
    /// length for a complete identical file, which is then checked at once).
    package mutating func prepared(holding held: UInt64) -> [Action] {
        guard case .preparing(let linked) = state else { return [] }
        guard linked else {
            state = .awaitingOffer(written: min(held, offer.length))
            return []
        }
        return begin(at: min(held, offer.length))
    }

    /// The sender offered the transfer again, on a new link: begin where the writing stands (or
    /// say again how it ended, if the END went with the last link).
    package mutating func offeredAgain() -> [Action] {
        switch state {
        case .awaitingOffer(let written), .receiving(_, let written, _):
            return begin(at: written)
        case .preparing:
            state = .preparing(linked: true)
            return []
        case .verifying:
            return []  // (its END goes on this link)
        case .ended(let reason, _):
            return [.sendEnd(reason)]  // (the END before went with the last link)
        }
    }

    private mutating func begin(at held: UInt64) -> [Action] {
        guard held < offer.length else {
            state = .verifying
            return [.sendWant(received: held, granted: held), .verify]
        }
        let granted = min(held + window, offer.length)
        state = .receiving(next: held, written: held, granted: granted)
        return [.sendWant(received: held, granted: granted)]
    }

    /// A chunk of `count` bytes at `offset` arrived. Throws `outOfSequence` for one that does not
    /// follow on, and `malformedMessage` for an empty one or one beyond what was granted.
    package mutating func chunk(offset: UInt64, count: UInt64) throws(MultipeerError) -> Action {
        // (a cancelled transfer's last chunks)
        guard case .receiving(let next, let written, let granted) = state else { return .none }
        guard offset == next else {
            throw MultipeerError(
                .outOfSequence,
                "a chunk of resource \(offer.id) at byte \(offset), where \(next) was next"
            )
        }
        guard count > 0, count <= granted - next else {
            throw MultipeerError(
                .malformedMessage,
                "a chunk of resource \(offer.id) of \(count) bytes at \(offset), beyond the \(granted) bytes granted"
            )
        }
        state = .receiving(next: next + count, written: written, granted: granted)
        return .write(offset: offset, count: count)
    }

    /// The bytes up to `through` are written (also after the link went, for chunks taken before).
    /// Grants more once half the window is written, and asks for the check once the file is whole.
    package mutating func wrote(through: UInt64) -> Action {
        if case .awaitingOffer(let before) = state, through > before {
            // A chunk taken before the link went was written after: the next offer resumes after it.
            if through == offer.length {
                state = .verifying
                return .verify
            }
            state = .awaitingOffer(written: through)
            return .none
        }
        guard case .receiving(let next, let before, let granted) = state, through > before, through <= next else {
            return .none
        }
        if through == offer.length {
            state = .verifying
            return .verify
        }
        // A grant every half window: one WANT per half window of chunks, not one per chunk.
        guard granted - through <= window / 2, granted < offer.length else {
            state = .receiving(next: next, written: through, granted: granted)
            return .none
        }
        let more = min(through + window, offer.length)
        state = .receiving(next: next, written: through, granted: more)
        return .sendWant(received: through, granted: more)
    }

    /// The check of the whole file ended: it has the offered hash (it is in place), or not.
    package mutating func verified(_ matches: Bool) -> [Action] {
        guard case .verifying = state else { return [] }
        let reason: ResourceEndReason = matches ? .complete : .hashMismatch
        state = .ended(reason, byReceiver: true)
        return [.sendEnd(reason), .finish(reason, byReceiver: true, keepPartial: false)]
    }

    /// The link went: what is written is kept for the sender's next offer.
    package mutating func linkDown() {
        switch state {
        case .receiving(_, let written, _): state = .awaitingOffer(written: written)
        case .preparing: state = .preparing(linked: false)
        case .awaitingOffer, .verifying, .ended: break
        }
    }

    /// The sender ended the transfer (cancelled it, or its file changed).
    package mutating func ended(_ reason: ResourceEndReason) -> Action {
        if case .ended = state { return .none }
        state = .ended(reason, byReceiver: false)
        return .finish(reason, byReceiver: false, keepPartial: false)
    }

    /// This side ends the transfer: its application cancelled it, or a write failed (disk full,
    /// unwritable), or it refuses the offer. A write that failed keeps what was written before it.
    package mutating func end(_ reason: ResourceEndReason) -> [Action] {
        if case .ended = state { return [] }
        let keep = reason == .diskFull || reason == .unwritable
        let linked: Bool
        switch state {
        case .awaitingOffer, .preparing(linked: false): linked = false
        default: linked = true
        }
        state = .ended(reason, byReceiver: true)
        return (linked ? [.sendEnd(reason)] : []) + [.finish(reason, byReceiver: true, keepPartial: keep)]
    }
}
