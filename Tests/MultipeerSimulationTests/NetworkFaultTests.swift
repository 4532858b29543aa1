import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// The network's faults beyond partitions (turmoil's and madsim's): a one-way cut, a hold let
/// go, a path's own impairment with one bandwidth for its connections, a drifting clock.
@Suite struct NetworkFaultTests {
    struct Numbered: Codable, Sendable, Equatable { var number: Int }
    struct Cargo: Codable, Sendable { var bytes: Data }

    /// Reads `session`'s Numbered messages in its host's process: each number with the
    /// simulated time it arrived.
    static func read(
        _ session: MultipeerSession,
        on host: SimulatedHost,
        in world: SimulatedWorld
    ) -> Collected<
        (
            number: Int, at: Duration
        )
    > {
        let received = Collected<(number: Int, at: Duration)>()
        Task(executorPreference: host.executor) {
            for await (_, message) in session.messages(of: Numbered.self) {
                received.append((message.number, world.now))
            }
        }
        return received
    }

    /// What the relief sends the captain is cut, nothing else: TCP goes half-open, each side's
    /// keepalive finds the other silent (the captain hears the relief's pings, but its pongs
    /// never arrive), neither can connect while it lasts, and both are together again once it
    /// heals.
    @Test func aOneWayCutIsFoundOnBothSidesAndHeals() async throws {
        let crew = try await FaultTests.Crew(["captain", "relief"], world: SimulatedWorld(seed: 31))
        let cut = await crew.world.cut(from: [crew.hosts[1]], to: [crew.hosts[0]])
        let detected = try await crew.world.run(until: { crew.apart(0, 1) }, within: .seconds(10))
        #expect(detected <= .seconds(5), "both sides found the cut after \(detected)")
        await crew.world.run(for: .seconds(10))
        #expect(crew.apart(0, 1), "no handshake completes over half a path")
        await cut.heal()
        let rejoined = try await crew.world.run(until: { crew.together(0, 1) }, within: .seconds(15))
        #expect(rejoined <= .seconds(11), "rejoined after \(rejoined)")
        await crew.world.shutdown()
    }

    /// What crosses between two hosts while a hold lasts waits, and arrives at once, every
    /// message once and in order, when it is let go; shorter than the keepalive's timeout, the
    /// hold costs the link nothing.
    @Test func whatAHoldKeptArrivesAtOnceInOrderWhenLetGo() async throws {
        let world = SimulatedWorld(seed: 32)
        try await Task(executorPreference: world.executor) {
            let crew = try await FaultTests.Crew(["captain", "relief"], world: world)
            let received = Self.read(crew.sessions[1], on: crew.hosts[1], in: world)
            let (captain, relief) = (crew.sessions[0], crew.sessions[1].peerID)
            let hold = await world.hold([crew.hosts[0]], from: [crew.hosts[1]])
            for number in 0..<20 { try await captain.send(Numbered(number: number), to: relief) }
            await world.run(for: .milliseconds(800))
            #expect(received.count == 0, "nothing crosses while held")
            let released = world.now
            await hold.heal()
            try await world.run(until: { received.count == 20 }, within: .seconds(5))
            #expect(received.all.map(\.number) == Array(0..<20))
            #expect(received.all.allSatisfy { $0.at - released < .milliseconds(50) }, "at once")
            #expect(crew.together(0, 1), "a hold shorter than the keepalive's timeout is no silence")
            await world.shutdown()
        }.value
    }

