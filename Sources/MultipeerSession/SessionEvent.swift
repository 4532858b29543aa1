import Foundation
public import MultipeerCore

/// What happens in a session.
public enum SessionEvent: Sendable, CustomStringConvertible {
    /// The session listens on this TCP port (and advertises it).
    case listening(port: Int)
    /// On ``MultipeerSession/resume()``, the session could not listen on the port it listened
    /// on before (something else took it meanwhile): it listens on another now, which the
    /// ``listening(port:)`` event after this one names and which it advertises over DNS-SD.
    /// Peers that reach it by a fixed address (``MultipeerSession/Discovery/staticPeers(_:)``)
    /// must be told the new one.
    case listenFailed(port: Int, MultipeerError)
    /// A peer became active: its link is authenticated and HELLO-complete, and both sides
    /// admitted it (the peer's resume point came). A peer that refuses this device (its roster
    /// does not list it) never joins: that is an ``authenticationFailed(address:_:)`` with
    /// `notInRoster`, reported once.
    case peerJoined(Peer)
    /// A peer left the active set.
    case peerLeft(Peer, PeerLeftReason)
    /// A peer the session knows of (``MultipeerSession/availablePeers``) was found, or how far
    /// its link is changed, or it is gone (its state `gone`). It follows the ``peerJoined(_:)``
    /// or ``peerLeft(_:_:)`` of a peer that joins or leaves. After ``eventsDropped(count:)``,
    /// read ``MultipeerSession/availablePeers`` afresh: a change may have been among them.
    case availablePeerChanged(AvailablePeer)
    /// A connection to or from this address failed before its peer became active.
    case connectionFailed(address: String, MultipeerError)
    /// A connection to or from this address was refused for who is at the other end: the group
    /// key differs (`authenticationFailed`), its HELLO does not prove the peer ID it claims
    /// (`identityMismatch`, `badSignature`), or a roster does not list it (`notInRoster`: this
    /// session's roster, or the peer's, which refused this device). Retrying cannot change such
    /// a refusal: each is reported once per peer and code (then counted by the
    /// `multipeer_connections_failed_total` metric), and the peer is dialled again only at the
    /// longest backoff, until its advert or this session's roster or keys change.
    case authenticationFailed(address: String, MultipeerError)
    /// More inbound connections failed with `code` than were reported one by one: after ten at
    /// once, ``connectionFailed(address:_:)`` and ``authenticationFailed(address:_:)`` report
    /// inbound failures at most once a second per code, and this says how many more there were
    /// since the last report (a flood of connections makes two events a second, never one per
    /// connection). The `multipeer_connections_failed_total` metric counts every one.
    case connectionsFailed(count: Int, code: MultipeerError.Code)
    /// A message arrived whose payload does not decode as its named type (reported as it is
    /// decoded: by a stream's reader as it comes to the message, or, when several streams
    /// take its type or it is larger than a fragment, as it arrives); it is skipped and the
    /// link stays up.
    case undecodableMessage(from: Peer, typeName: String, error: String)
    /// A reliable message this session sent did not decode in the peer's application: the peer
    /// acknowledged it (its session had it), but its type named `typeName` takes other data
    /// than this side's, and its application never got the message. `sequence` is the
    /// message's number among the reliable messages sent to the peer's current incarnation
    /// (from 1, in the order they were queued; PROTOCOL.md 3b), `reason` the peer's decoding
    /// error. One event per such message (per Swift type of the name there, if several
    /// subscribe); the `multipeer_messages_rejected_total` metric counts them.
    case messageRejected(by: Peer, typeName: String, sequence: UInt64, reason: String)
    /// Advertising failed; the session still dials and accepts.
    case advertisingFailed(MultipeerError)
    /// The periodic report on an active peer's link (``MultipeerSession/Configuration/statsInterval``).
    case stats(Peer, LinkStats)
    /// A message arrived of a type nobody has subscribed to (``MultipeerSession/messages(of:)``);
    /// it is held for the first subscriber, within ``MultipeerSession/Limits/unsubscribedMessages``.
    /// Reported once per type name: a name no program here uses shows up this way.
    case messageHeld(typeName: String, from: Peer)
    /// The messages held for the first subscriber of `typeName`, a type this application reads
    /// (declared, or subscribed to once), reached ``MultipeerSession/Limits/unsubscribedMessages``
    /// (or the name is one more than ``MultipeerSession/Limits/maximumUnsubscribedTypes`` allows
    /// to hold): as with a full stream, the links bringing more of them stop reading, and their
    /// senders wait, until something subscribes to the type. Nothing held is dropped. (A type
    /// not known to be read never stops a link: beyond the bound it is refused,
    /// ``messageNotRead(typeName:from:)``.) Reported each time the hold fills; the
    /// `multipeer_holds_full_total` metric counts them.
    case heldMessagesFull(typeName: String, from: Peer)
    /// A message of a type this session does not read arrived, from a peer that sent it before
    /// it knew (or a peer of 0.9.0 or earlier, which never knows): it was refused, not held, and
    /// if it came reliably its sender was told (the peer's
    /// ``messageRejected(by:typeName:sequence:reason:)``). A session that declares the types it
    /// reads (``MultipeerSession/Configuration/messageTypes``) refuses every other type; one
    /// that declares nothing refuses a type nothing subscribes to once it holds as many of it,
    /// or of types, as ``MultipeerSession/Limits`` allows, until the application subscribes to
    /// it. Its peers of this release are told, and send no more of it. Reported once per peer
    /// and type name (for at most 256 such pairs); the `multipeer_messages_not_read_total`
    /// metric counts every one.
    case messageNotRead(typeName: String, from: Peer)
    /// A ``MultipeerSession/broadcast(_:delivery:)`` did not go to this peer: the peer would
    /// refuse it, its application not reading the type (`messageTypeNotRead`: it runs another
    /// build, and said which types it reads) or the message larger than it takes
    /// (`messageTooLarge`); or, reliable, the peer's outbox had no room for it (`outboxFull`:
    /// the peer is slow or away, and never gets that message). Reported once per type name and
    /// code each time the peer's link comes up or goes (so once while it is away); the
    /// broadcast's count leaves the peer out every time. (``MultipeerSession/send(_:to:delivery:awaitAcknowledgement:)``
    /// throws the error, or waits for room, instead.)
    case broadcastSkipped(to: Peer, typeName: String, MultipeerError)
    /// An active peer's application changed which message types it reads (its session's
    /// subscriptions grew, or it refused a type it never subscribed to): a `send` to it of a
    /// type that threw `messageTypeNotRead` may go through now, and one of a type it stopped
    /// reading throws. What a peer reads when it joins comes with the join; this tells the
    /// changes after it. (Peers of 0.9.0 and earlier never tell.)
    case peerReadsChanged(Peer)
    /// Messages were dropped that no acknowledgement covered: queued ones the peer can no
    /// longer take, unreliable ones whose link went, or part of a message whose sender gave up
    /// the rest (``MessageDropReason`` says which). A message this session acknowledged is never
    /// dropped. The `multipeer_messages_dropped_total` metric counts every one.
    case messagesDropped(typeName: String, count: Int, reason: MessageDropReason)
    /// This event stream fell behind by ``MultipeerSession/Limits/eventBuffer`` events and lost
    /// `count` of them since the last one it read (``stats(_:_:)`` reports first).
    case eventsDropped(count: Int)

