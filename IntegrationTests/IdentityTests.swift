import Foundation
import MultipeerCore
import MultipeerDiscovery
import MultipeerTLS
import MultipeerTestSupport
import NIOCore
import Testing

@testable import MultipeerSession

/// Who is who: a holder of the group key cannot pass for another member, nor relay a member's
/// HELLO from another connection, and a member's link and reliable delivery are unhurt by the
/// attempts (docs/PROTOCOL.md, section 3).
@Suite struct IdentityTests {
    /// The authentication failures a session reported for links that never became a peer.
    static func refusals(_ events: [SessionEvent]) -> [MultipeerError] {
        events.compactMap { if case .authenticationFailed(_, let error) = $0 { error } else { nil } }
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func anImpostorWithTheGroupKeyCannotPassForAMemberNorDisturbIt() async throws {
        // Keepalives too patient to time out: a loaded machine (the suite beside this test)
        // must not end bravo's link, so that only an impostor could.
        let patient = KeepaliveParameters(interval: .seconds(60), timeout: .seconds(600))
        let server = MultipeerSession(
            configuration: .test("alpha", discovery: .staticPeers([]), keepalive: patient),
            identity: PeerIdentity()
        )
        let serverEvents = EventLog(server.events)
        let inbox = server.messages(of: DeliveryTests.Numbered.self)
        try await whileRunning([server]) {
            let port = try await serverEvents.listeningPort()
            let member = MultipeerSession(
                configuration: .test("bravo", discovery: .staticPeers(["127.0.0.1:\(port)"]), keepalive: patient),
                identity: PeerIdentity()
            )
            let memberEvents = EventLog(member.events)
            try await whileRunning([member]) {
                try await serverEvents.waitUntilActive([member.peerID])
                try await memberEvents.waitUntilActive([server.peerID])
                for number in 0..<10 {
                    try await member.send(DeliveryTests.Numbered(number: number), to: server.peerID)
                }

                // The impostor claims bravo's ID with its own key (every incarnation that once
                // let it take bravo's place), then with bravo's public key, which it cannot sign for.
                let impostor = PeerIdentity()
                let attempts: [(presenting: PeerKey, incarnation: UInt64, expected: MultipeerError.Code)] = [
                    (impostor.key, .max, .identityMismatch),
                    (impostor.key, member.incarnation, .identityMismatch),
                    (impostor.key, 1, .identityMismatch),
                    (member.identity.key, .max, .badSignature),
                ]
                for (index, attempt) in attempts.enumerated() {
                    let raw = try await RawPeer(port: port)
                    let hello = try await raw.hello(
                        claiming: member.peerID,
                        presenting: attempt.presenting,
                        signedBy: impostor,
                        incarnation: attempt.incarnation,
                        name: "bravo"
                    )
                    try await raw.send(hello)
                    try? await raw.send(.ack(.max))  // would have "acknowledged" everything bravo was ever sent
                    let events = try await serverEvents.wait { Self.refusals($0).count == index + 1 }
                    let refusal = try #require(Self.refusals(events).last)
                    #expect(refusal.code == attempt.expected, "\(refusal)")
                    #expect(refusal.message.contains("127.0.0.1"), "names the address: \(refusal.message)")
                    #expect(refusal.message.contains("\(member.peerID)"))
                    await raw.close()
                }

                // Bravo never left, and what it sends before and after arrives once, in order.
                for number in 10..<20 {
                    try await member.send(DeliveryTests.Numbered(number: number), to: server.peerID)
                }
                try await member.send(DeliveryTests.Numbered(number: 20), to: server.peerID, awaitAcknowledgement: true)
                let received = try await collect(inbox) { $0.count >= 21 }
                #expect(received.map(\.message.number) == Array(0...20))
                #expect(received.allSatisfy { $0.peer.id == member.peerID && $0.peer.key == member.identity.key })
                #expect(
                    !serverEvents.history.contains { if case .peerLeft = $0 { true } else { false } },
                    "bravo's link stayed up"
                )
                #expect(await server.linkCount == 1)
            }
        }
    }

