/// How often a peer wants to be pinged on an idle link, and how long silence may last
/// before the link is declared dead. Carried in HELLO; both sides use the stricter pair.
public struct KeepaliveParameters: Hashable, Sendable {
    /// The idle time after which a PING is sent. Sent in whole milliseconds.
    public var interval: Duration
    /// The silence after which the link is torn down. Sent in whole milliseconds.
    public var timeout: Duration

    /// Creates keepalive parameters; the defaults are 500 ms and 1.5 s.
    public init(interval: Duration = .milliseconds(500), timeout: Duration = .milliseconds(1500)) {
        self.interval = interval
        self.timeout = timeout
    }
}
