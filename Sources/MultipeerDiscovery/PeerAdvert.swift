package import struct Foundation.UUID

/// One address at which a peer was resolved.
package struct PeerAddress: Hashable, Sendable, CustomStringConvertible {
    /// An IP literal; IPv6 link-local addresses carry their scope, e.g. `fe80::1%eth0`.
    package var host: String
    /// The index of the interface the address was seen on (0 when unknown).
    package var interfaceIndex: Int32

    package init(host: String, interfaceIndex: Int32 = 0) {
        self.host = host
        self.interfaceIndex = interfaceIndex
    }

    package var isIPv6: Bool { host.contains(":") }
    package var isLoopback: Bool { host.hasPrefix("127.") || host == "::1" }
    package var isLinkLocal: Bool { host.lowercased().hasPrefix("fe80:") || host.hasPrefix("169.254.") }

    /// Lower dials first: loopback, IPv4, routable IPv6, link-local.
    var preference: Int {
        if isLoopback { return 0 }
        if isLinkLocal { return 3 }
        return isIPv6 ? 2 : 1
    }

    package var description: String { host }
}

/// A peer found by discovery: who it is, and where to dial it.
package struct PeerAdvert: Hashable, Sendable, CustomStringConvertible {
    /// The peer's UUID, from TXT `id`. Nil for a static peer, whose identity arrives with its HELLO.
    package var peerID: UUID?
    /// The peer's incarnation, from TXT `inc` (0 for a static peer).
    package var incarnation: UInt64
    /// The peer's display name, from TXT `name`.
    package var displayName: String
    /// The application's entries of the TXT record.
    package var metadata: [String: String]
    /// The TCP port the peer listens on.
    package var port: Int
    /// Every address the peer was resolved at, best first (loopback, IPv4, IPv6, link-local).
    package var addresses: [PeerAddress]

    package init(
        peerID: UUID?, incarnation: UInt64 = 0, displayName: String = "", metadata: [String: String] = [:],
        port: Int, addresses: [PeerAddress]
    ) {
        self.peerID = peerID
        self.incarnation = incarnation
        self.displayName = displayName
        self.metadata = metadata
        self.port = port
        self.addresses = addresses
    }

    package var description: String {
        "\(displayName.isEmpty ? "peer" : displayName) (\(peerID?.uuidString ?? "identity unknown")) at "
            + addresses.map { "\($0):\(port)" }.joined(separator: ", ")
    }
}

/// What a browser reports.
package enum BrowseEvent: Hashable, Sendable {
    /// A peer appeared, or came back with another incarnation, port, name or metadata.
    /// Reported once however many interfaces and protocols announce it.
    case found(PeerAdvert)
    /// Every announcement of the peer is gone. Liveness comes from links, not from this:
    /// a dead peer's record can linger in the mDNS cache for about two minutes.
    case lost(UUID)
}

/// A source of peers to connect to: ``PeerBrowser`` over DNS-SD, or ``StaticPeers``.
package protocol PeerDiscovery: Sendable {
    /// Starts discovering; stops when the iteration ends or its task is cancelled.
    func browse() -> AsyncStream<BrowseEvent>
}
