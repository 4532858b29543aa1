import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// The testing product as an application's tests use it: sessions made by simulated hosts,
/// faults as calls, assertions in simulated time.
@Suite struct SimulationTests {
    static func configuration(_ name: String) -> MultipeerSession.Configuration {
        MultipeerSession.Configuration(serviceType: "_consumer._tcp", peer: PeerInfo(displayName: name), psk: groupKey)
    }

    /// Two hosts of a world of `seed`, each running a session, joined: captain's `a` and
    /// relief's `b`, whose application reads notes into `notes`.
    struct Joined {
        let world: SimulatedWorld
        let captain: SimulatedHost
        let relief: SimulatedHost
        let a: MultipeerSession
        let b: MultipeerSession
        let notes: Received
    }

    static func joined(seed: UInt64) async throws -> Joined {
        let world = SimulatedWorld(seed: seed)
        let (captain, relief) = (world.addHost("captain"), world.addHost("relief"))
        let a = captain.makeSession(configuration: configuration("captain"))
        let b = relief.makeSession(configuration: configuration("relief"))
        let notes = reading(b, on: relief)
        captain.start(a)
        relief.start(b)
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))
        return Joined(world: world, captain: captain, relief: relief, a: a, b: b, notes: notes)
    }

    /// The notes `session`'s application reads, in `host`'s process.
    static func reading(_ session: MultipeerSession, on host: SimulatedHost) -> Received {
        let notes = Received()
        Task(executorPreference: host.executor) {
            for await (_, note) in session.messages(of: Note.self) { notes.add(note.text) }
        }
        return notes
    }

    /// An application that reads a session from a plain task, outside the world, is named: in
    /// the world's `outsideReaders`, in its trace, and by a timeout (the world neither waits for
    /// such a reader nor sees it, so simulated time runs ahead of it).
    @Test func aReaderOutsideTheWorldIsNamed() async throws {
        let pair = try await Self.joined(seed: 5)
        let (world, a, b) = (pair.world, pair.a, pair.b)
        #expect(world.outsideReaders.isEmpty, "readers on their host's executor are in the world")
        let notes = a.messages(of: Note.self)
        let outside = Task { () -> String? in  // a plain task: on Swift's global executor
            for await (_, note) in notes { return note.text }
            return nil
        }
        try await b.send(Note(text: "to the captain"), to: a.peerID)
        await world.run(for: .seconds(1))
        #expect(await outside.value == "to the captain")
        #expect(world.outsideReaders == ["captain"])
        #expect(
            world.trace.lines.contains { $0.text.hasPrefix("warning: an application reads captain's session outside") }
        )
        let timeout = await #expect(throws: SimulationTimeout.self) {
            try await world.run(until: { false }, within: .seconds(1))
        }
        #expect(timeout?.description.contains("read the sessions of captain from outside the world") == true)
        await world.shutdown()
    }

    /// (What it costs in wall time is Benchmarks/SimulationBenchmark's to say: milliseconds.)
    @Test func aFrozenPeerIsDetectedAndRejoins() async throws {
        let pair = try await Self.joined(seed: 3)
        let (world, purser, a, b) = (pair.world, pair.relief, pair.a, pair.b)
        #expect(a.activePeers.first?.id == purser.identity.peerID)

        purser.freeze()
        let detected = try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))
        #expect(
            detected >= .milliseconds(1_400) && detected <= .milliseconds(1_600),
            "the default timeout, 1.5 s: \(detected)"
        )
        purser.thaw()
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(20))
        await world.shutdown()
    }

    /// A reliable message sent while its receiver is killed reaches the receiver's next
    /// incarnation (same identity): a receiver that restarts gets what it never acknowledged.
    /// The network's finer faults from an application's tests: a hold keeps the captain's note
    /// back until let go, then it arrives; a one-way cut leaves both sides apart until healed;
    /// a drifting clock shows in the host's wall clock.
    @Test func aHoldAOneWayCutAndADriftingClock() async throws {
        let pair = try await Self.joined(seed: 8)
        let (world, captain, relief, a, b) = (pair.world, pair.captain, pair.relief, pair.a, pair.b)
        let hold = await world.hold([captain], from: [relief])
        try await world.run(within: .seconds(1)) { try await a.send(Note(text: "held"), to: b.peerID) }
        await world.run(for: .milliseconds(500))
        #expect(pair.notes.texts.isEmpty, "held")
        await hold.heal()
        try await world.run(until: { pair.notes.texts == ["held"] }, within: .seconds(1))

        let cut = await world.cut(from: [relief], to: [captain])
        try await world.run(until: { a.activePeers.isEmpty && b.activePeers.isEmpty }, within: .seconds(10))
        await cut.heal()
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(15))

        let before = relief.wallClock
        relief.driftClock(by: -0.1)
        await world.run(for: .seconds(10))
        #expect(abs(relief.wallClock.timeIntervalSince(before) - 9) < 0.001, "10 s of the world's, 9 of its own")
        await world.shutdown()
    }

    @Test func aMessageForAKilledPeerReachesItsRestart() async throws {
        let pair = try await Self.joined(seed: 4)
        let (world, relief, a) = (pair.world, pair.relief, pair.a)

        await relief.kill()
        try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))
        try await a.send(Note(text: "while you were away"), to: relief.identity.peerID)

        relief.restart()
        let restarted = relief.makeSession(configuration: Self.configuration("relief"))
        let received = Self.reading(restarted, on: relief)
        relief.start(restarted)
        try await world.run(until: { received.texts == ["while you were away"] }, within: .seconds(30))
        #expect(
            world.trace.lines.contains {
                $0.host == "relief" && $0.text.contains("captain") && $0.text.contains("joined")
            }
        )
        await world.shutdown()
    }

    /// A receiver that stops in the middle of a burst gets again, in its next run, what its
    /// previous process had read but whose acknowledgements never reached the sender (here its
    /// Wi-Fi drops, taking what was in the air with it, and then its process is killed): exactly
    /// once towards each run of the receiver, nothing lost, each run's messages in order.
    @Test func aRestartedReceiverGetsAgainWhatItsPreviousRunReadUnacknowledged() async throws {
        let pair = try await Self.joined(seed: 7)
        let (world, captain, relief, a, first) = (pair.world, pair.captain, pair.relief, pair.a, pair.notes)
        // 50 ms each way, and 1 KB of note every 5 ms: about ten notes' acknowledgements in the air.
        await relief.impair(latency: .milliseconds(50), bandwidth: 200_000)
        let notes = (1...160).map { Note(text: "\($0) " + String(repeating: ".", count: 1_000)) }
        let peer = relief.identity.peerID
        Task(executorPreference: captain.executor) {
            for note in notes { try await a.send(note, to: peer) }
        }
        try await world.run(until: { first.texts.count >= 80 }, within: .seconds(10))
        let cut = await relief.blackHole()
        await relief.kill()
        let read = first.texts
        #expect(read == Array(notes.prefix(read.count).map(\.text)), "the first run's notes, in order")

        relief.restart()
        let restarted = relief.makeSession(configuration: Self.configuration("relief"))
        let second = Self.reading(restarted, on: relief)
        relief.start(restarted)
        await cut.heal()
        try await world.run(until: { second.texts.last == notes.last?.text }, within: .seconds(60))

        let again = second.texts
        let from = notes.firstIndex { $0.text == again.first }!
        #expect(again == notes[from...].map(\.text), "the next run's notes: in order, none missing, through the last")
        #expect(
            from < read.count,
            "the next run gets again what the first read, unacknowledged: from \(from + 1), the first read \(read.count)"
        )
        #expect(read.count - from <= 30, "no more than about a round trip's worth: \(read.count - from) again")
        await world.shutdown()
    }

    /// What takes simulated time to come back is awaited inside `world.run(within:)`: a send
    /// awaiting its acknowledgement returns once the peer's application has the message.
    @Test func anAcknowledgedSendReturnsInSimulatedTime() async throws {
        let pair = try await Self.joined(seed: 5)
        let (world, relief, a, b, received) = (pair.world, pair.relief, pair.a, pair.b, pair.notes)
        await relief.impair(latency: .milliseconds(40))
        let before = world.now
        try await world.run(within: .seconds(5)) {
            try await a.send(Note(text: "acknowledged"), to: b.peerID, awaitAcknowledgement: true)
        }
        #expect(received.texts == ["acknowledged"], "in the peer's application once the send returns")
        #expect(
            world.now - before >= .milliseconds(80),
            "a round trip of the 40 ms path at least: \(world.now - before)"
        )
        await world.shutdown()
    }

    /// A device whose lid closes is timed out by its peers (it acknowledges nothing); it rejoins
    /// when it wakes. Rebooted with its clock an hour behind, its next session is an older
    /// incarnation by the wall clock, and joins all the same.
    @Test func aSleepingPeerIsTimedOutAndABootWithItsClockBehindStillJoins() async throws {
        let pair = try await Self.joined(seed: 6)
        let (world, relief, a, b) = (pair.world, pair.relief, pair.a, pair.b)

        await relief.sleep()
        let detected = try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))
        #expect(
            detected >= .milliseconds(1_400) && detected <= .milliseconds(1_600),
            "the default timeout, 1.5 s: \(detected)"
        )
        await world.run(for: .seconds(10))
        await relief.wake()
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(15))

        await relief.kill()
        relief.restart()
        relief.stepClock(by: .seconds(-3_600))
        let rebooted = relief.makeSession(configuration: Self.configuration("relief"))
        relief.start(rebooted)
        #expect(rebooted.incarnation < b.incarnation)
        try await world.run(until: { a.activePeers.first?.incarnation == rebooted.incarnation }, within: .seconds(15))
        await world.shutdown()
    }

    final class Received: @unchecked Sendable {
        private let lock = NSLock()
        private var all: [String] = []
        func add(_ text: String) { lock.withLock { all.append(text) } }
        var texts: [String] { lock.withLock { all } }
    }
}
