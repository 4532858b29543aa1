package import NIOCore

/// A piece of an application message carried in FRAGMENT: bytes `offset ..< offset +
/// bytes.readableBytes` of a payload of `length` bytes (docs/PROTOCOL.md, 2b).
package struct Fragment: Hashable, Sendable {
    /// The message's reliable sequence number, or 0 for an unreliable message.
    package var sequence: UInt64
    /// Where ``bytes`` begin in the payload.
    package var offset: Int
    /// The whole payload's length, the same in every fragment of a message.
    package var length: Int
    /// The message's type name, the same in every fragment of a message.
    package var typeName: String
    /// This fragment's part of the payload: at least one byte.
    package var bytes: ByteBuffer
    /// The trace context the message was sent in, the same in every fragment of it (FRAGMENT_TRACED).
    package var context: TraceContext?

    /// Whether this is the message's last fragment.
    package var isLast: Bool { offset + bytes.readableBytes == length }

    /// The length of the frame value that carries it.
    package var frameLength: Int { Self.overhead(typeName: typeName, context: context) + bytes.readableBytes }

    /// The bytes of a FRAGMENT value before its payload bytes: its context (FRAGMENT_TRACED),
    /// sequence, offset, length, type name.
    package static func overhead(typeName: String, context: TraceContext? = nil) -> Int {
        (context?.encodedLength ?? 0) + 8 + 8 + 8 + 1 + typeName.utf8.count
    }

    package init(
        sequence: UInt64,
        offset: Int,
        length: Int,
        typeName: String,
        bytes: ByteBuffer,
        context: TraceContext? = nil
    ) throws {
        guard typeName.utf8.count <= DataMessage.maximumTypeNameLength else {
            throw MultipeerError(
                .malformedMessage,
                "FRAGMENT is malformed: its type name is \(typeName.utf8.count) bytes; the limit is \(DataMessage.maximumTypeNameLength)"
            )
        }
        guard bytes.readableBytes > 0, offset >= 0, length >= 0, offset <= length - bytes.readableBytes else {
            throw MultipeerError(
                .malformedMessage,
                "FRAGMENT is malformed: \(bytes.readableBytes) bytes at offset \(offset) of a \(length)-byte message (a fragment carries at least one byte, inside the message)"
            )
        }
        self.sequence = sequence
        self.offset = offset
        self.length = length
        self.typeName = typeName
        self.bytes = bytes
        self.context = context
    }
}

/// A reliable message of which the receiver has the first `received` bytes, not all: carried
/// in ACK (docs/PROTOCOL.md, 2b).
package struct PartialMessage: Hashable, Sendable {
    package var sequence: UInt64
    package var received: Int

    package init(sequence: UInt64, received: Int) {
        self.sequence = sequence
        self.received = received
    }
}

extension DataMessage {
    /// The most payload bytes this implementation puts in one fragment, and so the largest
    /// payload it sends whole in DATA to a peer that takes fragments: small enough that a
    /// message in fragments holds up a small one sent after it by about a fragment's writing.
    package static let fragmentLength = 256 * 1024

    /// Whether the message travels in fragments to a peer that takes frames of at most
    /// `frameLimit` bytes (and takes fragments at all).
    package func travelsInFragments(frameLimit: Int) -> Bool {
        payload.readableBytes > Self.fragmentLength || frameLength > frameLimit
    }

    /// The fragment of the payload from `offset`: as long as the peer's `frameLimit` and
    /// ``fragmentLength`` allow.
    package func fragment(from offset: Int, frameLimit: Int) -> Fragment {
        let room = min(Self.fragmentLength, frameLimit - Fragment.overhead(typeName: typeName, context: context))
        let count = min(room, payload.readableBytes - offset)
        // A view of the payload's bytes, not a slice: NIO copies a slice that begins 16 MiB or
        // more into its storage, so slices would copy most of every large message.
        var bytes = payload
        bytes.moveReaderIndex(forwardBy: offset)
        bytes.moveWriterIndex(to: bytes.readerIndex + count)
        // The type name and bounds were checked when the message was made: this cannot fail.
        return try! Fragment(
            sequence: sequence,
            offset: offset,
            length: payload.readableBytes,
            typeName: typeName,
            bytes: bytes,
            context: context
        )
    }
}

