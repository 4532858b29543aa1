import Foundation
import MultipeerSession
import Testing

/// A device's identity, as an application keeps it: a file made on first run and loaded after,
/// whose key every peer sees proven.
@Suite struct IdentityTests {
    @Test func aPeerIsKnownByTheKeyInItsIdentityFileAcrossRestarts() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("consumer-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/device.identity"

        let listener = MultipeerSession(configuration: configuration("listener"), identity: PeerIdentity())
        try await whileRunning([listener]) {
            let port = try await listeningPort(of: listener)
            var seen: [Peer] = []
            for _ in 0..<2 {  // the same device, started twice
                let identity = try PeerIdentity(loadingOrCreatingFile: file)
                let dialler = MultipeerSession(
                    configuration: configuration("dialler", dialling: port),
                    identity: identity
                )
                #expect(dialler.peerID == identity.peerID && identity.peerID == identity.key.peerID)
                try await whileRunning([dialler]) {
                    // This run of it (the last may not have been seen leaving yet).
                    let peer = try await within(30, "the dialler to join") { () -> Peer? in
                        for await event in listener.events {
                            if case .peerJoined(let peer) = event, peer.incarnation == dialler.incarnation {
                                return peer
                            }
                        }
                        return nil
                    }
                    #expect(peer?.id == identity.peerID)
                    #expect(peer?.key == identity.key, "the key it proved")
                    if let peer { seen.append(peer) }
                }
            }
            try #require(seen.count == 2)
            #expect(seen[0].id == seen[1].id && seen[0].key == seen[1].key, "the same peer after a restart")
            #expect(seen[1].incarnation > seen[0].incarnation, "and newer")
            #expect(seen[0].key.fingerprint.count == 19)
        }
        let error = try #require(throws: MultipeerError.self) { try PeerIdentity(contentsOfFile: directory) }
        #expect(error.code == .invalidKey)
    }

    /// A key file of two keys (a rotation under way) configures a session through
    /// `Configuration(serviceType:peer:keys:)`: a peer holding only the older key joins it. The
    /// file is no `PreSharedKey` (the README's sample read it as one, which throws).
    @Test func aKeyFileOfTwoKeysConfiguresASession() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("consumer-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/group.key"
        try KeyRing([groupKey, PreSharedKey.generate(identity: "consumer-2")]).write(toFile: file)
        #expect(throws: MultipeerError.self) { try PreSharedKey(contentsOfFile: file) }

        let listener = MultipeerSession(
            configuration: .init(
                serviceType: "_consumer._tcp",
                peer: PeerInfo(displayName: "listener"),
                keys: try KeyRing(contentsOfFile: file),
                discovery: .staticPeers([])
            ),
            identity: PeerIdentity()
        )
        #expect(listener.configuration.keys.keys.count == 2)
        try await whileRunning([listener]) {
            let port = try await listeningPort(of: listener)
            let dialler = MultipeerSession(
                configuration: configuration("dialler", dialling: port),
                identity: PeerIdentity()
            )  // the older key alone
            try await whileRunning([dialler]) {
                try await waitUntilActive(listener, dialler.peerID)
            }
        }
    }

    /// Data an application signs with its device key is checked by anyone holding the public
    /// key a peer proved, however it travelled; altered, or checked against another key, it fails.
    @Test func aDeviceSignsWhatItWritesAndAnyPeerChecksIt() throws {
        let writer = PeerIdentity()
        let other = PeerIdentity()
        let entry = Array("waypoint TESAT, fuel 12400".utf8)
        let signature = try writer.signature(for: entry)
        #expect(signature.count == 64)
        #expect(writer.key.isValidSignature(signature, for: entry))
        #expect(!writer.key.isValidSignature(signature, for: entry + [0x21]))
        #expect(!other.key.isValidSignature(signature, for: entry))
        let key = try PeerKey(hex: writer.key.description)
        #expect(key == writer.key && key.peerID == writer.peerID)
        #expect(try JSONDecoder().decode(PeerKey.self, from: JSONEncoder().encode(key)) == key)
    }

    /// A roster admits the dialler by key; emptied while running, it closes the dialler's link,
    /// and both sides say why. Both run on a ring of two group keys, dialling with the newest.
    @Test func aRosterAdmitsByKeyAndRemovesAMemberWhileRunning() async throws {
        let member = PeerIdentity()
        let ring = try KeyRing([groupKey, PreSharedKey.generate(identity: "consumer-2")])
        var listening = configuration("listener")
        listening.keys = ring
        listening.roster = try Roster(parsing: "\(member.key)  # the dialler\n")
        let listener = MultipeerSession(configuration: listening, identity: PeerIdentity())
        try await whileRunning([listener]) {
            let port = try await listeningPort(of: listener)
            var dialling = configuration("dialler", dialling: port)
            dialling.keys = ring
            let dialler = MultipeerSession(configuration: dialling, identity: member)
            try await whileRunning([dialler]) {
                try await waitUntilActive(listener, dialler.peerID)
                let events = dialler.events
                await listener.updateRoster(Roster())
                let reason = try await within(30, "the dialler to be told") { () -> PeerLeftReason? in
                    for await event in events {
                        if case .peerLeft(let peer, let reason) = event, peer.id == listener.peerID { return reason }
                    }
                    return nil
                }
                #expect(reason == .goodbye(.notInRoster))
                #expect(listener.activePeers.isEmpty)
            }
        }
    }
}
