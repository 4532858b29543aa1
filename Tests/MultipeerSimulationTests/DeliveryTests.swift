import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// IntegrationTests/DeliveryTests' promises in a simulated world: what is sent reliably arrives
/// once and in order across a restart of the receiver, and a message nobody reads yet is held
/// for its first reader.
@Suite struct DeliveryTests {
    struct Numbered: Codable, Sendable, Equatable { var number: Int }

    /// Reads `session`'s Numbered messages, in its host's process, into what it returns.
    static func read(_ session: MultipeerSession, on host: SimulatedHost) -> Collected<Int> {
        let received = Collected<Int>()
        Task(executorPreference: host.executor) {
            for await (_, message) in session.messages(of: Numbered.self) { received.append(message.number) }
        }
        return received
    }

    @Test func whatARestartedReceiverNeverAcknowledgedReachesItsNewIncarnation() async throws {
        let world = SimulatedWorld(seed: 15)
        try await Task(executorPreference: world.executor) {
            var crew = try await FaultTests.Crew(["sender", "receiver"], world: world)
            let (sender, receiverHost) = (crew.sessions[0], crew.hosts[1])
            let old = Self.read(crew.sessions[1], on: receiverHost)
            let receiverID = crew.sessions[1].peerID
            try await world.run(within: .seconds(10)) {
                for number in 0..<50 {
                    try await sender.send(Numbered(number: number), to: receiverID, awaitAcknowledgement: true)
                }
            }
            #expect(old.all == Array(0..<50))
            // These never reach the old receiver: its path is dead, then it is killed.
            let hole = await receiverHost.blackHole()
            for number in 50..<100 { try await sender.send(Numbered(number: number), to: crew.sessions[1].peerID) }
            await world.run(for: .seconds(1))
            await receiverHost.kill()
            await hole.heal()
            #expect(old.all == Array(0..<50))

            receiverHost.restart()
            let restarted = receiverHost.makeSession(
                configuration: FaultTests.configuration("receiver"),
                identity: crew.identities[1]
            )
            let new = Self.read(restarted, on: receiverHost)
            receiverHost.start(restarted)
            crew.sessions[1] = restarted
            try await world.run(until: { new.count >= 50 }, within: .seconds(30))
            await world.run(for: .seconds(5))
            #expect(new.all == Array(50..<100), "what it never acknowledged, once, in order; nothing it had")
            await world.shutdown()
        }.value
    }

    @Test func aMessageNobodyReadsYetIsHeldAcknowledgedAndGivenToItsFirstReader() async throws {
        let world = SimulatedWorld(seed: 16)
        try await Task(executorPreference: world.executor) {
            let crew = try await FaultTests.Crew(["sender", "receiver"], world: world)
            let (sender, receiver) = (crew.sessions[0], crew.sessions[1])
            let events = EventRecorder(receiver, in: world)
            for number in 0..<10 { try await sender.send(Numbered(number: number), to: receiver.peerID) }
            // Held is in the application's hands: the acknowledgement comes without a reader.
            try await world.run(within: .seconds(5)) {
                try await sender.send(Numbered(number: 10), to: receiver.peerID, awaitAcknowledgement: true)
            }
            let held = events.events.filter { if case .messageHeld = $0 { true } else { false } }
            #expect(held.count == 1, "reported once: \(held)")
            await world.run(for: .seconds(30))
            let first = Self.read(receiver, on: crew.hosts[1])
            try await sender.send(Numbered(number: 11), to: receiver.peerID)
            try await world.run(until: { first.count == 12 }, within: .seconds(5))
            #expect(first.all == Array(0...11), "the held messages first, then the newer one")
            await world.shutdown()
        }.value
    }
}
