package import NIOCore

package import struct Foundation.UUID

/// The first frame each side sends on a link, once TLS is up: who it is, proven, and what it
/// expects.
///
/// A HELLO carries the sender's public key, from which its peer ID is derived, and ends with
/// the sender's signature over this TLS connection's exporter value and everything before the
/// signature (docs/PROTOCOL.md, 3): it proves the ID for this connection only, so it can
/// neither be claimed without the private key nor replayed or relayed on another connection.
package struct Hello: Hashable, Sendable {
    /// The protocol version this library speaks.
    package static let currentProtocolVersion: UInt16 = 2
    /// The longest display name, in UTF-8 bytes: `name=` plus the name fits one 255-byte TXT entry.
    package static let maximumDisplayNameLength = 250
    /// The most metadata entries a peer may carry.
    package static let maximumMetadataCount = 32
    /// The longest metadata entry, `key=value`, in UTF-8 bytes: one TXT entry.
    package static let maximumMetadataEntryLength = 255
    /// The largest HELLO value accepted, in bytes. This version's fields take at most 8,622;
    /// the rest is room for fields later versions append. A link's first frame announcing
    /// more is refused from its header alone (``FrameDecoder``).
    package static let maximumLength = 16 * 1024

    package var protocolVersion: UInt16
    /// The sender's identity; the greater one dials. A receiver checks that ``key`` proves it.
    package var peerID: UUID
    /// The sender's public signing key.
    package var key: PeerKey
    /// Chosen anew each time the sender's session starts, so a restart is recognisable.
    package var incarnation: UInt64
    package var displayName: String
    package var metadata: [String: String]
    package var keepalive: KeepaliveParameters
    /// The largest frame value the sender accepts: a peer sends it nothing larger. A HELLO
    /// without the field (from an earlier version) means the default, 1 MiB.
    package var maximumFrameLength: Int
    /// The largest message payload the sender accepts in fragments (FRAGMENT frames); nil in a
    /// HELLO without the field (from an implementation without fragments), whose sender takes
    /// only messages that fit one DATA frame.
    package var maximumMessageLength: Int?
    /// What the sender takes beyond messages (``Features``); empty in a HELLO without the field.
    /// The bit of ``Features/messageTypes`` is not kept here: ``reads`` says it.
    package var features: Features = []
    /// The message types the sender's application reads, if it lists them (``Features/messageTypes``):
    /// a peer sends it no other type. Nil: it reads every type, as far as its HELLO says (a
    /// TYPES may say otherwise later).
    package var reads: MessageTypeList?

    /// Whether the sender takes TYPES (``Features/takesTypes``, or a list of its own in HELLO):
    /// a side tells it when what it reads changes.
    package var takesTypes: Bool { features.contains(.takesTypes) || reads != nil }

    /// What a side takes beyond messages, a bit each (docs/PROTOCOL.md, 3).
    package struct Features: OptionSet, Hashable, Sendable {
        package var rawValue: UInt32
        package init(rawValue: UInt32) { self.rawValue = rawValue }
        /// Resources: files offered, sent in chunks and resumed (RESOURCE_ frames, 3c).
        package static let resources = Features(rawValue: 1)
        /// Streams: ordered byte streams both ways, resumed across links (STREAM_ frames, 3d).
        package static let streams = Features(rawValue: 2)
        /// Message types: the list of the message types the sender reads (only those) follows
        /// the features field (3e). Set exactly when ``Hello/reads`` is not nil.
        package static let messageTypes = Features(rawValue: 4)
        /// Takes TYPES: the sender keeps to the message types a peer says it reads, so a peer
        /// tells it with TYPES whenever what it reads changes (3e). A side that sets
        /// ``messageTypes`` is taken to set this too.
        package static let takesTypes = Features(rawValue: 8)
        /// Takes trace contexts: the sender reads DATA_TRACED and FRAGMENT_TRACED (2c), so a
        /// peer may send it a message with the trace context it was sent in.
        package static let traceContext = Features(rawValue: 16)
        /// Every feature this version knows.
        package static let known: Features = [.resources, .streams, .messageTypes, .takesTypes, .traceContext]
    }

    /// The sender's signature (``signed(exporter:side:sign:)``); empty until signed.
    package var signature: [UInt8] = []

    /// The smallest maximum frame a peer may announce: a HELLO's own limit.
    package static let smallestMaximumFrameLength = Hello.maximumLength

    /// Creates a HELLO, checking the limits a receiver enforces.
    package init(
        protocolVersion: UInt16 = Hello.currentProtocolVersion,
        peerID: UUID,
        key: PeerKey,
        incarnation: UInt64,
        displayName: String,
        metadata: [String: String] = [:],
        keepalive: KeepaliveParameters = KeepaliveParameters(),
        maximumFrameLength: Int = Frame.defaultMaximumLength,
        maximumMessageLength: Int? = nil
    ) throws {
        self.protocolVersion = protocolVersion
        self.peerID = peerID
        self.key = key
        self.incarnation = incarnation
        self.displayName = displayName
        self.metadata = metadata
        self.keepalive = keepalive
        self.maximumFrameLength = maximumFrameLength
        self.maximumMessageLength = maximumMessageLength
        try Self.validate(displayName: displayName, metadata: metadata)
        guard (Self.smallestMaximumFrameLength...Int(UInt32.max)).contains(maximumFrameLength) else {
            throw MultipeerError(
                .invalidArgument,
                "the maximum frame length is \(maximumFrameLength) bytes; it must be from \(Self.smallestMaximumFrameLength) to \(UInt32.max)"
            )
        }
        if let maximumMessageLength, maximumMessageLength < 0 {
            throw MultipeerError(
                .invalidArgument,
                "the maximum message length is \(maximumMessageLength) bytes; it cannot be negative"
            )
        }
    }

    /// Checks a display name and metadata against the limits of HELLO (and of DNS-SD TXT records).
    /// A display name is 1 to 250 bytes of UTF-8 without control characters.
    package static func validate(displayName: String, metadata: [String: String]) throws {
        guard (1...maximumDisplayNameLength).contains(displayName.utf8.count) else {
            throw MultipeerError(
                .invalidArgument,
                "the display name is \(displayName.utf8.count) bytes of UTF-8; it must be 1 to \(maximumDisplayNameLength)"
            )
        }
        guard !displayName.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw MultipeerError(
                .invalidArgument,
                "the display name \"\(displayName.debugDescription.dropFirst().dropLast())\" contains a control character"
            )
        }
        try validate(metadata: metadata)
    }

    /// Checks metadata against HELLO's limits: at most 32 entries, each `key=value` at most 255
    /// bytes, keys non-empty and without `=`.
    package static func validate(metadata: [String: String]) throws {
        guard metadata.count <= maximumMetadataCount else {
            throw MultipeerError(
                .invalidArgument,
                "there are \(metadata.count) metadata entries; the limit is \(maximumMetadataCount)"
            )
        }
        for (key, value) in metadata {
            guard !key.isEmpty, !key.contains("=") else {
                throw MultipeerError(
                    .invalidArgument,
                    "metadata key \"\(key)\" must be non-empty and must not contain '='"
                )
            }
            let length = key.utf8.count + 1 + value.utf8.count
            guard length <= maximumMetadataEntryLength else {
                throw MultipeerError(
                    .invalidArgument,
                    "metadata entry \"\(key)\" is \(length) bytes as key=value; the limit is \(maximumMetadataEntryLength)"
                )
            }
        }
    }
}

