/// A link's quality as its PING/PONG exchanges show it (the measures of the AWDL thesis and
/// RFC 3550): round-trip time, jitter, loss, and traffic each way.
public struct LinkQuality: Hashable, Sendable {
    /// The latest round trip.
    public var latestRTT: Duration?
    /// Exponentially smoothed round trip (gain 1/8, as TCP's SRTT).
    public var smoothedRTT: Duration?
    /// The shortest round trip seen on the link.
    public var minimumRTT: Duration?
    /// The median round trip over the window of recent round trips.
    public var medianRTT: Duration?
    /// The 99th percentile round trip over the same window.
    public var p99RTT: Duration?
    /// Standard deviation of the round trips in the window.
    public var jitter: Duration?
    /// RFC 3550's smoothed jitter: J += (|D| - J) / 16, D the change between consecutive round trips.
    public var smoothedJitter: Duration?
    /// PINGs this side sent.
    public var pingsSent: Int = 0
    /// PONGs that answered them.
    public var pongsReceived: Int = 0
    /// Unanswered pings over pings sent, not counting those still within the timeout.
    public var loss: Double = 0
    /// Frames received that carry the application's bytes: DATA and FRAGMENT (messages),
    /// RESOURCE_CHUNK (files) and STREAM_DATA (streams).
    public var framesIn: Int = 0
    /// Frames sent that carry the application's bytes (as ``framesIn`` counts them).
    public var framesOut: Int = 0
    /// The application's bytes received: message payloads (DATA, FRAGMENT), files'
    /// (RESOURCE_CHUNK) and streams' (STREAM_DATA); not the frames' own fields.
    public var bytesIn: Int = 0
    /// The application's bytes sent (as ``bytesIn`` counts them).
    public var bytesOut: Int = 0

    /// No measurements yet.
    public init() {}
}

/// Computes ``LinkQuality`` from pings sent and pongs received. Sans-IO: times are inputs.
///
/// Recording a ping or a pong is cheap (it happens twice a second on every link); the window's
/// median, p99 and deviation are computed when ``quality`` is read.
package struct LinkQualityEstimator: Sendable {
    /// How many recent round trips the window holds.
    package let windowSize: Int
    /// The recent round trips, a ring: once full, `next` is the oldest.
    private var window: [Duration] = []
    private var next = 0
    private var outstanding: [UInt64: Duration] = [:]
    private var expired = 0
    private var counters = LinkQuality()

    package init(windowSize: Int = 100) {
        self.windowSize = windowSize
        window.reserveCapacity(windowSize)
    }

    /// The quality so far, with the window's statistics.
    package var quality: LinkQuality {
        var quality = counters
        guard !window.isEmpty else { return quality }
        let sorted = window.sorted()
        quality.medianRTT = sorted[sorted.count / 2]
        quality.p99RTT = sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]
        let mean = window.reduce(0.0) { $0 + $1.seconds } / Double(window.count)
        let variance = window.reduce(0.0) { $0 + ($1.seconds - mean) * ($1.seconds - mean) } / Double(window.count)
        quality.jitter = .seconds(variance.squareRoot())
        return quality
    }

    package mutating func pingSent(_ probe: Probe, at now: Duration) {
        counters.pingsSent += 1
        outstanding[probe.nonce] = now
    }

    /// A PONG arrived; returns its round trip if it answers a ping still awaited.
    @discardableResult
    package mutating func pongReceived(_ probe: Probe, at now: Duration) -> Duration? {
        guard let sent = outstanding.removeValue(forKey: probe.nonce) else { return nil }
        counters.pongsReceived += 1
        let rtt = now - sent
        if let previous = counters.latestRTT {
            let change = abs((rtt - previous).seconds)
            let jitter = counters.smoothedJitter?.seconds ?? 0
            counters.smoothedJitter = .seconds(jitter + (change - jitter) / 16)
        } else {
            counters.smoothedJitter = .zero
        }
        counters.latestRTT = rtt
        counters.smoothedRTT = counters.smoothedRTT.map { $0 + (rtt - $0) / 8 } ?? rtt
        counters.minimumRTT = counters.minimumRTT.map { min($0, rtt) } ?? rtt
        if window.count < windowSize {
            window.append(rtt)
        } else {
            window[next] = rtt
            next = (next + 1) % windowSize
        }
        updateLoss()
        return rtt
    }

    /// Pings older than `timeout` count as lost. Returns how many pings are still awaited.
    @discardableResult
    package mutating func expire(olderThan timeout: Duration, now: Duration) -> Int {
        guard outstanding.values.contains(where: { now - $0 >= timeout }) else { return outstanding.count }
        let before = outstanding.count
        outstanding = outstanding.filter { now - $0.value < timeout }
        expired += before - outstanding.count
        updateLoss()
        return outstanding.count
    }

    /// Message frames (DATA, FRAGMENT) and their message bytes, received and sent since the last count.
    package mutating func count(_ traffic: MessageTraffic) {
        counters.framesIn += traffic.framesIn
        counters.bytesIn += traffic.bytesIn
        counters.framesOut += traffic.framesOut
        counters.bytesOut += traffic.bytesOut
    }

    private mutating func updateLoss() {
        let settled = counters.pongsReceived + expired
        counters.loss = settled == 0 ? 0 : Double(expired) / Double(settled)
    }
}

/// Message frames and bytes counted on a link's event loop between two updates of its
/// ``LinkQualityEstimator`` (one a read batch or a flush, not one a frame).
package struct MessageTraffic: Sendable {
    package var framesIn = 0
    package var bytesIn = 0
    package var framesOut = 0
    package var bytesOut = 0

    package init() {}

    package var isEmpty: Bool { framesIn == 0 && framesOut == 0 }
}
