import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

import struct Foundation.UUID

/// What each peer's links showed lately of the path to it (``PathHistory``: the silences they
/// survived, when a packet was last lost), kept by a session across its links: a link that
/// replaces one on a lossy path starts out allowing for the stalls the path had. Never the
/// silence a link ended with: that is no evidence of a lossy path. Each history is aged by the
/// time it was kept, so nothing older than two minutes counts however often the links are
/// replaced; entries older than two minutes are forgotten (and at most 4,096 kept).
package final class PathMemory: Sendable {
    private static let lifetime = Duration.seconds(120)
    private let paths = NIOLockedValueBox<[UUID: (history: PathHistory, at: NIODeadline)]>([:])

    package init() {}

    func remember(_ history: PathHistory, of peer: UUID, now: NIODeadline) {
        paths.withLockedValue { paths in
            if paths.count >= 4_096 { paths = paths.filter { now - $0.value.at < TimeAmount(Self.lifetime) } }
            if paths.count < 4_096 { paths[peer] = (history, now) }
        }
    }

    func recall(_ peer: UUID, now: NIODeadline) -> PathHistory {
        paths.withLockedValue { paths in
            guard let entry = paths[peer], now - entry.at < TimeAmount(Self.lifetime) else { return PathHistory() }
            return entry.history.aged(by: .nanoseconds((now - entry.at).nanoseconds))
        }
    }
}