/// A message being put together from its fragments, as they arrive in order.
package struct MessageAssembly: Sendable {
    package let sequence: UInt64
    package let typeName: String
    package let length: Int
    private var buffer: ByteBuffer

    /// The payload bytes that arrived so far.
    package var received: Int { buffer.readableBytes }

    /// The memory it holds for the payload: its whole length once begun, nothing once
    /// ``releaseBytes()`` gave it up (until it begins again).
    package var reservedBytes: Int { buffer.capacity == 0 ? 0 : length }

    /// Gives up the bytes that arrived, keeping the message's place: it begins again at offset 0.
    package mutating func releaseBytes() {
        buffer = ByteBuffer()
    }

    /// Where the receiver stands, for an ACK.
    package var partial: PartialMessage { PartialMessage(sequence: sequence, received: received) }

    /// What a message's first fragment makes: the whole message, if it is its only fragment,
    /// or an assembly waiting for the rest.
    package enum Beginning {
        case whole(DataMessage)
        case partial(MessageAssembly)
    }

    /// Begins a message with its first fragment (offset 0), refusing a message larger than
    /// `limit` before keeping any of it; a message in one fragment is not copied.
    package static func begin(with fragment: Fragment, limit: Int, from peer: String) throws -> Beginning {
        guard fragment.isLast else { return .partial(try MessageAssembly(first: fragment, limit: limit, from: peer)) }
        try check(first: fragment, limit: limit, from: peer)
        return .whole(
            try DataMessage(
                sequence: fragment.sequence,
                typeName: fragment.typeName,
                payload: fragment.bytes,
                context: fragment.context
            )
        )
    }

    private init(first fragment: Fragment, limit: Int, from peer: String) throws {
        try Self.check(first: fragment, limit: limit, from: peer)
        sequence = fragment.sequence
        typeName = fragment.typeName
        length = fragment.length
        buffer = PayloadMemory.allocator.buffer(capacity: fragment.length)
        buffer.writeImmutableBuffer(fragment.bytes)
    }

    /// Throws unless `fragment` can begin a message this side takes.
    private static func check(first fragment: Fragment, limit: Int, from peer: String) throws {
        guard fragment.length <= limit else {
            throw MultipeerError(
                .messageTooLarge,
                "\(peer) began a \(fragment.typeName) of \(fragment.length) bytes in fragments; this side takes messages of at most \(limit) bytes (Limits.maximumMessageLength), as its HELLO said"
            )
        }
        guard fragment.offset == 0 else {
            throw MultipeerError(
                .outOfSequence,
                "\(peer) sent a fragment at offset \(fragment.offset) of message \(fragment.sequence), whose beginning this side does not have"
            )
        }
    }

    /// Whether `fragment` belongs to this message (it may still not follow on from what arrived).
    package func contains(_ fragment: Fragment) -> Bool {
        fragment.sequence == sequence
    }

    /// Adds the next fragment; returns the whole message once it is complete.
    package mutating func append(_ fragment: Fragment, from peer: String) throws -> DataMessage? {
        guard fragment.offset == received, fragment.length == length, fragment.typeName == typeName else {
            throw MultipeerError(
                .outOfSequence,
                "\(peer) sent a fragment of \(fragment.typeName) \(fragment.sequence) at offset \(fragment.offset) of \(fragment.length) bytes; this side has \(received) bytes of a \(length)-byte \(typeName): fragments follow on in order"
            )
        }
        if buffer.capacity == 0 { buffer = PayloadMemory.allocator.buffer(capacity: length) }
        buffer.writeImmutableBuffer(fragment.bytes)
        guard received == length else { return nil }
        // (The context of the fragment that completes it: a resumed message's first fragments
        // may have come on an earlier link.)
        return try DataMessage(sequence: sequence, typeName: typeName, payload: buffer, context: fragment.context)
    }
}
