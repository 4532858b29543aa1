import Metrics
import MultipeerCore

/// The session's swift-metrics instruments, labelled with the session's display name.
struct SessionMetrics: Sendable {
    private let dimensions: [(String, String)]
    private let peersActive: Gauge
    private let linksOpened: Counter
    private let messagesIn: Counter
    private let messagesOut: Counter
    private let bytesIn: Counter
    private let bytesOut: Counter

    init(localName: String) {
        dimensions = [("session", localName)]
        peersActive = Gauge(label: "multipeer_peers_active", dimensions: dimensions)
        linksOpened = Counter(label: "multipeer_links_opened_total", dimensions: dimensions)
        messagesIn = Counter(label: "multipeer_messages_total", dimensions: dimensions + [("direction", "in")])
        messagesOut = Counter(label: "multipeer_messages_total", dimensions: dimensions + [("direction", "out")])
        bytesIn = Counter(label: "multipeer_payload_bytes_total", dimensions: dimensions + [("direction", "in")])
        bytesOut = Counter(label: "multipeer_payload_bytes_total", dimensions: dimensions + [("direction", "out")])
    }

    func activePeers(_ count: Int) { peersActive.record(count) }
    func linkOpened() { linksOpened.increment() }

    func linkClosed(reason: String) {
        Counter(label: "multipeer_links_closed_total", dimensions: dimensions + [("reason", reason)]).increment()
    }

    func received(bytes: Int) {
        messagesIn.increment()
        bytesIn.increment(by: bytes)
    }

    /// A message acknowledged here was dropped before a subscriber took it.
    func dropped(reason: MessageDropReason, count: Int = 1) {
        Counter(label: "multipeer_messages_dropped_total", dimensions: dimensions + [("reason", "\(reason.label)")])
            .increment(by: count)
    }

    /// The messages held for a type's first subscriber filled their hold: links bringing more stop.
    /// A reliable message did not decode in the receiver's application: `direction` "in" for one
    /// this side received (and told its sender of), "out" for one a peer told this side of.
    func rejected(direction: String) {
        Counter(label: "multipeer_messages_rejected_total", dimensions: dimensions + [("direction", direction)])
            .increment()
    }

    /// A message of a type its receiver does not read: refused as it arrived (`in`), or
    /// refused to this application for a peer that said it does not read it (`out`).
    func notRead(direction: String = "in") {
        Counter(label: "multipeer_messages_not_read_total", dimensions: dimensions + [("direction", direction)])
            .increment()
    }

    func holdFull() {
        Counter(label: "multipeer_holds_full_total", dimensions: dimensions).increment()
    }

    /// A connection failed before its peer became active.
    func connectionFailed(code: MultipeerError.Code, inbound: Bool) {
        Counter(
            label: "multipeer_connections_failed_total",
            dimensions: dimensions + [("direction", inbound ? "in" : "out"), ("code", "\(code)")]
        ).increment()
    }

    func sent(bytes: Int) {
        messagesOut.increment()
        bytesOut.increment(by: bytes)
    }
}

extension MessageDropReason {
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
