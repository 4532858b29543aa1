import MultipeerCore

package import struct Foundation.UUID

/// One place a peer was resolved at: an address and the port its advert named there.
package struct PeerEndpoint: Hashable, Sendable, CustomStringConvertible {
    /// An IP literal or, for a static peer, a host name; IPv6 link-local addresses carry their
    /// scope, e.g. `fe80::1%eth0`.
    package var host: String
    /// The TCP port.
    package var port: Int
    /// The index of the interface the address was seen on (0 when unknown).
    package var interfaceIndex: Int32

    package init(host: String, port: Int, interfaceIndex: Int32 = 0) {
        self.host = host
        self.port = port
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

    /// `192.0.2.1:7000`, `[fe80::1%eth0]:7000` (as a dial names it).
    package var description: String { DialTarget.Endpoint(host: host, port: port).description }
}

/// A peer found by discovery: who it claims to be, and where to dial it.
///
/// Everything here is a claim anyone on the network can make: the link's HELLO proves who
/// answers at an endpoint. So every advert of an ID counts (not only the one with the highest
/// incarnation, which anyone can outbid), and the endpoints are candidates to try.
package struct PeerAdvert: Hashable, Sendable, CustomStringConvertible {
    /// The peer's UUID, from TXT `id`. Nil for a static peer, whose identity arrives with its HELLO.
    package var peerID: UUID?
    /// The highest incarnation its adverts claim, from TXT `inc` (0 for a static peer).
    package var incarnation: UInt64
    /// The display name of that advert, from TXT `name`.
    package var displayName: String
    /// The application's entries of that advert's TXT record.
    package var metadata: [String: String]
    /// Every endpoint its adverts name, best first (loopback, IPv4, IPv6, link-local; then in
    /// the order they were first seen), at most ``AdvertDirectory/maximumEndpointsPerPeer``.
    package var endpoints: [PeerEndpoint]

    package init(
        peerID: UUID?,
        incarnation: UInt64 = 0,
        displayName: String = "",
        metadata: [String: String] = [:],
        endpoints: [PeerEndpoint]
    ) {
        self.peerID = peerID
        self.incarnation = incarnation
        self.displayName = displayName
        self.metadata = metadata
        self.endpoints = endpoints
    }

    package var description: String {
        "\(displayName.isEmpty ? "peer" : displayName) (\(peerID?.uuidString ?? "identity unknown")) at "
            + (endpoints.isEmpty ? "no address yet" : endpoints.map(\.description).joined(separator: ", "))
    }
}

/// What a browser reports.
package enum BrowseEvent: Hashable, Sendable {
    /// A peer appeared, or its adverts changed (an endpoint added or withdrawn, another
    /// incarnation, name or metadata). Reported once however many interfaces and protocols
    /// announce it.
    case found(PeerAdvert)
    /// Every announcement of the peer is gone. Liveness comes from links, not from this:
    /// a dead peer's record can linger in the mDNS cache for about two minutes.
    case lost(UUID)
}

/// A source of peers to connect to: ``PeerBrowser`` over DNS-SD, or ``StaticPeers``.
package protocol PeerDiscovery: Sendable {
    /// Starts discovering; stops when the iteration ends or its task is cancelled.
    func browse() -> AsyncStream<BrowseEvent>

    /// Every endpoint of `peerID` failed: look its adverts up again rather than trust what
    /// discovery last said (the peer may have moved). New endpoints come as ``BrowseEvent/found(_:)``.
    func refresh(_ peerID: UUID)
}
