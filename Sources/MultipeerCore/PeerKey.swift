import Crypto

public import struct Foundation.UUID

/// A peer's public signing key (Ed25519): what its HELLO proves it holds, and what a roster lists.
///
/// A peer's ID is derived from it (``peerID``), so nobody can claim another peer's ID without
/// that peer's private key. Its text form, ``description``, is the 32 key bytes in lowercase
/// hexadecimal (what a roster file lists); ``fingerprint`` is a short form for people.
public struct PeerKey: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The length of an Ed25519 public key, in bytes.
    public static let length = 32

    /// The raw key bytes (RFC 8032).
    public let rawRepresentation: [UInt8]

    /// Reads a raw Ed25519 public key.
    /// - Throws: `invalidKey` if it is not 32 bytes.
    public init(rawRepresentation: some Collection<UInt8>) throws {
        guard rawRepresentation.count == Self.length else {
            throw MultipeerError(
                .invalidKey,
                "a peer key is \(Self.length) bytes; this one is \(rawRepresentation.count)"
            )
        }
        self.rawRepresentation = Array(rawRepresentation)
    }

    /// Reads a key from its text form: 64 hexadecimal digits.
    /// - Throws: `invalidKey` naming what is wrong.
    public init(hex: some StringProtocol) throws {
        guard hex.utf8.count == 2 * Self.length else {
            throw MultipeerError(
                .invalidKey,
                "a peer key is \(2 * Self.length) hexadecimal digits; \"\(hex)\" has \(hex.utf8.count) characters"
            )
        }
        guard let bytes = Hex.decode(hex.utf8) else {
            throw MultipeerError(.invalidKey, "\"\(hex)\" is not hexadecimal")
        }
        self.rawRepresentation = bytes
    }

    /// The peer ID this key proves: the first 16 bytes of the key's SHA-256, with the version
    /// and variant bits of an RFC 9562 UUIDv8 (docs/PROTOCOL.md, 3).
    public var peerID: UUID {
        var bytes = Array(SHA256.hash(data: rawRepresentation).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x80  // version 8
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // variant 0b10
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            )
        )
    }

    /// A short form for people to compare: the first 8 bytes of the key's SHA-256 in hexadecimal,
    /// in groups of four digits (`3f2a-91c0-5b7e-d410`).
    public var fingerprint: String {
        let hex = Hex.encode(SHA256.hash(data: rawRepresentation).prefix(8))
        return stride(from: 0, to: 16, by: 4).map { offset in
            String(hex.dropFirst(offset).prefix(4))
        }.joined(separator: "-")
    }

    /// The key as 64 lowercase hexadecimal digits.
    public var description: String { Hex.encode(rawRepresentation) }

    /// Whether `signature` is this key's application signature of `message` (one made with
    /// `PeerIdentity.signature(for:)`, under the application context of docs/PROTOCOL.md 1.3):
    /// an application checks with it that data a peer relays was written by the peer it names.
    /// A signature the protocol made (a HELLO's, a navlog version's) is never one.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        isValidProtocolSignature(signature, for: Self.applicationSignatureContext + message)
    }

    /// What an application's signatures sign before its message: `"multipeer application v1"`
    /// and a zero byte.
    package static let applicationSignatureContext = Array("multipeer application v1".utf8) + [0]

    /// Whether `signature` is this key's Ed25519 signature of `message` itself: for the
    /// protocol's own signed bytes.
    package func isValidProtocolSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: rawRepresentation) else { return false }
        return key.isValidSignature(signature, for: message)
    }

    /// Reads the text form (``description``).
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do {
            try self.init(hex: text)
        } catch let error as MultipeerError {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    /// Writes the text form (``description``): 64 lowercase hexadecimal digits.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
