package import struct Foundation.UUID

/// Turns DNS-SD's per-interface, per-protocol service instances into peers: a peer is found
/// once, however many instances announce it, and lost when the last of them is removed.
/// Sans-IO: the browser feeds it what Avahi reports and carries out the events it returns (and
/// a simulated directory feeds it its adverts, so a simulated browser reports as this one does).
///
/// Adverts are hints (anyone can publish one with any `id` and `inc`), so no instance hides
/// another: a peer's endpoints are those of every instance naming it, whatever incarnation
/// each claims, and the dialler finds out which one answers as the peer.
package struct AdvertDirectory {
    /// The most endpoints reported for one peer: those of its earliest-seen instances. A peer
    /// has one per interface and IP protocol, plus loopback; more means someone else is
    /// advertising its ID too, and those instances come after the ones seen first.
    static let maximumEndpointsPerPeer = 16

    /// One service instance as DNS-SD reports it.
    package struct InstanceKey: Hashable {
        var interfaceIndex: Int32
        var protocolFamily: Int32
        var name: String

        package init(interfaceIndex: Int32, protocolFamily: Int32, name: String) {
            self.interfaceIndex = interfaceIndex
            self.protocolFamily = protocolFamily
            self.name = name
        }
    }

    /// What resolving one instance gave.
    package struct Resolution: Hashable {
        var txt: AdvertTXT
        var port: Int
        /// Nil while the instance's address is unknown (its address record was withdrawn and
        /// no other has come yet).
        var address: String?
        var interfaceIndex: Int32 = 0
        /// The instance is published on this host (Avahi's LOCAL flag): dial it over loopback.
        var isOnThisHost: Bool

        package init(txt: AdvertTXT, port: Int, address: String?, interfaceIndex: Int32 = 0, isOnThisHost: Bool) {
            self.txt = txt
            self.port = port
            self.address = address
            self.interfaceIndex = interfaceIndex
            self.isOnThisHost = isOnThisHost
        }
    }

    private let localPeerID: UUID
    private var instances: [InstanceKey: (resolution: Resolution, seen: UInt64)] = [:]
    private var nextSeen: UInt64 = 0
    private var reported: [UUID: PeerAdvert] = [:]

    package init(localPeerID: UUID) {
        self.localPeerID = localPeerID
    }

    /// The peers reported found and not yet lost.
    var peers: [PeerAdvert] { Array(reported.values) }

    /// An instance was resolved, or resolved again with new data.
    package mutating func resolved(_ key: InstanceKey, _ resolution: Resolution) -> [BrowseEvent] {
        var events: [BrowseEvent] = []
        var seen = nextSeen
        if let previous = instances[key] {
            if previous.resolution.txt.peerID != resolution.txt.peerID {
                // The instance name now belongs to another peer: the old one left it.
                events += removed(key)
            } else {
                seen = previous.seen
            }
        }
        guard resolution.txt.peerID != localPeerID else { return events }
        if seen == nextSeen { nextSeen += 1 }
        instances[key] = (resolution, seen)
        let advert = merged(resolution.txt.peerID)!
        if reported.updateValue(advert, forKey: resolution.txt.peerID) != advert {
            events.append(.found(advert))
        }
        return events
    }

    /// An instance was removed.
    package mutating func removed(_ key: InstanceKey) -> [BrowseEvent] {
        guard let peerID = instances.removeValue(forKey: key)?.resolution.txt.peerID else { return [] }
        guard let advert = merged(peerID) else {
            return reported.removeValue(forKey: peerID) == nil ? [] : [.lost(peerID)]
        }
        return reported.updateValue(advert, forKey: peerID) == advert ? [] : [.found(advert)]
    }

    /// Every instance is gone at once (the daemon went away).
    mutating func removeAll() -> [BrowseEvent] {
        instances.removeAll()
        defer { reported.removeAll() }
        return reported.keys.sorted { $0.uuidString < $1.uuidString }.map { .lost($0) }
    }

    /// The advert of `peerID` from all its instances: every endpoint (the earliest-seen
    /// instances' first, within the bound), and the name and metadata of the highest incarnation.
    private func merged(_ peerID: UUID) -> PeerAdvert? {
        let resolutions = instances.values.filter { $0.resolution.txt.peerID == peerID }.sorted { $0.seen < $1.seen }
            .map(\.resolution)
        guard let newest = resolutions.max(by: { $0.txt.incarnation < $1.txt.incarnation }) else { return nil }
        var endpoints: [PeerEndpoint] = []
        for resolution in resolutions {
            var candidates: [PeerEndpoint] = []
            if resolution.isOnThisHost { candidates.append(PeerEndpoint(host: "127.0.0.1", port: resolution.port)) }
            if let address = resolution.address {
                candidates.append(
                    PeerEndpoint(host: address, port: resolution.port, interfaceIndex: resolution.interfaceIndex)
                )
            }
            for candidate in candidates
            where endpoints.count < Self.maximumEndpointsPerPeer
                && !endpoints.contains(where: { $0.host == candidate.host && $0.port == candidate.port })
            {
                endpoints.append(candidate)
            }
        }
        // Stable: within a preference, the order they were first seen in.
        let ranked = endpoints.enumerated().sorted {
            ($0.element.preference, $0.offset) < ($1.element.preference, $1.offset)
        }.map(\.element)
        return PeerAdvert(
            peerID: peerID,
            incarnation: newest.txt.incarnation,
            displayName: newest.txt.displayName,
            metadata: newest.txt.metadata,
            endpoints: ranked
        )
    }
}
