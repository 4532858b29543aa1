internal import CGnuTLS
import MultipeerCore

/// The group keys a session holds, so that a group can change its key without downtime: a
/// listener accepts a connection made with any of them (chosen by the identity the dialler
/// offers), and a dialler offers the newest first, then the others if the listener does not
/// know it yet.
///
/// Rotating a group's key: add the new key (under a new identity) to every peer's ring, in any
/// order and at any pace; once every peer has it, remove the old one. No link is torn down:
/// links already up keep their TLS session, and a new link always finds a key both sides hold.
///
/// A key ring file is GnuTLS psktool's format with one `IDENTITY:HEXKEY` line per key, the
/// newest last: `psktool -u NEW-IDENTITY -p FILE` adds a key to it.
public struct KeyRing: Sendable, Hashable, CustomStringConvertible {
    /// The keys, oldest first; the last is the newest. Never empty; identities are distinct.
    public private(set) var keys: [PreSharedKey]

    /// A ring of `keys`, oldest first.
    /// - Throws: `invalidKey` if there is no key or two share an identity.
    public init(_ keys: [PreSharedKey]) throws {
        guard !keys.isEmpty else { throw MultipeerError(.invalidKey, "a key ring needs at least one key") }
        var identities: Set<String> = []
        for key in keys where !identities.insert(key.identity).inserted {
            throw MultipeerError(
                .invalidKey,
                "two keys of the ring have the identity \"\(key.identity)\"; each key needs its own"
            )
        }
        self.keys = keys
    }

    /// A ring of one key.
    public init(_ key: PreSharedKey) {
        keys = [key]
    }

    /// Loads a key ring file: psktool's format, one `IDENTITY:HEXKEY` line per key, newest last.
    /// The file is held to the rules of ``PreSharedKey/init(contentsOfFile:)``.
    public init(contentsOfFile path: String) throws {
        var bytes = try ProtectedFile.read(path, protection: .secret, what: "the key file", code: .invalidKey)
        defer { multipeer_secure_zero(&bytes, bytes.count) }
        var keys: [PreSharedKey] = []
        var lineNumber = 0
        for line in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            var line = Array(line)
            defer { multipeer_secure_zero(&line, line.count) }
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            guard !line.isEmpty else { continue }
            do {
                keys.append(try PreSharedKey(line: line))
            } catch let error as MultipeerError {
                throw MultipeerError(.invalidKey, "line \(lineNumber) of the key file \(path): \(error.message)")
            }
        }
        guard !keys.isEmpty else {
            throw MultipeerError(
                .invalidKey,
                "the key file \(path) holds no key; it needs lines IDENTITY:HEXKEY (as psktool writes)"
            )
        }
        do {
            try self.init(keys)
        } catch let error as MultipeerError {
            throw MultipeerError(.invalidKey, "the key file \(path) is unusable: \(error.message)")
        }
    }

    /// The key a dialler offers first.
    public var newest: PreSharedKey { keys[keys.count - 1] }

    /// The key named `identity`, if the ring holds it.
    public func key(identity: some Collection<UInt8>) -> PreSharedKey? {
        keys.last { $0.identity.utf8.elementsEqual(identity) }
    }

    /// This ring with `key` added as the newest.
    /// - Throws: `invalidKey` if the ring has a key of that identity already.
    public func adding(_ key: PreSharedKey) throws -> KeyRing {
        try KeyRing(keys + [key])
    }

    /// This ring without the key named `identity`.
    /// - Throws: `invalidKey` if the ring does not hold it, or holds nothing else.
    public func removing(identity: String) throws -> KeyRing {
        guard keys.contains(where: { $0.identity == identity }) else {
            throw MultipeerError(
                .invalidKey,
                "the key ring has no key \"\(identity)\"; it holds \(keys.map(\.identity))"
            )
        }
        guard keys.count > 1 else {
            throw MultipeerError(.invalidKey, "\"\(identity)\" is the ring's only key; add its successor first")
        }
        return try KeyRing(keys.filter { $0.identity != identity })
    }

    /// Writes the ring to `path` in psktool's format, mode 0600, atomically; with `replacing`,
    /// an existing file is replaced (atomically: a reader sees the old ring or the new one).
    public func write(toFile path: String, replacing: Bool = false) throws {
        var text: [UInt8] = []
        text.reserveCapacity(keys.reduce(0) { $0 + $1.identity.utf8.count + 2 + 2 * $1.key.count })
        defer { multipeer_secure_zero(&text, text.count) }
        for key in keys { key.appendLine(to: &text) }
        do {
            try ProtectedFile.create(
                path,
                contents: text,
                what: "the key file",
                code: .invalidKey,
                replacing: replacing
            )
        } catch is ProtectedFile.FileExists {
            throw MultipeerError(.invalidKey, "the key file \(path) exists already; it is never overwritten")
        }
    }

    /// The identities, oldest first; never the keys.
    public var description: String { "KeyRing(\(keys.map(\.identity).joined(separator: ", ")))" }
}
