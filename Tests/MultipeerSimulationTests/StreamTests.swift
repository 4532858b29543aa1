import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// IntegrationTests/StreamResumeTests in a simulated world: a stream outlives the links it runs
/// on, and not the sessions at its ends.
@Suite struct StreamTests {
    /// `count` bytes that differ at each offset.
    static func bytes(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) ^ seed }
    }

    /// Writes `bytes` to `stream` in 16 KiB pieces, then finishes it.
    static func write(_ bytes: [UInt8], to stream: PeerStream) async throws {
        for start in stride(from: 0, to: bytes.count, by: 16_384) {
            try await stream.write(bytes[start..<min(start + 16_384, bytes.count)])
        }
        try await stream.finish()
    }

    /// Reads `stream` until it ends, in `host`'s process.
    static func read(_ stream: PeerStream, on host: SimulatedHost) -> Collected<UInt8> {
        let received = Collected<UInt8>()
        Task(executorPreference: host.executor) {
            do {
                for try await chunk in stream { received.append(contentsOf: chunk) }
                received.end()
            } catch {
                received.end(error)
            }
        }
        return received
    }

    @Test func blackHolesDuringAStreamLoseAndRepeatNothingEitherWay() async throws {
        let world = SimulatedWorld(seed: 17)
        try await Task(executorPreference: world.executor) {
            let crew = try await FaultTests.Crew(["sender", "receiver"], world: world)
            let (sender, receiver) = (crew.sessions[0], crew.sessions[1])
            await crew.hosts[1].impair(latency: .milliseconds(2), bandwidth: 4_000_000)
            let telemetry = Self.bytes(8 << 20, seed: 1)
            let commands = Self.bytes(1 << 20, seed: 2)
            let stream = try sender.openStream(named: "telemetry", to: receiver.peerID)
            let writing = Task(executorPreference: crew.hosts[0].executor) {
                try await Self.write(telemetry, to: stream)
            }
            let accepted = Collected<PeerStream>()
            Task(executorPreference: crew.hosts[1].executor) {
                for await incoming in receiver.incomingStreams {
                    accepted.append(incoming)
                    return
                }
            }
            try await world.run(until: { accepted.count == 1 }, within: .seconds(5))
            let answer = accepted.all[0]
            let answering = Task(executorPreference: crew.hosts[1].executor) {
                try await Self.write(commands, to: answer)
            }
            let received = Self.read(answer, on: crew.hosts[1])
            let replied = Self.read(stream, on: crew.hosts[0])
            for mark in 1...3 {
                try await world.run(until: { received.count >= mark * telemetry.count / 4 }, within: .seconds(30))
                let hole = await crew.hosts[1].blackHole()
                try await world.run(until: { crew.apart(0, 1) }, within: .seconds(10))
                await hole.heal()
                try await world.run(until: { crew.together(0, 1) }, within: .seconds(15))
            }
            try await world.run(until: { received.ended && replied.ended }, within: .seconds(60))
            #expect(
                received.error == nil && replied.error == nil,
                "\(String(describing: received.error ?? replied.error))"
            )
            #expect(received.all == telemetry, "every byte once, in order")
            #expect(replied.all == commands, "and the other way")
            // finish() returns once the peer's session holds the end: its acknowledgement takes time.
            try await world.run(within: .seconds(5)) {
                try await writing.value
                try await answering.value
            }
            #expect(await sender.linkStats(for: receiver.peerID)?.reconnects ?? 0 >= 3, "the links really broke")
            await world.shutdown()
        }.value
    }

    @Test func aPeerThatRestartsWithoutAWordLosesItsStreams() async throws {
        let world = SimulatedWorld(seed: 18)
        try await Task(executorPreference: world.executor) {
            var crew = try await FaultTests.Crew(["sender", "receiver"], world: world)
            let sender = crew.sessions[0]
            let stream = try sender.openStream(named: "telemetry", to: crew.sessions[1].peerID)
            try await stream.write(Self.bytes(1_000, seed: 3))
            let replied = Self.read(stream, on: crew.hosts[0])
            await world.run(for: .seconds(1))
            await crew.hosts[1].kill()
            crew.hosts[1].restart()
            let restarted = crew.hosts[1].makeSession(
                configuration: FaultTests.configuration("receiver"),
                identity: crew.identities[1]
            )
            crew.hosts[1].start(restarted)
            crew.sessions[1] = restarted
            try await world.run(until: { replied.ended }, within: .seconds(20))
            #expect((replied.error as? MultipeerError)?.code == .streamLost, "\(String(describing: replied.error))")
            await #expect(throws: MultipeerError.self) { try await stream.write([1, 2, 3]) }
            await world.shutdown()
        }.value
    }
}
