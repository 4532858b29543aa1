import Foundation
import Logging
import MultipeerCore
import MultipeerDiscovery
import MultipeerTLS
import MultipeerTestSupport
import ServiceLifecycle
import Testing

@testable import MultipeerSession

/// Many sessions in one process over real avahi-daemon (the sandbox's) and real GnuTLS.
@Suite(.enabled(if: inDiscoverySandbox, "needs scripts/sandbox.sh (make test, as root)"))
struct SessionTests {
    @Test(.scaledTimeLimit(minutes: 1))
    func twoSessionsConnect() async throws {
        let group = SessionGroup(count: 2)
        let (a, b) = (group.sessions[0], group.sessions[1])
        try await whileRunning(group.sessions) {
            let joined = try await group.events[0].waitUntilActive([b.peerID])
            try await group.events[1].waitUntilActive([a.peerID])
            guard case .peerJoined(let peer)? = joined.last(where: { if case .peerJoined = $0 { true } else { false } })
            else { return }
            #expect(peer.displayName == "peer 1")
            #expect(a.activePeers.map(\.id) == [b.peerID])
            #expect(b.activePeers.map(\.id) == [a.peerID])
        }
    }

    /// Discovered over DNS-SD, never connected: two sessions of one service type with different
    /// group keys each list the other among their available peers, under the name its advert
    /// claims, with no key proven. The one that dials finds its key refused (`refused`); the other
    /// waits for a dial that never succeeds (`discovered`). Neither is ever active.
    @Test(.scaledTimeLimit(minutes: 1))
    func aSessionOfAnotherGroupIsAvailableButNeverActive() async throws {
        var group = SessionGroup(count: 1)
        let otherKey = try PreSharedKey(identity: "another group", key: (0..<32).map { UInt8(255 - $0) })
        group.add(
            MultipeerSession(
                configuration: .test("stranger", serviceType: group.serviceType, psk: otherKey),
                identity: PeerIdentity()
            )
        )
        let (member, stranger) = (group.sessions[0], group.sessions[1])
        let memberDials = member.peerID.isGreater(than: stranger.peerID)
        func available(_ state: AvailablePeer.State) -> @Sendable ([SessionEvent]) -> Bool {
            { events in
                events.contains { if case .availablePeerChanged(let peer) = $0 { peer.state == state } else { false } }
            }
        }
        try await whileRunning(group.sessions) {
            try await group.events[0].wait(until: available(memberDials ? .refused : .discovered))
            try await group.events[1].wait(until: available(memberDials ? .discovered : .refused))
            for (session, other, name) in [(member, stranger, "stranger"), (stranger, member, "peer 0")] {
                let peers = session.availablePeers
                #expect(peers.map(\.id) == [other.peerID] && peers.first?.displayName == name, "\(peers)")
                #expect(peers.first?.key == nil, "nothing proven")
                #expect(session.activePeers.isEmpty)
            }
        }
        for events in group.events {
            #expect(!events.history.contains { if case .peerJoined = $0 { true } else { false } }, "never joined")
        }
    }

