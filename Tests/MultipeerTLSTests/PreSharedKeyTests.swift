import Foundation
import MultipeerCore
import MultipeerTestSupport
import Testing

@testable import MultipeerTLS

@Suite struct PreSharedKeyTests {
    static func temporaryPath(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("psk-\(UUID().uuidString)-\(name)").path
    }

    static func keyBytes(_ psk: PreSharedKey) -> [UInt8] {
        psk.key.withUnsafeBytes { Array($0) }
    }

    @Test func aKeyFileWrittenByPsktoolLoads() async throws {
        let path = Self.temporaryPath("psktool")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let psktool = try await runProcess("/usr/bin/psktool", ["-u", "crew", "-p", path, "-s", "32"])
        #expect(psktool.status == 0, "\(psktool.output)")

        let psk = try PreSharedKey(contentsOfFile: path)
        #expect(psk.identity == "crew")
        let line = try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .newlines)
        let hex = Self.keyBytes(psk).map { String(format: "%02x", $0) }.joined()
        #expect(line == "crew:\(hex)")
    }

    @Test func writtenKeyFilesAreOwnerOnlyRoundTripAndNeverOverwritten() throws {
        let path = Self.temporaryPath("written")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let psk = try PreSharedKey.generate(identity: "navlog")
        try psk.write(toFile: path)
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        #expect(try PreSharedKey(contentsOfFile: path) == psk)
        #expect(throws: MultipeerError.self) { try PreSharedKey.generate().write(toFile: path) }
        #expect(try PreSharedKey(contentsOfFile: path) == psk)
    }

    @Test func generatedKeysAreRandomAndLongEnough() throws {
        let first = try PreSharedKey.generate()
        let second = try PreSharedKey.generate()
        #expect(first.key.count == 32)
        #expect(first != second)
    }

    @Test func thePassphraseDerivationMatchesTheSpecVector() throws {
        let psk = try PreSharedKey(identity: "navlog", passphrase: "correct horse battery staple")
        #expect(Self.keyBytes(psk) == (try ProtocolVectors.load()["psk-from-passphrase"]))
    }

    @Test func badKeyFilesAndKeysAreRefusedWithoutShowingTheKey() throws {
        let cases: [(String, String)] = [
            ("navlog:00112233", "at least 16 bytes"),
            ("navlog:0011223344556677889900112233445Z", "hexadecimal"),
            ("no colon at all", "IDENTITY:HEXKEY"),
            (":00112233445566778899001122334455", "identity"),
            ("a:00112233445566778899001122334455\nb:00112233445566778899001122334455", "one line"),
        ]
        for (contents, expected) in cases {
            let path = Self.temporaryPath("bad")
            defer { try? FileManager.default.removeItem(atPath: path) }
            try contents.write(toFile: path, atomically: true, encoding: .utf8)
            chmod(path, 0o600)
            let error = try #require(throws: MultipeerError.self) { try PreSharedKey(contentsOfFile: path) }
            #expect(error.code == .invalidKey)
            #expect(error.message.contains(expected), "\(error.message)")
            #expect(!error.description.contains("0011223344"), "a key file error must not show key digits")
        }
        let missing = try #require(throws: MultipeerError.self) { try PreSharedKey(contentsOfFile: "/nonexistent/key") }
        #expect(missing.message.contains("/nonexistent/key"))
    }

    @Test func theKeyIsNeverPrinted() throws {
        let psk = try PreSharedKey(identity: "navlog", key: [UInt8](repeating: 0xAB, count: 16))
        var dumped = ""
        dump(psk, to: &dumped)
        for text in [psk.description, psk.debugDescription, "\(psk)", String(reflecting: psk), dumped] {
            #expect(text.contains("navlog"))
            #expect(!text.lowercased().contains("abab"), "\(text)")
            #expect(!text.contains("171"), "\(text)")
        }
    }
}

/// A device's key signs an application's data under the application context, and the
/// protocol's own bytes as they are (docs/PROTOCOL.md 1.3).
@Suite struct PeerIdentitySignatureTests {
    @Test func theApplicationSignatureIsTheSpecsAndNeverTheProtocols() throws {
        let vectors = try ProtocolVectors.load()
        let hex = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
        let raw = stride(from: 0, to: hex.count, by: 2).map { UInt8(hex.dropFirst($0).prefix(2), radix: 16)! }
        let identity = try PeerIdentity(rawPrivateKey: raw)
        #expect(try identity.signature(for: Array("abc".utf8)) == vectors["application-signature"])
        let hello = Array("multipeer hello v2".utf8) + [0, 1, 2]
        #expect(try identity.signature(for: hello) != identity.protocolSignature(for: hello))
        #expect(!identity.key.isValidProtocolSignature(try identity.signature(for: hello), for: hello))
    }
}
