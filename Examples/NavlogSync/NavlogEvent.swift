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
    /// An attached file on its way to or from a peer: how far it has come.
    case attachmentProgress(AttachmentTransfer)
    /// An attached file's transfer ended: it arrived whole (its hash checked) or was sent, or
    /// it failed with `error` (it is asked for again when a peer that holds it next joins).
    case attachmentDone(AttachmentTransfer, error: String?)
    /// Something failed that the user should know about; the host goes on.
    case error(code: String, message: String)
}

/// A file attached to an entry, on its way between this host and a peer.
public struct AttachmentTransfer: Hashable, Sendable {
    /// The entry it is attached to (the first held that names it).
    public var entry: UUID?
    /// Its name there.
    public var name: String
    /// The SHA-256 of its bytes, as the entry's signed version gives it.
    public var sha256: String
    /// The peer it comes from or goes to.
    public var peer: PeerRef
    /// This host sends it (rather than receives it).
    public var outgoing: Bool
    /// The bytes the receiver holds.
    public var bytesDone: Int64
    /// The file's length.
    public var totalBytes: Int64
    /// The rate since the transfer's first report here.
    public var bytesPerSecond: Double
}

/// Where an attached file stands on this host.
public enum AttachmentState: Hashable, Sendable {
    /// Here, whole, its hash checked.
    case held
    /// On its way from a peer: this many bytes of it are here.
    case arriving(bytesDone: Int64)
    /// Not here: no peer that holds it has sent it yet.
    case missing
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
