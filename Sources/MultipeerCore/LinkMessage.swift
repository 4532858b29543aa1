public import NIOCore

/// A PING or PONG body: the PONG echoes the PING's nonce and the pinger's monotonic time,
/// so the pinger computes the round trip from its own clock alone.
public struct Probe: Hashable, Sendable {
    public var nonce: UInt64
    /// The pinger's monotonic clock, in nanoseconds.
    public var timestamp: UInt64

    public init(nonce: UInt64, timestamp: UInt64) {
        self.nonce = nonce
        self.timestamp = timestamp
    }
}

/// An application message as carried in DATA.
public struct DataMessage: Hashable, Sendable {
    /// The longest message-type name, in UTF-8 bytes.
    public static let maximumTypeNameLength = 255

    /// The sender's sequence number for reliable delivery (0 for unreliable messages).
    public var sequence: UInt64
    /// Names the Codable type of `payload`, so several types share one link.
    public var typeName: String
    /// The encoded message.
    public var payload: ByteBuffer

    public init(sequence: UInt64, typeName: String, payload: ByteBuffer) throws {
        guard typeName.utf8.count <= Self.maximumTypeNameLength else {
            throw MultipeerError(
                .invalidArgument,
                "the message type name is \(typeName.utf8.count) bytes; the limit is \(Self.maximumTypeNameLength)")
        }
        self.sequence = sequence
        self.typeName = typeName
        self.payload = payload
    }
}

/// Why a link is being closed, sent in GOODBYE.
public struct GoodbyeReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// The session is shutting down.
    public static let shutdown = GoodbyeReason(rawValue: 0)
    /// No traffic arrived within the keepalive timeout.
    public static let keepaliveTimeout = GoodbyeReason(rawValue: 1)
    /// Another link to the same peer is kept instead of this one.
    public static let duplicateLink = GoodbyeReason(rawValue: 2)
    /// The peer broke the protocol.
    public static let protocolError = GoodbyeReason(rawValue: 3)
    /// The application went to the background.
    public static let suspended = GoodbyeReason(rawValue: 4)

    public var description: String {
        switch self {
        case .shutdown: "shutdown"
        case .keepaliveTimeout: "keepaliveTimeout"
        case .duplicateLink: "duplicateLink"
        case .protocolError: "protocolError"
        case .suspended: "suspended"
        default: "reason \(rawValue)"
        }
    }
}

/// A decoded frame: what travels over a link once TLS is up.
public enum LinkMessage: Hashable, Sendable {
    case hello(Hello)
    case ping(Probe)
    case pong(Probe)
    case data(DataMessage)
    /// Everything up to and including this sequence number arrived.
    case ack(UInt64)
    /// The reason, and a few words for logs (at most 255 bytes of UTF-8).
    case goodbye(GoodbyeReason, String)
    /// A frame type this version does not know; receivers ignore it.
    case unknown(FrameType)
}

extension LinkMessage {
    /// Parses a frame. Unknown types give `.unknown`, never an error.
    public init(frame: Frame) throws {
        var value = frame.value
        switch frame.type {
        case .hello:
            self = .hello(try Hello(decoding: value))
        case .ping, .pong:
            let nonce = try value.readField(UInt64.self, "nonce", in: frame.type)
            let timestamp = try value.readField(UInt64.self, "timestamp", in: frame.type)
            let probe = Probe(nonce: nonce, timestamp: timestamp)
            self = frame.type == .ping ? .ping(probe) : .pong(probe)
        case .data:
            let sequence = try value.readField(UInt64.self, "sequence number", in: .data)
            let typeName = try value.readShortString("type name", in: .data)
            self = .data(try DataMessage(sequence: sequence, typeName: typeName, payload: value))
        case .ack:
            self = .ack(try value.readField(UInt64.self, "sequence number", in: .ack))
        case .goodbye:
            let reason = try value.readField(UInt16.self, "reason", in: .goodbye)
            let text = try value.readShortString("text", in: .goodbye)
            self = .goodbye(GoodbyeReason(rawValue: reason), text)
        default:
            self = .unknown(frame.type)
        }
    }

    /// The frame type that carries this message.
    public var frameType: FrameType {
        switch self {
        case .hello: .hello
        case .ping: .ping
        case .pong: .pong
        case .data: .data
        case .ack: .ack
        case .goodbye: .goodbye
        case .unknown(let type): type
        }
    }

    /// Appends the whole frame, header and value, to `buffer`: one buffer, no intermediate copy.
    public func writeFrame(to buffer: inout ByteBuffer) {
        let start = buffer.writerIndex
        buffer.writeMultipleIntegers(frameType.rawValue, UInt32(0))
        writeValue(to: &buffer)
        buffer.setInteger(UInt32(buffer.writerIndex - start - Frame.headerLength), at: start + 4)
    }

    /// Encodes the message as a ``Frame``, with its value in a buffer from `allocator`.
    public func frame(allocator: ByteBufferAllocator = ByteBufferAllocator()) -> Frame {
        var value = allocator.buffer(capacity: 32)
        writeValue(to: &value)
        return Frame(type: frameType, value: value)
    }

    private func writeValue(to buffer: inout ByteBuffer) {
        switch self {
        case .hello(let hello):
            hello.encode(into: &buffer)
        case .ping(let probe), .pong(let probe):
            buffer.writeMultipleIntegers(probe.nonce, probe.timestamp)
        case .data(let message):
            buffer.reserveCapacity(minimumWritableBytes: 9 + message.typeName.utf8.count + message.payload.readableBytes)
            buffer.writeInteger(message.sequence)
            buffer.writeShortString(message.typeName)
            buffer.writeImmutableBuffer(message.payload)
        case .ack(let sequence):
            buffer.writeInteger(sequence)
        case .goodbye(let reason, let text):
            buffer.writeInteger(reason.rawValue)
            buffer.writeShortString(String(decoding: text.utf8.prefix(255), as: UTF8.self))
        case .unknown:
            break
        }
    }
}
