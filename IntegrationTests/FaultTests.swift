import Foundation
import MultipeerCore
import MultipeerTLS
import MultipeerTestSupport
import Testing

@testable import MultipeerSession

/// Two real sessions, the second reaching the first through a fault-injecting proxy (static
/// peers, no DNS-SD), at the default keepalive (500 ms, 1.5 s).
@Suite struct FaultTests {
    struct Pair {
        let listener: MultipeerSession
        let dialler: MultipeerSession
        let listenerEvents: EventLog
        let diallerEvents: EventLog
        let proxy: FaultProxy
    }

    /// Starts the listening session, a proxy in front of it, and a session dialling through the
    /// proxy; runs `body` once both see each other.
    static func withPair(
        limits: MultipeerSession.Limits = MultipeerSession.Limits(),
        keepalive: KeepaliveParameters = KeepaliveParameters(),
        proxyMode: FaultProxy.Mode = .passThrough,
        _ body: @escaping @Sendable (Pair) async throws -> Void
    ) async throws {
        let listener = MultipeerSession(
            configuration: .test("listener", discovery: .staticPeers([]), limits: limits, keepalive: keepalive),
            identity: PeerIdentity()
        )
        let listenerEvents = EventLog(listener.events)
        try await whileRunning([listener]) {
            let port = try await listenerEvents.listeningPort()
            let proxy = try await FaultProxy(forwardingTo: port)
            proxy.set(proxyMode)
            let dialler = MultipeerSession(
                configuration: .test(
                    "dialler",
                    discovery: .staticPeers(["127.0.0.1:\(proxy.port)"]),
                    limits: limits,
                    keepalive: keepalive
                ),
                identity: PeerIdentity()
            )
            let diallerEvents = EventLog(dialler.events)
            do {
                try await whileRunning([dialler]) {
                    try await diallerEvents.waitUntilActive([listener.peerID])
                    try await listenerEvents.waitUntilActive([dialler.peerID])
                    try await body(
                        Pair(
                            listener: listener,
                            dialler: dialler,
                            listenerEvents: listenerEvents,
                            diallerEvents: diallerEvents,
                            proxy: proxy
                        )
                    )
                }
            } catch {
                await proxy.stop()  // (a connection it holds open must not hold up the listener's stop)
                throw error
            }
            await proxy.stop()
        }
    }

    /// Keepalives no loaded machine times out (every other suite runs beside these tests and a
    /// CI machine's event loops can stall past the default 1.5 s): for the tests whose subject
    /// is not failure detection, so that a false teardown cannot fail them.
    static let patient = KeepaliveParameters(interval: .milliseconds(500), timeout: .seconds(30))

