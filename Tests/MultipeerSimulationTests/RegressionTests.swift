import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// Defects the simulator found, each kept as the scenario that showed it.
@Suite struct RegressionTests {
    static let groupKey = try! PreSharedKey(identity: "simulation", passphrase: "simulation tests only, not a secret")

    /// A host frozen for 4 s and thawed rejoins; a black hole right after is then found by the
    /// thawed host in the usual 1.5 s, not in the many seconds its own freeze would allow were
    /// it taken for the path's stall.
    @Test func aPeerThawedFindsTheNextFaultAsSoonAsEver() async throws {
        let world = SimulatedWorld(seed: 1)
        try await Task(executorPreference: world.executor) {
            let captain = world.addHost("captain")
            let relief = world.addHost("relief")
            let configuration = { (name: String) in
                MultipeerSession.Configuration(
                    serviceType: "_sim._tcp",
                    peer: PeerInfo(displayName: name),
                    psk: Self.groupKey
                )
            }
            let a = captain.makeSession(configuration: configuration("captain"))
            let b = relief.makeSession(configuration: configuration("relief"))
            captain.start(a)
            relief.start(b)
            try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))
            relief.freeze()
            await world.run(for: .seconds(4))
            relief.thaw()
            try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(20))
            await world.run(for: .seconds(3))
            await captain.blackHole()
            let detected = try await world.run(until: { b.activePeers.isEmpty }, within: .seconds(30))
            #expect(detected <= .milliseconds(1_600), "the thawed host found the black hole after \(detected)")
            await world.shutdown()
        }.value
    }
}
