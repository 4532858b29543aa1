import MultipeerCore
import NIOCore

/// The link a peer is reached on, as the session bound it (``Deliveries/bind(_:reads:)``): kept
/// once, in the peer's ``PeerDelivery``, and read from there by the peer's resources and streams.
struct PeerLink: Sendable {
    var id: LinkID
    var channel: any Channel
    /// The link's one writer of data frames: the peer's messages, streams and files are its
    /// sources.
    var writer: LinkWriter
    /// The HELLO the peer sent on it.
    var hello: Hello

    var peerID: UUID { hello.peerID }
}
