import struct Foundation.UUID
import Logging
import MultipeerCore
import MultipeerDiscovery

/// How a running session finds its peers and is found: over Avahi (a browser, and an
/// advertisement once it listens) or from a fixed list of endpoints (no advertisement).
struct SessionDiscovery: Sendable {
    /// Where the session's peers come from.
    let source: any PeerDiscovery
    /// The connection to avahi-daemon and the service type advertised on it; nil for static peers.
    private let avahi: (connection: AvahiConnection, serviceType: ServiceType)?

    /// The discovery `configuration` asks for, for the session of `localPeerID`. Throws if the
    /// service type is invalid (static peers too: the same configuration must not fail only once
    /// it is moved to DNS-SD) or avahi-daemon cannot be reached (and is not to be waited for).
    init(_ configuration: MultipeerSession.Configuration, localPeerID: UUID, logger: Logger) throws {
        let serviceType = try ServiceType(configuration.serviceType)
        switch configuration.discovery {
        case .avahi(let waitForDaemon):
            let connection = try AvahiConnection.shared(waitForDaemon: waitForDaemon, logger: logger)
            source = PeerBrowser(serviceType: serviceType, localPeerID: localPeerID, connection: connection)
            avahi = (connection, serviceType)
        case .staticPeers(let endpoints):
            source = try StaticPeers(endpoints)
            avahi = nil
        }
    }

    /// Advertises the session listening on `port` (nil for static peers). Throws a
    /// `MultipeerError` if the TXT record or the advertisement cannot be made.
    func advertise(port: Int, peerID: UUID, incarnation: UInt64, peer: PeerInfo) throws -> PeerAdvertiser? {
        guard let avahi else { return nil }
        let txt = try AdvertTXT(peerID: peerID, incarnation: incarnation, displayName: peer.displayName, metadata: peer.metadata)
        return try PeerAdvertiser(serviceType: avahi.serviceType, port: port, txt: txt, connection: avahi.connection)
    }
}
