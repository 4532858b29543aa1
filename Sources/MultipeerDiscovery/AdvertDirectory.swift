import struct Foundation.UUID

/// Turns DNS-SD's per-interface, per-protocol service instances into peers: a peer is found
/// once, however many instances announce it, and lost when the last of them is removed.
/// Sans-IO: the browser feeds it what Avahi reports and carries out the events it returns.
struct AdvertDirectory {
    /// One service instance as DNS-SD reports it.
    struct InstanceKey: Hashable {
        var interfaceIndex: Int32
        var protocolFamily: Int32
        var name: String
    }

    /// What resolving one instance gave.
    struct Resolution: Hashable {
        var txt: AdvertTXT
        var port: Int
        var address: PeerAddress?
        /// The instance is published on this host (Avahi's LOCAL flag): dial it over loopback.
        var isOnThisHost: Bool
    }

    private let localPeerID: UUID
    private var instances: [InstanceKey: Resolution] = [:]
    private var reported: [UUID: PeerAdvert] = [:]

    init(localPeerID: UUID) {
        self.localPeerID = localPeerID
    }

    /// The peers reported found and not yet lost.
    var peers: [PeerAdvert] { Array(reported.values) }

    /// An instance was resolved, or resolved again with new data.
    mutating func resolved(_ key: InstanceKey, _ resolution: Resolution) -> [BrowseEvent] {
        var events: [BrowseEvent] = []
        if let previous = instances[key], previous.txt.peerID != resolution.txt.peerID {
            // The instance name now belongs to another peer: the old one left it.
            events += removed(key)
        }
        guard resolution.txt.peerID != localPeerID else { return events }
        instances[key] = resolution
        let advert = merged(resolution.txt.peerID)!
        let previous = reported[advert.peerID!]
        reported[advert.peerID!] = advert
        if previous == nil || !previous!.sameAnnouncement(as: advert) {
            events.append(.found(advert))
        }
        return events
    }

    /// An instance was removed.
    mutating func removed(_ key: InstanceKey) -> [BrowseEvent] {
        guard let resolution = instances.removeValue(forKey: key) else { return [] }
        let peerID = resolution.txt.peerID
        if let advert = merged(peerID) {
            reported[peerID] = advert
            return []
        }
        return reported.removeValue(forKey: peerID) == nil ? [] : [.lost(peerID)]
    }

    /// Every instance is gone at once (the daemon went away).
    mutating func removeAll() -> [BrowseEvent] {
        instances.removeAll()
        defer { reported.removeAll() }
        return reported.keys.sorted { $0.uuidString < $1.uuidString }.map { .lost($0) }
    }

    /// The advert of `peerID` from all its instances: the newest incarnation's record, every address.
    private func merged(_ peerID: UUID) -> PeerAdvert? {
        let resolutions = instances.values.filter { $0.txt.peerID == peerID }
        guard let newest = resolutions.max(by: { $0.txt.incarnation < $1.txt.incarnation }) else { return nil }
        var addresses = Set(resolutions.filter { $0.txt.incarnation == newest.txt.incarnation }.compactMap(\.address))
        if resolutions.contains(where: \.isOnThisHost) { addresses.insert(PeerAddress(host: "127.0.0.1")) }
        return PeerAdvert(
            peerID: peerID, incarnation: newest.txt.incarnation, displayName: newest.txt.displayName,
            metadata: newest.txt.metadata, port: newest.port,
            addresses: addresses.sorted { ($0.preference, $0.host, $0.interfaceIndex) < ($1.preference, $1.host, $1.interfaceIndex) })
    }
}

extension PeerAdvert {
    /// Same peer, incarnation, port, name and metadata: only addresses may differ.
    func sameAnnouncement(as other: PeerAdvert) -> Bool {
        peerID == other.peerID && incarnation == other.incarnation && port == other.port
            && displayName == other.displayName && metadata == other.metadata
    }
}