    /// A HELLO signs this connection's exporter value: copied from a member's connection to
    /// another one (by someone with the group key), it does not verify.
    @Test(.scaledTimeLimit(minutes: 1))
    func aHelloRelayedFromAnotherConnectionIsRefused() async throws {
        let alpha = MultipeerSession(
            configuration: .test("alpha", discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let charlie = MultipeerSession(
            configuration: .test("charlie", discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let alphaEvents = EventLog(alpha.events)
        let charlieEvents = EventLog(charlie.events)
        try await whileRunning([alpha, charlie]) {
            let alphaPort = try await alphaEvents.listeningPort()
            let charliePort = try await charlieEvents.listeningPort()
            // Alpha's HELLO, as alpha sends it to whoever connects.
            let toAlpha = try await RawPeer(port: alphaPort)
            var frames = toAlpha.frames.makeAsyncIterator()
            let alphaHello = try #require(await frames.next())
            #expect(alphaHello.type == .hello)
            // Relayed to charlie as if alpha had dialled it.
            let toCharlie = try await RawPeer(port: charliePort)
            var relayed = ByteBuffer()
            alphaHello.write(to: &relayed)
            try await toCharlie.send(relayed)
            let events = try await charlieEvents.wait { !Self.refusals($0).isEmpty }
            let refusal = try #require(Self.refusals(events).first)
            #expect(refusal.code == .badSignature, "\(refusal)")
            #expect(refusal.message.contains("\(alpha.peerID)"))
            #expect(activeIDs(events).isEmpty, "charlie never believed alpha was there")
            await toAlpha.close()
            await toCharlie.close()
        }
    }
}

/// Adverts are hints (docs/PROTOCOL.md, 3 and 5): an advert placing peer P at another peer's
/// address never makes a session believe it has a link to P.
@Suite(.enabled(if: inDiscoverySandbox, "needs scripts/sandbox.sh (make test, as root)"))
struct AdvertHintTests {
    @Test(.scaledTimeLimit(minutes: 1))
    func anAdvertPlacingAPeerAtAnotherPeersAddressIsRefusedWhenDialled() async throws {
        let type = try DiscoveryTests.uniqueServiceType()
        let alpha = MultipeerSession(
            configuration: .test("alpha", serviceType: type.rawValue, discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let alphaEvents = EventLog(alpha.events)
        try await whileRunning([alpha]) {
            let port = try await alphaEvents.listeningPort()
            // "P" is the least UUID, so the session below is the one to dial it.
            let absent = UUID(uuidString: "00000000-0000-8000-8000-000000000001")!
            let false_ = try DiscoveryTests.advertise(type, name: "absent", peerID: absent, port: port)
            defer { false_.stop() }
            _ = try await DiscoveryTests.established(false_)
            let dialler = MultipeerSession(
                configuration: .test("dialler", serviceType: type.rawValue),
                identity: PeerIdentity()
            )
            let events = EventLog(dialler.events)
            try await whileRunning([dialler]) {
                let seen = try await events.wait { events in
                    events.contains {
                        if case .connectionFailed(_, let error) = $0 { error.code == .unexpectedPeer } else { false }
                    }
                }
                let refusal = seen.compactMap {
                    if case .connectionFailed(_, let error) = $0, error.code == .unexpectedPeer { error } else { nil }
                }.first
                #expect(
                    refusal?.message.contains("advertised as peer \(absent)") == true,
                    "\(String(describing: refusal))"
                )
                #expect(refusal?.message.contains("proved to be peer \(alpha.peerID)") == true)
                #expect(!activeIDs(seen).contains(absent), "no link counts for the advertised peer")
                #expect(dialler.activePeers.isEmpty)
            }
        }
    }

    /// A TCP sink: a listening socket that never accepts, so a connection to it completes and
    /// then hears nothing, ever (what an advert pointing at a black hole gives a dialler).
    final class Sink {
        let descriptor: Int32
        let port: Int

        init() throws {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                    bind(descriptor, pointer, length) == 0 && listen(descriptor, 64) == 0
                        && getsockname(descriptor, pointer, &length) == 0
                }
            }
            guard bound else {
                close(descriptor)
                throw MultipeerError(.connectionFailed, "cannot open a sink: \(String(cString: strerror(errno)))")
            }
            self.descriptor = descriptor
            port = Int(UInt16(bigEndian: address.sin_port))
        }

        deinit { close(descriptor) }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func rogueAdvertsCopyingEachPeersIDTowardsASinkDoNotKeepThemApart() async throws {
        let type = try DiscoveryTests.uniqueServiceType()
        let sink = try Sink()
        let alpha = MultipeerSession(
            configuration: .test("alpha", serviceType: type.rawValue),
            identity: PeerIdentity()
        )
        let beta = MultipeerSession(configuration: .test("beta", serviceType: type.rawValue), identity: PeerIdentity())
        // Published first, so they are seen before the real ones, with the greatest incarnation.
        var rogues: [PeerAdvertiser] = []
        defer { rogues.forEach { $0.stop() } }
        for (index, victim) in [alpha, beta].enumerated() {
            for copy in 0..<3 {
                let rogue = try DiscoveryTests.advertise(
                    type,
                    name: "rogue",
                    peerID: victim.peerID,
                    incarnation: .max - UInt64(copy),
                    port: sink.port,
                    instanceName: "rogue \(index)-\(copy)"
                )
                _ = try await DiscoveryTests.established(rogue)
                rogues.append(rogue)
            }
        }
        let (alphaEvents, betaEvents) = (EventLog(alpha.events), EventLog(beta.events))
        try await whileRunning([alpha, beta]) {
            _ = try await alphaEvents.waitUntilActive([beta.peerID])
            _ = try await betaEvents.waitUntilActive([alpha.peerID])
            // (Before adverts were hints, the dial went to the greatest incarnation's endpoints
            // alone, the sink, and the two never met. Whether the sink is tried first depends on
            // the order Avahi reports the instances in; what it costs is measured by the host
            // suite's "rogue adverts" scenario.)
            let history = alphaEvents.history + betaEvents.history
            #expect(!history.contains { if case .peerLeft = $0 { true } else { false } }, "no link was lost to a race")
            #expect(alpha.activePeers.map(\.id) == [beta.peerID])
            #expect(beta.activePeers.map(\.id) == [alpha.peerID])
        }
    }
}
