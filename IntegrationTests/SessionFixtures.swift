import Foundation
import MultipeerCore
import MultipeerSession
import MultipeerTLS
import MultipeerTestSupport
import NIOConcurrencyHelpers
import Testing

/// Whether this run is the one for tests that disturb whatever runs beside them (a flood that
/// starves the event loops, a restart of the shared avahi-daemon) or that need the machine to
/// themselves: MULTIPEER_RUN_ALONE=1, set by scripts/run-tests.sh for a run of each such suite
/// alone, after the rest.
let runningAlone = ProcessInfo.processInfo.environment["MULTIPEER_RUN_ALONE"] == "1"

/// Sessions on a service type of their own, run for the length of a test.
struct SessionGroup {
    let serviceType: String
    var sessions: [MultipeerSession]
    /// Each session's events, subscribed before it runs so nothing is missed.
    var events: [EventLog]

    static func uniqueServiceType() -> String {
        "_mps\(String(UInt32.random(in: 0...UInt32.max), radix: 16))._tcp"
    }

    init(count: Int, serviceType: String = SessionGroup.uniqueServiceType(), psk: PreSharedKey = LinkFixtures.psk) {
        self.serviceType = serviceType
        sessions = (0..<count).map { index in
            MultipeerSession(
                configuration: .test("peer \(index)", serviceType: serviceType, psk: psk),
                identity: PeerIdentity()
            )
        }
        events = sessions.map { EventLog($0.events) }
    }

    mutating func add(_ session: MultipeerSession) {
        sessions.append(session)
        events.append(EventLog(session.events))
    }
}

extension MultipeerSession.Configuration {
    /// A test session's configuration: the tests' group key unless `psk` says otherwise, and
    /// every timing bound (keepalive, handshake and GOODBYE timeouts) stretched by ``TestTime/scale``.
    static func test(
        _ name: String,
        serviceType: String = "_navlog._tcp",
        psk: PreSharedKey = LinkFixtures.psk,
        discovery: MultipeerSession.Discovery = .avahi(),
        limits: MultipeerSession.Limits = .init(),
        keepalive: KeepaliveParameters = KeepaliveParameters(),
        statsInterval: Duration? = .seconds(5)
    ) -> Self {
        var limits = limits
        limits.handshakeTimeout = TestTime.scaled(limits.handshakeTimeout)
        limits.firstBytesTimeout = TestTime.scaled(limits.firstBytesTimeout)
        // A GOODBYE given up after a second goes unsaid on a machine slowed by a sanitizer.
        limits.goodbyeTimeout = TestTime.scaled(limits.goodbyeTimeout)
        return .init(
            serviceType: serviceType,
            peer: PeerInfo(displayName: name),
            psk: psk,
            discovery: discovery,
            limits: limits,
            keepalive: .scaled(keepalive),
            statsInterval: statsInterval
        )
    }
}

extension KeepaliveParameters {
    /// `keepalive` with both durations stretched by ``TestTime/scale``.
    static func scaled(_ keepalive: KeepaliveParameters) -> Self {
        KeepaliveParameters(interval: TestTime.scaled(keepalive.interval), timeout: TestTime.scaled(keepalive.timeout))
    }
}

extension Trait where Self == TimeLimitTrait {
    /// A time limit of `minutes`, stretched by ``TestTime/scale``.
    static func scaledTimeLimit(minutes: Int) -> Self {
        .timeLimit(.minutes(minutes * TestTime.scale))
    }
}

/// Runs `sessions` while `body` runs, then cancels them and waits until every one has stopped.
@discardableResult
func whileRunning<T: Sendable>(_ sessions: [MultipeerSession], _ body: () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: Void.self) { group in
        for session in sessions {
            group.addTask {
                do {
                    try await session.run()
                } catch {
                    // Recorded at once: the body may be waiting on this session's events.
                    Issue.record(error, "a session stopped with an error")
                    throw error
                }
            }
        }
        do {
            let result = try await body()
            group.cancelAll()
            try await group.waitForAll()
            return result
        } catch {
            group.cancelAll()
            throw error
        }
    }
}

/// The peers that joined (and did not leave again), by the events read so far.
func activeIDs(_ events: [SessionEvent]) -> Set<UUID> {
    var active: Set<UUID> = []
    for event in events {
        switch event {
        case .peerJoined(let peer): active.insert(peer.id)
        case .peerLeft(let peer, _): active.remove(peer.id)
        default: break
        }
    }
    return active
}

/// A session's events, read on demand by one test, remembering everything read so far.
///
/// `@unchecked Sendable`: a test reads it from one task at a time.
final class EventLog: @unchecked Sendable {
    private let stream: EventStream
    private(set) var history: [SessionEvent] = []

    init(_ stream: EventStream) { self.stream = stream }

    /// Reads events until `done` holds for everything read so far (maybe at once); returns it all.
    /// What a wait that gives up read stays in ``history``.
    @discardableResult
    func wait(
        timeout: Duration = .seconds(60),
        until done: @escaping @Sendable ([SessionEvent]) -> Bool
    ) async throws -> [SessionEvent] {
        let before = history
        let read = NIOLockedValueBox(before)
        defer { history = read.withLockedValue { $0 } }
        _ = try await collect(stream, timeout: timeout) { events in
            let all = before + events
            read.withLockedValue { $0 = all }
            return done(all)
        }
        return read.withLockedValue { $0 }
    }

    /// Reads events until the session listens; returns its port.
    func listeningPort() async throws -> Int {
        let events = try await wait { $0.contains { if case .listening = $0 { true } else { false } } }
        return events.lazy.compactMap { if case .listening(let port) = $0 { port } else { nil } }.first!
    }

    /// Reads events until exactly `expected` are active.
    @discardableResult
    func waitUntilActive(_ expected: Set<UUID>, timeout: Duration = .seconds(60)) async throws -> [SessionEvent] {
        try await wait(timeout: timeout) { activeIDs($0) == expected }
    }
}

/// A message type for the tests.
struct Note: Codable, Sendable, Equatable {
    var text: String
}

/// Another one, to share a link with `Note`.
struct Fix: Codable, Sendable, Equatable {
    var waypoint: String
    var fuel: Double
}
