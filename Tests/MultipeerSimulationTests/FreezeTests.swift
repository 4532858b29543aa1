import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// Two devices in a simulated world: real sessions (TLS, HELLO, keepalive, dials) over
/// simulated TCP, DNS-SD and time.
@Suite struct FreezeTests {
    static let groupKey = try! PreSharedKey(identity: "simulation", passphrase: "simulation tests only, not a secret")

    static func configuration(_ name: String) -> MultipeerSession.Configuration {
        MultipeerSession.Configuration(serviceType: "_sim._tcp", peer: PeerInfo(displayName: name), psk: groupKey)
    }

    @Test func aFrozenPeerIsDetectedAndRejoinsWhenThawed() async throws {
        let world = SimulatedWorld()
        let captain = world.addHost("captain")
        let purser = world.addHost("purser")
        let a = captain.makeSession(configuration: Self.configuration("captain"), identity: PeerIdentity())
        let b = purser.makeSession(configuration: Self.configuration("purser"), identity: PeerIdentity())
        captain.start(a)
        purser.start(b)

        // Found over the simulated DNS-SD, dialled, authenticated: active on both sides.
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))
        #expect(a.activePeers.first?.id == b.peerID)

        // Frozen as under SIGSTOP: its kernel still acknowledges, so the captain's keepalive
        // finds it hung and drops it at the default timeout (1.5 s), not sooner.
        let frozenAt = world.now
        purser.freeze()
        let detected = try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))
        #expect(detected >= .milliseconds(1_400) && detected <= .milliseconds(1_600), "detected after \(detected)")
        #expect(b.activePeers.count == 1, "the frozen side has not run")

        // Ten seconds frozen: the dialler's redials reach a kernel that accepts them and a
        // process that never answers. Thawed, it finds its link gone, and the two meet again.
        await world.run(for: .seconds(10))
        #expect(a.activePeers.isEmpty && b.activePeers.count == 1)
        purser.thaw()
        let rejoined = try await world.run(
            until: { a.activePeers.count == 1 && b.activePeers.count == 1 },
            within: .seconds(20)
        )
        #expect(a.activePeers.first?.id == b.peerID && b.activePeers.first?.id == a.peerID)
        #expect(world.now - frozenAt >= detected + rejoined)

        await world.shutdown()
        #expect(a.activePeers.isEmpty && b.activePeers.isEmpty)
    }
}
