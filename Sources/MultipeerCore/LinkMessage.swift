package import NIOCore

/// A PING or PONG body: the PONG echoes the PING's nonce and the pinger's monotonic time,
/// so the pinger computes the round trip from its own clock alone.
package struct Probe: Hashable, Sendable {
    package var nonce: UInt64
    /// The pinger's monotonic clock, in nanoseconds.
    package var timestamp: UInt64

    package init(nonce: UInt64, timestamp: UInt64) {
        self.nonce = nonce
        self.timestamp = timestamp
    }
}

/// An application message as carried in DATA.
package struct DataMessage: Hashable, Sendable {
    /// The longest message-type name, in UTF-8 bytes.
    package static let maximumTypeNameLength = 255

    /// The sender's sequence number for reliable delivery (0 for unreliable messages).
    package var sequence: UInt64
    /// Names the Codable type of `payload`, so several types share one link.
    package var typeName: String
    /// The encoded message.
    package var payload: ByteBuffer
    /// The trace context it was sent in, if any (DATA_TRACED; to a peer that does not take it, DATA).
    package var context: TraceContext?

    /// The length of the frame value that carries it: its context, sequence, type name, payload.
    package var frameLength: Int { (context?.encodedLength ?? 0) + plainFrameLength }

    /// The length of its DATA value without the context, as a peer that takes no trace
    /// contexts gets it (docs/PROTOCOL.md 2c).
    package var plainFrameLength: Int { 8 + 1 + typeName.utf8.count + payload.readableBytes }

    package init(sequence: UInt64, typeName: String, payload: ByteBuffer, context: TraceContext? = nil) throws {
        guard typeName.utf8.count <= Self.maximumTypeNameLength else {
            throw MultipeerError(
                .invalidArgument,
                "the message type name is \(typeName.utf8.count) bytes; the limit is \(Self.maximumTypeNameLength)"
            )
        }
        self.sequence = sequence
        self.typeName = typeName
        self.payload = payload
        self.context = context
    }
}

/// A REJECT body: the receiver delivered reliable message `sequence` (it acknowledged it), and
/// its application could not decode the payload as the type `typeName` stands for there.
package struct Rejection: Hashable, Sendable {
    /// The message's number in the sender's current numbering towards this receiver (from 1).
    package var sequence: UInt64
    package var typeName: String
    /// Why it did not decode, for the sender's logs and application (at most 255 bytes of UTF-8).
    package var reason: String

    package init(sequence: UInt64, typeName: String, reason: String) {
        self.sequence = sequence
        self.typeName = typeName
        self.reason = reason
    }
}

