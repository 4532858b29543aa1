public import Foundation
public import MultipeerCore

/// What happens on a navlog host, for a user interface to show.
public enum NavlogEvent: Sendable {
    /// The host listens on this TCP port.
    case listening(port: Int)
    case peerJoined(PeerRef)
    case peerLeft(PeerRef, PeerLeftReason)
    /// A version changed the log here, typed on this host (`origin` nil) or received from a peer.
    case entryApplied(NavlogEntry, origin: PeerRef?)
    /// An anti-entropy exchange with a peer finished.
    case synced(PeerRef, sent: Int, received: Int)
    /// Something failed that the user should know about; the host goes on.
    case error(code: String, message: String)
}

/// A peer, as navlog-sync names it.
public struct PeerRef: Hashable, Sendable {
    public var id: UUID
    public var name: String
    /// The short fingerprint of the key the peer proved (`PeerKey.fingerprint`).
    public var fingerprint: String
}

/// A row of the peer table.
public struct PeerStatus: Hashable, Sendable {
    public var peer: PeerRef
    public var active: Bool
    /// Smoothed round-trip time, jitter (standard deviation) and loss of the current link.
    public var rtt: Duration?
    public var jitter: Duration?
    public var loss: Double?
    /// When the peer was last active: now while it is.
    public var lastSeen: Date
}
