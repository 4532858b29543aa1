public import Foundation
public import MultipeerCore

/// An active peer, as its HELLO introduced it.
public struct Peer: Hashable, Sendable, Identifiable, CustomStringConvertible {
    public var id: UUID
    /// Changes each time the peer's session starts.
    public var incarnation: UInt64
    public var displayName: String
    public var metadata: [String: String]

    init(_ hello: Hello) {
        id = hello.peerID
        incarnation = hello.incarnation
        displayName = hello.displayName
        metadata = hello.metadata
    }

    public var description: String { "\(displayName) (\(id))" }
}

/// What happens in a session.
public enum SessionEvent: Sendable, CustomStringConvertible {
    /// The session listens on this TCP port (and advertises it).
    case listening(port: Int)
    /// A peer became active: its link is authenticated and HELLO-complete.
    case peerJoined(Peer)
    /// A peer left the active set.
    case peerLeft(Peer, PeerLeftReason)
    /// A connection to or from this address failed before its peer became active.
    case connectionFailed(address: String, MultipeerError)
    /// A connection to or from this address failed PSK authentication (wrong key or identity).
    case authenticationFailed(address: String, MultipeerError)
    /// A message arrived whose payload does not decode as its named type; the link stays up.
    case undecodableMessage(from: Peer, typeName: String, error: String)
    /// Advertising failed; the session still dials and accepts.
    case advertisingFailed(MultipeerError)
    /// The periodic report on an active peer's link (``MultipeerSession/Configuration/statsInterval``).
    case stats(Peer, LinkStats)

    public var description: String {
        switch self {
        case .listening(let port): "listening on port \(port)"
        case .peerJoined(let peer): "\(peer) joined"
        case .peerLeft(let peer, let reason): "\(peer) left: \(reason)"
        case .connectionFailed(let address, let error): "connection with \(address) failed: \(error)"
        case .authenticationFailed(let address, let error): "authentication with \(address) failed: \(error)"
        case .undecodableMessage(let peer, let type, let error): "a \(type) from \(peer) did not decode: \(error)"
        case .advertisingFailed(let error): "advertising failed: \(error)"
        case .stats(let peer, let stats): "\(peer): \(stats)"
        }
    }
}

/// How a peer's link is doing.
public struct LinkStats: Hashable, Sendable, CustomStringConvertible {
    /// Round trips, jitter, loss and traffic of the current link.
    public var quality: LinkQuality
    /// How many times the peer became active again after leaving.
    public var reconnects: Int
    /// How long the peer has been active this time.
    public var timeActive: Duration

    public var description: String {
        let rtt = quality.smoothedRTT.map { String(format: "%.2f ms", $0.seconds * 1000) } ?? "-"
        let jitter = quality.jitter.map { String(format: "%.2f ms", $0.seconds * 1000) } ?? "-"
        return "RTT \(rtt), jitter \(jitter), loss \(String(format: "%.1f", quality.loss * 100)) %, "
            + "\(quality.framesIn)/\(quality.framesOut) messages in/out, \(reconnects) reconnects, active \(timeActive)"
    }
}
