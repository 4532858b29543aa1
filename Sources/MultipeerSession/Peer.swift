public import Foundation
public import MultipeerCore

/// An active peer, as its HELLO introduced it.
public struct Peer: Hashable, Sendable, Identifiable, CustomStringConvertible {
    /// The peer's identity: its session's ``MultipeerSession/peerID``, proven by its ``key``.
    public var id: UUID
    /// The public key the peer proved it holds; its `fingerprint` is a short form to show.
    public var key: PeerKey
    /// Changes each time the peer's session starts.
    public var incarnation: UInt64
    /// The name it gave for people.
    public var displayName: String
    /// The application metadata it announced.
    public var metadata: [String: String]

    /// A peer as a session introduces one, for an application that tests its own handling of
    /// peers and events (a session makes its own from each peer's HELLO).
    public init(id: UUID, key: PeerKey, incarnation: UInt64 = 1, displayName: String, metadata: [String: String] = [:])
    {
        self.id = id
        self.key = key
        self.incarnation = incarnation
        self.displayName = displayName
        self.metadata = metadata
    }

    init(_ hello: Hello) {
        id = hello.peerID
        key = hello.key
        incarnation = hello.incarnation
        displayName = hello.displayName
        metadata = hello.metadata
    }

    /// Its name and identity, e.g. `Captain (6F9619FF-...)`.
    public var description: String { "\(displayName) (\(id))" }
}
