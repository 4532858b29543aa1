import MultipeerCore
import NIOCore

/// What the session carries on a peer's link beside its messages: its files (``Resources``) and
/// its streams (``Streams``), plumbed one way.
///
/// - The peer's link is its delivery's record (``LinkHandle``, bound and unbound at one site
///   each, ``MultipeerSession/bind(_:reads:)`` and ``MultipeerSession/unbind(_:link:)``). The
///   feature is told when it comes and goes, on the link's event loop, in order with the link's
///   frames (``MultipeerSession/tellFeatures(_:)``); each transfer or stream holds the handle
///   while the peer is on it, and a link that went is let go of only by that link's
///   ``linkDown(_:)``. What begins between (a file sent, a stream opened) reads the link from
///   the delivery (``Deliveries/binding(of:)``) under the feature's lock.
/// - The link's router (``LinkDeliveryStateMachine/received(_:)``) hands it its frames
///   (``received(_:from:on:)``) on the link's event loop, only once the peer is active on the
///   link: the feature keeps no early buffer.
/// - It remembers how its latest transfers ended (``RememberedEnds``), to tell a peer that did
///   not hear the end again.
protocol PeerLinkFeature: Sendable {
    /// The frames of the feature (``ResourceFrame``, ``StreamFrame``).
    associatedtype Frame

    /// The peer is active on `link`: what waits for it goes on there.
    func linkUp(_ link: LinkHandle)
    /// The peer's `link` went: what went on it waits for the peer's next.
    func linkDown(_ link: LinkHandle)
    /// A frame of the feature from `peer` arrived on `channel`. Throws what breaks the protocol:
    /// the link is then closed (GOODBYE 3).
    func received(_ frame: Frame, from peer: Peer, on channel: any Channel) throws(MultipeerError)
}
