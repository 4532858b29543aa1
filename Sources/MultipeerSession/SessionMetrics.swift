import CoreMetrics
import MultipeerCore
import NIOConcurrencyHelpers

/// The session's swift-metrics instruments, labelled with the session's display name: each made
/// once, its dimensions from a fixed set (a reason a peer names that this version does not is
/// counted as `other`, so no peer can make a backend keep a series per number it sends). The
/// DocC guide lists them ("Observing a session").
struct SessionMetrics: Sendable {
    private let peersActive: Gauge
    private let linksOpened: Counter
    private let messagesIn: Counter
    private let messagesOut: Counter
    private let bytesIn: Counter
    private let bytesOut: Counter
    private let linksClosed: [String: Counter]
    private let messagesDropped: [MessageDropReason: Counter]
    private let rejectedIn: Counter
    private let rejectedOut: Counter
    private let notReadIn: Counter
    private let notReadOut: Counter
    private let holdsFull: Counter
    private let handshakeIn: Timer
    private let handshakeOut: Timer
    private let roundTrips: Timer
    private let detection: Timer
    private let rejoin: Timer
    /// By the failure's code and direction: made as each first happens (the codes are this
    /// version's own, so at most twice their number).
    private let connectionsFailed: NIOLockedValueBox<[String: Counter]>
    private let dimensions: [(String, String)]
    private let factory: any MetricsFactory

    /// What `multipeer_links_closed_total`'s `reason` can be: a GOODBYE's reason this version
    /// names, `closed` (no GOODBYE, no error), `error`, or `other` (a GOODBYE's reason it does not name).
    static let closeReasons =
        [GoodbyeReason.shutdown, .keepaliveTimeout, .duplicateLink, .protocolError, .suspended, .notInRoster].map(
            \.description
        ) + ["closed", "error", "other"]

    /// - Parameter factory: Where the instruments are made: the one bootstrapped by default.
    init(localName: String, factory: any MetricsFactory = MetricsSystem.factory) {
        let dimensions = [("session", localName)]
        func counter(_ label: String, _ more: [(String, String)] = []) -> Counter {
            Counter(label: label, dimensions: dimensions + more, factory: factory)
        }
        self.dimensions = dimensions
        self.factory = factory
        peersActive = Gauge(label: "multipeer_peers_active", dimensions: dimensions, factory: factory)
        linksOpened = counter("multipeer_links_opened_total")
        messagesIn = counter("multipeer_messages_total", [("direction", "in")])
        messagesOut = counter("multipeer_messages_total", [("direction", "out")])
        bytesIn = counter("multipeer_payload_bytes_total", [("direction", "in")])
        bytesOut = counter("multipeer_payload_bytes_total", [("direction", "out")])
        linksClosed = Dictionary(
            uniqueKeysWithValues: Self.closeReasons.map {
                ($0, counter("multipeer_links_closed_total", [("reason", $0)]))
            }
        )
        messagesDropped = Dictionary(
            uniqueKeysWithValues: MessageDropReason.every.map {
                ($0, counter("multipeer_messages_dropped_total", [("reason", $0.label)]))
            }
        )
        rejectedIn = counter("multipeer_messages_rejected_total", [("direction", "in")])
        rejectedOut = counter("multipeer_messages_rejected_total", [("direction", "out")])
        notReadIn = counter("multipeer_messages_not_read_total", [("direction", "in")])
        notReadOut = counter("multipeer_messages_not_read_total", [("direction", "out")])
        holdsFull = counter("multipeer_holds_full_total")
        func timer(_ label: String, _ more: [(String, String)] = []) -> Timer {
            Timer(label: label, dimensions: dimensions + more, preferredDisplayUnit: .seconds, factory: factory)
        }
        handshakeIn = timer("multipeer_handshake_seconds", [("direction", "in")])
        handshakeOut = timer("multipeer_handshake_seconds", [("direction", "out")])
        roundTrips = timer("multipeer_round_trip_seconds")
        detection = timer("multipeer_failure_detection_seconds")
        rejoin = timer("multipeer_rejoin_seconds")
        connectionsFailed = NIOLockedValueBox([:])
    }

    func activePeers(_ count: Int) { peersActive.record(count) }

    /// A link's TLS handshake and HELLO exchange took `duration`, from its connection (`inbound`:
    /// accepted here) to both HELLOs checked.
    func handshake(_ duration: Duration, inbound: Bool) {
        (inbound ? handshakeIn : handshakeOut).recordNanoseconds(duration.nanoseconds)
    }

    /// A keepalive PING of this side's came back after `duration`.
    func roundTrip(_ duration: Duration) { roundTrips.recordNanoseconds(duration.nanoseconds) }

    /// A link's keepalive gave it up after `silence` without a sign of the peer.
    func failureDetected(after silence: Duration) { detection.recordNanoseconds(silence.nanoseconds) }

    /// A peer that left on a failure is active again, `after` it left.
    func rejoined(after duration: Duration) { rejoin.recordNanoseconds(duration.nanoseconds) }
    func linkOpened() { linksOpened.increment() }

    /// A link closed: with the GOODBYE's reason, or without one (`error` when it failed).
    func linkClosed(goodbye: GoodbyeReason?, failed: Bool) {
        let reason = goodbye.map { linksClosed[$0.description] == nil ? "other" : $0.description }
        linksClosed[reason ?? (failed ? "error" : "closed")]!.increment()
    }

    func received(bytes: Int) {
        messagesIn.increment()
        bytesIn.increment(by: bytes)
    }

    /// A message acknowledged here was dropped before a subscriber took it.
    func dropped(reason: MessageDropReason, count: Int = 1) {
        messagesDropped[reason]!.increment(by: count)
    }

    /// A reliable message did not decode in the receiver's application: `inbound` for one this
    /// side received (and told its sender of), not for one a peer told this side of.
    func rejected(inbound: Bool) {
        (inbound ? rejectedIn : rejectedOut).increment()
    }

    /// A message of a type its receiver does not read: refused as it arrived (`inbound`), or
    /// refused to this application for a peer that said it does not read it.
    func notRead(inbound: Bool = true) {
        (inbound ? notReadIn : notReadOut).increment()
    }

    /// The messages held for a type's first subscriber filled their hold: links bringing more stop.
    func holdFull() {
        holdsFull.increment()
    }

    /// A connection failed before its peer became active.
    func connectionFailed(code: MultipeerError.Code, inbound: Bool) {
        let (direction, code) = (inbound ? "in" : "out", "\(code)")
        let counter = connectionsFailed.withLockedValue { made in
            if let counter = made["\(direction) \(code)"] { return counter }
            let counter = Counter(
                label: "multipeer_connections_failed_total",
                dimensions: dimensions + [("direction", direction), ("code", code)],
                factory: factory
            )
            made["\(direction) \(code)"] = counter
            return counter
        }
        counter.increment()
    }

    func sent(bytes: Int) {
        messagesOut.increment()
        bytesOut.increment(by: bytes)
    }
}

extension MessageDropReason {
    /// Every reason (beside ``label``'s switch, which the compiler holds to every case).
    static let every: [MessageDropReason] = [.abandonedBySender, .tooLargeForPeer, .notReadByPeer, .linkLost]

    /// The metric's label value.
    var label: String {
        switch self {
        case .abandonedBySender: "abandoned_by_sender"
        case .tooLargeForPeer: "too_large_for_peer"
        case .notReadByPeer: "not_read_by_peer"
        case .linkLost: "link_lost"
        }
    }
}
