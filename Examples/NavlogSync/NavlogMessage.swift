package import Foundation
package import MultipeerSession

/// What hosts say to each other over the session (docs/NAVLOG.md). One type, so that a peer's
/// messages arrive in the order they were sent.
///
/// When two hosts meet, each asks the other for what it lacks (anti-entropy): it sends the
/// summaries of its log by id prefix (`ask`); the other answers each with the entries under
/// prefixes the asker holds nothing of, its versions by name under small prefixes that differ,
/// and the prefixes to split further (`reply`); the asker then names the versions it wants
/// (`need`), the last `need` final once every ask is answered, and gets them as `entries`. What
/// is exchanged grows with the differences, not with the log. While connected, every local edit
/// is broadcast as an update. A host that holds versions whose attached files it lacks says so
/// (`lack`), and a peer that holds them offers them as resources.
package enum NavlogMessage: MultipeerMessage, Hashable {
    /// The name on the wire (docs/NAVLOG.md), as every version of navlog-sync has sent it.
    package static var wireName: String { "NavlogSync.NavlogMessage" }
    /// JSON, as docs/NAVLOG.md specifies, whatever the session's default.
    package static var wireEncoding: MessageEncoding? { .json }

    /// The asker's summaries of the children of some prefixes, in its exchange `exchange` (a
    /// number it picks at random for each exchange, below 2^53).
    case ask(exchange: UInt64, ranges: [NavlogRanges])
    /// The holder's answer to one `ask` of exchange `exchange`: the prefixes to split further,
    /// and its versions under the small prefixes that differ (the entries under prefixes the
    /// asker holds nothing of went before it, as `entries`).
    case reply(exchange: UInt64, expand: [NavlogPrefix], versions: NavlogDigest)
    /// The versions an asker wants, by entry id; the last one of an exchange is `final`.
    case need(ids: [UUID], final: Bool)
    /// A batch of versions an asker lacks; the batch answering a final `need` is `final`.
    case entries(versions: [NavlogEntry], final: Bool)
    /// One new local version.
    case update(entry: NavlogEntry)
    /// The whole log by name, in parts, as hosts of earlier releases sent when they met (the
    /// last part `final`): answered with `entries`, and with this host's own digest, so that
    /// such a host syncs both ways.
    case digest(versions: NavlogDigest, final: Bool)
    /// The SHA-256 of files attached to versions the sender holds, which it lacks (at most
    /// ``lackBatchSize``): a peer that holds any of them offers it as a resource (docs/NAVLOG.md 1a).
    case lack(attachments: [String])

    /// Versions per `entries` message: well under the session's 1 MiB frame limit.
    package static let batchSize = 500
    /// Versions per `digest` message (about 130 bytes each): well under the 1 MiB frame limit.
    package static let digestBatchSize = 4_000
    /// Hashes per `lack` message.
    package static let lackBatchSize = 64
}

/// Where the anti-entropy exchanges with one peer stand: done when this side, as holder, has
/// answered the peer's final `need` (or an earlier release's digest) and, as asker, has received
/// the final `entries`.
struct SyncProgress: Sendable {
    private(set) var sent: Int?
    private(set) var received = 0
    private(set) var receivedAll = false

    /// Records our answer to the peer's final request; returns the totals when the exchange is done.
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