    static func lastLeaveReason(_ events: [SessionEvent]) -> PeerLeftReason? {
        events.reversed().lazy.compactMap { if case .peerLeft(_, let reason) = $0 { reason } else { nil } }.first
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aBlackHoleIsDetectedOnBothSidesAndHealsByItself() async throws {
        // A timeout of 4 s, not the default 1.5 s: beside the rest of the suite an event loop
        // stalled past 1.5 s before the black hole was set, so the listener timed the link out
        // first and its GOODBYE reached the dialler (make test, once). How soon the default
        // detects is timed where time is exact (the consumer's SimulationTests) or real hosts
        // (the host suite).
        try await Self.withPair(keepalive: KeepaliveParameters(interval: .milliseconds(500), timeout: .seconds(4))) {
            pair in
            pair.proxy.set(.blackHole)
            let diallerSaw = try await pair.diallerEvents.waitUntilActive([])
            let listenerSaw = try await pair.listenerEvents.waitUntilActive([])
            #expect(Self.lastLeaveReason(diallerSaw) == .keepaliveTimeout)
            #expect(Self.lastLeaveReason(listenerSaw) == .keepaliveTimeout)
            pair.proxy.set(.passThrough)
            try await pair.diallerEvents.waitUntilActive([pair.listener.peerID])
            try await pair.listenerEvents.waitUntilActive([pair.dialler.peerID])
            #expect(await pair.dialler.linkStats(for: pair.listener.peerID)?.reconnects == 1)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aResetIsAnImmediateLeaveAndARedial() async throws {
        // A reset is seen at once; a loaded machine must not time the link out first (which this
        // test would report).
        try await Self.withPair(keepalive: Self.patient) { pair in
            await pair.proxy.resetConnections()
            let saw = try await pair.diallerEvents.waitUntilActive([])
            guard case .linkClosed? = Self.lastLeaveReason(saw) else {
                Issue.record(
                    "a reset is a closed link, not a timeout: \(String(describing: Self.lastLeaveReason(saw)))"
                )
                return
            }
            try await pair.diallerEvents.waitUntilActive([pair.listener.peerID])
            try await pair.listenerEvents.waitUntilActive([pair.dialler.peerID])
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func oneByteSegmentsBreakNothing() async throws {
        try await Self.withPair(keepalive: Self.patient, proxyMode: .slice) { pair in
            let inbox = pair.listener.messages(of: Fix.self)
            let fixes = (0..<50).map { Fix(waypoint: "WP\($0)", fuel: Double($0)) }
            for fix in fixes { try await pair.dialler.send(fix, to: pair.listener.peerID) }
            #expect(try await collect(inbox) { $0.count == 50 }.map(\.message) == fixes)
            let stats = await pair.dialler.linkStats(for: pair.listener.peerID)
            #expect(stats?.quality.framesOut == 50)
        }
    }
}

/// A pong later than the keepalive's 1 s timeout counts as a ping lost: on a machine busy with
/// every other suite, one came late, so the suite runs alone (scripts/run-tests.sh).
@Suite(.enabled(if: runningAlone, "its pongs' timing: scripts/run-tests.sh runs it alone"))
struct LinkStatsTests {
    @Test(.scaledTimeLimit(minutes: 1))
    func pingsMeasureTheLinkAndStatsAreReportedPeriodically() async throws {
        let keepalive = KeepaliveParameters(interval: .milliseconds(100), timeout: .seconds(1))
        let listener = MultipeerSession(
            configuration: .test(
                "listener",
                discovery: .staticPeers([]),
                keepalive: keepalive,
                statsInterval: .milliseconds(300)
            ),
            identity: PeerIdentity()
        )
        let events = EventLog(listener.events)
        try await whileRunning([listener]) {
            let port = try await events.listeningPort()
            let dialler = MultipeerSession(
                configuration: .test("dialler", discovery: .staticPeers(["127.0.0.1:\(port)"]), keepalive: keepalive),
                identity: PeerIdentity()
            )
            try await whileRunning([dialler]) {
                // Both sides are quiet, so both ping every 100 ms; a stats event carries the round trips.
                let seen = try await events.wait { events in
                    events.contains {
                        if case .stats(_, let stats) = $0 { stats.quality.pongsReceived > 0 } else { false }
                    }
                }
                guard case .stats(let peer, let stats)? = seen.last else { return }
                #expect(peer.id == dialler.peerID)
                #expect(stats.quality.smoothedRTT.map { $0 > .zero } == true)
                #expect(stats.quality.minimumRTT != nil && stats.quality.jitter != nil)
                #expect(stats.quality.loss == 0)
                #expect(stats.reconnects == 0)
                #expect(stats.timeActive > .zero)
            }
        }
    }
}

/// A test of the keepalive's own judgement that a machine busy with every other suite at once
/// confounds (1 in 5 full runs, before this change too, starved links beside it of 1.5 s): it
/// runs alone (``runningAlone``, scripts/run-tests.sh).
@Suite(.enabled(if: runningAlone, "needs the machine to itself: scripts/run-tests.sh runs it alone"))
struct ThrottleTests {
    @Test(.scaledTimeLimit(minutes: 1))
    func aLargeMessageThroughAThrottleCausesNoFalseTeardown() async throws {
        try await FaultTests.withPair(limits: MultipeerSession.Limits(maximumFrameLength: 2 << 20)) { pair in
            let inbox = pair.listener.messages(of: Note.self)
            pair.proxy.set(.throttle(bytesPerSecond: 200_000))
            let large = Note(text: String(repeating: "n", count: 1 << 20))  // 1 MiB: over 5 s at 200 KB/s
            try await pair.dialler.send(large, to: pair.listener.peerID)
            let received = try await collect(inbox, timeout: .seconds(40)) { $0.count == 1 }
            #expect(received.first?.message == large)
            // Both still on their first link: no teardown while the message crawled through.
            #expect(await pair.listener.linkStats(for: pair.dialler.peerID)?.reconnects == 0)
            #expect(await pair.dialler.linkStats(for: pair.listener.peerID)?.reconnects == 0)
        }
    }
}
