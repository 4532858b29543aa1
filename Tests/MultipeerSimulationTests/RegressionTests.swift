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

    struct Note: Codable, Sendable {
        var number: Int
    }

    /// Seed 998 of `make simulate`: a send awaiting its acknowledgement from a peer away whose
    /// outbox stayed full gave up after `Limits.sendTimeout` with `peerAway`, the code a wait
    /// for the acknowledgement of a queued message throws too; the checker took the message for
    /// queued, and for lost when it never came. It was never queued, and its error says so: the
    /// messages queued before it arrive when the peer comes back, it does not, and a send that
    /// was queued and gave up waiting for its acknowledgement says it stays queued, and arrives.
    @Test func aSendThatGaveUpWaitingForRoomWasNeverQueuedAndSaysSo() async throws {
        let world = SimulatedWorld(seed: 998)
        try await Task(executorPreference: world.executor) {
            let captain = world.addHost("captain")
            let relief = world.addHost("relief")
            var configuration = MultipeerSession.Configuration(
                serviceType: "_sim._tcp",
                peer: PeerInfo(displayName: "captain"),
                psk: Self.groupKey
            )
            configuration.limits.outbox = BufferLimits(maximumCount: 3, maximumBytes: 1 << 20)
            configuration.limits.sendTimeout = .seconds(5)
            let a = captain.makeSession(configuration: configuration)
            let b = relief.makeSession(
                configuration: MultipeerSession.Configuration(
                    serviceType: "_sim._tcp",
                    peer: PeerInfo(displayName: "relief"),
                    psk: Self.groupKey
                )
            )
            let received = Collected<Int>()
            Task(executorPreference: relief.executor) {
                for await (_, note) in b.messages(of: Note.self) { received.append(note.number) }
            }
            captain.start(a)
            relief.start(b)
            try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))
            let cut = await relief.blackHole()
            try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))

            // Queued, and its wait for the acknowledgement gives up: it stays queued.
            let awaited = try await world.run(within: .seconds(20)) { () -> MultipeerError? in
                do {
                    try await a.send(Note(number: 0), to: relief.identity.peerID, awaitAcknowledgement: true)
                    return nil
                } catch let error as MultipeerError { return error }
            }
            #expect(awaited?.code == .peerAway && awaited?.message.contains("The message stays queued") == true)
            for number in 1...2 { try await a.send(Note(number: number), to: relief.identity.peerID) }
            // The outbox is full: this one waits for room, gives up, and was never queued.
            let refused = try await world.run(within: .seconds(20)) { () -> MultipeerError? in
                do {
                    try await a.send(Note(number: 3), to: relief.identity.peerID, awaitAcknowledgement: true)
                    return nil
                } catch let error as MultipeerError { return error }
            }
            #expect(refused?.code == .peerAway)
            #expect(refused?.message.contains("the send gave up") == true, "\(String(describing: refused))")
            #expect(refused?.message.contains("The message stays queued") == false)

            await cut.heal()
            try await world.run(
                until: { received.count == 3 },
                within: .seconds(60)
            )
            await world.run(for: .seconds(5))
            #expect(received.all == [0, 1, 2], "what was queued arrives; the one that gave up does not")
            await world.shutdown()
        }.value
    }
}