/// A decoded frame: what travels over a link once TLS is up.
///
/// Its larger cases are `indirect`, so that the enum takes three words at most: a message goes
/// through the channel pipeline as a `NIOAny`, which holds a value of three words in place and
/// a larger one in a box of its own, allocated each time a handler passes the message on (the
/// enum was 128 bytes, for HELLO's sake).
package enum LinkMessage: Hashable, Sendable {
    indirect case hello(Hello)
    case ping(Probe)
    case pong(Probe)
    indirect case data(DataMessage)
    /// Everything up to and including this sequence number was delivered, except the message in
    /// fragments named by `partial`, of which the receiver has the first bytes.
    indirect case ack(UInt64, partial: PartialMessage? = nil)
    /// The reason, and a few words for logs (at most 255 bytes of UTF-8).
    indirect case goodbye(GoodbyeReason, String)
    /// The sender stopped reading the link (`reading` false: its application is behind, and
    /// TCP's window towards it will close) or reads it again (true).
    case flow(reading: Bool)
    /// A piece of a message too large for one frame.
    indirect case fragment(Fragment)
    /// A message the receiver delivered did not decode there.
    indirect case reject(Rejection)
    /// A file offered (docs/PROTOCOL.md 3c).
    indirect case resourceOffer(ResourceOffer)
    /// Where the receiver of a resource begins, and how far the sender may send.
    indirect case resourceWant(ResourceWant)
    /// A piece of a resource.
    indirect case resourceChunk(ResourceChunk)
    /// A resource's transfer is over.
    indirect case resourceEnd(ResourceEnd)
    /// A byte stream opened (docs/PROTOCOL.md 3d).
    indirect case streamOpen(StreamOpen)
    /// What the reader of a stream's direction holds, and how far the writer may send.
    indirect case streamWant(StreamWant)
    /// A stream's bytes in one direction.
    indirect case streamData(StreamData)
    /// A stream ended before both its directions finished.
    indirect case streamEnd(StreamEnd)
    /// The message types the sender's application reads from now on (docs/PROTOCOL.md 3e).
    indirect case types(MessageTypesRead)
    /// A frame type this version does not know; receivers ignore it.
    case unknown(FrameType)

    /// This message as a peer that does not take trace contexts reads it: DATA and FRAGMENT
    /// without their context (docs/PROTOCOL.md 2c); every other message as it is.
    package var withoutTraceContext: LinkMessage {
        switch self {
        case .data(var message) where message.context != nil:
            message.context = nil
            return .data(message)
        case .fragment(var fragment) where fragment.context != nil:
            fragment.context = nil
            return .fragment(fragment)
        default:
            return self
        }
    }

    /// The message payload bytes this frame carries: a DATA frame's payload, a FRAGMENT's
    /// piece of one, a RESOURCE_CHUNK's or a STREAM_DATA's bytes; nil for the other frames.
    package var messageBytes: Int? {
        switch self {
        case .data(let message): message.payload.readableBytes
        case .fragment(let fragment): fragment.bytes.readableBytes
        case .resourceChunk(let chunk): chunk.bytes.readableBytes
        case .streamData(let data): data.bytes.readableBytes
        case .hello, .ping, .pong, .ack, .goodbye, .flow, .reject, .resourceOffer, .resourceWant, .resourceEnd,
            .streamOpen, .streamWant, .streamEnd, .types, .unknown:
            nil
        }
    }
}

