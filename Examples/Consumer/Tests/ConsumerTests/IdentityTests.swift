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

        let listener = MultipeerSession(configuration: configuration("listener"))
        try await whileRunning([listener]) {
            let port = try await listeningPort(of: listener)
            var seen: [Peer] = []
            for _ in 0..<2 {  // the same device, started twice
                let identity = try PeerIdentity(loadingOrCreatingFile: file)
                let dialler = MultipeerSession(configuration: configuration("dialler", dialling: port), identity: identity)
                #expect(dialler.peerID == identity.peerID && identity.peerID == identity.key.peerID)
                try await whileRunning([dialler]) {
                    try await waitUntilActive(listener, dialler.peerID)
                    let peer = try #require(await listener.activePeers.first { $0.id == dialler.peerID })
                    #expect(peer.key == identity.key, "the key it proved")
                    seen.append(peer)
                }
            }
            #expect(seen[0].id == seen[1].id && seen[0].key == seen[1].key, "the same peer after a restart")
            #expect(seen[1].incarnation > seen[0].incarnation, "and newer")
            #expect(seen[0].key.fingerprint.count == 19)
        }
        let error = try #require(throws: MultipeerError.self) { try PeerIdentity(contentsOfFile: directory) }
        #expect(error.code == .invalidKey)
    }
}
