import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// IntegrationTests/KeyRotationTests in a simulated world: a group changes its key while it
/// runs, each step at once, with latecomers holding either key.
@Suite struct KeyRotationTests {
    static let old = try! PreSharedKey(identity: "crew-2026-11", passphrase: "the old key of the simulation tests")
    static let new = try! PreSharedKey(identity: "crew-2026-12", passphrase: "the new key of the simulation tests")

    static func configuration(_ name: String, keys: [PreSharedKey]) throws -> MultipeerSession.Configuration {
        var configuration = MultipeerSession.Configuration(
            serviceType: "_sim._tcp",
            peer: PeerInfo(displayName: name),
            psk: keys[0]
        )
        configuration.keys = try KeyRing(keys)
        return configuration
    }

    struct Numbered: Codable, Sendable, Equatable { var number: Int }

    @Test func aGroupRotatesItsKeyWhileItRunsWithNoLinkTornDownAndNothingLost() async throws {
        let world = SimulatedWorld(seed: 11)
        try await Task(executorPreference: world.executor) {
            func start(_ name: String, _ keys: [PreSharedKey]) throws -> (MultipeerSession, EventRecorder) {
                let host = world.addHost(name)
                let session = host.makeSession(configuration: try Self.configuration(name, keys: keys))
                let recorder = EventRecorder(session, in: world)
                host.start(session)
                return (session, recorder)
            }
            let (alpha, alphaEvents) = try start("alpha", [Self.old])
            let (bravo, bravoEvents) = try start("bravo", [Self.old])
            let (charlie, charlieEvents) = try start("charlie", [Self.old])
            let group = [alpha, bravo, charlie]
            let received = Collected<Int>()
            Task(executorPreference: world.executor) {
                for await (_, message) in charlie.messages(of: Numbered.self) { received.append(message.number) }
            }
            try await world.run(until: { group.allSatisfy { $0.activePeers.count == 2 } }, within: .seconds(10))
            var sent = 0
            func send(_ count: Int) async throws {
                for _ in 0..<count {
                    try await alpha.send(Numbered(number: sent), to: charlie.peerID)
                    sent += 1
                }
            }

            // Step 1: the new key reaches alpha only; alpha dials with it first and falls back
            // to the old one for peers that do not hold it yet.
            try await alpha.updateKeys(KeyRing([Self.old, Self.new]))
            try await send(20)
            let (delta, deltaEvents) = try start("delta", [Self.old, Self.new])
            try await world.run(until: { delta.activePeers.count == 3 }, within: .seconds(15))
            #expect(deltaEvents.refusals.isEmpty, "falling back to the old key is no failure to report")

            // Step 2: everyone has both keys; step 3: the old one goes everywhere.
            for session in [bravo, charlie] { try await session.updateKeys(KeyRing([Self.old, Self.new])) }
            try await send(20)
            for session in group + [delta] { try await session.updateKeys(KeyRing(Self.new)) }
            try await send(20)

            // A peer with only the new key joins everyone; one with only the old key joins nobody.
            let (fresh, _) = try start("fresh", [Self.new])
            let (stale, staleEvents) = try start("stale", [Self.old])
            try await world.run(
                until: { fresh.activePeers.count == 4 && !staleEvents.refusals.isEmpty },
                within: .seconds(15)
            )
            await world.run(for: .seconds(10))
            #expect(stale.activePeers.isEmpty, "the old key alone opens nothing")

            // Nothing was lost, and no link of the group was ever torn down.
            let last = sent
            try await world.run(within: .seconds(5)) {
                try await alpha.send(Numbered(number: last), to: charlie.peerID, awaitAcknowledgement: true)
            }
            let total = sent + 1
            try await world.run(until: { received.count == total }, within: .seconds(5))
            #expect(received.all == Array(0...sent))
            for (session, events) in zip(group, [alphaEvents, bravoEvents, charlieEvents]) {
                for member in group where member !== session {
                    #expect(
                        events.departures(of: member.peerID).isEmpty,
                        "\(session.peerID) lost \(member.peerID)'s link"
                    )
                }
            }
            await world.shutdown()
        }.value
    }
}
