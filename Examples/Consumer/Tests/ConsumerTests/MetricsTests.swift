import CoreMetrics
import Foundation
import MetricsTestKit
import MultipeerSession
import MultipeerSessionTesting
import Testing

/// The metrics a session records, read from the backend the process bootstrapped, as an
/// application's dashboard reads them (the DocC guide's "Observing a session" lists them).
@Suite struct MetricsTests {
    /// The process's backend: bootstrapped once (swift-metrics allows no second), by the first
    /// test that reads it. Sessions of other tests record into it too, under their own names.
    static let recorded: TestMetrics = {
        let metrics = TestMetrics()
        MetricsSystem.bootstrap(metrics)
        return metrics
    }()

    @Test func aSessionCountsItsLinksAndMessagesUnderItsName() async throws {
        let recorded = Self.recorded
        // Names of their own: the counters are the process's, and other tests run beside.
        let (listenerName, diallerName) = ("metrics-listener-\(UUID())", "metrics-dialler-\(UUID())")
        let listener = MultipeerSession(configuration: configuration(listenerName), identity: PeerIdentity())
        let notes = listener.messages(of: Note.self)
        try await whileRunning([listener]) {
            let port = try await listeningPort(of: listener)
            let dialler = MultipeerSession(
                configuration: configuration(diallerName, dialling: port),
                identity: PeerIdentity()
            )
            try await whileRunning([dialler]) {
                try await waitUntilActive(dialler, listener.peerID)
                for number in 0..<3 {
                    try await dialler.send(Note(text: "\(number)"), to: listener.peerID, awaitAcknowledgement: true)
                }
            }
            // (The dialler has stopped: its link closed with a GOODBYE saying shutdown.)
        }
        _ = notes
        let dialler = ("session", diallerName)
        #expect(try recorded.expectCounter("multipeer_links_opened_total", [dialler]).totalValue == 1)
        #expect(
            try recorded.expectCounter("multipeer_messages_total", [dialler, ("direction", "out")]).totalValue >= 3
        )
        #expect(
            try recorded.expectCounter("multipeer_payload_bytes_total", [dialler, ("direction", "out")]).totalValue > 0
        )
        #expect(
            try recorded.expectCounter("multipeer_messages_total", [("session", listenerName), ("direction", "in")])
                .totalValue >= 3
        )
        let closed = recorded.counters.filter {
            $0.label == "multipeer_links_closed_total" && $0.dimensions.contains { $0 == dialler }
        }
        .map { "\($0.dimensions) \($0.totalValue)" }
        #expect(
            try recorded.expectCounter("multipeer_links_closed_total", [dialler, ("reason", "shutdown")]).totalValue
                == 1,
            "\(closed)"
        )
        #expect(try recorded.expectGauge("multipeer_peers_active", [dialler]).lastValue == 0)
    }

    /// The timers, in a simulated world (simulated time: exact): the handshakes of the first
    /// link and of the one after a freeze, the keepalive's round trips, how long the frozen peer's
    /// silence lasted before its link was given up (the keepalive timeout, 1.5 s), and how long
    /// it was away.
    @Test func theTimersTellHandshakesRoundTripsDetectionAndTheTimeAway() async throws {
        let recorded = Self.recorded
        let name = "metrics-timers-\(UUID())"
        let world = SimulatedWorld(seed: 21)
        let (captain, relief) = (world.addHost("captain"), world.addHost("relief"))
        let a = captain.makeSession(configuration: SimulationTests.configuration(name))
        let b = relief.makeSession(configuration: SimulationTests.configuration("\(name)-relief"))
        captain.start(a)
        relief.start(b)
        try await world.run(until: { a.activePeers.count == 1 && b.activePeers.count == 1 }, within: .seconds(10))
        await world.run(for: .seconds(5))  // idle: the keepalive pings
        relief.freeze()
        try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))
        relief.thaw()
        try await world.run(until: { a.activePeers.count == 1 }, within: .seconds(20))
        await world.shutdown()

        let session = ("session", name)
        func values(_ label: String, _ more: [(String, String)] = []) -> [Duration] {
            recorded.timers.filter { timer in
                timer.label == label && timer.dimensions.contains { $0 == session }
                    && more.allSatisfy { wanted in timer.dimensions.contains { $0 == wanted } }
            }
            .flatMap(\.values).map { Duration.nanoseconds($0) }
        }
        let handshakes = values("multipeer_handshake_seconds")
        #expect(handshakes.count >= 2, "the first link's and the rejoining one's: \(handshakes)")
        #expect(handshakes.allSatisfy { $0 > .zero && $0 < .seconds(1) }, "\(handshakes)")
        let roundTrips = values("multipeer_round_trip_seconds")
        #expect(!roundTrips.isEmpty && roundTrips.allSatisfy { $0 > .zero && $0 < .milliseconds(500) }, "\(roundTrips)")
        let detection = values("multipeer_failure_detection_seconds")
        #expect(detection.count == 1, "\(detection)")
        #expect(detection.allSatisfy { $0 >= .milliseconds(1_400) && $0 <= .milliseconds(1_600) }, "\(detection)")
        let away = values("multipeer_rejoin_seconds")
        #expect(away.count == 1 && away.allSatisfy { $0 > .zero && $0 < .seconds(20) }, "\(away)")
    }
}