extension LinkMessage {
    /// Parses a frame. Unknown types give `.unknown`, never an error.
    package init(frame: Frame) throws {
        var value = frame.value
        switch frame.type {
        case .hello:
            self = .hello(try Hello(decoding: value))
        case .ping, .pong:
            let nonce = try value.readField(UInt64.self, "nonce", in: frame.type)
            let timestamp = try value.readField(UInt64.self, "timestamp", in: frame.type)
            let probe = Probe(nonce: nonce, timestamp: timestamp)
            self = frame.type == .ping ? .ping(probe) : .pong(probe)
        case .data, .dataTraced:
            let context = frame.type == .dataTraced ? try TraceContext.decode(from: &value, in: frame.type) : nil
            let sequence = try value.readField(UInt64.self, "sequence number", in: frame.type)
            let typeName = try value.readShortString("type name", in: frame.type)
            self = .data(try DataMessage(sequence: sequence, typeName: typeName, payload: value, context: context))
        case .ack:
            let sequence = try value.readField(UInt64.self, "sequence number", in: .ack)
            guard value.readableBytes > 0 else {
                self = .ack(sequence)
                return
            }
            let partial = try value.readField(UInt64.self, "partial message", in: .ack)
            let received = try value.readField(UInt64.self, "bytes received", in: .ack)
            guard value.readableBytes == 0, partial >= 1, partial <= sequence, received <= UInt64(Int.max) else {
                throw MultipeerError(
                    .malformedMessage,
                    "ACK is malformed: \(value.readableBytes) bytes after its fields, or partial message \(partial) not from 1 to its sequence number \(sequence)"
                )
            }
            self = .ack(sequence, partial: PartialMessage(sequence: partial, received: Int(received)))
        case .goodbye:
            let reason = try value.readField(UInt16.self, "reason", in: .goodbye)
            let text = try value.readShortString("text", in: .goodbye)
            self = .goodbye(GoodbyeReason(rawValue: reason), text)
        case .flow:
            let reading = try value.readField(UInt8.self, "reading", in: .flow)
            guard reading <= 1 else {
                throw MultipeerError(.malformedMessage, "FLOW is malformed: reading is \(reading), not 0 or 1")
            }
            self = .flow(reading: reading == 1)
        case .fragment, .fragmentTraced:
            let context = frame.type == .fragmentTraced ? try TraceContext.decode(from: &value, in: frame.type) : nil
            let sequence = try value.readField(UInt64.self, "sequence number", in: frame.type)
            let offset = try value.readField(UInt64.self, "offset", in: frame.type)
            let length = try value.readField(UInt64.self, "length", in: frame.type)
            let typeName = try value.readShortString("type name", in: frame.type)
            guard length <= UInt64(Int.max), offset <= length else {
                throw MultipeerError(
                    .malformedMessage,
                    "\(frame.type) is malformed: offset \(offset) of a \(length)-byte message"
                )
            }
            self = .fragment(
                try Fragment(
                    sequence: sequence,
                    offset: Int(offset),
                    length: Int(length),
                    typeName: typeName,
                    bytes: value,
                    context: context
                )
            )
        case .reject:
            let sequence = try value.readField(UInt64.self, "sequence number", in: .reject)
            let typeName = try value.readShortString("type name", in: .reject)
            let reason = try value.readShortString("reason", in: .reject)
            guard sequence >= 1, value.readableBytes == 0 else {
                throw MultipeerError(
                    .malformedMessage,
                    "REJECT is malformed: sequence number \(sequence) (reliable messages number from 1), or \(value.readableBytes) bytes after its fields"
                )
            }
            self = .reject(Rejection(sequence: sequence, typeName: typeName, reason: reason))
        case .resourceOffer:
            let id = try value.readUUIDField("transfer ID", in: .resourceOffer)
            let length = try value.readField(UInt64.self, "length", in: .resourceOffer)
            let sha256 = try value.readFieldBytes(length: 32, "SHA-256", in: .resourceOffer)
            let name = try value.readShortString("name", in: .resourceOffer)
            let metadata = try value.readMetadata(in: .resourceOffer)
            try Self.expectEnd(of: value, .resourceOffer)
            do {
                self = .resourceOffer(
                    try ResourceOffer(
                        id: id,
                        name: name,
                        length: length,
                        sha256: Array(sha256.readableBytesView),
                        metadata: metadata
                    )
                )
            } catch let error as MultipeerError {
                throw MultipeerError(.malformedMessage, "RESOURCE_OFFER is malformed: \(error.message)")
            }
        case .resourceWant:
            let id = try value.readUUIDField("transfer ID", in: .resourceWant)
            let received = try value.readField(UInt64.self, "bytes received", in: .resourceWant)
            let granted = try value.readField(UInt64.self, "bytes granted", in: .resourceWant)
            try Self.expectEnd(of: value, .resourceWant)
            guard granted >= received else {
                throw MultipeerError(
                    .malformedMessage,
                    "RESOURCE_WANT is malformed: it grants up to byte \(granted), before the \(received) received"
                )
            }
            self = .resourceWant(ResourceWant(id: id, received: received, granted: granted))
        case .resourceChunk:
            let id = try value.readUUIDField("transfer ID", in: .resourceChunk)
            let offset = try value.readField(UInt64.self, "offset", in: .resourceChunk)
            guard value.readableBytes > 0 else {
                throw MultipeerError(.malformedMessage, "RESOURCE_CHUNK is malformed: it carries no bytes")
            }
            self = .resourceChunk(ResourceChunk(id: id, offset: offset, bytes: value))
        case .resourceEnd:
            let id = try value.readUUIDField("transfer ID", in: .resourceEnd)
            let reason = try value.readField(UInt16.self, "reason", in: .resourceEnd)
            let text = try value.readShortString("text", in: .resourceEnd)
            try Self.expectEnd(of: value, .resourceEnd)
            self = .resourceEnd(ResourceEnd(id: id, reason: ResourceEndReason(rawValue: reason), text: text))
        case .streamOpen:
            let id = try value.readUUIDField("stream ID", in: .streamOpen)
            let flags = try value.readField(UInt8.self, "flags", in: .streamOpen)
            let name = try value.readShortString("name", in: .streamOpen)
            try Self.expectEnd(of: value, .streamOpen)
            try Self.expectFlags(flags, in: .streamOpen)
            do {
                self = .streamOpen(try StreamOpen(id: id, resuming: flags == 1, name: name))
            } catch {
                throw MultipeerError(.malformedMessage, "STREAM_OPEN is malformed: \(error.message)")
            }
        case .streamWant:
            let id = try value.readUUIDField("stream ID", in: .streamWant)
            let received = try value.readField(UInt64.self, "bytes received", in: .streamWant)
            let granted = try value.readField(UInt64.self, "bytes granted", in: .streamWant)
            let flags = try value.readField(UInt8.self, "flags", in: .streamWant)
            try Self.expectEnd(of: value, .streamWant)
            try Self.expectFlags(flags, in: .streamWant)
            guard granted >= received else {
                throw MultipeerError(
                    .malformedMessage,
                    "STREAM_WANT is malformed: it grants up to byte \(granted), before the \(received) received"
                )
            }
            self = .streamWant(StreamWant(id: id, received: received, granted: granted, endReceived: flags == 1))
        case .streamData:
            let id = try value.readUUIDField("stream ID", in: .streamData)
            let offset = try value.readField(UInt64.self, "offset", in: .streamData)
            let flags = try value.readField(UInt8.self, "flags", in: .streamData)
            try Self.expectFlags(flags, in: .streamData)
            guard value.readableBytes > 0 || flags == 1 else {
                throw MultipeerError(.malformedMessage, "STREAM_DATA is malformed: it carries no bytes and not the end")
            }
            guard offset <= UInt64(Int64.max) - UInt64(value.readableBytes) else {
                throw MultipeerError(
                    .malformedMessage,
                    "STREAM_DATA is malformed: its bytes at \(offset) go beyond 2^63"
                )
            }
            self = .streamData(StreamData(id: id, offset: offset, end: flags == 1, bytes: value))
        case .streamEnd:
            let id = try value.readUUIDField("stream ID", in: .streamEnd)
            let reason = try value.readField(UInt16.self, "reason", in: .streamEnd)
            let text = try value.readShortString("text", in: .streamEnd)
            try Self.expectEnd(of: value, .streamEnd)
            self = .streamEnd(StreamEnd(id: id, reason: StreamEndReason(rawValue: reason), text: text))
        case .types:
            let reads = try MessageTypesRead(decoding: &value)
            try Self.expectEnd(of: value, .types)
            self = .types(reads)
        case .unknown:
            self = .unknown(frame.type)
        }
    }

