import Foundation
import MultipeerSession
import Testing

/// The group key of these tests: made here, as an application would (never written to a file).
let groupKey = try! PreSharedKey(identity: "consumer", passphrase: "consumer tests only, not a secret")

/// A message type of the consumer's own.
struct Note: Codable, Sendable, Equatable {
    var text: String
}

/// How much slower than usual the code runs (`MULTIPEER_TEST_TIME_SCALE`, set by `make sanitize`).
let timeScale = ProcessInfo.processInfo.environment["MULTIPEER_TEST_TIME_SCALE"].flatMap(Int.init) ?? 1

/// A configuration on loopback without DNS-SD: `listener` takes no peers list, a dialler names it.
func configuration(
    _ name: String,
    dialling port: Int? = nil,
    limits: MultipeerSession.Limits = .init(),
    encoding: MessageEncoding? = nil,
    statsInterval: Duration? = nil
) -> MultipeerSession.Configuration {
    var configuration = MultipeerSession.Configuration(
        serviceType: "_consumer._tcp",
        peer: PeerInfo(displayName: name),
        psk: groupKey,
        discovery: .staticPeers(port.map { ["127.0.0.1:\($0)"] } ?? []),
        limits: limits,
        keepalive: KeepaliveParameters(
            interval: .milliseconds(500 * timeScale),
            timeout: .milliseconds(1500 * timeScale)
        )
    )
    if let encoding { configuration.messageEncoding = encoding }  // else the default, binary
    if let statsInterval { configuration.statsInterval = statsInterval }
    return configuration
}

/// Thrown by ``within(_:_:)``.
struct TimedOut: Error, CustomStringConvertible {
    var what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Runs `body`, failing with ``TimedOut`` after `seconds` (a generous bound, stretched by the time scale).
func within<T: Sendable>(
    _ seconds: Int,
    _ what: String,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds * timeScale))
            return nil
        }
        defer { group.cancelAll() }
        guard case let value?? = try await group.next() else { throw TimedOut(what: what) }
        return value
    }
}

/// Waits until `session` knows whether `peer` reads `type` as `expected` (its HELLO and TYPES:
/// told by ``SessionEvent/peerReadsChanged(_:)``), within 30 s.
func untilReads<Message: Sendable>(
    _ session: MultipeerSession,
    _ type: Message.Type,
    peer: UUID,
    _ expected: Bool
) async throws {
    let events = session.events  // (before reading: a change after it is in the stream)
    try await within(30, "\(peer) to be known \(expected ? "to read" : "not to read") \(type)") {
        if await session.reads(type, peer: peer) == expected { return }
        for await case .peerReadsChanged(let changed) in events where changed.id == peer {
            if await session.reads(type, peer: peer) == expected { return }
        }
        throw TimedOut(what: "what \(peer) reads (the session stopped)")
    }
}

/// Runs `sessions` while `body` runs, then cancels them and waits for each to stop.
func whileRunning<T: Sendable>(_ sessions: [MultipeerSession], _ body: () async throws -> T) async throws -> T {
    try await whileRunning(sessions.map { session in { try await session.run() } }, body)
}

/// Runs each of `runs` (a `run()` that ends when cancelled) while `body` runs, then cancels
/// them and waits for each to stop.
func whileRunning<T: Sendable>(
    _ runs: [@Sendable () async throws -> Void],
    _ body: () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: Void.self) { group in
        for run in runs { group.addTask { try await run() } }
        defer { group.cancelAll() }
        let result = try await body()
        group.cancelAll()
        try await group.waitForAll()
        return result
    }
}

/// Waits until `session` has `peer` among its active peers.
func waitUntilActive(_ session: MultipeerSession, _ peer: UUID) async throws {
    try await within(30, "\(peer) to become active") {
        for await event in session.events {
            if case .peerJoined(let joined) = event, joined.id == peer { return }
        }
        throw TimedOut(what: "\(peer) to become active (the session stopped)")
    }
}

/// The port `session` listens on, once it does (its event stream starts with it).
func listeningPort(of session: MultipeerSession) async throws -> Int {
    try await within(30, "the session to listen") {
        for await event in session.events {
            if case .listening(let port) = event { return port }
        }
        throw TimedOut(what: "the session to listen (it stopped)")
    }
}

/// Runs a listening session (which declares it reads `listenerReads`, none by default) and a
/// session that dials it over loopback, and `body` once each has the other among its active
/// peers; stops both afterwards.
func withPair<T: Sendable>(
    listenerLimits: MultipeerSession.Limits = .init(),
    diallerLimits: MultipeerSession.Limits = .init(),
    listenerEncoding: MessageEncoding? = nil,
    listenerStatsInterval: Duration? = nil,
    listenerReads: [any (Decodable & SendableMetatype).Type] = [],
    _ body: @escaping @Sendable (_ listener: MultipeerSession, _ dialler: MultipeerSession) async throws -> T
) async throws -> T {
    var listenerConfiguration = configuration(
        "listener",
        limits: listenerLimits,
        encoding: listenerEncoding,
        statsInterval: listenerStatsInterval
    )
    listenerConfiguration.messageTypes = listenerReads
    let listener = MultipeerSession(configuration: listenerConfiguration, identity: PeerIdentity())
    return try await whileRunning([listener]) {
        let port = try await listeningPort(of: listener)
        let dialler = MultipeerSession(
            configuration: configuration("dialler", dialling: port, limits: diallerLimits),
            identity: PeerIdentity()
        )
        return try await whileRunning([dialler]) {
            try await waitUntilActive(dialler, listener.peerID)
            try await waitUntilActive(listener, dialler.peerID)
            return try await body(listener, dialler)
        }
    }
}

/// Sends `message` from `session` to `peer` reliably once `session` no longer refuses its type
/// (`messageTypeNotRead`: the peer has not said yet that it reads it), within 30 s: tried again
/// at each `peerReadsChanged` of the peer, as the guide's *Upgrading a fleet* does.
func sendOnceRead(
    _ message: some Codable & Sendable,
    from session: MultipeerSession,
    to peer: UUID
) async throws {
    try await within(30, "\(peer) to read \(type(of: message))") {
        let events = session.events  // (before the first try: no change can slip between)
        while true {
            do {
                return try await session.send(message, to: peer)
            } catch let error as MultipeerError where error.code == .messageTypeNotRead {
                for await event in events {
                    if case .peerReadsChanged(let changed) = event, changed.id == peer { break }
                }
            }
        }
    }
}
