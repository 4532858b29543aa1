package import Logging

package import struct Foundation.UUID

/// Where a session advertises itself and browses for its peers: DNS-SD through avahi-daemon
/// (``AvahiDirectory``), or a simulated directory of adverts (the MultipeerSessionTesting
/// product). The seam below a session's discovery: what is above it (the session's dials,
/// its advert's TXT) is the same either way.
package protocol ServiceDirectory: Sendable {
    /// The peers of `serviceType` as they come and go, this peer's own adverts left out.
    func browser(for serviceType: ServiceType, localPeerID: UUID) -> any PeerDiscovery

    /// Publishes this peer listening on `port`, with `txt`, until the advertisement's `stop()`.
    func advertise(_ serviceType: ServiceType, port: Int, txt: AdvertTXT) throws -> any Advertisement
}

/// One published advertisement.
package protocol Advertisement: Sendable {
    /// What happens to it, from start to ``stop()``.
    var events: AsyncStream<AdvertisementEvent> { get }
    /// Withdraws it.
    func stop()
}

extension PeerAdvertiser: Advertisement {}

/// DNS-SD through avahi-daemon, over one shared connection to the daemon.
package struct AvahiDirectory: ServiceDirectory {
    let connection: AvahiConnection

    /// Connects to avahi-daemon (``AvahiConnection/shared(waitForDaemon:logger:)``).
    package init(waitForDaemon: Bool, logger: Logger) throws {
        connection = try AvahiConnection.shared(waitForDaemon: waitForDaemon, logger: logger)
    }

    package func browser(for serviceType: ServiceType, localPeerID: UUID) -> any PeerDiscovery {
        PeerBrowser(serviceType: serviceType, localPeerID: localPeerID, connection: connection)
    }

    package func advertise(_ serviceType: ServiceType, port: Int, txt: AdvertTXT) throws -> any Advertisement {
        try PeerAdvertiser(serviceType: serviceType, port: port, txt: txt, connection: connection)
    }
}