    private static func expectEnd(of value: ByteBuffer, _ type: FrameType) throws {
        guard value.readableBytes == 0 else {
            throw MultipeerError(
                .malformedMessage,
                "\(type) is malformed: \(value.readableBytes) bytes after its fields"
            )
        }
    }

    /// A stream frame's flags have one bit, bit 0.
    private static func expectFlags(_ flags: UInt8, in type: FrameType) throws {
        guard flags <= 1 else {
            throw MultipeerError(.malformedMessage, "\(type) is malformed: flags \(flags), where only bit 0 is defined")
        }
    }

    /// The frame type that carries this message.
    package var frameType: FrameType {
        switch self {
        case .hello: .hello
        case .ping: .ping
        case .pong: .pong
        case .data(let message): message.context == nil ? .data : .dataTraced
        case .ack: .ack
        case .goodbye: .goodbye
        case .flow: .flow
        case .fragment(let fragment): fragment.context == nil ? .fragment : .fragmentTraced
        case .reject: .reject
        case .resourceOffer: .resourceOffer
        case .resourceWant: .resourceWant
        case .resourceChunk: .resourceChunk
        case .resourceEnd: .resourceEnd
        case .streamOpen: .streamOpen
        case .streamWant: .streamWant
        case .streamData: .streamData
        case .streamEnd: .streamEnd
        case .types: .types
        case .unknown(let type): type
        }
    }

