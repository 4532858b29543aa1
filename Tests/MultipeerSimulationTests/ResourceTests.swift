import Crypto
import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// Resources in a simulated world: real files, simulated links.
@Suite struct SimulatedResourceTests {
    static let groupKey = try! PreSharedKey(identity: "simulation", passphrase: "simulation tests only, not a secret")

    /// An 8 MiB file on a 2 MB/s path, partitioned at a quarter of the way: the transfer waits,
    /// and once healed resumes where the receiver stands and arrives whole.
    @Test func aResourceInFlightAcrossAPartitionArrivesWhole() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sim-resource-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let chart = directory.appendingPathComponent("chart.bin")
        var bytes = [UInt8](repeating: 0, count: 8 << 20)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 2_654_435_761 >> 13) }
        try Data(bytes).write(to: chart)

        let world = SimulatedWorld(seed: 5)
        try await Task(executorPreference: world.executor) {
            let captain = world.addHost("captain"), relief = world.addHost("relief")
            var receiving = MultipeerSession.Configuration(serviceType: "_sim._tcp", peer: PeerInfo(displayName: "relief"), psk: Self.groupKey)
            receiving.resourceDirectory = directory.appendingPathComponent("incoming")
            let a = captain.makeSession(configuration: .init(serviceType: "_sim._tcp", peer: PeerInfo(displayName: "captain"), psk: Self.groupKey))
            let b = relief.makeSession(configuration: receiving)
            captain.start(a)
            relief.start(b)
            try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))
            await relief.impair(latency: .milliseconds(2), bandwidth: 2_000_000)

            let outgoing = try await a.sendResource(at: chart, to: b.peerID)
            let done = Completion()
            Task(executorPreference: relief.executor) {
                for await incoming in b.incomingResources {
                    done.begin()
                    done.arrived(try? await incoming.file())
                    return
                }
            }
            try await world.run(until: { done.started }, within: .seconds(5))
            await world.run(for: .seconds(1))
            let partition = await world.partition([captain])
            try await world.run(until: { a.activePeers.isEmpty && b.activePeers.isEmpty }, within: .seconds(20))
            #expect(!done.finished, "nothing arrives across a partition")
            await partition.heal()
            let took = try await world.run(until: { done.finished }, within: .seconds(60))
            let file = try #require(done.file)
            let received = try Data(contentsOf: file)
            #expect(received.count == bytes.count && Array(SHA256.hash(data: received)) == outgoing.sha256, "whole, with its SHA-256")
            // Resumed, not begun anew: the rest at 2 MB/s takes well under the whole file's 4 s.
            #expect(took < .seconds(15), "healed to whole in \(took)")
            await world.shutdown()
        }.value
    }

    /// Set from the receiver's task (in relief's process), read between the world's jobs.
    final class Completion: @unchecked Sendable {
        private let lock = NSLock()
        private var url: URL??
        private var began = false

        func begin() { lock.withLock { began = true } }
        func arrived(_ url: URL?) { lock.withLock { self.url = .some(url) } }
        var started: Bool { lock.withLock { began } }
        var finished: Bool { lock.withLock { url != nil } }
        var file: URL? { lock.withLock { url ?? nil } }
    }
}
