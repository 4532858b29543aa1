import CoreMetrics
import Foundation
import MetricsTestKit
import MultipeerSession
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
}
