import Foundation
import Testing

@testable import MultipeerDiscovery

@Suite struct AdvertDirectoryTests {
    static let me = UUID()
    static let peer = UUID()

    static func key(_ interface: Int32, _ family: Int32 = 0, _ name: String = "captain") -> AdvertDirectory.InstanceKey
    {
        .init(interfaceIndex: interface, protocolFamily: family, name: name)
    }

    static func resolution(
        _ peerID: UUID = peer,
        incarnation: UInt64 = 1,
        name: String = "Captain",
        address: String?,
        port: Int = 7000,
        local: Bool = false
    ) throws -> AdvertDirectory.Resolution {
        .init(
            txt: try AdvertTXT(peerID: peerID, incarnation: incarnation, displayName: name),
            port: port,
            address: address,
            interfaceIndex: 2,
            isOnThisHost: local
        )
    }

    static func endpoints(_ events: [BrowseEvent]) -> [String]? {
        guard case .found(let advert)? = events.last else { return nil }
        return advert.endpoints.map(\.description)
    }

    @Test func aPeerOnManyInterfacesIsFoundOnceAndLostWithItsLastInstance() throws {
        var directory = AdvertDirectory(localPeerID: Self.me)
        let found = directory.resolved(Self.key(2, 0), try Self.resolution(address: "198.18.0.2"))
        #expect(found.count == 1)
        #expect(
            Self.endpoints(directory.resolved(Self.key(2, 1), try Self.resolution(address: "fe80::2%eth0"))) == [
                "198.18.0.2:7000", "[fe80::2%eth0]:7000",
            ]
        )
        #expect(directory.resolved(Self.key(3, 0), try Self.resolution(address: "2001:db8::2")).count == 1)
        #expect(directory.peers.first?.endpoints.map(\.host) == ["198.18.0.2", "2001:db8::2", "fe80::2%eth0"])
        #expect(Self.endpoints(directory.removed(Self.key(2, 0))) == ["[2001:db8::2]:7000", "[fe80::2%eth0]:7000"])
        #expect(Self.endpoints(directory.removed(Self.key(2, 1))) == ["[2001:db8::2]:7000"])
        #expect(directory.removed(Self.key(3, 0)) == [.lost(Self.peer)])
        #expect(directory.removed(Self.key(3, 0)).isEmpty, "an unknown instance is no news")
    }

    @Test func ourOwnAdvertIsSkipped() throws {
        var directory = AdvertDirectory(localPeerID: Self.me)
        #expect(directory.resolved(Self.key(1), try Self.resolution(Self.me, address: "127.0.0.1")).isEmpty)
        #expect(directory.removed(Self.key(1)).isEmpty)
    }

    @Test func anyChangeIsFoundAgainAndTheSameRecordIsNot() throws {
        var directory = AdvertDirectory(localPeerID: Self.me)
        _ = directory.resolved(Self.key(2), try Self.resolution(address: "198.18.0.2"))
        #expect(directory.resolved(Self.key(2), try Self.resolution(address: "198.18.0.2")).isEmpty)
        // The host was renumbered: the new address replaces the old.
        #expect(
            Self.endpoints(directory.resolved(Self.key(2), try Self.resolution(address: "198.18.0.9"))) == [
                "198.18.0.9:7000"
            ]
        )
        let restarted = directory.resolved(Self.key(2), try Self.resolution(incarnation: 2, address: "198.18.0.9"))
        guard case .found(let advert)? = restarted.first else {
            Issue.record("expected found")
            return
        }
        #expect(advert.incarnation == 2)
        let renamed = directory.resolved(
            Self.key(2),
            try Self.resolution(incarnation: 2, name: "Skipper", address: "198.18.0.9")
        )
        #expect(renamed.count == 1)
    }

    @Test func aWithdrawnAddressTakesItsEndpointAwayButNotThePeer() throws {
        var directory = AdvertDirectory(localPeerID: Self.me)
        _ = directory.resolved(Self.key(2, 0), try Self.resolution(address: "198.18.0.2"))
        _ = directory.resolved(Self.key(2, 1), try Self.resolution(address: "fe80::2%eth0"))
        #expect(
            Self.endpoints(directory.resolved(Self.key(2, 0), try Self.resolution(address: nil))) == [
                "[fe80::2%eth0]:7000"
            ]
        )
        #expect(
            Self.endpoints(directory.resolved(Self.key(2, 1), try Self.resolution(address: nil))) == [],
            "found, with nowhere to dial yet"
        )
        #expect(
            Self.endpoints(directory.resolved(Self.key(2, 0), try Self.resolution(address: "198.18.0.7"))) == [
                "198.18.0.7:7000"
            ]
        )
    }

    @Test func anotherAdvertOfTheSameIDAddsEndpointsWhateverIncarnationItClaims() throws {
        var directory = AdvertDirectory(localPeerID: Self.me)
        _ = directory.resolved(Self.key(2, 0, "captain"), try Self.resolution(address: "198.18.0.2"))
        // A rogue copies the ID with a far greater incarnation and points at its sink: the
        // honest endpoint stays, first (seen first); the rogue's comes after it.
        let rogue = directory.resolved(
            Self.key(2, 0, "captain #2"),
            try Self.resolution(incarnation: .max, address: "198.18.0.66", port: 9)
        )
        #expect(Self.endpoints(rogue) == ["198.18.0.2:7000", "198.18.0.66:9"])
        #expect(Self.endpoints(directory.removed(Self.key(2, 0, "captain #2"))) == ["198.18.0.2:7000"])
    }

    @Test func aPeerHasAtMostSixteenEndpointsTheEarliestSeen() throws {
        var directory = AdvertDirectory(localPeerID: Self.me)
        _ = directory.resolved(Self.key(2, 0, "honest"), try Self.resolution(address: "198.18.0.2"))
        for copy in 1...40 {
            _ = directory.resolved(
                Self.key(2, 0, "copy \(copy)"),
                try Self.resolution(incarnation: UInt64(copy) << 40, address: "198.18.1.\(copy)")
            )
        }
        let endpoints = try #require(directory.peers.first?.endpoints)
        #expect(endpoints.count == AdvertDirectory.maximumEndpointsPerPeer)
        #expect(endpoints.first?.host == "198.18.0.2")
        #expect(endpoints.last?.host == "198.18.1.15")
        // A copy going away lets the next one in.
        #expect(Self.endpoints(directory.removed(Self.key(2, 0, "copy 3")))?.last == "198.18.1.16:7000")
    }

    @Test func aPeerOnThisHostIsDialledOverLoopbackFirst() throws {
        var directory = AdvertDirectory(localPeerID: Self.me)
        let events = directory.resolved(Self.key(2), try Self.resolution(address: "198.18.0.1", local: true))
        guard case .found(let advert)? = events.first else {
            Issue.record("expected found")
            return
        }
        #expect(advert.endpoints.map(\.host) == ["127.0.0.1", "198.18.0.1"])
    }

    @Test func anInstanceNameTakenOverByAnotherPeerLosesTheFirst() throws {
        var directory = AdvertDirectory(localPeerID: Self.me)
        _ = directory.resolved(Self.key(2), try Self.resolution(address: "198.18.0.2"))
        let other = UUID()
        let events = directory.resolved(Self.key(2), try Self.resolution(other, address: "198.18.0.3"))
        #expect(events.count == 2)
        #expect(events.first == .lost(Self.peer))
        if case .found(let advert)? = events.last {
            #expect(advert.peerID == other)
        } else {
            Issue.record("expected found")
        }
    }

    @Test func removingEverythingLosesEveryPeer() throws {
        var directory = AdvertDirectory(localPeerID: Self.me)
        let second = UUID()
        _ = directory.resolved(Self.key(2, 0, "a"), try Self.resolution(address: "198.18.0.2"))
        _ = directory.resolved(Self.key(2, 0, "b"), try Self.resolution(second, address: "198.18.0.3"))
        #expect(Set(directory.removeAll()) == [.lost(Self.peer), .lost(second)])
        #expect(directory.peers.isEmpty)
    }
}
