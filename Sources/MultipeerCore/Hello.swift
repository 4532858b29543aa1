package import struct Foundation.UUID
package import NIOCore

/// The first frame each side sends on a link, once TLS is up: who it is and what it expects.
package struct Hello: Hashable, Sendable {
    /// The protocol version this library speaks.
    package static let currentProtocolVersion: UInt16 = 1
    /// The longest display name, in UTF-8 bytes: `name=` plus the name fits one 255-byte TXT entry.
    package static let maximumDisplayNameLength = 250
    /// The most metadata entries a peer may carry.
    package static let maximumMetadataCount = 32
    /// The longest metadata entry, `key=value`, in UTF-8 bytes: one TXT entry.
    package static let maximumMetadataEntryLength = 255
    /// The largest HELLO value accepted, in bytes. This version's fields take at most 8,514;
    /// the rest is room for fields later versions append. A link's first frame announcing
    /// more is refused from its header alone (``FrameDecoder``).
    package static let maximumLength = 16 * 1024

    package var protocolVersion: UInt16
    /// The sender's identity; the greater one dials.
    package var peerID: UUID
    /// Chosen anew each time the sender's session starts, so a restart is recognisable.
    package var incarnation: UInt64
    package var displayName: String
    package var metadata: [String: String]
    package var keepalive: KeepaliveParameters
    /// The largest frame value the sender accepts: a peer sends it nothing larger. A HELLO
    /// without the field (from an earlier version) means the default, 1 MiB.
    package var maximumFrameLength: Int

    /// The smallest maximum frame a peer may announce: a HELLO's own limit.
    package static let smallestMaximumFrameLength = Hello.maximumLength

    /// Creates a HELLO, checking the limits a receiver enforces.
    package init(
        protocolVersion: UInt16 = Hello.currentProtocolVersion,
        peerID: UUID,
        incarnation: UInt64,
        displayName: String,
        metadata: [String: String] = [:],
        keepalive: KeepaliveParameters = KeepaliveParameters(),
        maximumFrameLength: Int = Frame.defaultMaximumLength
    ) throws {
        self.protocolVersion = protocolVersion
        self.peerID = peerID
        self.incarnation = incarnation
        self.displayName = displayName
        self.metadata = metadata
        self.keepalive = keepalive
        self.maximumFrameLength = maximumFrameLength
        try Self.validate(displayName: displayName, metadata: metadata)
        guard (Self.smallestMaximumFrameLength...Int(UInt32.max)).contains(maximumFrameLength) else {
            throw MultipeerError(
                .invalidArgument,
                "the maximum frame length is \(maximumFrameLength) bytes; it must be from \(Self.smallestMaximumFrameLength) to \(UInt32.max)")
        }
    }

    /// Checks a display name and metadata against the limits of HELLO (and of DNS-SD TXT records).
    package static func validate(displayName: String, metadata: [String: String]) throws {
        guard displayName.utf8.count <= maximumDisplayNameLength else {
            throw MultipeerError(
                .invalidArgument,
                "the display name is \(displayName.utf8.count) bytes of UTF-8; the limit is \(maximumDisplayNameLength)")
        }
        guard metadata.count <= maximumMetadataCount else {
            throw MultipeerError(.invalidArgument, "there are \(metadata.count) metadata entries; the limit is \(maximumMetadataCount)")
        }
        for (key, value) in metadata {
            guard !key.isEmpty, !key.contains("=") else {
                throw MultipeerError(.invalidArgument, "metadata key \"\(key)\" must be non-empty and must not contain '='")
            }
            let length = key.utf8.count + 1 + value.utf8.count
            guard length <= maximumMetadataEntryLength else {
                throw MultipeerError(
                    .invalidArgument,
                    "metadata entry \"\(key)\" is \(length) bytes as key=value; the limit is \(maximumMetadataEntryLength)")
            }
        }
    }
}

extension Hello {
    /// Encodes the HELLO value (see docs/PROTOCOL.md). Metadata is written sorted by key.
    package func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(protocolVersion)
        withUnsafeBytes(of: peerID.uuid) { _ = buffer.writeBytes($0) }
        buffer.writeMultipleIntegers(
            incarnation,
            UInt32(clamping: keepalive.interval.milliseconds),
            UInt32(clamping: keepalive.timeout.milliseconds))
        buffer.writeShortString(displayName)
        buffer.writeInteger(UInt8(metadata.count))
        for key in metadata.keys.sorted() {
            buffer.writeShortString(key)
            buffer.writeShortString(metadata[key]!)
        }
        buffer.writeInteger(UInt32(maximumFrameLength))
    }

    /// Decodes a HELLO value. The version is read first, so a peer of another version is told
    /// so even if the rest of its HELLO has changed shape. Bytes after the last field are
    /// ignored: later versions may append fields.
    package init(decoding buffer: ByteBuffer) throws {
        var buffer = buffer
        let version = try buffer.readField(UInt16.self, "protocol version", in: .hello)
        guard version == Self.currentProtocolVersion else {
            throw MultipeerError(
                .protocolVersionMismatch,
                "the peer speaks protocol version \(version); this side speaks \(Self.currentProtocolVersion)")
        }
        var uuidBytes = try buffer.readFieldBytes(length: 16, "peer UUID", in: .hello)
        let uuid = uuidBytes.readBytes(length: 16)!
        let peerID = UUID(uuid: (
            uuid[0], uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7],
            uuid[8], uuid[9], uuid[10], uuid[11], uuid[12], uuid[13], uuid[14], uuid[15]))
        let incarnation = try buffer.readField(UInt64.self, "incarnation", in: .hello)
        let interval = try buffer.readField(UInt32.self, "keepalive interval", in: .hello)
        let timeout = try buffer.readField(UInt32.self, "keepalive timeout", in: .hello)
        let displayName = try buffer.readShortString("display name", in: .hello)
        let count = try buffer.readField(UInt8.self, "metadata count", in: .hello)
        var metadata: [String: String] = [:]
        for _ in 0..<count {
            let key = try buffer.readShortString("metadata key", in: .hello)
            let value = try buffer.readShortString("metadata value", in: .hello)
            guard metadata.updateValue(value, forKey: key) == nil else {
                throw MultipeerError(.malformedMessage, "HELLO is malformed: metadata key \"\(key)\" appears twice")
            }
        }
        // Added after the first release: a HELLO that ends here comes from a peer that takes the default.
        let maximumFrameLength = buffer.readableBytes == 0
            ? Frame.defaultMaximumLength : Int(try buffer.readField(UInt32.self, "maximum frame length", in: .hello))
        do {
            try self.init(
                protocolVersion: version, peerID: peerID, incarnation: incarnation,
                displayName: displayName, metadata: metadata,
                keepalive: KeepaliveParameters(interval: .milliseconds(interval), timeout: .milliseconds(timeout)),
                maximumFrameLength: maximumFrameLength)
        } catch let error as MultipeerError {
            throw MultipeerError(.malformedMessage, "HELLO is malformed: \(error.message)")
        }
    }
}
