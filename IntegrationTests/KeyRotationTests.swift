import Foundation
import MultipeerCore
import MultipeerTestSupport
import Testing

@testable import MultipeerSession

/// A group changes its key while it runs (docs/PROTOCOL.md, 1.1): the new key is added to every
/// peer, then the old one removed. No link is torn down, nothing is lost, and peers joining at
/// any step meet everyone who holds a key in common with them.
@Suite struct KeyRotationTests {
    static let old = try! PreSharedKey(identity: "navlog-1", key: (0..<32).map { UInt8($0) })
    static let new = try! PreSharedKey(identity: "navlog-2", key: (0..<32).map { UInt8(255 - $0) })

    static func session(_ name: String, keys: [PreSharedKey], dialling ports: [Int] = []) throws -> MultipeerSession {
        let ring = try KeyRing(keys)
        return MultipeerSession(
            configuration: .test(name, discovery: .staticPeers(ports.map { "127.0.0.1:\($0)" })).with {
                $0.keys = ring
            },
            identity: PeerIdentity()
        )
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func aGroupRotatesItsKeyWhileItRunsWithNoLinkTornDownAndNothingLost() async throws {
        let alpha = try Self.session("alpha", keys: [Self.old])
        let alphaEvents = EventLog(alpha.events)
        try await whileRunning([alpha]) {
            let alphaPort = try await alphaEvents.listeningPort()
            let bravo = try Self.session("bravo", keys: [Self.old], dialling: [alphaPort])
            let bravoEvents = EventLog(bravo.events)
            try await whileRunning([bravo]) {
                let bravoPort = try await bravoEvents.listeningPort()
                let charlie = try Self.session("charlie", keys: [Self.old], dialling: [alphaPort, bravoPort])
                let charlieEvents = EventLog(charlie.events)
                let inbox = charlie.messages(of: DeliveryTests.Numbered.self)
                try await whileRunning([charlie]) {
                    let group = [alpha, bravo, charlie]
                    try await alphaEvents.waitUntilActive([bravo.peerID, charlie.peerID])
                    try await bravoEvents.waitUntilActive([alpha.peerID, charlie.peerID])
                    try await charlieEvents.waitUntilActive([alpha.peerID, bravo.peerID])
                    var sent = 0
                    func send(_ count: Int) async throws {
                        for _ in 0..<count {
                            try await alpha.send(DeliveryTests.Numbered(number: sent), to: charlie.peerID)
                            sent += 1
                        }
                    }

                    // Step 1: the new key reaches alpha only. Alpha now dials with it first and
                    // falls back to the old one for peers that do not hold it yet.
                    try await alpha.updateKeys(KeyRing([Self.old, Self.new]))
                    try await send(20)
                    let delta = try Self.session("delta", keys: [Self.old, Self.new], dialling: [bravoPort])
                    let deltaEvents = EventLog(delta.events)
                    try await whileRunning([delta]) {
                        // bravo holds only the old key
                        let joined = try await deltaEvents.waitUntilActive([bravo.peerID])
                        #expect(
                            !joined.contains { if case .authenticationFailed = $0 { true } else { false } },
                            "falling back to the old key is no failure to report"
                        )
                    }
                    let late = try Self.session("late", keys: [Self.old], dialling: [alphaPort])
                    let lateEvents = EventLog(late.events)
                    try await whileRunning([late]) {
                        try await lateEvents.waitUntilActive([alpha.peerID])  // alpha still accepts the old key
                    }

                    // Step 2: everyone has both keys; step 3: the old one goes everywhere.
                    for session in [bravo, charlie] { try await session.updateKeys(KeyRing([Self.old, Self.new])) }
                    try await send(20)
                    for session in group { try await session.updateKeys(KeyRing(Self.new)) }
                    try await send(20)

                    // A peer with only the new key joins everyone; one with only the old key joins nobody.
                    let fresh = try Self.session("fresh", keys: [Self.new], dialling: [alphaPort, bravoPort])
                    let stale = try Self.session("stale", keys: [Self.old], dialling: [alphaPort])
                    let freshEvents = EventLog(fresh.events)
                    let staleEvents = EventLog(stale.events)
                    try await whileRunning([fresh, stale]) {
                        try await freshEvents.waitUntilActive([alpha.peerID, bravo.peerID])
                        let refused = try await staleEvents.wait { events in
                            events.contains { if case .authenticationFailed = $0 { true } else { false } }
                        }
                        #expect(activeIDs(refused).isEmpty)
                    }

                    // Nothing was lost, and no link of the group was ever torn down.
                    let last = sent
                    try await alpha.send(
                        DeliveryTests.Numbered(number: last),
                        to: charlie.peerID,
                        awaitAcknowledgement: true
                    )
                    let received = try await collect(inbox) { $0.count >= last + 1 }
                    #expect(received.map(\.message.number) == Array(0...last))
                    for (session, events) in zip(group, [alphaEvents, bravoEvents, charlieEvents]) {
                        let members = Set(group.map(\.peerID)).subtracting([session.peerID])
                        let left = events.history.compactMap { event -> UUID? in
                            if case .peerLeft(let peer, _) = event, members.contains(peer.id) { peer.id } else { nil }
                        }
                        #expect(left.isEmpty, "\(session.configuration.peer.displayName) lost a member's link: \(left)")
                    }
                }
            }
        }
    }

    @Test func aKeyRingFileIsPsktoolsFormatNewestLast() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ring-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Self.old.write(toFile: path)
        let added = try await runProcess("/usr/bin/psktool", ["-u", "navlog-3", "-p", path, "-s", "32"])
        #expect(added.status == 0, "\(added.output)")
        let ring = try KeyRing(contentsOfFile: path)
        #expect(ring.keys.map(\.identity) == ["navlog-1", "navlog-3"])
        #expect(ring.newest.identity == "navlog-3")
        let rotated = try ring.removing(identity: "navlog-1").adding(Self.new)
        try rotated.write(toFile: path, replacing: true)
        #expect(try KeyRing(contentsOfFile: path) == rotated)
        #expect(throws: MultipeerError.self) { try rotated.removing(identity: "navlog-1") }
        #expect(throws: MultipeerError.self) { try KeyRing([Self.old, Self.old]) }
        #expect(!"\(rotated)".contains("00010203"), "identities only")
    }
}