extension Hello {
    /// Which side of the TLS connection a HELLO comes from; part of what it signs.
    package enum Side: UInt8, Sendable {
        /// The side that dialled (the TLS client).
        case dialler = 0
        /// The side that accepted the connection (the TLS server).
        case listener = 1
    }

    /// The TLS exporter label of the value a HELLO signs (RFC 8446 7.5, RFC 5705).
    package static let exporterLabel = "EXPERIMENTAL multipeer hello v2"
    /// The length of the exporter value, in bytes.
    package static let exporterLength = 32
    /// The length of an Ed25519 signature, the last bytes of a HELLO.
    package static let signatureLength = 64
    /// What a HELLO's signed message starts with.
    private static let signatureContext = Array("multipeer hello v2".utf8)

    /// What the signature covers: the context, the side, the connection's exporter value and the
    /// HELLO value up to its signature.
    package static func signedMessage(exporter: [UInt8], side: Side, unsignedValue: ByteBufferView) -> [UInt8] {
        var message = signatureContext
        message.reserveCapacity(message.count + 1 + exporter.count + unsignedValue.count)
        message.append(side.rawValue)
        message += exporter
        message += unsignedValue
        return message
    }

    /// This HELLO, signed by `sign` (the private key of ``key``) for the connection whose
    /// exporter value is `exporter`, sent by `side`.
    package func signed(exporter: [UInt8], side: Side, sign: ([UInt8]) throws -> [UInt8]) rethrows -> Hello {
        var unsigned = ByteBuffer()
        encodeFields(into: &unsigned)
        var hello = self
        hello.signature = try sign(
            Self.signedMessage(exporter: exporter, side: side, unsignedValue: unsigned.readableBytesView)
        )
        return hello
    }

    /// Checks that a received HELLO proves its sender: its key derives its peer ID, and its
    /// signature verifies over `value` (the HELLO frame's value, as received) for this connection.
    ///
    /// - Parameter peer: Names the sender in errors (its address).
    /// - Throws: `identityMismatch` or `badSignature`.
    package func verify(value: ByteBuffer, exporter: [UInt8], side: Side, peer: String) throws {
        guard key.peerID == peerID else {
            throw MultipeerError(
                .identityMismatch,
                "\(peer) claims to be peer \(peerID), but the key it presents belongs to peer \(key.peerID): it is not who it says, and the link is closed"
            )
        }
        let unsigned = value.readableBytesView.dropLast(Self.signatureLength)
        let message = Self.signedMessage(exporter: exporter, side: side, unsignedValue: ByteBufferView(unsigned))
        guard key.isValidProtocolSignature(signature, for: message) else {
            throw MultipeerError(
                .badSignature,
                "the HELLO of \(peer), claiming to be peer \(peerID), carries a signature that does not verify for this connection (forged, or relayed from another connection): the link is closed"
            )
        }
    }

