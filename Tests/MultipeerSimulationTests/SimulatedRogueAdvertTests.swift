import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// The host suite's rogue adverts in a simulated world: adverts anyone can publish, claiming a
/// member's ID with the greatest incarnation and pointing at a host that accepts TCP and never
/// answers. They cost a dial a short attempt; they keep no member from another.
@Suite struct SimulatedRogueAdvertTests {
    @Test func advertsCopyingEachMembersIDPointingAtASinkKeepNoOneApart() async throws {
        let world = SimulatedWorld(seed: 20)
        try await Task(executorPreference: world.executor) {
            let captain = world.addHost("captain")
            let relief = world.addHost("relief")
            let rogue = world.addHost("rogue")
            // The sink: a process whose kernel accepts connections and which never answers.
            let sinkSession = rogue.makeSession(configuration: FaultTests.configuration("sink"))
            rogue.start(sinkSession)
            try await world.run(within: .seconds(5)) {
                while await sinkSession.listeningPort == nil { await Task.yield() }
            }
            let sinkPort = try #require(await sinkSession.listeningPort)
            rogue.freeze()

            var adverts: [SimulatedAdvert] = []
            for (name, host) in [("captain", captain), ("relief", relief)] {
                for _ in 1...2 {
                    let claims = [
                        "v=2", "id=\(host.identity.peerID.uuidString.lowercased())", "inc=\(UInt64.max)",
                        "name=\(name)",
                    ]
                    adverts.append(await world.advertise("_sim._tcp", txt: claims, at: rogue.address, port: sinkPort))
                }
            }
            // The members start after the adverts: each sees the rogue ones first.
            let a = captain.makeSession(configuration: FaultTests.configuration("captain"))
            let b = relief.makeSession(configuration: FaultTests.configuration("relief"))
            captain.start(a)
            relief.start(b)
            let joined = try await world.run(
                until: { a.activePeers.count == 1 && b.activePeers.count == 1 },
                within: .seconds(15)
            )
            #expect(
                a.activePeers.first?.id == relief.identity.peerID && b.activePeers.first?.id == captain.identity.peerID
            )
            // A dial tries the sink once, briefly (a fifth of the handshake timeout), then the real endpoint.
            #expect(joined < .seconds(3), "joined after \(joined)")
            let atSink = world.trace.lines.filter {
                $0.text.contains("\(rogue.address):\(sinkPort)") && $0.text.contains("failed")
            }
            #expect(!atSink.isEmpty, "the rogue endpoint was tried and failed")

            // Withdrawn, they are gone from what the members know; nobody left.
            for advert in adverts { await advert.withdraw() }
            await world.run(for: .seconds(5))
            #expect(a.activePeers.count == 1 && b.activePeers.count == 1)
            await world.shutdown()
        }.value
    }
}
