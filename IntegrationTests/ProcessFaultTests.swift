import Foundation
import Glibc
import MultipeerCore
import MultipeerTLS
import MultipeerTestSupport
import Testing

@testable import MultipeerSession

/// A peer in a real child process (multipeer-test-peer), frozen with SIGSTOP and killed with
/// SIGKILL, against a session in this process.
@Suite struct ProcessFaultTests {
    /// The helper executable, built beside this test bundle.
    static let peerBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        .deletingLastPathComponent().appendingPathComponent("multipeer-test-peer").path

    /// Starts the child with the identity in `identityFile` (made on its first start).
    static func startChild(identityFile: String, dialling port: Int, keyFile: String) throws -> BackgroundProcess {
        try BackgroundProcess(
            Self.peerBinary,
            [
                "--psk-file", keyFile, "--identity-file", identityFile, "--name", "child", "--static",
                "127.0.0.1:\(port)",
            ]
        )
    }

    /// Runs a listening session here and hands the body its port, events and a key file.
    static func withLocalSession(
        _ body: @escaping @Sendable (MultipeerSession, EventLog, Int, String) async throws -> Void
    ) async throws {
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("multipeer-\(UUID()).key").path
        try LinkFixtures.psk.write(toFile: keyFile)
        defer { try? FileManager.default.removeItem(atPath: keyFile) }
        let session = MultipeerSession(
            configuration: .test("here", discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let events = EventLog(session.events)
        try await whileRunning([session]) {
            let port = try await events.listeningPort()
            try await body(session, events, port, keyFile)
        }
    }

    /// A new identity file for the child, and the peer ID it proves.
    static func childIdentity() throws -> (file: String, peerID: UUID) {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("multipeer-\(UUID()).identity").path
        let identity = PeerIdentity()
        try identity.write(toFile: file)
        return (file, identity.peerID)
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aFrozenPeerIsDetectedAndComesBackWhenThawed() async throws {
        try await Self.withLocalSession { session, events, port, keyFile in
            let (identityFile, childID) = try Self.childIdentity()
            defer { try? FileManager.default.removeItem(atPath: identityFile) }
            let child = try Self.startChild(identityFile: identityFile, dialling: port, keyFile: keyFile)
            defer { child.stop() }
            try await events.waitUntilActive([childID])
            // Frozen: its kernel still acknowledges, only the application ping can tell.
            kill(child.pid, SIGSTOP)
            let left = try await events.waitUntilActive([])
            #expect(FaultTests.lastLeaveReason(left) == .keepaliveTimeout)
            kill(child.pid, SIGCONT)
            try await events.waitUntilActive([childID])
            #expect(await session.linkCount == 1)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aKilledAndRestartedPeerReturnsWithANewIncarnationAndNoDuplicate() async throws {
        try await Self.withLocalSession { session, events, port, keyFile in
            let (identityFile, childID) = try Self.childIdentity()
            defer { try? FileManager.default.removeItem(atPath: identityFile) }
            let first = try Self.startChild(identityFile: identityFile, dialling: port, keyFile: keyFile)
            let joined = try await events.waitUntilActive([childID])
            guard case .peerJoined(let before)? = joined.last else { return }
            kill(first.pid, SIGKILL)
            first.stop()
            try await events.waitUntilActive([])
            let second = try Self.startChild(identityFile: identityFile, dialling: port, keyFile: keyFile)
            defer { second.stop() }
            let rejoined = try await events.waitUntilActive([childID])
            guard case .peerJoined(let after)? = rejoined.last else { return }
            #expect(after.incarnation > before.incarnation, "a restart of one identity is newer")
            #expect(after.key == before.key)
            #expect(session.activePeers.count == 1)
            #expect(await session.linkCount == 1)
        }
    }
    /// A program that runs its session with `runUntilSignalled()` and is sent SIGTERM says
    /// GOODBYE before it ends: its peer sees it leave at once, for that reason, not after a
    /// keepalive timeout; and it exits 0.
    @Test(.scaledTimeLimit(minutes: 1))
    func aPeerSentSIGTERMSaysGoodbyeAndExitsCleanly() async throws {
        try await Self.withLocalSession { _, events, port, keyFile in
            let (identityFile, childID) = try Self.childIdentity()
            defer { try? FileManager.default.removeItem(atPath: identityFile) }
            let child = try Self.startChild(identityFile: identityFile, dialling: port, keyFile: keyFile)
            defer { child.stop() }
            try await events.waitUntilActive([childID])
            kill(child.pid, SIGTERM)
            let left = try await events.waitUntilActive([])
            #expect(FaultTests.lastLeaveReason(left) == .goodbye(.shutdown))
            #expect(await child.waitForExit() == 0)
        }
    }
}
