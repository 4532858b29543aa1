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