    /// Encodes the HELLO value (see docs/PROTOCOL.md): its fields, then its signature.
    package func encode(into buffer: inout ByteBuffer) {
        precondition(signature.count == Self.signatureLength, "a HELLO is signed before it is sent")
        encodeFields(into: &buffer)
        buffer.writeBytes(signature)
    }

    /// Writes every field before the signature. Metadata is written sorted by key.
    private func encodeFields(into buffer: inout ByteBuffer) {
        buffer.writeInteger(protocolVersion)
        buffer.writeUUID(peerID)
        buffer.writeBytes(key.rawRepresentation)
        buffer.writeMultipleIntegers(
            incarnation,
            UInt32(clamping: keepalive.interval.milliseconds),
            UInt32(clamping: keepalive.timeout.milliseconds)
        )
        buffer.writeShortString(displayName)
        buffer.writeMetadata(metadata)
        buffer.writeInteger(UInt32(maximumFrameLength))
        if let maximumMessageLength {
            buffer.writeInteger(UInt64(maximumMessageLength))
            let features = reads == nil ? features.subtracting(.messageTypes) : features.union(.messageTypes)
            if !features.isEmpty { buffer.writeInteger(features.rawValue) }
            reads?.encode(into: &buffer)
        }
    }

    /// Decodes a HELLO value; ``verify(value:exporter:side:peer:)`` then checks its proof. The
    /// version is read first, so a peer of another version is told so even if the rest of its
    /// HELLO has changed shape. The last 64 bytes are the signature; bytes between the last
    /// field and the signature are ignored: later versions may add fields there.
    package init(decoding buffer: ByteBuffer) throws {
        var buffer = buffer
        let version = try buffer.readField(UInt16.self, "protocol version", in: .hello)
        guard version == Self.currentProtocolVersion else {
            let upgrade =
                version < Self.currentProtocolVersion
                ? "; version \(version) cannot prove which peer it is: upgrade that peer to a release that speaks version \(Self.currentProtocolVersion)"
                : "; upgrade this peer to a release that speaks version \(version)"
            throw MultipeerError(
                .protocolVersionMismatch,
                "the peer speaks protocol version \(version); this side speaks \(Self.currentProtocolVersion)\(upgrade)"
            )
        }
        guard buffer.readableBytes >= Self.signatureLength else {
            throw MultipeerError(
                .malformedMessage,
                "HELLO is malformed: it ends before its \(Self.signatureLength)-byte signature"
            )
        }
        let signature = buffer.getBytes(at: buffer.writerIndex - Self.signatureLength, length: Self.signatureLength)!
        buffer.moveWriterIndex(to: buffer.writerIndex - Self.signatureLength)
        let peerID = try buffer.readUUIDField("peer UUID", in: .hello)
        let key = try PeerKey(
            rawRepresentation: buffer.readFieldBytes(length: PeerKey.length, "peer key", in: .hello).readableBytesView
        )
        let incarnation = try buffer.readField(UInt64.self, "incarnation", in: .hello)
        let interval = try buffer.readField(UInt32.self, "keepalive interval", in: .hello)
        let timeout = try buffer.readField(UInt32.self, "keepalive timeout", in: .hello)
        let displayName = try buffer.readShortString("display name", in: .hello)
        let metadata = try buffer.readMetadata(in: .hello)
        let maximumFrameLength = Int(try buffer.readField(UInt32.self, "maximum frame length", in: .hello))
        // Added to version 2 in the reserved bytes: absent from a HELLO of an earlier release.
        let maximumMessageLength =
            buffer.readableBytes >= 8
            ? Int(clamping: try buffer.readField(UInt64.self, "maximum message length", in: .hello))
            : nil
        // Added after it the same way; bits this version does not know are ignored.
        let features =
            maximumMessageLength != nil && buffer.readableBytes >= 4
            ? Features(rawValue: try buffer.readField(UInt32.self, "features", in: .hello)).intersection(.known)
            : []
        // The message types the sender reads follow the features that announce them.
        let reads = features.contains(.messageTypes) ? try MessageTypeList(decoding: &buffer, in: .hello) : nil
        do {
            try self.init(
                protocolVersion: version,
                peerID: peerID,
                key: key,
                incarnation: incarnation,
                displayName: displayName,
                metadata: metadata,
                keepalive: KeepaliveParameters(interval: .milliseconds(interval), timeout: .milliseconds(timeout)),
                maximumFrameLength: maximumFrameLength,
                maximumMessageLength: maximumMessageLength
            )
        } catch let error as MultipeerError {
            throw MultipeerError(.malformedMessage, "HELLO is malformed: \(error.message)")
        }
        self.features = features.subtracting(.messageTypes)
        self.reads = reads
        self.signature = signature
    }
}
