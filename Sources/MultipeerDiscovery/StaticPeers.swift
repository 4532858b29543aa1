import MultipeerCore

package import struct Foundation.UUID

/// Peers at fixed addresses, for routed networks without multicast: the same interface as
/// ``PeerBrowser``, fed from a list of `host:port`. Each is reported found at once and never
/// lost; its identity (nil ``PeerAdvert/peerID``) arrives with its HELLO. A host name is looked
/// up again at every dial, so a peer whose name moves to another address is found there.
package struct StaticPeers: PeerDiscovery {
    package let adverts: [PeerAdvert]

    /// Parses `host:port` entries: `192.0.2.7:7000`, `navlog-2.local:7000`, `[fe80::1%eth0]:7000`.
    package init(_ endpoints: [String]) throws {
        adverts = try endpoints.map { endpoint in
            guard let colon = endpoint.lastIndex(of: ":"), let port = Int(endpoint[endpoint.index(after: colon)...]),
                (1...65535).contains(port)
            else {
                throw MultipeerError(
                    .invalidArgument,
                    "static peer \"\(endpoint)\" is not HOST:PORT (e.g. 192.0.2.7:7000)"
                )
            }
            var host = String(endpoint[..<colon])
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            guard !host.isEmpty, !host.contains("[") else {
                throw MultipeerError(
                    .invalidArgument,
                    "static peer \"\(endpoint)\" has no host; write IPv6 as [ADDRESS]:PORT"
                )
            }
            return PeerAdvert(peerID: nil, displayName: endpoint, endpoints: [PeerEndpoint(host: host, port: port)])
        }
    }

    package func browse() -> AsyncStream<BrowseEvent> {
        let (events, continuation) = AsyncStream<BrowseEvent>.makeStream()
        for advert in adverts { continuation.yield(.found(advert)) }
        // The stream ends only when its consumer stops: keep the continuation until then.
        continuation.onTermination = { _ in _ = continuation }
        return events
    }

    /// Nothing to do: each dial resolves a host name again.
    package func refresh(_ peerID: UUID) {}
}
