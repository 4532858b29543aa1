internal import CGnuTLS
import Foundation
import Glibc
import MultipeerCore

/// The group secret that authenticates every link: an identity (sent in clear, it names the
/// group) and at least 16 random key bytes.
///
/// The key bytes live in memory of their own that is zeroed when the last copy of the key is
/// released. They are never printed: `description`, `debugDescription` and `dump` show the
/// identity only.
public struct PreSharedKey: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable
{
    /// The fewest key bytes accepted.
    public static let minimumKeyLength = 16
    /// The identity used when none is given.
    public static let defaultIdentity = "multipeer"

    /// Names the key (and so the group) in the TLS handshake. Not secret.
    public let identity: String
    let key: SecretBytes

    /// Creates a key from raw bytes, which should come from a cryptographic random source.
    public init(identity: String = PreSharedKey.defaultIdentity, key: some Collection<UInt8>) throws {
        try Self.validate(identity: identity)
        guard key.count >= Self.minimumKeyLength else {
            throw MultipeerError(
                .invalidKey,
                "a pre-shared key needs at least \(Self.minimumKeyLength) bytes; this one has \(key.count)"
            )
        }
        self.identity = identity
        self.key = SecretBytes(key)
    }

    /// The iterations of PBKDF2-HMAC-SHA256 in ``init(identity:passphrase:)``.
    public static let passphraseIterations: UInt32 = 600_000

    /// Derives a 32-byte key from a passphrase with PBKDF2-HMAC-SHA256 (RFC 8018), 600,000
    /// iterations, salted with the group's identity (docs/PROTOCOL.md, 1.1).
    ///
    /// Slow on purpose (about a quarter of a second), so that each guess of someone who recorded
    /// a handshake costs as much; still, a passphrase is only as strong as it is unguessable (six
    /// or more random diceware words), and the identity should name this group alone (it is the
    /// salt: `navlog-VH-OQA`, not `navlog`).
    public init(identity: String = PreSharedKey.defaultIdentity, passphrase: String) throws {
        try Self.validate(identity: identity)
        guard !passphrase.isEmpty else { throw MultipeerError(.invalidKey, "the passphrase is empty") }
        self.identity = identity
        self.key = try SecretBytes.pbkdf2SHA256(
            password: Array(passphrase.utf8),
            salt: Array("MultipeerSession PSK v2:\(identity)".utf8),
            iterations: Self.passphraseIterations,
            length: 32
        )
    }

    /// Loads a key file in GnuTLS psktool's format: one line `IDENTITY:HEXKEY` (``KeyRing``
    /// reads a file of several).
    ///
    /// The file must be a regular file (not a symbolic link) owned by this process's user and
    /// readable by it alone (mode 0600). Errors name the file and the problem (and how to fix
    /// it), never the key.
    public init(contentsOfFile path: String) throws {
        let ring = try KeyRing(contentsOfFile: path)
        guard ring.keys.count == 1 else {
            throw MultipeerError(
                .invalidKey,
                "the key file \(path) must hold one line IDENTITY:HEXKEY (as psktool writes); a file of several is a KeyRing"
            )
        }
        self = ring.keys[0]
    }

    /// Reads one line of psktool's format, `IDENTITY:HEXKEY`, without its line break.
    init(line bytes: [UInt8]) throws {
        guard let colon = bytes.lastIndex(of: UInt8(ascii: ":")) else {
            throw MultipeerError(.invalidKey, "a key line is IDENTITY:HEXKEY (as psktool writes)")
        }
        guard let identity = String(validating: bytes[..<colon], as: UTF8.self) else {
            throw MultipeerError(.invalidKey, "the identity is not UTF-8")
        }
        guard var key = Hex.decode(bytes[(colon + 1)...]) else {
            throw MultipeerError(.invalidKey, "the key is not an even number of hexadecimal digits")
        }
        defer { multipeer_secure_zero(&key, key.count) }
        try self.init(identity: identity, key: key)
    }

