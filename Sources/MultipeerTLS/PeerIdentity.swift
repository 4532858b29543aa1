internal import CGnuTLS
import Crypto
public import Foundation
public import MultipeerCore

/// This device's long-term identity: an Ed25519 signing key pair. A session proves it in every
/// HELLO, and its peer ID is derived from the public key (``PeerKey/peerID``), so no other
/// device can claim that ID, take over its links or write in its name.
///
/// Keep it in a file (``init(loadingOrCreatingFile:)``) so the device keeps its ID across
/// restarts. The file holds the private key as PKCS #8 PEM, the form `openssl genpkey
/// -algorithm ed25519` writes, readable by its owner only. The private key is never printed:
/// `description`, `debugDescription` and `dump` show the peer ID and key fingerprint only.
public struct PeerIdentity: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    private let privateKey: Curve25519.Signing.PrivateKey
    /// The public key, which others see in HELLO and list in a roster.
    public let key: PeerKey
    /// The peer ID this identity proves.
    public let peerID: UUID

    /// A new identity from the system's random source. It lasts as long as the value: use
    /// ``init(loadingOrCreatingFile:)`` for one that survives a restart.
    public init() {
        self.init(privateKey: Curve25519.Signing.PrivateKey())
    }

    /// An identity from a private key's 32 raw bytes (RFC 8032), as in docs/PROTOCOL.md's vectors.
    package init(rawPrivateKey: some ContiguousBytes) throws {
        do {
            self.init(privateKey: try Curve25519.Signing.PrivateKey(rawRepresentation: rawPrivateKey))
        } catch {
            throw MultipeerError(.invalidKey, "an Ed25519 private key is 32 bytes", underlying: "\(error)")
        }
    }

    private init(privateKey: Curve25519.Signing.PrivateKey) {
        self.privateKey = privateKey
        self.key = try! PeerKey(rawRepresentation: privateKey.publicKey.rawRepresentation)  // always 32 bytes
        self.peerID = key.peerID
    }

    /// Loads an identity file: PKCS #8 PEM holding an Ed25519 private key.
    ///
    /// The file must be a regular file (not a symbolic link) owned by this process's user and
    /// readable by it alone (mode 0600); errors say how to fix one that is not, and never show the key.
    public init(contentsOfFile path: String) throws {
        var contents = try ProtectedFile.read(path, protection: .secret, what: "the identity file", code: .invalidKey)
        defer { multipeer_secure_zero(&contents, contents.count) }
        guard let raw = Self.privateKey(fromPEM: contents) else {
            throw MultipeerError(
                .invalidKey,
                "the identity file \(path) does not hold an Ed25519 private key in PKCS #8 PEM (\"-----BEGIN PRIVATE KEY-----\", as `openssl genpkey -algorithm ed25519` writes)"
            )
        }
        try self.init(rawPrivateKey: raw)
    }

    /// Loads the identity file at `path`, or creates it with a new identity if there is none.
    /// Two processes racing to create it end up with the same identity.
    public init(loadingOrCreatingFile path: String) throws {
        if access(path, F_OK) != 0 {
            let identity = PeerIdentity()
            do {
                try identity.write(toFile: path)
                self = identity
                return
            } catch is ProtectedFile.FileExists {
                // Made meanwhile by someone else: use theirs.
            }
        }
        try self.init(contentsOfFile: path)
    }

    /// Writes the identity to a new file (PKCS #8 PEM, mode 0600), atomically; an existing
    /// file is never overwritten.
    public func write(toFile path: String) throws {
        var der = Self.pkcs8Prefix + privateKey.rawRepresentation
        defer { multipeer_secure_zero(&der, der.count) }
        var pem = Array(
            "-----BEGIN PRIVATE KEY-----\n\(Data(der).base64EncodedString())\n-----END PRIVATE KEY-----\n".utf8
        )
        defer { multipeer_secure_zero(&pem, pem.count) }
        do {
            try ProtectedFile.create(path, contents: pem, what: "the identity file", code: .invalidKey)
        } catch is ProtectedFile.FileExists {
            throw MultipeerError(.invalidKey, "the identity file \(path) exists already; it is never overwritten")
        }
    }

    /// Signs `message` for an application, so that anyone holding ``key`` can check that this
    /// device wrote it (`PeerKey.isValidSignature(_:for:)`), however it travelled: the
    /// Ed25519 signature (RFC 8032: deterministic, 64 bytes) of the bytes
    /// `"multipeer application v1"`, a zero byte, then `message` (docs/PROTOCOL.md 1.3). The
    /// context keeps an application's signatures apart from the protocol's made with the same
    /// key (a HELLO's, a navlog version's): no message an application signs is one of those.
    public func signature(for message: [UInt8]) throws -> [UInt8] {
        try protocolSignature(for: PeerKey.applicationSignatureContext + message)
    }

    /// The Ed25519 signature of `message` itself, for the protocol's own signed bytes, which
    /// begin with a context of their own (`"multipeer hello v2"`, `"navlog version v1"`).
    package func protocolSignature(for message: [UInt8]) throws -> [UInt8] {
        Array(try privateKey.signature(for: message))
    }

    /// The peer ID and key fingerprint; never the private key.
    public var description: String { "PeerIdentity(peerID: \(peerID), fingerprint: \(key.fingerprint))" }
    /// Same as ``description``.
    public var debugDescription: String { description }
    /// Shows the peer ID and public key only.
    public var customMirror: Mirror {
        Mirror(self, children: ["peerID": peerID, "key": key, "privateKey": "<redacted>"])
    }

    /// PKCS #8 v1 for an Ed25519 key (RFC 8410): SEQUENCE { version 0, AlgorithmIdentifier
    /// { 1.3.101.112 }, OCTET STRING { OCTET STRING { 32 key bytes } } }, before the key bytes.
    private static let pkcs8Prefix: [UInt8] = [
        0x30, 0x2E, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2B, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
    ]

    /// The 32 key bytes of a PEM file holding one PKCS #8 Ed25519 private key, if it is one.
    private static func privateKey(fromPEM contents: [UInt8]) -> [UInt8]? {
        guard let text = String(validating: contents, as: UTF8.self) else { return nil }
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
        guard let begin = lines.firstIndex(of: "-----BEGIN PRIVATE KEY-----"),
            let end = lines.firstIndex(of: "-----END PRIVATE KEY-----"), begin < end,
            let der = Data(base64Encoded: lines[(begin + 1)..<end].joined())
        else { return nil }
        let bytes = [UInt8](der)
        guard bytes.count == pkcs8Prefix.count + 32, bytes.starts(with: pkcs8Prefix) else { return nil }
        return Array(bytes.suffix(32))
    }
}

extension Hello {
    /// A HELLO for `identity`: its peer ID and public key, with the other fields as given.
    package init(
        identity: PeerIdentity,
        incarnation: UInt64,
        displayName: String,
        metadata: [String: String] = [:],
        keepalive: KeepaliveParameters = KeepaliveParameters(),
        maximumFrameLength: Int = Frame.defaultMaximumLength,
        maximumMessageLength: Int? = nil
    ) throws {
        try self.init(
            peerID: identity.peerID,
            key: identity.key,
            incarnation: incarnation,
            displayName: displayName,
            metadata: metadata,
            keepalive: keepalive,
            maximumFrameLength: maximumFrameLength,
            maximumMessageLength: maximumMessageLength
        )
    }
}
