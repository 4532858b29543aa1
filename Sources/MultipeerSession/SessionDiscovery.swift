import Logging
import MultipeerCore
import MultipeerDiscovery

import struct Foundation.UUID

/// How a running session finds its peers and is found: over DNS-SD (a browser, and an
/// advertisement once it listens) or from a fixed list of endpoints (no advertisement).
struct SessionDiscovery: Sendable {
    /// Where the session's peers come from.
    let source: any PeerDiscovery
    /// The DNS-SD directory and the service type advertised in it; nil for static peers.
    private let dnssd: (directory: any ServiceDirectory, serviceType: ServiceType)?

    /// The discovery `configuration` asks for, for the session of `localPeerID`, with DNS-SD
    /// from `directory`. Throws if the service type is invalid (static peers too: the same
    /// configuration must not fail only once it is moved to DNS-SD) or the directory cannot be
    /// reached (avahi-daemon, not to be waited for).
    init(
        _ configuration: MultipeerSession.Configuration,
        localPeerID: UUID,
        directory: SessionEnvironment.Directory,
        logger: Logger
    ) throws {
        let serviceType = try ServiceType(configuration.serviceType)
        switch configuration.discovery {
        case .avahi(let waitForDaemon):
            let directory = try directory(waitForDaemon, logger)
            source = directory.browser(for: serviceType, localPeerID: localPeerID)
            dnssd = (directory, serviceType)
        case .staticPeers(let endpoints):
            source = try StaticPeers(endpoints)
            dnssd = nil
        }
    }

    /// Advertises the session listening on `port` (nil for static peers). Throws a
    /// `MultipeerError` if the TXT record or the advertisement cannot be made.
    func advertise(port: Int, peerID: UUID, incarnation: UInt64, peer: PeerInfo) throws -> (any Advertisement)? {
        guard let dnssd else { return nil }
        let txt = try AdvertTXT(
            peerID: peerID,
            incarnation: incarnation,
            displayName: peer.displayName,
            metadata: peer.metadata
        )
        return try dnssd.directory.advertise(dnssd.serviceType, port: port, txt: txt)
    }
}
