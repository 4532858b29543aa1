import MetricsTestKit
import MultipeerCore
import Testing

@testable import MultipeerSession

/// The session's instruments: each made once, with dimensions from a fixed set, whatever its
/// peers send.
@Suite struct SessionMetricsTests {
    @Test func everyInstrumentIsMadeAtTheStartAndNonePerEvent() throws {
        let made = TestMetrics()
        let metrics = SessionMetrics(localName: "relief", factory: made)
        let atStart = made.counters.count
        let timersAtStart = made.timers.count
        metrics.linkOpened()
        metrics.handshake(.milliseconds(12), inbound: true)
        metrics.handshake(.milliseconds(14), inbound: false)
        metrics.roundTrip(.microseconds(300))
        metrics.failureDetected(after: .milliseconds(1_500))
        metrics.rejoined(after: .milliseconds(900))
        metrics.linkClosed(goodbye: .keepaliveTimeout, failed: false)
        metrics.linkClosed(goodbye: nil, failed: true)
        metrics.linkClosed(goodbye: nil, failed: false)
        metrics.dropped(reason: .linkLost, count: 3)
        metrics.rejected(inbound: true)
        metrics.notRead(inbound: false)
        metrics.holdFull()
        metrics.received(bytes: 10)
        metrics.sent(bytes: 20)
        #expect(made.counters.count == atStart, "an event made an instrument")
        #expect(made.timers.count == timersAtStart && timersAtStart == 5, "an event made a timer")
        #expect(
            try made.expectTimer("multipeer_handshake_seconds", [("session", "relief"), ("direction", "in")]).values
                == [12_000_000]
        )
        #expect(
            try made.expectTimer("multipeer_failure_detection_seconds", [("session", "relief")]).lastValue
                == 1_500_000_000
        )
        #expect(try made.expectTimer("multipeer_rejoin_seconds", [("session", "relief")]).lastValue == 900_000_000)
        let session = ("session", "relief")
        #expect(
            try made.expectCounter("multipeer_links_closed_total", [session, ("reason", "keepaliveTimeout")]).totalValue
                == 1
        )
        #expect(try made.expectCounter("multipeer_links_closed_total", [session, ("reason", "error")]).totalValue == 1)
        #expect(
            try made.expectCounter("multipeer_links_closed_total", [session, ("reason", "closed")]).totalValue == 1
        )
        #expect(
            try made.expectCounter("multipeer_messages_dropped_total", [session, ("reason", "link_lost")]).totalValue
                == 3
        )
        #expect(
            try made.expectCounter("multipeer_messages_rejected_total", [session, ("direction", "in")]).totalValue == 1
        )
        #expect(
            try made.expectCounter("multipeer_messages_not_read_total", [session, ("direction", "out")]).totalValue == 1
        )
        #expect(
            try made.expectCounter("multipeer_payload_bytes_total", [session, ("direction", "out")]).totalValue == 20
        )
    }

    /// A GOODBYE's reason is a number a peer chooses: one this version does not name is
    /// `other`, so a peer cannot make the application's metrics backend keep a series for each
    /// of 65,536 numbers.
    @Test func aGoodbyeReasonThisVersionDoesNotNameIsCountedAsOther() throws {
        let made = TestMetrics()
        let metrics = SessionMetrics(localName: "relief", factory: made)
        let atStart = made.counters.count
        for number in UInt16(100)..<UInt16(356) {
            metrics.linkClosed(goodbye: GoodbyeReason(rawValue: number), failed: false)
        }
        #expect(made.counters.count == atStart)
        #expect(
            try made.expectCounter("multipeer_links_closed_total", [("session", "relief"), ("reason", "other")])
                .totalValue
                == 256
        )
    }

    /// Connection failures are counted by code and direction, each pair's instrument made once.
    @Test func aConnectionFailuresInstrumentIsMadeOncePerCodeAndDirection() throws {
        let made = TestMetrics()
        let metrics = SessionMetrics(localName: "relief", factory: made)
        let atStart = made.counters.count
        for _ in 0..<5 {
            metrics.connectionFailed(code: .handshakeTimeout, inbound: true)
            metrics.connectionFailed(code: .handshakeTimeout, inbound: false)
        }
        #expect(made.counters.count == atStart + 2)
        let failed = try made.expectCounter(
            "multipeer_connections_failed_total",
            [("session", "relief"), ("direction", "in"), ("code", "handshakeTimeout")]
        )
        #expect(failed.totalValue == 5)
    }
}
