package import NIOCore

package import struct Foundation.UUID

/// A byte stream opened by the sender (STREAM_OPEN, docs/PROTOCOL.md 3d).
package struct StreamOpen: Hashable, Sendable {
    /// Names the stream, the same on every link for as long as it lasts.
    package var id: UUID
    /// The opener has had a STREAM_WANT of this stream from the peer before, on an earlier link:
    /// a peer that does not know it has lost it (it must not take it as a new stream).
    package var resuming: Bool
    /// The name the opener gave it: 1 to 255 bytes of UTF-8, no control character.
    package var name: String

    /// An open, checked against the limits a receiver enforces (`invalidArgument` otherwise).
    package init(id: UUID, resuming: Bool, name: String) throws(MultipeerError) {
        guard (1...255).contains(name.utf8.count),
            !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            throw MultipeerError(
                .invalidArgument,
                "a stream's name is 1 to 255 bytes of UTF-8 without a control character; \"\(name.debugDescription.dropFirst().dropLast())\" is not"
            )
        }
        self.id = id
        self.resuming = resuming
        self.name = name
    }
}

/// The reader of one direction of a stream holds its first `received` bytes (and its end, if
/// `endReceived`); the writer may send up to byte `granted` (STREAM_WANT).
package struct StreamWant: Hashable, Sendable {
    package var id: UUID
    package var received: UInt64
    package var granted: UInt64
    package var endReceived: Bool

    package init(id: UUID, received: UInt64, granted: UInt64, endReceived: Bool) {
        self.id = id
        self.received = received
        self.granted = granted
        self.endReceived = endReceived
    }
}

/// A stream's bytes in one direction from `offset` on; `end`: the writer writes nothing after
/// them (STREAM_DATA).
package struct StreamData: Hashable, Sendable {
    package var id: UUID
    package var offset: UInt64
    package var end: Bool
    package var bytes: ByteBuffer

    package init(id: UUID, offset: UInt64, end: Bool, bytes: ByteBuffer) {
        self.id = id
        self.offset = offset
        self.end = end
        self.bytes = bytes
    }

    /// A STREAM_DATA frame's value before its bytes: the stream UUID, the offset and the flags.
    package static let headerLength = 25
}

/// A stream ended, both ways, and why (STREAM_END); a few words for logs (at most 255 bytes).
package struct StreamEnd: Hashable, Sendable {
    package var id: UUID
    package var reason: StreamEndReason
    package var text: String

    package init(id: UUID, reason: StreamEndReason, text: String) {
        self.id = id
        self.reason = reason
        self.text = text
    }
}

/// Why a stream ended before both its directions finished (STREAM_END). A reason this version
/// does not name is kept as its number, and ends the stream like any failure.
package struct StreamEndReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    package var rawValue: UInt16
    package init(rawValue: UInt16) { self.rawValue = rawValue }

    /// The side that says it cancelled the stream.
    package static let cancelled = StreamEndReason(rawValue: 1)
    /// The side that says it does not take the stream (it takes none, or has too many).
    package static let refused = StreamEndReason(rawValue: 2)
    /// The side that says it does not know the stream (it restarted, or forgot it).
    package static let unknown = StreamEndReason(rawValue: 3)
    /// The side that says it is stopping.
    package static let closed = StreamEndReason(rawValue: 4)

    package var description: String {
        switch self {
        case .cancelled: "cancelled"
        case .refused: "refused"
        case .unknown: "unknown"
        case .closed: "closed"
        default: "reason \(rawValue)"
        }
    }
}