    /// A peer that stops says GOODBYE: the session that dialled it sees it leave for that
    /// reason and does not dial it again while its advert lingers (each dial would fail, and
    /// each failure be reported), and its advert's withdrawal takes it off the available peers.
    /// Its next session (the same identity, a new incarnation) is dialled as soon as it is
    /// announced.
    @Test(.scaledTimeLimit(minutes: 1))
    func aPeerThatStopsIsNotRedialledUntilItComesBack() async throws {
        let serviceType = SessionGroup.uniqueServiceType()
        var (first, second) = (PeerIdentity(), PeerIdentity())
        if second.peerID.isGreater(than: first.peerID) { swap(&first, &second) }  // `first` dials
        let dialler = MultipeerSession(configuration: .test("dialler", serviceType: serviceType), identity: first)
        let events = EventLog(dialler.events)
        try await whileRunning([dialler]) {
            let leaving = MultipeerSession(configuration: .test("leaving", serviceType: serviceType), identity: second)
            try await whileRunning([leaving]) { try await events.waitUntilActive([second.peerID]) }
            let gone = try await events.wait { history in
                history.contains { if case .availablePeerChanged(let peer) = $0 { peer.state == .gone } else { false } }
            }
            #expect(FaultTests.lastLeaveReason(gone) == .goodbye(.shutdown))
            // (From its leaving on: a first dial may fail on a loaded machine before the peer joins.)
            let left = gone.lastIndex { if case .peerLeft = $0 { true } else { false } } ?? gone.startIndex
            let failures = gone[left...].filter { if case .connectionFailed = $0 { true } else { false } }
            #expect(failures.isEmpty, "no dial of a peer that said it stops: \(failures)")

            let back = MultipeerSession(configuration: .test("back", serviceType: serviceType), identity: second)
            try await whileRunning([back]) { try await events.waitUntilActive([second.peerID]) }
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func threeSessionsFormAFullMeshWithOneLinkPerPair() async throws {
        let group = SessionGroup(count: 3)
        let ids = group.sessions.map(\.peerID)
        try await whileRunning(group.sessions) {
            for (index, events) in group.events.enumerated() {
                let seen = try await events.waitUntilActive(Set(ids).subtracting([ids[index]]))
                let joins = seen.filter { if case .peerJoined = $0 { true } else { false } }
                #expect(joins.count == 2, "each peer joins once: \(seen)")
            }
            for session in group.sessions {
                #expect(await session.linkCount == 2, "one link per pair")
            }
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aMessageToOnePeerReachesOnlyThatPeer() async throws {
        let group = SessionGroup(count: 3)
        let (a, b, c) = (group.sessions[0], group.sessions[1], group.sessions[2])
        let atB = b.messages(of: Note.self)
        let atC = c.messages(of: Note.self)
        try await whileRunning(group.sessions) {
            try await group.events[0].waitUntilActive([b.peerID, c.peerID])
            try await a.send(Note(text: "for B only"), to: b.peerID)
            try await a.send(Note(text: "marker"), to: c.peerID)
            let atBReceived = try await collect(atB) { $0.count == 1 }
            #expect(atBReceived.first?.message == Note(text: "for B only"))
            #expect(atBReceived.first?.peer.id == a.peerID)
            // A's link to C is ordered: had the first message gone to C too, it would come first.
            let atCReceived = try await collect(atC) { $0.count == 1 }
            #expect(atCReceived.first?.message == Note(text: "marker"))
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aBroadcastReachesEveryPeer() async throws {
        let group = SessionGroup(count: 3)
        let inboxes = group.sessions.map { $0.messages(of: Note.self) }
        try await whileRunning(group.sessions) {
            try await group.events[0].waitUntilActive(Set(group.sessions.dropFirst().map(\.peerID)))
            #expect(try await group.sessions[0].broadcast(Note(text: "all stations")) == 2)
            for inbox in inboxes.dropFirst() {
                #expect(try await collect(inbox) { $0.count == 1 }.first?.message == Note(text: "all stations"))
            }
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func severalMessageTypesShareOneLink() async throws {
        let group = SessionGroup(count: 2)
        let (a, b) = (group.sessions[0], group.sessions[1])
        let notes = b.messages(of: Note.self)
        let fixes = b.messages(of: Fix.self)
        try await whileRunning(group.sessions) {
            try await group.events[0].waitUntilActive([b.peerID])
            try await a.send(Fix(waypoint: "ALPHA", fuel: 12.4), to: b.peerID)
            try await a.send(Note(text: "passing ALPHA"), to: b.peerID)
            try await a.send(Fix(waypoint: "BRAVO", fuel: 11.9), to: b.peerID)
            #expect(
                try await collect(fixes) { $0.count == 2 }.map(\.message) == [
                    Fix(waypoint: "ALPHA", fuel: 12.4), Fix(waypoint: "BRAVO", fuel: 11.9),
                ]
            )
            #expect(try await collect(notes) { $0.count == 1 }.map(\.message) == [Note(text: "passing ALPHA")])
            #expect(await a.linkCount == 1)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func anUndecodablePayloadIsReportedAndTheLinkStays() async throws {
        /// Same wire name as `Note`, another shape.
        struct Impostor: Codable, Sendable { var number: Int }
        let group = SessionGroup(count: 2)
        let (a, b) = (group.sessions[0], group.sessions[1])
        let notes = b.messages(of: Note.self)
        try await whileRunning(group.sessions) {
            try await group.events[0].waitUntilActive([b.peerID])
            try await group.events[1].waitUntilActive([a.peerID])
            try await a.sendRaw(Impostor(number: 7), as: MultipeerSession.wireName(of: Note.self), to: b.peerID)
            try await a.send(Note(text: "still here"), to: b.peerID)
            // The reader skips it (and it is reported as the reader comes to it).
            #expect(try await collect(notes) { $0.count == 1 }.first?.message == Note(text: "still here"))
            let events = try await group.events[1].wait { events in
                events.contains { if case .undecodableMessage = $0 { true } else { false } }
            }
            guard case .undecodableMessage(let from, let typeName, _)? = events.last else { return }
            #expect(from.id == a.peerID)
            #expect(typeName == MultipeerSession.wireName(of: Note.self))
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aSendToAPeerNeverMetFails() async throws {
        let group = SessionGroup(count: 2)
        let (a, b) = (group.sessions[0], group.sessions[1])
        try await whileRunning(group.sessions) {
            try await group.events[0].waitUntilActive([b.peerID])
            let notActive = await #expect(throws: MultipeerError.self) { try await a.send(Note(text: "?"), to: UUID()) }
            #expect(notActive?.code == .peerNotActive)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func sessionsOfDifferentServiceTypesNeverConnect() async throws {
        var group = SessionGroup(count: 2)
        let stranger = MultipeerSession(
            configuration: .test("stranger", serviceType: SessionGroup.uniqueServiceType()),
            identity: PeerIdentity()
        )
        group.add(stranger)
        let (a, b) = (group.sessions[0], group.sessions[1])
        try await whileRunning(group.sessions) {
            // By the time A and B have found each other, the stranger had as long to be found.
            try await group.events[0].waitUntilActive([b.peerID])
            #expect(!a.activePeers.contains { $0.id == stranger.peerID })
            #expect(stranger.activePeers.isEmpty)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aSessionWithAnotherKeyNeverBecomesActiveAndIsNamed() async throws {
        let type = SessionGroup.uniqueServiceType()
        var group = SessionGroup(count: 1, serviceType: type)
        group.add(
            MultipeerSession(
                configuration: .test(
                    "intruder",
                    serviceType: type,
                    psk: try PreSharedKey.generate(identity: LinkFixtures.identity)
                ),
                identity: PeerIdentity()
            )
        )
        let (a, intruder) = (group.sessions[0], group.sessions[1])
        try await whileRunning(group.sessions) {
            // Whichever side dials, both see the authentication fail; A names the intruder's address.
            let events = try await group.events[0].wait { events in
                events.contains { if case .authenticationFailed = $0 { true } else { false } }
            }
            guard case .authenticationFailed(let address, let error)? = events.last else { return }
            #expect(address.hasPrefix("127.0.0.1:") || address.hasPrefix("[::ffff:127.0.0.1]:"), "\(address)")
            #expect(error.code == .authenticationFailed)
            #expect(a.activePeers.isEmpty)
            #expect(intruder.activePeers.isEmpty)
            #expect(activeIDs(events).isEmpty)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aRestartedPeerIsActiveAgainWithoutAppAction() async throws {
        let group = SessionGroup(count: 2)
        let (a, b) = (group.sessions[0], group.sessions[1])
        try await whileRunning([a]) {
            try await whileRunning([b]) {
                try await group.events[0].waitUntilActive([b.peerID])
            }
            // B stopped: A sees it leave.
            try await group.events[0].waitUntilActive([])
            // B starts again: same identity, new incarnation.
            let again = MultipeerSession(configuration: b.configuration, identity: b.identity)
            try await whileRunning([again]) {
                let events = try await group.events[0].waitUntilActive([b.peerID])
                guard case .peerJoined(let peer)? = events.last else { return }
                #expect(peer.incarnation == again.incarnation)
            }
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func suspendAndResume() async throws {
        let group = SessionGroup(count: 2)
        let (a, b) = (group.sessions[0], group.sessions[1])
        try await whileRunning(group.sessions) {
            try await group.events[1].waitUntilActive([a.peerID])
            try await group.events[0].waitUntilActive([b.peerID])
            await a.suspend()
            let left = try await group.events[1].waitUntilActive([])
            guard case .peerLeft(_, let reason)? = left.last else {
                Issue.record("B saw A leave: \(left)")
                return
            }
            #expect(reason == .goodbye(.suspended))
            let leftHere = try await group.events[0].waitUntilActive([])
            guard case .peerLeft(_, let localReason)? = leftHere.last else {
                Issue.record("A saw B leave: \(leftHere)")
                return
            }
            #expect(localReason == .local(.suspended))
            await a.resume()
            try await group.events[1].waitUntilActive([a.peerID])
            try await group.events[0].waitUntilActive([b.peerID])
        }
    }

    @Test(.scaledTimeLimit(minutes: 3))
    func sixteenSessionsReachAFullMeshAndEveryBroadcastArrives() async throws {
        let group = SessionGroup(count: 16)
        let ids = group.sessions.map(\.peerID)
        let inboxes = group.sessions.map { $0.messages(of: Note.self) }
        try await whileRunning(group.sessions) {
            for (index, events) in group.events.enumerated() {
                try await events.waitUntilActive(Set(ids).subtracting([ids[index]]), timeout: .seconds(120))
            }
            var links = 0
            for session in group.sessions { links += await session.linkCount }
            #expect(links == 16 * 15, "120 links, each counted at both ends")
            try await withThrowingTaskGroup(of: Void.self) { senders in
                for (index, session) in group.sessions.enumerated() {
                    senders.addTask {
                        for number in 0..<100 { try await session.broadcast(Note(text: "\(index)/\(number)")) }
                    }
                }
                try await senders.waitForAll()
            }
            for (index, inbox) in inboxes.enumerated() {
                let received = try await collect(inbox, timeout: .seconds(120)) { $0.count == 1500 }
                #expect(received.count == 1500)
                #expect(Set(received.map(\.message.text)).count == 1500, "every message once at session \(index)")
            }
        }
    }
}

/// Sessions without DNS-SD: static peer lists, over loopback.
@Suite struct StaticSessionTests {
    @Test(.scaledTimeLimit(minutes: 1))
    func aSessionListingAnotherStaticallyConnectsToIt() async throws {
        let listed = MultipeerSession(
            configuration: .test("listed", discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let listedEvents = EventLog(listed.events)
        try await whileRunning([listed]) {
            let port = try await listedEvents.listeningPort()
            let dialler = MultipeerSession(
                configuration: .test("dialler", discovery: .staticPeers(["127.0.0.1:\(port)", "127.0.0.1:1"])),
                identity: PeerIdentity()
            )
            let diallerEvents = EventLog(dialler.events)
            try await whileRunning([dialler]) {
                try await diallerEvents.waitUntilActive([listed.peerID])
                try await listedEvents.waitUntilActive([dialler.peerID])
                // The dead entry is reported, and retried, without harm to the live one.
                try await diallerEvents.wait {
                    $0.contains {
                        if case .connectionFailed(let address, _) = $0 { address == "127.0.0.1:1" } else { false }
                    }
                }
                #expect(dialler.activePeers.map(\.id) == [listed.peerID])
            }
        }
    }
}

/// A session run by swift-service-lifecycle, shut down gracefully.
@Suite(.enabled(if: inDiscoverySandbox, "needs scripts/sandbox.sh (make test, as root)"))
struct SessionLifecycleTests {
    @Test(.scaledTimeLimit(minutes: 1))
    func gracefulShutdownSaysGoodbyeAndLeavesNothingBehind() async throws {
        let group = SessionGroup(count: 2)
        let (a, b) = (group.sessions[0], group.sessions[1])
        let watcher = PeerBrowser(
            serviceType: try ServiceType(group.serviceType),
            localPeerID: UUID(),
            connection: try .shared()
        ).browse()
        try await whileRunning([b]) {
            let services = ServiceGroup(configuration: .init(services: [a], logger: Logger(label: "test")))
            let running = Task { try await services.run() }
            let port = try await group.events[0].listeningPort()
            try await group.events[1].waitUntilActive([a.peerID])
            _ = try await collect(watcher) {
                $0.contains(.lost(a.peerID)) == false
                    && $0.contains { if case .found(let ad) = $0 { ad.peerID == a.peerID } else { false } }
            }

            await services.triggerGracefulShutdown()
            try await running.value
            let left = try await group.events[1].waitUntilActive([])
            if case .peerLeft(_, let reason)? = left.last { #expect(reason == .goodbye(.shutdown)) }
            // The advertisement is withdrawn and the port closed.
            _ = try await collect(watcher) { $0.contains(.lost(a.peerID)) }
            await #expect(throws: (any Error).self) {
                _ = try await PeerConnection.dial(
                    host: "127.0.0.1",
                    port: port,
                    configuration: LinkFixtures.configuration(name: "probe")
                )
            }
        }
    }
}
