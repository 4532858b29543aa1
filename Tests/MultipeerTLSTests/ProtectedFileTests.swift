import Foundation
import Glibc
import MultipeerCore
import MultipeerTestSupport
import Testing

@testable import MultipeerTLS

/// The identity file and the group key file: made owner-only and atomically, read by other
/// tools (OpenSSL, psktool), and refused, with the fix in the error, when anyone else could
/// read or replace them.
@Suite struct ProtectedFileTests {
    static func temporaryPath(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("protected-\(UUID().uuidString)-\(name)").path
    }

    @Test func anIdentityIsMadeOnceOwnerOnlyAndKeptAcrossLoads() throws {
        let directory = Self.temporaryPath("directory")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/identity"
        let made = try PeerIdentity(loadingOrCreatingFile: path)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let loaded = try PeerIdentity(loadingOrCreatingFile: path)
        #expect(loaded.key == made.key && loaded.peerID == made.peerID)
        #expect(made.peerID == made.key.peerID)
        #expect(throws: MultipeerError.self) { try PeerIdentity().write(toFile: path) }
        #expect(try PeerIdentity(contentsOfFile: path).key == made.key, "never overwritten")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory) == ["identity"],
            "no temporary file left beside it"
        )
    }

    @Test func openSSLReadsOurIdentityFileAndWeReadItsKeys() async throws {
        let ours = Self.temporaryPath("ours")
        let theirs = Self.temporaryPath("theirs")
        defer {
            unlink(ours)
            unlink(theirs)
        }
        let identity = try PeerIdentity(loadingOrCreatingFile: ours)
        #expect(try await Self.openSSLPublicKey(ours) == identity.key.rawRepresentation, "the same public key")

        let generated = try await runProcess("/usr/bin/openssl", ["genpkey", "-algorithm", "ed25519", "-out", theirs])
        #expect(generated.status == 0, "\(generated.output)")
        chmod(theirs, 0o600)
        let loaded = try PeerIdentity(contentsOfFile: theirs)
        #expect(try await Self.openSSLPublicKey(theirs) == loaded.key.rawRepresentation)
    }

    /// The raw public key OpenSSL reads from a private key file (the end of its SubjectPublicKeyInfo).
    static func openSSLPublicKey(_ path: String) async throws -> [UInt8] {
        let result = try await runProcess("/usr/bin/openssl", ["pkey", "-in", path, "-pubout"])
        #expect(result.status == 0, "\(result.output)")
        let base64 = result.output.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        return Array(try #require(Data(base64Encoded: base64)).suffix(32))
    }

    @Test func filesOthersCouldReadOrReplaceAreRefusedWithTheFix() throws {
        let path = Self.temporaryPath("key")
        defer { unlink(path) }
        try PeerIdentity().write(toFile: path)
        let psk = Self.temporaryPath("psk")
        defer { unlink(psk) }
        try PreSharedKey.generate().write(toFile: psk)

        for file in [path, psk] {
            func refusal() throws -> MultipeerError {
                try #require(throws: MultipeerError.self) {
                    if file == path {
                        _ = try PeerIdentity(contentsOfFile: file)
                    } else {
                        _ = try PreSharedKey(contentsOfFile: file)
                    }
                }
            }
            for mode in [0o644, 0o640, 0o602] as [mode_t] {
                chmod(file, mode)
                let error = try refusal()
                #expect(error.code == .invalidKey)
                #expect(error.message.contains("chmod 600 \(file)"), "\(error.message)")
            }
            chmod(file, 0o600)
            chown(file, 65534, 65534)
            let owner = try refusal()
            #expect(
                owner.message.contains("belongs to user 65534") && owner.message.contains("chown"),
                "\(owner.message)"
            )
            chown(file, geteuid(), getegid())

            let link = file + "-link"
            symlink(file, link)
            defer { unlink(link) }
            let linked = try #require(throws: MultipeerError.self) {
                if file == path {
                    _ = try PeerIdentity(contentsOfFile: link)
                } else {
                    _ = try PreSharedKey(contentsOfFile: link)
                }
            }
            #expect(linked.message.contains("symbolic link"), "\(linked.message)")
        }
        let directory = try #require(throws: MultipeerError.self) { try PeerIdentity(contentsOfFile: "/tmp") }
        #expect(directory.message.contains("not a regular file"))
    }

    @Test func anIdentityNeverShowsItsPrivateKey() throws {
        let path = Self.temporaryPath("shown")
        defer { unlink(path) }
        let identity = try PeerIdentity(loadingOrCreatingFile: path)
        let pem = try String(contentsOfFile: path, encoding: .utf8)
        let base64 = pem.split(separator: "\n")[1]
        var dumped = ""
        dump(identity, to: &dumped)
        for shown in [identity.description, identity.debugDescription, "\(identity)", dumped] {
            #expect(!shown.contains(base64.suffix(40)), "the private key must not be shown")
            #expect(shown.contains(identity.peerID.uuidString))
        }
        let garbage = Self.temporaryPath("garbage")
        defer { unlink(garbage) }
        _ = try ProtectedFile.create(
            garbage,
            contents: Array("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".utf8),
            what: "t",
            code: .invalidKey
        )
        let error = try #require(throws: MultipeerError.self) { try PeerIdentity(contentsOfFile: garbage) }
        #expect(error.message.contains("PKCS #8"))
    }
}