    /// Appends the whole frame, header and value, to `buffer`: one buffer, no intermediate copy.
    package func writeFrame(to buffer: inout ByteBuffer) {
        if let payload = writeFrameHead(to: &buffer) { buffer.writeImmutableBuffer(payload) }
    }

    /// Appends the frame to `buffer` up to a DATA or FRAGMENT frame's message bytes, and
    /// returns those (which complete the frame, not copied); appends the whole of any other
    /// frame and returns nil. A large payload then goes to TLS as it is.
    package func writeFrameHead(to buffer: inout ByteBuffer) -> ByteBuffer? {
        let start = buffer.writerIndex
        buffer.writeMultipleIntegers(frameType.rawValue, UInt32(0))
        let payload = writeValue(to: &buffer)
        let length = buffer.writerIndex - start - Frame.headerLength + (payload?.readableBytes ?? 0)
        buffer.setInteger(UInt32(length), at: start + 4)
        return payload
    }

    /// Writes the value, but for the bytes of DATA, FRAGMENT, RESOURCE_CHUNK or STREAM_DATA, which it returns.
    private func writeValue(to buffer: inout ByteBuffer) -> ByteBuffer? {
        switch self {
        case .hello(let hello):
            hello.encode(into: &buffer)
        case .ping(let probe), .pong(let probe):
            buffer.writeMultipleIntegers(probe.nonce, probe.timestamp)
        case .data(let message):
            message.context?.encode(into: &buffer)
            buffer.writeInteger(message.sequence)
            buffer.writeShortString(message.typeName)
            return message.payload
        case .ack(let sequence, let partial):
            buffer.writeInteger(sequence)
            if let partial { buffer.writeMultipleIntegers(partial.sequence, UInt64(partial.received)) }
        case .fragment(let fragment):
            fragment.context?.encode(into: &buffer)
            buffer.writeMultipleIntegers(fragment.sequence, UInt64(fragment.offset), UInt64(fragment.length))
            buffer.writeShortString(fragment.typeName)
            return fragment.bytes
        case .goodbye(let reason, let text):
            buffer.writeInteger(reason.rawValue)
            buffer.writeShortText(text)
        case .flow(let reading):
            buffer.writeInteger(UInt8(reading ? 1 : 0))
        case .reject(let rejection):
            buffer.writeInteger(rejection.sequence)
            buffer.writeShortString(rejection.typeName)
            buffer.writeShortText(rejection.reason)
        case .resourceOffer(let offer):
            buffer.writeUUID(offer.id)
            buffer.writeInteger(offer.length)
            buffer.writeBytes(offer.sha256)
            buffer.writeShortString(offer.name)
            buffer.writeMetadata(offer.metadata)
        case .resourceWant(let want):
            buffer.writeUUID(want.id)
            buffer.writeMultipleIntegers(want.received, want.granted)
        case .resourceChunk(let chunk):
            buffer.writeUUID(chunk.id)
            buffer.writeInteger(chunk.offset)
            return chunk.bytes
        case .resourceEnd(let end):
            buffer.writeUUID(end.id)
            buffer.writeInteger(end.reason.rawValue)
            buffer.writeShortText(end.text)
        case .streamOpen(let open):
            buffer.writeUUID(open.id)
            buffer.writeInteger(UInt8(open.resuming ? 1 : 0))
            buffer.writeShortString(open.name)
        case .streamWant(let want):
            buffer.writeUUID(want.id)
            buffer.writeMultipleIntegers(want.received, want.granted, UInt8(want.endReceived ? 1 : 0))
        case .streamData(let data):
            buffer.writeUUID(data.id)
            buffer.writeMultipleIntegers(data.offset, UInt8(data.end ? 1 : 0))
            return data.bytes
        case .streamEnd(let end):
            buffer.writeUUID(end.id)
            buffer.writeInteger(end.reason.rawValue)
            buffer.writeShortText(end.text)
        case .types(let reads):
            reads.encode(into: &buffer)
        case .unknown:
            break
        }
        return nil
    }
}