/// One byte stream between this side and a peer, both directions, without I/O.
///
/// Each direction is a sequence of bytes numbered from 0 and ended once. The writer keeps what
/// it wrote until the reader says it holds it (STREAM_WANT's `received`), and sends only up to
/// what the reader granted (`granted`), which the reader raises as its application reads: so
/// the writer's application waits when the reader's does not read (``writeCapacity``), and a
/// direction holds at most ``window`` bytes at each end. On every link the reader's first WANT
/// says where the writer goes on from, so a link that breaks loses and repeats nothing.
///
/// The shell reports links, frames, the application's writes and reads; it sends what
/// ``framesDue(chunkLimit:)`` returns, on the link, in order.
package struct ByteStreamStateMachine: Sendable {
    package enum Outcome: Sendable, Equatable {
        /// Both directions ended, and this side's end was acknowledged.
        case complete
        /// Ended by a STREAM_END (this side's when `byPeer` is false).
        case failed(StreamEndReason, byPeer: Bool, text: String)
    }

    /// What arrived for the application to read.
    package enum Read: Sendable, Equatable {
        case bytes(ByteBuffer)
        /// The peer ended its direction, and every byte of it was read.
        case end
        /// The stream failed, and every byte that arrived before was read.
        case failed(StreamEndReason, byPeer: Bool, text: String)
        /// Nothing yet.
        case wait
    }

    package let id: UUID
    package let name: String
    /// This side opened the stream (it sends STREAM_OPEN on each link).
    package let opener: Bool
    /// The most a direction holds at each end: written and not yet held by the reader, or
    /// held by the reader and not yet read by its application.
    package let window: UInt64

    package private(set) var outcome: Outcome?

    // The direction this side writes.
    /// What was written and is not yet held by the reader, from byte ``acknowledged``.
    private var unacknowledged = CircularBuffer<ByteBuffer>()
    /// The bytes the reader holds (its latest WANT's `received`).
    package private(set) var acknowledged: UInt64 = 0
    /// The bytes written (the end of ``unacknowledged``).
    package private(set) var written: UInt64 = 0
    /// How far the reader lets this side send.
    private var granted: UInt64 = 0
    /// How far this direction's end has gone.
    private var writeEnd = WriteEnd.notWritten

    private enum WriteEnd {
        case notWritten
        /// The application ended the direction: nothing is written after it.
        case written
        /// The reader holds the end: the direction is over.
        case acknowledged
    }

    private var endWritten: Bool { writeEnd != .notWritten }
    /// The reader holds this direction's end.
    package var endAcknowledged: Bool { writeEnd == .acknowledged }

    // The direction this side reads.
    /// Arrived and not yet read by the application.
    private var unread = CircularBuffer<ByteBuffer>()
    /// The bytes that arrived, in order: where the next must begin.
    package private(set) var received: UInt64 = 0
    /// The bytes the application read.
    private var consumed: UInt64 = 0
    /// How far the peer may send.
    private var grantedToPeer: UInt64 = 0
    package private(set) var endReceived = false

    /// What this side holds in memory of each direction: the bytes arrived and not yet read by
    /// its application, and those written and not yet held by the reader. Each at most ``window``.
    package var held: (reading: UInt64, writing: UInt64) { (received - consumed, written - acknowledged) }

    // The link.
    /// The link, while there is one.
    private var link: LinkState?
    /// The peer sent a WANT of this stream once: an OPEN says it resumes.
    private var peerKnowsIt = false

    private struct LinkState: Equatable {
        /// This side's first frames of the stream on the link, or a new WANT, or its END, are due.
        var openDue = false
        var wantDue = false
        var endDue = false
        /// Since the reader's first WANT on the link: the next byte to send, and whether the end went.
        var sending: Sending?
    }

    private struct Sending: Equatable {
        var next: UInt64
        var endSent = false
    }

    package init(id: UUID, name: String, opener: Bool, window: UInt64) {
        precondition(window > 0)
        self.id = id
        self.name = name
        self.opener = opener
        self.window = window
        grantedToPeer = window
    }

    // MARK: The link

    /// A link to the peer came up (or the stream began on one): the opener opens the stream on
    /// it, both sides say what they hold of the other's direction.
    package mutating func linkUp() {
        guard outcome == nil else { return }
        link = LinkState(openDue: opener, wantDue: true)
    }

    /// The link went: what the reader did not say it holds goes again on the next, from where it says.
    package mutating func linkDown() {
        link = nil
    }

    // MARK: Frames from the peer

    /// The peer's WANT: it holds `received` bytes of this side's direction (and its end), and
    /// lets this side send up to `granted`. Throws `malformedMessage` for a WANT that goes back
    /// on what the reader said before or beyond what was written.
    /// Returns whether writers waiting for room (or for the end's acknowledgement) may go on.
    package mutating func want(received: UInt64, granted: UInt64, endReceived: Bool) throws(MultipeerError) -> Bool {
        guard outcome == nil else { return false }
        guard received >= acknowledged, received <= link?.sending?.next ?? written, granted >= received,
            !endReceived || (endWritten && received == written)
        else {
            throw MultipeerError(
                .malformedMessage,
                "the reader of stream \(id) said it holds \(received) bytes\(endReceived ? " and the end" : "") and grants up to \(granted), of \(written) written\(endWritten ? " and ended" : ""), \(acknowledged) held before"
            )
        }
        peerKnowsIt = true
        let freed = received > acknowledged
        drop(through: received)
        acknowledged = received
        self.granted = max(self.granted, granted)
        // The first WANT on a link is where the writer goes on from.
        if link != nil, link?.sending == nil { link?.sending = Sending(next: received) }
        let ended = endReceived && !endAcknowledged
        if endReceived { writeEnd = .acknowledged }
        completeIfDone()
        return freed || ended
    }

    /// The peer's bytes from `offset` (`end`: and the end of its direction). Throws
    /// `outOfSequence` for bytes that do not follow on, and `malformedMessage` for an empty DATA
    /// without the end, bytes beyond what was granted, or bytes after the end.
    package mutating func data(offset: UInt64, bytes: ByteBuffer, end: Bool) throws(MultipeerError) {
        guard outcome == nil else { return }  // (a failed stream's last frames)
        guard !endReceived else {
            throw MultipeerError(.malformedMessage, "bytes of stream \(id) at \(offset), after its end")
        }
        guard offset == received else {
            throw MultipeerError(.outOfSequence, "bytes of stream \(id) at \(offset), where \(received) was next")
        }
        let count = UInt64(bytes.readableBytes)
        guard count > 0 || end, count <= grantedToPeer - received else {
            throw MultipeerError(
                .malformedMessage,
                "\(count) bytes of stream \(id) at \(offset)\(end ? "" : " without its end"), beyond the \(grantedToPeer) granted or empty"
            )
        }
        received += count
        if count > 0 { unread.append(bytes) }
        if end {
            endReceived = true
            // The end is acknowledged at once: the writer's application is waiting to hear it.
            dueWant()
            completeIfDone()
        }
    }

    /// The peer ended the stream (STREAM_END).
    package mutating func ended(_ reason: StreamEndReason, text: String) {
        guard outcome == nil else { return }
        outcome = .failed(reason, byPeer: true, text: text)
        release()
    }

    /// This side ends the stream (its application cancelled it, or its session stops, or the
    /// stream is lost): the peer is told on the link, if there is one.
    package mutating func end(_ reason: StreamEndReason, text: String) {
        guard outcome == nil else { return }
        outcome = .failed(reason, byPeer: false, text: text)
        release()
        if link != nil { link = LinkState(endDue: true) }
    }

    /// What a failed stream no longer needs: what it had to send.
    private mutating func release() {
        unacknowledged.removeAll()
    }

    // MARK: The application

    /// How many more bytes the application may write now: what this side keeps until the reader
    /// holds it is at most ``window``. Zero once the direction is ended or the stream failed.
    package var writeCapacity: UInt64 {
        guard outcome == nil, !endWritten else { return 0 }
        return window - (written - acknowledged)
    }

    /// Takes as much of `bytes` as ``writeCapacity`` allows (moving its reader index past it).
    package mutating func write(_ bytes: inout ByteBuffer) {
        let count = Int(min(UInt64(bytes.readableBytes), writeCapacity))
        guard count > 0, let taken = bytes.readSlice(length: count) else { return }
        unacknowledged.append(taken)
        written += UInt64(count)
    }

    /// The application ends this side's direction: nothing is written after it.
    package mutating func finishWriting() {
        guard outcome == nil, writeEnd == .notWritten else { return }
        writeEnd = .written
    }

    /// Whether the application ended its direction.
    package var writingFinished: Bool { endWritten }

    /// The next bytes for the application (at most `maximum`), the end, the failure, or nothing
    /// yet. Reading makes room: the peer is granted more once half the window was read.
    package mutating func read(maximum: Int) -> Read {
        if var first = unread.first {
            let count = min(maximum, first.readableBytes)
            let bytes = first.readSlice(length: count)!
            if first.readableBytes == 0 { unread.removeFirst() } else { unread[unread.startIndex] = first }
            consumed += UInt64(count)
            if !endReceived, consumed + window - grantedToPeer >= window / 2 {
                grantedToPeer = consumed + window
                dueWant()
            }
            return .bytes(bytes)
        }
        if case .failed(let reason, let byPeer, let text) = outcome {
            return .failed(reason, byPeer: byPeer, text: text)
        }
        if endReceived { return .end }
        return .wait
    }

    /// Whether what arrived waits to be read (the bytes, the end, or a failure).
    package var readable: Bool {
        !unread.isEmpty || endReceived || outcome != nil
    }

    // MARK: Sending

    private mutating func dueWant() {
        link?.wantDue = true
    }

    /// The frames to send now on the link, in order: the OPEN and the WANT due, then the bytes
    /// granted (in frames of at most `chunkLimit` bytes, until they carry `budget` bytes: the
    /// rest are due still) and the end; or the END of a failed stream.
    package mutating func framesDue(chunkLimit: Int, budget: Int = .max) -> [LinkMessage] {
        guard let due = link else { return [] }
        link = LinkState(sending: due.sending)
        switch outcome {
        case .failed(let reason, byPeer: false, let text):
            return due.endDue ? [.streamEnd(StreamEnd(id: id, reason: reason, text: text))] : []
        case .failed:
            return []
        case .complete, nil:
            break
        }
        var frames: [LinkMessage] = []
        if due.openDue { frames.append(.streamOpen(try! StreamOpen(id: id, resuming: peerKnowsIt, name: name))) }
        if due.wantDue {
            frames.append(
                .streamWant(StreamWant(id: id, received: received, granted: grantedToPeer, endReceived: endReceived))
            )
        }
        guard var sending = due.sending, !endAcknowledged else { return frames }
        let limit = min(written, granted)
        var taken = 0
        while sending.next < limit, taken < budget {
            let bytes = slice(from: sending.next, count: min(UInt64(chunkLimit), limit - sending.next))
            let offset = sending.next
            sending.next += UInt64(bytes.readableBytes)
            taken += bytes.readableBytes
            sending.endSent = endWritten && sending.next == written
            frames.append(.streamData(StreamData(id: id, offset: offset, end: sending.endSent, bytes: bytes)))
        }
        if endWritten, !sending.endSent, sending.next == written {
            frames.append(.streamData(StreamData(id: id, offset: sending.next, end: true, bytes: ByteBuffer())))
            sending.endSent = true
        }
        link?.sending = sending
        return frames
    }

    /// Whether ``framesDue(chunkLimit:)`` has something to send.
    package var hasFramesDue: Bool {
        guard let link else { return false }
        if link.endDue || link.openDue || link.wantDue { return true }
        guard outcome == nil, !endAcknowledged, let sending = link.sending else { return false }
        return sending.next < min(written, granted) || (endWritten && !sending.endSent && sending.next == written)
    }

    /// At most `count` bytes written from byte `offset` (which the reader does not hold yet),
    /// from the one buffer that holds it.
    private func slice(from offset: UInt64, count: UInt64) -> ByteBuffer {
        var start = acknowledged
        for buffer in unacknowledged {
            let length = UInt64(buffer.readableBytes)
            if offset < start + length {
                let skip = Int(offset - start)
                return buffer.getSlice(at: buffer.readerIndex + skip, length: Int(min(count, length - UInt64(skip))))!
            }
            start += length
        }
        preconditionFailure("byte \(offset) of stream \(id) is not kept")
    }

    /// Forgets what the reader holds.
    private mutating func drop(through offset: UInt64) {
        var start = acknowledged
        while var first = unacknowledged.first, start < offset {
            let length = UInt64(first.readableBytes)
            if start + length <= offset {
                unacknowledged.removeFirst()
                start += length
            } else {
                first.moveReaderIndex(forwardBy: Int(offset - start))
                unacknowledged[unacknowledged.startIndex] = first
                start = offset
            }
        }
    }

    private mutating func completeIfDone() {
        if endAcknowledged, endReceived, outcome == nil { outcome = .complete }
    }
}
