public import struct Foundation.UUID

/// A peer the session knows of, whether or not it is active: discovered over DNS-SD (or a
/// static endpoint once a HELLO has named its peer), being connected, refused, or active
/// (``MultipeerSession/availablePeers``).
///
/// Until a link of the peer proves who it is, its name and metadata are what its advert
/// claims, which anyone on the network can claim; ``key`` says whether a HELLO has proved them.
public struct AvailablePeer: Hashable, Sendable, Identifiable, CustomStringConvertible {
    /// How far the peer's link is.
    public enum State: Hashable, Sendable, CustomStringConvertible {
        /// Found, with no link under way: waiting for the peer to dial (the greater UUID dials),
        /// or for the next dial after one failed.
        case discovered
        /// A connection to or from it is being made (TLS, HELLO, admission by both sides).
        case connecting
        /// Its last link was refused for a reason retrying cannot change: a roster (this
        /// session's, or the peer's, which does not list this device), or a key or identity
        /// that did not verify. An ``SessionEvent/authenticationFailed(address:_:)`` said why.
        /// It is dialled again only at the longest backoff, or at once when its advert or this
        /// session's roster or keys change.
        case refused
        /// Joined: one of ``MultipeerSession/activePeers``.
        case active
        /// No longer known: its advert was withdrawn and no link speaks for it (or the session
        /// stopped running). Only ``SessionEvent/availablePeerChanged(_:)`` says so; a gone peer
        /// is not among ``MultipeerSession/availablePeers``.
        case gone

        /// The state in a word.
        public var description: String {
            switch self {
            case .discovered: "discovered"
            case .connecting: "connecting"
            case .refused: "refused"
            case .active: "active"
            case .gone: "gone"
            }
        }
    }

    /// The peer's session's ``MultipeerSession/peerID``.
    public var id: UUID
    /// How far its link is.
    public var state: State
    /// The name it gave for people: proven by its HELLO if ``key`` is set, else its advert's claim.
    public var displayName: String
    /// Its application metadata: proven by its HELLO if ``key`` is set, else its advert's claim.
    public var metadata: [String: String]
    /// The public key the peer proved it holds, while a link of it speaks for it (connecting
    /// after its HELLO, or active); nil for a peer known only from its advert.
    public var key: PeerKey?

    /// A peer as a session describes one, for an application that tests its own handling of
    /// ``SessionEvent/availablePeerChanged(_:)``.
    public init(id: UUID, state: State, displayName: String, metadata: [String: String] = [:], key: PeerKey? = nil) {
        self.id = id
        self.state = state
        self.displayName = displayName
        self.metadata = metadata
        self.key = key
    }

    /// Its name, identity and state, e.g. `Captain (6F9619FF-...), connecting`.
    public var description: String { "\(displayName) (\(id)), \(state)" }
}
