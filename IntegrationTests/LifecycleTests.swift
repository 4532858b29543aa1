import Foundation
import MultipeerCore
import MultipeerDiscovery
import MultipeerTestSupport
import Testing

@testable import MultipeerSession

/// Suspend, resume and stop, and what they do to work already under way (static peers, no DNS-SD).
@Suite struct LifecycleTests {
    /// A dial the peer table asked for just after a suspend was asked for: it reaches the run
    /// loop once the session is suspended. It used to be dropped there while the table still
    /// counted it as under way, so after `resume()` the peer was never dialled again.
    @Test(.scaledTimeLimit(minutes: 1))
    func aDialQueuedBehindASuspendIsMadeAfterResume() async throws {
        let listener = MultipeerSession(
            configuration: .test("listener", discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let listenerEvents = EventLog(listener.events)
        try await whileRunning([listener]) {
            let port = try await listenerEvents.listeningPort()
            let dialler = MultipeerSession(
                configuration: .test("dialler", discovery: .staticPeers([])),
                identity: PeerIdentity()
            )
            let diallerEvents = EventLog(dialler.events)
            try await whileRunning([dialler]) {
                _ = try await diallerEvents.listeningPort()
                try await dialler.suspend(discoveringMeanwhile: "127.0.0.1:\(port)")
                await dialler.resume()
                try await diallerEvents.waitUntilActive([listener.peerID])
                #expect(dialler.activePeers.map(\.id) == [listener.peerID])
            }
        }
    }

    /// A peer forgotten while away, that comes back (same incarnation): its receiver had
    /// delivered some of the old outbox's messages, and what is sent now must not be numbered
    /// from 1 again (the receiver would drop it as duplicates, silently).
    @Test(.scaledTimeLimit(minutes: 1))
    func aForgottenPeerThatComesBackGetsWhatIsSentAfter() async throws {
        try await FaultTests.withPair { pair in
            let (sender, receiver) = (pair.listener, pair.dialler)
            let inbox = receiver.messages(of: Note.self)
            for number in 0..<5 { try await sender.send(Note(text: "before \(number)"), to: receiver.peerID) }
            // (Not inside #expect: there, Swift 6.3 ran this closure again for the collect below.)
            let before = try await collect(inbox) { $0.count >= 5 }
            #expect(before.count == 5)
            pair.proxy.set(.blackHole)
            try await sender.send(Note(text: "dropped"), to: receiver.peerID)
            // Forgotten once it has left: through the black hole no link can form again, and
            // one formed just before it (a slow machine's redial) times out in its turn.
            while true {
                let leaves = pair.listenerEvents.history.count { if case .peerLeft = $0 { true } else { false } }
                do {
                    try await sender.forget(peer: receiver.peerID)
                    break
                } catch let error as MultipeerError where error.code == .sessionState {
                    try await pair.listenerEvents.wait {
                        $0.count { if case .peerLeft = $0 { true } else { false } } > leaves
                    }
                }
            }
            pair.proxy.set(.passThrough)
            try await pair.listenerEvents.waitUntilActive([receiver.peerID])
            try await sender.send(Note(text: "after"), to: receiver.peerID, awaitAcknowledgement: true)
            let next = try await collect(inbox) { $0.count >= 1 }
            #expect(next.map(\.message.text) == ["after"], "the forgotten message is not sent; the next one arrives")
        }
    }
}

/// Over DNS-SD only the greater UUID dials: what the other side does to bring a peer back now.
@Suite(.enabled(if: inDiscoverySandbox, "needs scripts/sandbox.sh (make test, as root)"))
struct RejoinOverDiscoveryTests {
    /// Two identities, the lesser first.
    static func identities() -> (lesser: PeerIdentity, greater: PeerIdentity) {
        let pair = (PeerIdentity(), PeerIdentity())
        return pair.0.peerID.isGreater(than: pair.1.peerID) ? (pair.1, pair.0) : pair
    }

    /// Both sides' limits: a first dial's first bytes, and its handshake, may come seconds late on
    /// a loaded machine (make test's suites side by side once kept the first bytes past the
    /// default second, and the dial failed), and the dialler's next dial is a minute away, by design.
    static var patientLimits: MultipeerSession.Limits {
        var limits = MultipeerSession.Limits()
        limits.firstBytesTimeout = .seconds(10)
        limits.handshakeTimeout = .seconds(10)
        return limits
    }

    /// A dialler whose redials wait a minute: a rejoin within the test's deadline is the other side's doing.
    static func patientDialler(_ identity: PeerIdentity, serviceType: String) -> MultipeerSession {
        var configuration = MultipeerSession.Configuration.test(
            "greater",
            serviceType: serviceType,
            limits: patientLimits
        )
        configuration.reconnect = ReconnectParameters(initialDelay: .seconds(60), maximumDelay: .seconds(60))
        return MultipeerSession(configuration: configuration, identity: identity)
    }

    /// The side with the lesser UUID, which never dials, resumes: it dials its peer once itself,
    /// so the pair is back at once, not at the peer's next redial (whose delay grew while it was
    /// away). The peer here redials only after a minute: the pair rejoins well before.
    @Test(.scaledTimeLimit(minutes: 2))
    func aResumedSideBringsBackAPeerThatDialsIt() async throws {
        let type = try DiscoveryTests.uniqueServiceType()
        let (lesser, greater) = Self.identities()
        let dialler = Self.patientDialler(greater, serviceType: type.rawValue)
        let resumed = MultipeerSession(
            configuration: .test("lesser", serviceType: type.rawValue, limits: Self.patientLimits),
            identity: lesser
        )
        let diallerEvents = EventLog(dialler.events)
        let resumedEvents = EventLog(resumed.events)
        try await whileRunning([dialler, resumed]) {
            try await Self.explaining(["greater": diallerEvents, "lesser": resumedEvents]) {
                try await resumedEvents.waitUntilActive([greater.peerID], timeout: .seconds(30))
                await resumed.suspend()
                _ = try await diallerEvents.wait(timeout: .seconds(30)) { events in
                    events.contains { if case .peerLeft(let peer, _) = $0 { peer.id == lesser.peerID } else { false } }
                }
                await resumed.resume()
                let joined = try await diallerEvents.wait(timeout: .seconds(30)) { events in
                    events.filter { if case .peerJoined(let peer) = $0 { peer.id == lesser.peerID } else { false } }
                        .count == 2
                }
                #expect(joined.last.map { if case .peerJoined = $0 { true } else { false } } != nil)
                #expect(dialler.activePeers.map(\.id) == [lesser.peerID])
            }
        }
    }

    /// The lesser side's roster refuses the greater, which dials it and is then held at its
    /// longest backoff (a minute here). The roster changes to admit it: the lesser side dials
    /// it itself, until they join, and the pair joins now (it waited out the dialler's backoff,
    /// 6-8 s by default, before).
    @Test(.scaledTimeLimit(minutes: 2))
    func aRosterChangeBringsARefusedPeerInNow() async throws {
        let type = try DiscoveryTests.uniqueServiceType()
        let (lesser, greater) = Self.identities()
        let dialler = Self.patientDialler(greater, serviceType: type.rawValue)
        var strict = MultipeerSession.Configuration.test(
            "lesser",
            serviceType: type.rawValue,
            limits: Self.patientLimits
        )
        strict.roster = Roster(keys: [lesser.key])
        let guarded = MultipeerSession(configuration: strict, identity: lesser)
        let guardedEvents = EventLog(guarded.events)
        let diallerEvents = EventLog(dialler.events)
        try await whileRunning([dialler, guarded]) {
            try await Self.explaining(["greater": diallerEvents, "lesser": guardedEvents]) {
                _ = try await guardedEvents.wait(timeout: .seconds(30)) { events in
                    events.contains {
                        if case .authenticationFailed(_, let error) = $0 { error.code == .notInRoster } else { false }
                    }
                }
                await guarded.updateRoster(Roster(keys: [lesser.key, greater.key]))
                try await guardedEvents.waitUntilActive([greater.peerID], timeout: .seconds(30))
                #expect(guarded.activePeers.map(\.id) == [greater.peerID])
            }
        }
    }

    /// Runs `body`; if it throws, records every side's events read so far before rethrowing, so
    /// a wait that gave up says what each side saw.
    static func explaining(_ logs: KeyValuePairs<String, EventLog>, _ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch {
            for (side, log) in logs {
                Issue.record("\(side) read: \(log.history.map { String(describing: $0) }.joined(separator: " | "))")
            }
            throw error
        }
    }
}