    /// A new random key of `length` bytes from GnuTLS's key-grade random generator.
    public static func generate(
        identity: String = PreSharedKey.defaultIdentity,
        length: Int = 32
    ) throws -> PreSharedKey {
        var bytes = [UInt8](repeating: 0, count: max(length, minimumKeyLength))
        defer { multipeer_secure_zero(&bytes, bytes.count) }
        let status = gnutls_rnd(GNUTLS_RND_KEY, &bytes, bytes.count)
        guard status == 0 else { throw MultipeerError(gnutls: status, .invalidKey, "could not generate a random key") }
        return try PreSharedKey(identity: identity, key: bytes)
    }

    /// Writes the key to a new file in psktool's format (`IDENTITY:HEXKEY`), readable and
    /// writable by the owner only (mode 0600), atomically. An existing file is never overwritten.
    public func write(toFile path: String) throws {
        try KeyRing(self).write(toFile: path)
    }

    /// Appends `IDENTITY:HEXKEY` and a line break to `line`, which has room for it (so no
    /// reallocation leaves a copy of the key behind).
    func appendLine(to line: inout [UInt8]) {
        line += (identity + ":").utf8
        key.withUnsafeBytes { Hex.append($0, to: &line) }
        line.append(UInt8(ascii: "\n"))
    }

    public var description: String { "PreSharedKey(identity: \(identity), key: <redacted>)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["identity": identity, "key": "<redacted>"]) }

    static func validate(identity: String) throws {
        guard !identity.isEmpty, identity.utf8.count <= 128,
            !identity.contains(":"), !identity.contains(where: \.isNewline)
        else {
            throw MultipeerError(
                .invalidKey,
                "a PSK identity must be 1 to 128 bytes without ':' or line breaks; got \"\(identity)\""
            )
        }
    }
}

/// Key bytes in memory of their own, zeroed when freed.
///
/// `@unchecked Sendable`: the bytes are written once, in `init`, and only read afterwards.
final class SecretBytes: @unchecked Sendable, Hashable {
    private let storage: UnsafeMutableRawBufferPointer

    init(_ bytes: some Collection<UInt8>) {
        storage = .allocate(byteCount: bytes.count, alignment: 1)
        storage.copyBytes(from: bytes)
    }

    private init(storage: UnsafeMutableRawBufferPointer) { self.storage = storage }

    deinit {
        multipeer_secure_zero(storage.baseAddress, storage.count)
        storage.deallocate()
    }

    var count: Int { storage.count }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(storage))
    }

    /// Constant-time comparison, so equality checks leak nothing through timing.
    static func == (lhs: SecretBytes, rhs: SecretBytes) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in 0..<lhs.count { difference |= lhs.storage[index] ^ rhs.storage[index] }
        return difference == 0
    }

    func hash(into hasher: inout Hasher) { hasher.combine(count) }

    static func pbkdf2SHA256(password: [UInt8], salt: [UInt8], iterations: UInt32, length: Int) throws -> SecretBytes {
        var password = password
        defer { multipeer_secure_zero(&password, password.count) }
        let output = UnsafeMutableRawBufferPointer.allocate(byteCount: length, alignment: 1)
        let result = SecretBytes(storage: output)
        let status = password.withUnsafeMutableBytes { passwordBytes in
            salt.withUnsafeBytes { saltBytes in
                var key = gnutls_datum_t(
                    data: passwordBytes.bindMemory(to: UInt8.self).baseAddress,
                    size: UInt32(passwordBytes.count)
                )
                var saltDatum = gnutls_datum_t(
                    data: UnsafeMutablePointer(mutating: saltBytes.bindMemory(to: UInt8.self).baseAddress),
                    size: UInt32(saltBytes.count)
                )
                return gnutls_pbkdf2(
                    GNUTLS_MAC_SHA256,
                    &key,
                    &saltDatum,
                    UInt32(iterations),
                    output.baseAddress,
                    length
                )
            }
        }
        guard status == 0 else { throw MultipeerError(gnutls: status, .invalidKey, "PBKDF2-HMAC-SHA256 failed") }
        return result
    }
}

extension MultipeerError {
    /// An error carrying GnuTLS's own text for `status`.
    init(gnutls status: Int32, _ code: Code, _ message: String) {
        self.init(code, message, underlying: String(cString: gnutls_strerror(status)))
    }
}