    /// The event in a sentence, for logs.
    public var description: String {
        switch self {
        case .listening(let port): "listening on port \(port)"
        case .listenFailed(let port, let error): "cannot listen on port \(port) again, listening on another: \(error)"
        case .peerJoined(let peer): "\(peer) joined"
        case .peerLeft(let peer, let reason): "\(peer) left: \(reason)"
        case .availablePeerChanged(let peer): "\(peer.displayName) (\(peer.id)) is \(peer.state)"
        case .connectionFailed(let address, let error): "connection with \(address) failed: \(error)"
        case .authenticationFailed(let address, let error): "authentication with \(address) failed: \(error)"
        case .connectionsFailed(let count, let code): "\(count) more inbound connection(s) failed (\(code))"
        case .undecodableMessage(let peer, let type, let error): "a \(type) from \(peer) did not decode: \(error)"
        case .messageRejected(let peer, let type, let sequence, let reason):
            "\(peer) could not decode the \(type) numbered \(sequence) sent to it: \(reason)"
        case .advertisingFailed(let error): "advertising failed: \(error)"
        case .stats(let peer, let stats): "\(peer): \(stats)"
        case .messageHeld(let type, let peer): "a \(type) from \(peer) is held until something subscribes to that type"
        case .heldMessagesFull(let type, let peer):
            "the \(type) messages held for a first subscriber are at their limit: \(peer)'s link waits until something subscribes to that type"
        case .messageNotRead(let type, let peer):
            "a \(type) from \(peer) was refused: this application does not read that type"
        case .broadcastSkipped(let peer, let type, let error): "a broadcast \(type) did not go to \(peer): \(error)"
        case .peerReadsChanged(let peer): "\(peer) reads other message types from now on"
        case .messagesDropped(let type, let count, let reason): "\(count) \(type) message(s) dropped: \(reason)"
        case .eventsDropped(let count): "this event stream fell behind and lost \(count) event(s)"
        }
    }
}

/// Why messages were dropped.
public enum MessageDropReason: Hashable, Sendable, CustomStringConvertible {
    /// Queued for a peer that came back taking smaller frames or messages than they need (a
    /// smaller ``MultipeerSession/Limits/maximumFrameLength`` or
    /// ``MultipeerSession/Limits/maximumMessageLength``): they were taken out of its outbox unsent.
    case tooLargeForPeer
    /// Queued for a peer that came back reading other message types (a restart with another
    /// build of its application, which declares the types it reads), none of them this one:
    /// they were taken out of its outbox unsent.
    case notReadByPeer
    /// Part of a message arriving in fragments came, and the sender gave up the rest: it forgot
    /// this peer (``MultipeerSession/forget(peer:)``) while the message was on its way.
    case abandonedBySender
    /// Unreliable messages waiting for the peer's link when it went, never written (sent with
    /// ``Delivery/unreliable``, as such messages may be lost).
    case linkLost

    /// Why, in a sentence.
    public var description: String {
        switch self {
        case .tooLargeForPeer: "queued for a peer that came back taking smaller frames or messages than they need"
        case .notReadByPeer: "queued for a peer that came back reading other message types"
        case .abandonedBySender:
            "part of it arrived in fragments, and the sender gave up the rest (it forgot this peer)"
        case .linkLost: "sent unreliably, and the peer's link went before it was written"
        }
    }
}
