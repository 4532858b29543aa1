import Foundation
import Glibc
import MultipeerCore
import MultipeerTestSupport
import Testing

@testable import MultipeerSession

/// Membership beyond the group key: a roster of member keys or IDs, read from a file and
/// changed while the session runs (revocation without re-keying everyone).
@Suite struct RosterTests {
    @Test func aRosterFileListsKeysAndIDsWithComments() throws {
        let captain = PeerIdentity()
        let officer = PeerIdentity()
        let stranger = PeerIdentity()
        let text = """
            # navlog crew
            \(captain.key)   # captain, by key

            \(officer.peerID.uuidString.lowercased())  # first officer, by ID
            """
        let roster = try Roster(parsing: text)
        #expect(roster.admits(captain.key) && roster.admits(officer.key))
        #expect(!roster.admits(stranger.key))
        #expect(!Roster().admits(captain.key), "an empty roster admits nobody")

        for (bad, expected) in [
            ("\(captain.key) extra", "line 1"),
            ("\n\ncafe", "line 3 of the roster is neither a peer ID nor a peer key"),
        ] {
            let error = try #require(throws: MultipeerError.self) { try Roster(parsing: bad) }
            #expect(error.code == .invalidArgument)
            #expect(error.message.contains(expected), "\(error.message)")
        }
    }

    /// Whoever can write the roster decides who joins: a file others could write, replace or
    /// point elsewhere is refused, with the fix.
    @Test func aRosterFileOthersCouldWriteIsRefused() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("roster-\(UUID())").path
        defer { unlink(path) }
        try "# nobody yet\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o644)
        #expect(try Roster(contentsOfFile: path) == Roster(), "readable by others is fine: it holds no secret")
        chmod(path, 0o664)
        let error = try #require(throws: MultipeerError.self) { try Roster(contentsOfFile: path) }
        #expect(error.message.contains("chmod go-w \(path)"), "\(error.message)")
        chmod(path, 0o644)
        let link = path + "-link"
        symlink(path, link)
        defer { unlink(link) }
        let linked = try #require(throws: MultipeerError.self) { try Roster(contentsOfFile: link) }
        #expect(linked.message.contains("symbolic link"), "\(linked.message)")
        chown(path, 65534, 65534)
        let owner = try #require(throws: MultipeerError.self) { try Roster(contentsOfFile: path) }
        #expect(owner.message.contains("belongs to user 65534"), "\(owner.message)")
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func outsidersAreRefusedAndARemovedMemberIsClosedAtOnceAndRefusedAfter() async throws {
        let member = PeerIdentity()
        let server = MultipeerSession(
            configuration: .test("alpha", discovery: .staticPeers([])).with { $0.roster = Roster(keys: [member.key]) },
            identity: PeerIdentity()
        )
        let serverEvents = EventLog(server.events)
        try await whileRunning([server]) {
            let port = try await serverEvents.listeningPort()
            // Refused, they try again at the longest backoff: short here, so the test is.
            let patient = ReconnectParameters(maximumDelay: TestTime.scaled(.seconds(2)))
            let outsider = MultipeerSession(
                configuration: .test("outsider", discovery: .staticPeers(["127.0.0.1:\(port)"])).with {
                    $0.reconnect = patient
                },
                identity: PeerIdentity()
            )
            let bravo = MultipeerSession(
                configuration: .test("bravo", discovery: .staticPeers(["127.0.0.1:\(port)"])).with {
                    $0.reconnect = patient
                },
                identity: member
            )
            let bravoEvents = EventLog(bravo.events)
            try await whileRunning([outsider, bravo]) {
                try await serverEvents.waitUntilActive([bravo.peerID])
                let refused = try await serverEvents.wait { events in
                    IdentityTests.refusals(events).contains {
                        $0.code == .notInRoster && $0.message.contains("\(outsider.peerID)")
                    }
                }
                #expect(activeIDs(refused) == [bravo.peerID], "the outsider never became active")

                // Bravo is removed: its link closes at once, both sides say why.
                await server.updateRoster(Roster())
                let left = try await serverEvents.waitUntilActive([])
                #expect(HostileClientTests.leftReason(bravo.peerID, in: left) == .local(.notInRoster))
                let bravoLeft = try await bravoEvents.wait {
                    HostileClientTests.leftReason(server.peerID, in: $0) != nil
                }
                #expect(HostileClientTests.leftReason(server.peerID, in: bravoLeft) == .goodbye(.notInRoster))
                // Its next link is refused.
                let before = IdentityTests.refusals(serverEvents.history).filter {
                    $0.message.contains("\(bravo.peerID)")
                }.count
                try await serverEvents.wait { events in
                    IdentityTests.refusals(events).filter { $0.message.contains("\(bravo.peerID)") }.count > before
                }
                #expect(activeIDs(serverEvents.history).isEmpty)

                // Without a roster any holder of the group key is admitted again.
                await server.updateRoster(nil)
                try await serverEvents.waitUntilActive([bravo.peerID, outsider.peerID])
            }
        }
    }
}

extension MultipeerSession.Configuration {
    /// This configuration, changed by `change`.
    func with(_ change: (inout Self) -> Void) -> Self {
        var copy = self
        change(&copy)
        return copy
    }
}
