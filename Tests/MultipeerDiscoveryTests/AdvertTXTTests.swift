import Foundation
import MultipeerCore
import Testing

@testable import MultipeerDiscovery

@Suite struct AdvertTXTTests {
    static let peerID = UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!

    static func bytes(_ entries: [String]) -> [[UInt8]] { entries.map { Array($0.utf8) } }

    @Test func encodesLibraryKeysFirstThenSortedMetadata() throws {
        let txt = try AdvertTXT(
            peerID: Self.peerID,
            incarnation: 42,
            displayName: "Captain",
            metadata: ["seat": "L", "role": "PIC"]
        )
        #expect(
            txt.entries == [
                "v=2", "id=6f9619ff-8b86-d011-b42d-00c04fc964ff", "inc=42", "name=Captain", "role=PIC", "seat=L",
            ]
        )
    }

    @Test func roundTrips() throws {
        let txt = try AdvertTXT(
            peerID: UUID(),
            incarnation: .max,
            displayName: "Kapitän ✈︎",
            metadata: ["a": "", "b": "x=y"]
        )
        #expect(try AdvertTXT(entries: Self.bytes(txt.entries)) == txt)
    }

    @Test func entriesThatWouldNotFitOrClashAreRefusedClearly() throws {
        let long = try #require(throws: MultipeerError.self) {
            try AdvertTXT(
                peerID: Self.peerID,
                incarnation: 1,
                displayName: "x",
                metadata: ["note": String(repeating: "n", count: 251)]
            )
        }
        #expect(long.message == "metadata entry \"note\" is 256 bytes as key=value; the limit is 255")
        let reserved = try #require(throws: MultipeerError.self) {
            try AdvertTXT(peerID: Self.peerID, incarnation: 1, displayName: "x", metadata: ["ID": "spoof"])
        }
        #expect(reserved.message.contains("reserved"))
        #expect(throws: MultipeerError.self) {
            try AdvertTXT(peerID: Self.peerID, incarnation: 1, displayName: String(repeating: "n", count: 251))
        }
    }

    @Test func keysAreCaseInsensitiveAndTheFirstOfARepeatWins() throws {
        let txt = try AdvertTXT(
            entries: Self.bytes(["V=2", "ID=\(Self.peerID)", "id=\(UUID())", "Name=Tower", "seat=L", "seat=R"])
        )
        #expect(txt.peerID == Self.peerID)
        #expect(txt.displayName == "Tower")
        #expect(txt.metadata == ["seat": "L"])
        #expect(txt.incarnation == 0, "a missing inc reads as 0")
    }

    @Test func malformedEntriesAreSkipped() throws {
        var entries = Self.bytes(["v=2", "id=\(Self.peerID)", "flag", "=novalue", "ok=yes"])
        entries.append([0x62, 0x61, 0x64, 0x3D, 0xC3, 0x28])  // "bad=" and invalid UTF-8
        entries.append([])
        let txt = try AdvertTXT(entries: entries)
        #expect(txt.metadata == ["ok": "yes"])
    }

    @Test func recordsThatAreNotOursAreRejectedWithAReason() {
        let cases: [([String], AdvertTXT.Rejection)] = [
            (["id=\(Self.peerID)"], .otherProtocolVersion("(none)")),
            (["v=1", "id=\(Self.peerID)"], .otherProtocolVersion("1")),
            (["v=2"], .missingPeerID),
            (["v=2", "id=captain"], .invalidPeerID("captain")),
            (["v=2", "id=\(Self.peerID)", "inc=-1"], .invalidIncarnation("-1")),
        ]
        for (entries, rejection) in cases {
            #expect(throws: rejection) { try AdvertTXT(entries: Self.bytes(entries)) }
        }
    }
}

@Suite struct StaticPeersTests {
    @Test func parsesHostsAndPortsIncludingIPv6() throws {
        let peers = try StaticPeers(["198.18.0.2:7000", "navlog-2.local:7001", "[fe80::1%eth0]:7002"])
        #expect(peers.adverts.map(\.endpoints.first?.host) == ["198.18.0.2", "navlog-2.local", "fe80::1%eth0"])
        #expect(peers.adverts.map(\.endpoints.first?.port) == [7000, 7001, 7002])
        #expect(peers.adverts.allSatisfy { $0.peerID == nil })
    }

    @Test func refusesWhatIsNotHostColonPort() {
        for bad in ["198.18.0.2", "198.18.0.2:0", "198.18.0.2:70000", ":7000", "fe80::1:7000x"] {
            #expect(throws: MultipeerError.self, "\(bad)") { try StaticPeers([bad]) }
        }
    }

    @Test func reportsEveryPeerFoundAtOnce() async throws {
        let peers = try StaticPeers(["198.18.0.2:7000", "198.18.0.3:7000"])
        var found: [PeerAdvert] = []
        for await event in peers.browse() {
            if case .found(let advert) = event { found.append(advert) }
            if found.count == 2 { break }
        }
        #expect(found == peers.adverts)
    }
}
