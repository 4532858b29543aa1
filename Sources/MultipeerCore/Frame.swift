package import NIOCore

/// The type of a TLV frame on the wire: one case per frame this version knows, and
/// ``unknown(_:)`` for the rest, which a receiver ignores, so later versions can add frames
/// (docs/PROTOCOL.md 2). Every switch over it names every frame: a frame added here is a
/// compile error wherever it is not handled yet.
package enum FrameType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// Opens every link: who the sender is and how it wants to be pinged.
    case hello
    /// A liveness probe carrying a nonce and the sender's monotonic time.
    case ping
    /// The answer to a PING, echoing its nonce and time.
    case pong
    /// An application message.
    case data
    /// A cumulative acknowledgement of reliable messages.
    case ack
    /// The sender is closing the link, and says why.
    case goodbye
    /// The sender stopped reading the link (its application is behind), or reads it again.
    case flow
    /// A piece of an application message too large for one frame.
    case fragment
    /// The receiver's application could not decode a reliable message it was given.
    case reject
    /// A file the sender offers the receiver (a resource).
    case resourceOffer
    /// Where the receiver of a resource begins, and how far the sender may send.
    case resourceWant
    /// A piece of a resource's bytes.
    case resourceChunk
    /// A resource's transfer is over, and why.
    case resourceEnd
    /// A byte stream the sender opens.
    case streamOpen
    /// What the reader of a stream holds, and how far the writer may send.
    case streamWant
    /// A stream's bytes in one direction, and its end.
    case streamData
    /// A stream ended before both its directions finished, and why.
    case streamEnd
    /// The message types the sender's application reads, announced anew.
    case types
    /// An application message with its sender's trace context (DATA's value after the context).
    case dataTraced
    /// A piece of a message with its sender's trace context (FRAGMENT's value after the context).
    case fragmentTraced
    /// A type this version does not know.
    case unknown(UInt32)

    /// Every frame this version knows, in the order of their numbers.
    package static let known: [FrameType] = (1...20).map { FrameType(rawValue: $0) }

    package init(rawValue: UInt32) {
        switch rawValue {
        case 1: self = .hello
        case 2: self = .ping
        case 3: self = .pong
        case 4: self = .data
        case 5: self = .ack
        case 6: self = .goodbye
        case 7: self = .flow
        case 8: self = .fragment
        case 9: self = .reject
        case 10: self = .resourceOffer
        case 11: self = .resourceWant
        case 12: self = .resourceChunk
        case 13: self = .resourceEnd
        case 14: self = .streamOpen
        case 15: self = .streamWant
        case 16: self = .streamData
        case 17: self = .streamEnd
        case 18: self = .types
        case 19: self = .dataTraced
        case 20: self = .fragmentTraced
        default: self = .unknown(rawValue)
        }
    }

    package var rawValue: UInt32 {
        switch self {
        case .hello: 1
        case .ping: 2
        case .pong: 3
        case .data: 4
        case .ack: 5
        case .goodbye: 6
        case .flow: 7
        case .fragment: 8
        case .reject: 9
        case .resourceOffer: 10
        case .resourceWant: 11
        case .resourceChunk: 12
        case .resourceEnd: 13
        case .streamOpen: 14
        case .streamWant: 15
        case .streamData: 16
        case .streamEnd: 17
        case .types: 18
        case .dataTraced: 19
        case .fragmentTraced: 20
        case .unknown(let rawValue): rawValue
        }
    }

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
        case .unknown(let rawValue): "type \(rawValue)"
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
