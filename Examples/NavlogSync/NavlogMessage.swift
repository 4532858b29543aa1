public import MultipeerSession

/// What hosts say to each other over the session (docs/NAVLOG.md). One type, so that a peer's
/// messages arrive in the order they were sent.
///
/// When two hosts meet, each sends its ``NavlogDigest``; each answers a digest with the
/// versions the other lacks, in batches, the last one marked final (anti-entropy). While
/// connected, every local edit is broadcast as an update.
public enum NavlogMessage: MultipeerMessage, Hashable {
    /// The name on the wire (docs/NAVLOG.md), as every version of navlog-sync has sent it.
    public static var wireName: String { "NavlogSync.NavlogMessage" }

    /// A batch of the versions of the entries the sender holds; the last batch is `final`, and
    /// the receiver answers once it has them all.
    case digest(versions: NavlogDigest, final: Bool)
    /// A batch of the versions a peer's digest lacked; the last batch is `final`.
    case entries(versions: [NavlogEntry], final: Bool)
    /// One new local version.
    case update(entry: NavlogEntry)

    /// Versions per `entries` message: well under the session's 1 MiB frame limit.
    public static let batchSize = 500
    /// Versions per `digest` message (about 130 bytes each): well under the 1 MiB frame limit.
    public static let digestBatchSize = 4_000
}

/// Where an anti-entropy exchange with one peer stands: done when this side has answered the
/// peer's digest and the peer has answered ours.
struct SyncProgress: Sendable {
    private(set) var sent: Int?
    private(set) var received = 0
    private(set) var receivedAll = false

    /// Records our answer to the peer's digest; returns the totals when the exchange is done.
    mutating func answered(sending count: Int) -> (sent: Int, received: Int)? {
        sent = count
        return finished()
    }

    /// Records a batch of the peer's answer; returns the totals when the exchange is done.
    mutating func received(_ count: Int, final: Bool) -> (sent: Int, received: Int)? {
        received += count
        receivedAll = receivedAll || final
        return finished()
    }

    private mutating func finished() -> (sent: Int, received: Int)? {
        guard let sent, receivedAll else { return nil }
        defer { self = SyncProgress() }
        return (sent, received)
    }
}
