import Foundation
public import MultipeerCore

/// How a peer's link is doing.
public struct LinkStats: Hashable, Sendable, CustomStringConvertible {
    /// Round trips, jitter, loss and traffic of the current link.
    public var quality: LinkQuality
    /// How many times the peer became active again after leaving.
    public var reconnects: Int
    /// How long the peer has been active this time.
    public var timeActive: Duration

    /// Link figures, for an application that tests its own handling of them (a session makes
    /// its own: ``MultipeerSession/linkStats(for:)``, ``SessionEvent/stats(_:_:)``).
    public init(quality: LinkQuality = LinkQuality(), reconnects: Int = 0, timeActive: Duration = .zero) {
        self.quality = quality
        self.reconnects = reconnects
        self.timeActive = timeActive
    }

    /// The figures in one line, for logs.
    public var description: String {
        let rtt = quality.smoothedRTT.map { String(format: "%.2f ms", $0.seconds * 1000) } ?? "-"
        let jitter = quality.jitter.map { String(format: "%.2f ms", $0.seconds * 1000) } ?? "-"
        return "RTT \(rtt), jitter \(jitter), loss \(String(format: "%.1f", quality.loss * 100)) %, "
            + "\(quality.framesIn)/\(quality.framesOut) frames of messages in/out, \(reconnects) reconnects, active \(timeActive)"
    }
}