    /// A path given its own impairment one way: what the captain sends the relief takes its
    /// 200 ms, what the relief sends back the world's 250 µs; the hosts' other paths are theirs.
    @Test func aPathImpairedOneWayDelaysThatWayAlone() async throws {
        let world = SimulatedWorld(seed: 33)
        try await Task(executorPreference: world.executor) {
            let crew = try await FaultTests.Crew(["captain", "relief"], world: world)
            let toRelief = Self.read(crew.sessions[1], on: crew.hosts[1], in: world)
            let toCaptain = Self.read(crew.sessions[0], on: crew.hosts[0], in: world)
            await world.impair(from: crew.hosts[0], to: crew.hosts[1], oneWay: true, latency: .milliseconds(200))
            let sent = world.now
            try await crew.sessions[0].send(Numbered(number: 1), to: crew.sessions[1].peerID)
            try await crew.sessions[1].send(Numbered(number: 2), to: crew.sessions[0].peerID)
            try await world.run(until: { toRelief.count == 1 && toCaptain.count == 1 }, within: .seconds(5))
            #expect(toRelief.all[0].at - sent >= .milliseconds(200))
            #expect(toCaptain.all[0].at - sent < .milliseconds(10))
            await world.repair(from: crew.hosts[0], to: crew.hosts[1], oneWay: true)
            let again = world.now
            try await crew.sessions[0].send(Numbered(number: 3), to: crew.sessions[1].peerID)
            try await world.run(until: { toRelief.count == 2 }, within: .seconds(5))
            #expect(toRelief.all[1].at - again < .milliseconds(10), "repaired")
            await world.shutdown()
        }.value
    }

    /// Two sessions on each of two hosts, each pair with its own link over the one path
    /// between the hosts, capped at 500 kB/s: two messages of 500 kB sent at once share the
    /// path, and the last arrives after about two seconds, not one.
    @Test func aPathsBandwidthIsSharedByItsConnections() async throws {
        let world = SimulatedWorld(seed: 34)
        try await Task(executorPreference: world.executor) {
            let (captain, relief) = (world.addHost("captain"), world.addHost("relief"))
            var pairs: [(MultipeerSession, MultipeerSession)] = []
            for service in ["_one._tcp", "_two._tcp"] {
                let sessions = [captain, relief].map { host in
                    host.makeSession(
                        configuration: MultipeerSession.Configuration(
                            serviceType: service,
                            peer: PeerInfo(displayName: host.name),
                            psk: FaultTests.groupKey
                        ),
                        identity: PeerIdentity()
                    )
                }
                for (host, session) in zip([captain, relief], sessions) { host.start(session) }
                pairs.append((sessions[0], sessions[1]))
            }
            try await world.run(
                until: { [pairs] in pairs.allSatisfy { !$0.0.activePeers.isEmpty && !$0.1.activePeers.isEmpty } },
                within: .seconds(10)
            )
            await world.impair(from: captain, to: relief, latency: .milliseconds(1), bandwidth: 500_000)
            let received = Collected<Duration>()
            for (_, receiver) in pairs {
                Task(executorPreference: relief.executor) {
                    for await _ in receiver.messages(of: Cargo.self) { received.append(world.now) }
                }
            }
            let start = world.now
            for (sender, receiver) in pairs {
                try await sender.send(Cargo(bytes: Data(repeating: 7, count: 500_000)), to: receiver.peerID)
            }
            try await world.run(until: { received.count == 2 }, within: .seconds(10))
            let last = received.all.max()! - start
            #expect(last >= .milliseconds(1_900), "both 500 kB over one 500 kB/s path: the last after \(last)")
            #expect(last <= .milliseconds(2_600), "and not much more: \(last)")
            await world.shutdown()
        }.value
    }

    /// A watcher whose clock runs half as fast again finds a frozen peer silent after 1.5 s of
    /// its own time, which is 1 s of the world's; its wall clock gains as much.
    @Test func aFastClockTimesOutSoonerInTheWorldsTime() async throws {
        let crew = try await FaultTests.Crew(["captain", "relief"], world: SimulatedWorld(seed: 35))
        let before = crew.hosts[0].wallClock
        crew.hosts[0].driftClock(by: 0.5)
        crew.hosts[1].freeze()
        let detected = try await crew.world.run(until: { crew.sessions[0].activePeers.isEmpty }, within: .seconds(10))
        #expect(detected >= .milliseconds(900) && detected <= .milliseconds(1_100), "detected after \(detected)")
        let gained = crew.hosts[0].wallClock.timeIntervalSince(before)
        let seconds = Double(detected.components.seconds) + Double(detected.components.attoseconds) / 1e18
        #expect(abs(gained - 1.5 * seconds) < 0.001, "its wall clock gained \(gained) s in \(detected)")
        crew.hosts[1].thaw()
        crew.hosts[0].driftClock(by: 0)
        try await crew.world.run(until: { crew.together(0, 1) }, within: .seconds(15))
        await crew.world.shutdown()
    }
}
