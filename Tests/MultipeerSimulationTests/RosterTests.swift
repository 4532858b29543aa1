import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// IntegrationTests/RosterTests in a simulated world: who a roster admits, and what changing
/// it does to a running link, at the default redial backoff (its 10 s costs nothing here).
@Suite struct RosterTests {
    @Test func outsidersAreRefusedAndARemovedMemberIsClosedAtOnceAndRefusedAfter() async throws {
        let world = SimulatedWorld(seed: 12)
        try await Task(executorPreference: world.executor) {
            let (alpha, bravo, outsider) = (world.addHost("alpha"), world.addHost("bravo"), world.addHost("outsider"))
            var guarded = FaultTests.configuration("alpha")
            guarded.roster = Roster(keys: [bravo.identity.key])
            let server = alpha.makeSession(configuration: guarded)
            let member = bravo.makeSession(configuration: FaultTests.configuration("bravo"))
            let stranger = outsider.makeSession(configuration: FaultTests.configuration("outsider"))
            let (serverEvents, memberEvents) = (EventRecorder(server, in: world), EventRecorder(member, in: world))
            for (host, session) in [(alpha, server), (bravo, member), (outsider, stranger)] { host.start(session) }
            @Sendable func refused(_ peerID: UUID) -> Int {
                serverEvents.refusals.filter { $0.error.code == .notInRoster && $0.error.message.contains("\(peerID)") }
                    .count
            }

            try await world.run(
                until: { server.activePeers.map(\.id) == [member.peerID] && refused(stranger.peerID) > 0 },
                within: .seconds(10)
            )
            await world.run(for: .seconds(30))
            #expect(server.activePeers.map(\.id) == [member.peerID], "the outsider never became active")
            #expect(stranger.activePeers.map(\.id) == [member.peerID], "it meets the others, who keep no roster")

            // Bravo is removed: its link closes at once, both sides say why.
            let removedAt = world.now
            await server.updateRoster(Roster())
            try await world.run(
                until: { server.activePeers.isEmpty && !memberEvents.departures(of: server.peerID).isEmpty },
                within: .seconds(1)
            )
            #expect(serverEvents.departures(of: member.peerID).map(\.reason) == [.local(.notInRoster)])
            #expect(memberEvents.departures(of: server.peerID).map(\.reason) == [.goodbye(.notInRoster)])
            #expect(
                serverEvents.departures(of: member.peerID).first.map { $0.at - removedAt } ?? .seconds(1)
                    < .milliseconds(10),
                "at once"
            )
            // Its next link is refused, and so is every one after.
            let before = refused(member.peerID)
            try await world.run(until: { refused(member.peerID) > before }, within: .seconds(15))
            await world.run(for: .seconds(30))
            #expect(server.activePeers.isEmpty)

            // Without a roster any holder of the group key is admitted again, within a backoff.
            await server.updateRoster(nil)
            let admitted = try await world.run(
                until: { Set(server.activePeers.map(\.id)) == [member.peerID, stranger.peerID] },
                within: .seconds(15)
            )
            #expect(
                admitted <= .seconds(13),
                "a refused peer redials within the longest backoff with its jitter: \(admitted)"
            )
            await world.shutdown()
        }.value
    }
}
