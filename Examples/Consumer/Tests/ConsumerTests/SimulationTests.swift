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

    /// (What it costs in wall time is Benchmarks/SimulationBenchmark's to say: milliseconds.)
    @Test func aFrozenPeerIsDetectedAndRejoins() async throws {
        let world = SimulatedWorld(seed: 3)
        let captain = world.addHost("captain")
        let purser = world.addHost("purser")
        let a = captain.makeSession(configuration: Self.configuration("captain"))
        let b = purser.makeSession(configuration: Self.configuration("purser"))
        captain.start(a)
        purser.start(b)
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))
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
    @Test func aMessageForAKilledPeerReachesItsRestart() async throws {
        let world = SimulatedWorld(seed: 4)
        let captain = world.addHost("captain")
        let relief = world.addHost("relief")
        let a = captain.makeSession(configuration: Self.configuration("captain"))
        captain.start(a)
        relief.start(relief.makeSession(configuration: Self.configuration("relief")))
        try await world.run(until: { a.activePeers.count == 1 }, within: .seconds(10))

        await relief.kill()
        try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))
        try await a.send(Note(text: "while you were away"), to: relief.identity.peerID)

        relief.restart()
        let restarted = relief.makeSession(configuration: Self.configuration("relief"))
        let received = Received()
        Task(executorPreference: relief.executor) {
            for await (_, note) in restarted.messages(of: Note.self) { received.add(note.text) }
        }
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
        let world = SimulatedWorld(seed: 7)
        let captain = world.addHost("captain")
        let relief = world.addHost("relief")
        let a = captain.makeSession(configuration: Self.configuration("captain"))
        let b = relief.makeSession(configuration: Self.configuration("relief"))
        let first = Received()
        Task(executorPreference: relief.executor) {
            for await (_, note) in b.messages(of: Note.self) { first.add(note.text) }
        }
        captain.start(a)
        relief.start(b)
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))
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
        let second = Received()
        Task(executorPreference: relief.executor) {
            for await (_, note) in restarted.messages(of: Note.self) { second.add(note.text) }
        }
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
        let world = SimulatedWorld(seed: 5)
        let captain = world.addHost("captain")
        let relief = world.addHost("relief")
        let a = captain.makeSession(configuration: Self.configuration("captain"))
        let b = relief.makeSession(configuration: Self.configuration("relief"))
        let received = Received()
        Task(executorPreference: relief.executor) {
            for await (_, note) in b.messages(of: Note.self) { received.add(note.text) }
        }
        captain.start(a)
        relief.start(b)
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))
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
        let world = SimulatedWorld(seed: 6)
        let captain = world.addHost("captain")
        let relief = world.addHost("relief")
        let a = captain.makeSession(configuration: Self.configuration("captain"))
        let b = relief.makeSession(configuration: Self.configuration("relief"))
        captain.start(a)
        relief.start(b)
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))

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
