import Foundation
import Logging
import MultipeerSession
import MultipeerSessionTesting
import NIOConcurrencyHelpers
import Testing

/// A simulated world's sessions log with the world's time and their host on every line.
@Suite struct LoggingTests {
    /// Keeps each line's message and metadata, its logger's provider's included.
    struct Captured: LogHandler {
        let lines: NIOLockedValueBox<[(message: String, metadata: Logger.Metadata)]>
        var metadata: Logger.Metadata = [:]
        var metadataProvider: Logger.MetadataProvider?
        var logLevel: Logger.Level = .debug

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(metadataProvider?.get() ?? [:]) { $1 }.merging(event.metadata ?? [:]) { $1 }
            lines.withLockedValue { $0.append(("\(event.message)", all)) }
        }
    }

    @Test func aSessionsLinesCarryTheWorldsTimeAndItsHost() async throws {
        let world = SimulatedWorld(seed: 41)
        let lines = NIOLockedValueBox<[(message: String, metadata: Logger.Metadata)]>([])
        let (captain, relief) = (world.addHost("captain"), world.addHost("relief"))
        var configuration = FaultTests.configuration("captain")
        configuration.logger = Logger(label: "captain") { _ in Captured(lines: lines) }
        let a = captain.makeSession(configuration: configuration)
        let b = relief.makeSession(configuration: FaultTests.configuration("relief"))
        captain.start(a)
        relief.start(b)
        try await world.run(until: { !a.activePeers.isEmpty && !b.activePeers.isEmpty }, within: .seconds(10))
        relief.freeze()
        let frozenAt = world.now
        try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))
        let left = try #require(lines.withLockedValue { $0 }.last { $0.message == "peer left" })
        #expect(left.metadata["simulation.host"] == "captain")
        let time = try #require(left.metadata["simulation.time"].flatMap { Double("\($0)") })
        let frozen = Double(frozenAt.components.seconds) + Double(frozenAt.components.attoseconds) / 1e18
        #expect(time - frozen >= 1.4 && time - frozen <= 1.6, "logged at \(time), frozen at \(frozen)")
        relief.thaw()
        await world.shutdown()
    }
}
