import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// The dialler's decisions in a simulated world (IntegrationTests' SessionTests and
/// FaultTests): redials back off while a path is dead, stop while a peer is gone, and come
/// back when it does.
@Suite struct RedialTests {
    /// A minute and a half behind a black hole: each dial fails after the connect timeout, the
    /// delays between them grow by 1.6 up to 10 s (+-20 %), and once healed the peer is back
    /// within the next one.
    @Test func redialsThroughALongBlackHoleBackOffToTheCapAndFindTheHeal() async throws {
        let world = SimulatedWorld(seed: 13)
        try await Task(executorPreference: world.executor) {
            let crew = try await FaultTests.Crew(["captain", "relief"], world: world)
            let recorders = crew.sessions.map { EventRecorder($0, in: world) }
            let cutAt = world.now
            let hole = await crew.hosts[1].blackHole()
            await world.run(for: .seconds(90))
            let dials = recorders.flatMap(\.failedDials).sorted()
            #expect(!dials.isEmpty, "the dialler kept trying")
            // From 100 ms growing by 1.6, the delays reach the cap after about ten dials (18 s
            // of delays, plus each dial's 1.5 s connect timeout): then one every 10 s +-20 %.
            #expect(
                dials.count >= 10 && dials.count <= 20,
                "\(dials.count) dials failed in 90 s: \(dials.map { $0 - cutAt })"
            )
            let late = dials.filter { $0 - cutAt > .seconds(50) }
            let gaps = zip(late.dropFirst(), late).map { $0 - $1 }
            #expect(
                gaps.allSatisfy { $0 >= .seconds(8) && $0 <= .seconds(14) },
                "capped delays (plus the connect timeout): \(gaps)"
            )
            await hole.heal()
            let back = try await world.run(until: { crew.together(0, 1) }, within: .seconds(20))
            #expect(back <= .seconds(14), "back \(back) after the heal")
            await world.shutdown()
        }.value
    }

    /// A peer that stops says GOODBYE: it is not redialled while it is gone (its advert gone
    /// with it), and when it comes back it is dialled at once.
    @Test func aPeerThatStopsIsNotRedialledUntilItComesBack() async throws {
        let world = SimulatedWorld(seed: 14)
        try await Task(executorPreference: world.executor) {
            let (captain, relief) = (world.addHost("captain"), world.addHost("relief"))
            let staying = captain.makeSession(configuration: FaultTests.configuration("captain"))
            let leaving = relief.makeSession(configuration: FaultTests.configuration("relief"))
            let events = EventRecorder(staying, in: world)
            captain.start(staying)
            let running = relief.start(leaving)
            try await world.run(
                until: { staying.activePeers.count == 1 && leaving.activePeers.count == 1 },
                within: .seconds(10)
            )
            // Stopped as a SIGTERM stops it: GOODBYE on its links, then its advert goes.
            running.cancel()
            try await world.run(
                until: {
                    events.contains {
                        if case .availablePeerChanged(let peer) = $0 { peer.state == .gone } else { false }
                    }
                },
                within: .seconds(5)
            )
            #expect(events.departures(of: leaving.peerID).map(\.reason) == [.goodbye(.shutdown)])
            await world.run(for: .seconds(60))
            #expect(events.failedDials.isEmpty, "no dial of a peer that said it stops: \(events.failedDials)")

            let back = relief.makeSession(configuration: FaultTests.configuration("relief"))
            relief.start(back)
            let took = try await world.run(
                until: { staying.activePeers.map(\.id) == [back.peerID] },
                within: .seconds(5)
            )
            #expect(took < .seconds(1), "dialled as soon as its advert came back: \(took)")
            await world.shutdown()
        }.value
    }
}
