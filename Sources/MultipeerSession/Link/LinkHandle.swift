import MultipeerCore
import NIOCore

import struct Foundation.UUID

/// A link the session carries, as the shell holds it: what it takes to write to it and close it.
/// The actor keeps one per carried link (``MultipeerSession/Running``'s links); the link a peer
/// is reached on now is the one its ``PeerDelivery`` holds, bound and unbound at one site each
/// (``MultipeerSession/bind(_:reads:)``, ``MultipeerSession/unbind(_:link:)``), and the
/// session's files and streams hold that same handle while the peer is on it
/// (``PeerLinkFeature``).
struct LinkHandle: Sendable {
    var id: LinkID
    var channel: any Channel
    /// Writes its data frames (``LinkWriter``): the peer's messages, streams and files are its
    /// sources.
    var writer: LinkWriter
    /// The HELLO the peer sent on it (the link's for good).
    var hello: Hello
    var quality: LinkQualityBox

    var peerID: UUID { hello.peerID }

    /// The most bytes of a frame's payload to the peer, for a frame whose fields before its
    /// bytes take `header`: at most `cap`, and within the peer's maximum frame.
    func payloadLimit(header: Int, cap: Int) -> Int {
        min(cap, hello.maximumFrameLength - header)
    }

    /// Says GOODBYE (best effort) and closes the link once it is written, or given up after
    /// `timeout`.
    func close(_ reason: GoodbyeReason, within timeout: TimeAmount) async {
        await Self.sayGoodbye(reason, on: channel, within: timeout)
        try? await channel.close()
    }

    /// Says GOODBYE and waits until it is written, or for at most `timeout`, after which the
    /// link is closed: a peer that stopped reading (its socket full) cannot hold a link, or a
    /// session's shutdown, open. The GOODBYE goes straight into the pipeline, from any task,
    /// cancelled (a session shutting down) or not.
    static func sayGoodbye(_ reason: GoodbyeReason, on channel: any Channel, within timeout: TimeAmount) async {
        let cutoff = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        try? await channel.writeAndFlush(LinkMessage.goodbye(reason, "\(reason)"))
        cutoff.cancel()
    }
}
