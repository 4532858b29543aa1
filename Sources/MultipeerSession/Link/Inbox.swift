import Foundation
import Logging
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Where a session's links run and hand what they receive.
struct Inbox: Sendable {
    /// The event loop every link of the session runs on, as a task executor: the application's
    /// tasks that prefer it (``MultipeerSession/executor``) read the streams and send on the
    /// thread that carries the bytes.
    var executor = EventLoopExecutor(MultiThreadedEventLoopGroup.singleton.next())
    /// What was delivered from each sender, for reliable delivery.
    var windows: ReceiveWindows
    /// The application's streams.
    var subscriptions: Subscriptions
    var metrics: SessionMetrics
    /// The resource transfers, both ways (by default none are taken: no resource directory).
    var resources: Resources
    /// The byte streams, both ways.
    var streams: Streams
    /// The largest message this side takes (Limits.maximumMessageLength).
    var maximumMessageLength = MultipeerSession.Limits().maximumMessageLength
}

extension Inbox {
    /// An inbox for links outside a session (the pipeline's tests): a session's default limits,
    /// its peers' deliveries of their own, no resource directory.
    init(windows: ReceiveWindows, subscriptions: Subscriptions, metrics: SessionMetrics, logger: Logger = .current) {
        let peers = Deliveries(metrics: metrics)
        self.init(
            windows: windows,
            subscriptions: subscriptions,
            metrics: metrics,
            resources: Resources(peers: peers, directory: nil, logger: logger),
            streams: Streams(peers: peers)
        )
    }
}
