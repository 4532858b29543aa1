/// Decides when an idle link is pinged and when a silent one is dead, without I/O: the shell
/// reports inbound activity and wakes it at ``nextWakeUp``; time is a `Duration` since any
/// fixed origin (a monotonic clock's reading).
///
/// Any inbound byte proves the peer alive, not just whole frames: a large message arriving
/// slowly is traffic, and must not look like silence.
public struct KeepaliveStateMachine: Sendable {
    public enum Action: Equatable, Sendable {
        /// Nothing to do until ``nextWakeUp``.
        case wait
        /// Send this PING.
        case sendPing(Probe)
        /// Nothing arrived for the timeout: close the link (GOODBYE `keepaliveTimeout` first).
        case timedOut
    }

    public let parameters: KeepaliveParameters
    private var lastInbound: Duration
    private var lastPing: Duration?
    private var nextNonce: UInt64 = 1
    private var finished = false

    public init(parameters: KeepaliveParameters, now: Duration) {
        self.parameters = parameters
        self.lastInbound = now
    }

    /// Bytes arrived from the peer.
    public mutating func inboundActivity(now: Duration) {
        if now > lastInbound { lastInbound = now }
    }

    /// When the shell should call ``wakeUp(now:)`` next.
    public var nextWakeUp: Duration {
        let pingDue = max(lastInbound, lastPing ?? lastInbound) + parameters.interval
        return min(pingDue, lastInbound + parameters.timeout)
    }

    /// The timer fired (or any time): what to do now.
    public mutating func wakeUp(now: Duration) -> Action {
        guard !finished else { return .wait }
        if now - lastInbound >= parameters.timeout {
            finished = true
            return .timedOut
        }
        let idle = now - lastInbound >= parameters.interval
        let pingedRecently = lastPing.map { now - $0 < parameters.interval } ?? false
        guard idle, !pingedRecently else { return .wait }
        lastPing = now
        defer { nextNonce &+= 1 }
        return .sendPing(Probe(nonce: nextNonce, timestamp: UInt64(clamping: now.nanoseconds)))
    }
}

extension KeepaliveParameters {
    /// The pair both sides use: the shorter interval and the shorter timeout. A zero announced
    /// by a peer means "no opinion".
    public func stricter(than other: KeepaliveParameters) -> KeepaliveParameters {
        func pick(_ a: Duration, _ b: Duration) -> Duration {
            if a <= .zero { return b }
            if b <= .zero { return a }
            return min(a, b)
        }
        return KeepaliveParameters(interval: pick(interval, other.interval), timeout: pick(timeout, other.timeout))
    }
}

extension Duration {
    /// Whole nanoseconds.
    public var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
