package import NIOCore

/// The type of a TLV frame on the wire. Types this version does not know are tolerated:
/// a receiver ignores them, so later versions can add frames.
package struct FrameType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    package var rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Opens every link: who the sender is and how it wants to be pinged.
    package static let hello = FrameType(rawValue: 1)
    /// A liveness probe carrying a nonce and the sender's monotonic time.
    package static let ping = FrameType(rawValue: 2)
    /// The answer to a PING, echoing its nonce and time.
    package static let pong = FrameType(rawValue: 3)
    /// An application message.
    package static let data = FrameType(rawValue: 4)
    /// A cumulative acknowledgement of reliable messages.
    package static let ack = FrameType(rawValue: 5)
    /// The sender is closing the link, and says why.
    package static let goodbye = FrameType(rawValue: 6)
    /// The sender stopped reading the link (its application is behind), or reads it again.
    package static let flow = FrameType(rawValue: 7)
    /// A piece of an application message too large for one frame.
    package static let fragment = FrameType(rawValue: 8)
    /// The receiver's application could not decode a reliable message it was given.
    package static let reject = FrameType(rawValue: 9)
    /// A file the sender offers the receiver (a resource).
    package static let resourceOffer = FrameType(rawValue: 10)
    /// Where the receiver of a resource begins, and how far the sender may send.
    package static let resourceWant = FrameType(rawValue: 11)
    /// A piece of a resource's bytes.
    package static let resourceChunk = FrameType(rawValue: 12)
    /// A resource's transfer is over, and why.
    package static let resourceEnd = FrameType(rawValue: 13)
    /// A byte stream the sender opens.
    package static let streamOpen = FrameType(rawValue: 14)
    /// What the reader of a stream holds, and how far the writer may send.
    package static let streamWant = FrameType(rawValue: 15)
    /// A stream's bytes in one direction, and its end.
    package static let streamData = FrameType(rawValue: 16)
    /// A stream ended before both its directions finished, and why.
    package static let streamEnd = FrameType(rawValue: 17)
    /// The message types the sender's application reads, announced anew.
    package static let types = FrameType(rawValue: 18)
    /// An application message with its sender's trace context (DATA's value after the context).
    package static let dataTraced = FrameType(rawValue: 19)
    /// A piece of a message with its sender's trace context (FRAGMENT's value after the context).
    package static let fragmentTraced = FrameType(rawValue: 20)

    package var description: String {
        switch self {
        case .hello: "HELLO"
        case .ping: "PING"
        case .pong: "PONG"
        case .data: "DATA"
        case .ack: "ACK"
        case .goodbye: "GOODBYE"
        case .flow: "FLOW"
        case .fragment: "FRAGMENT"
        case .reject: "REJECT"
        case .resourceOffer: "RESOURCE_OFFER"
        case .resourceWant: "RESOURCE_WANT"
        case .resourceChunk: "RESOURCE_CHUNK"
        case .resourceEnd: "RESOURCE_END"
        case .streamOpen: "STREAM_OPEN"
        case .streamWant: "STREAM_WANT"
        case .streamData: "STREAM_DATA"
        case .streamEnd: "STREAM_END"
        case .types: "TYPES"
        case .dataTraced: "DATA_TRACED"
        case .fragmentTraced: "FRAGMENT_TRACED"
        default: "type \(rawValue)"
        }
    }
}

/// One type-length-value frame: `type: UInt32 | length: UInt32 | value`, big-endian.
package struct Frame: Hashable, Sendable {
    /// Bytes of the type and length fields.
    package static let headerLength = 8
    /// The default largest value a link accepts: 1 MiB.
    package static let defaultMaximumLength = 1 << 20

    package var type: FrameType
    package var value: ByteBuffer

    package init(type: FrameType, value: ByteBuffer) {
        self.type = type
        self.value = value
    }

    /// Appends the encoded frame to `buffer`.
    package func write(to buffer: inout ByteBuffer) {
        buffer.reserveCapacity(minimumWritableBytes: Self.headerLength + value.readableBytes)
        buffer.writeMultipleIntegers(type.rawValue, UInt32(value.readableBytes))
        buffer.writeImmutableBuffer(value)
    }
}
