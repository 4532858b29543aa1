import Foundation
import Glibc
import MultipeerSession
import Testing

/// Strangers without the key, as an application sees them: connections that say nothing are
/// closed at the first-bytes deadline, one source holds at most its share of handshakes, a
/// member still joins, and a flood is reported in counted events, not one per connection.
@Suite struct AdmissionTests {
    /// A TCP connection to 127.0.0.1:`port` that never sends a byte; closed on deinit.
    final class Silent: Sendable {
        let descriptor: Int32

        init(port: Int) throws {
            descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(port).bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else {
                throw TimedOut(what: "a connection to port \(port): \(String(cString: strerror(errno)))")
            }
        }

        deinit { close(descriptor) }
    }

    @Test func silentStrangersAreCutOffAndCountedWhileAMemberJoins() async throws {
        var limits = MultipeerSession.Limits(
            maximumHandshakesPerSource: 2,
            firstBytesTimeout: .milliseconds(200 * timeScale)
        )
        limits.handshakeTimeout = .seconds(30)
        let server = MultipeerSession(configuration: configuration("server", limits: limits), identity: PeerIdentity())
        let events = server.events
        try await whileRunning([server]) {
            let port = try await listeningPort(of: server)
            // Forty silent connections, all from 127.0.0.1: each is cut off, by the next one
            // from its source (at most two at once) or at the first-bytes deadline.
            let strangers = try (0..<40).map { _ in try Silent(port: port) }
            let failures = try await within(30, "every stranger's failure reported or counted") {
                var oneByOne: [MultipeerError] = []
                var counted = 0
                for await event in events {
                    switch event {
                    case .connectionFailed(_, let error): oneByOne.append(error)
                    case .connectionsFailed(let count, _): counted += count
                    default: break
                    }
                    if oneByOne.count + counted >= strangers.count { return (oneByOne, counted) }
                }
                throw TimedOut(what: "the failures (the session stopped)")
            }
            #expect(Set(failures.0.map(\.code)).isSubset(of: [.connectionLimit, .handshakeTimeout]), "\(failures.0)")
            #expect(failures.0.contains { $0.message.contains("Limits.maximumHandshakesPerSource") })
            #expect(
                failures.0.count <= 20,
                "reported one by one ten at a time per code, the rest counted: \(failures.0.count)"
            )
            #expect(failures.1 > 0)
            // A member dials meanwhile and joins.
            let member = MultipeerSession(
                configuration: configuration("member", dialling: port),
                identity: PeerIdentity()
            )
            try await whileRunning([member]) {
                try await waitUntilActive(server, member.peerID)
            }
            _ = strangers
        }
    }

    /// A session whose key the other's roster does not list: it never sees the other join (it
    /// saw it join and leave ten times a second), each side reports the refusal once (the
    /// refusing side reported 31 in 3 s), the dialler waits the longest backoff between tries,
    /// and once the roster admits it, the two join.
    @Test func aPeerTheRosterRefusesNeverJoinsAndIsReportedOnce() async throws {
        var guarded = configuration("guarded")
        guarded.roster = Roster()
        let listener = MultipeerSession(configuration: guarded, identity: PeerIdentity())
        let listenerEvents = listener.events
        try await whileRunning([listener]) {
            let port = try await listeningPort(of: listener)
            var outside = configuration("outsider", dialling: port)
            outside.reconnect = .init(maximumDelay: .seconds(1 * timeScale))
            let outsider = MultipeerSession(configuration: outside, identity: PeerIdentity())
            let outsiderEvents = outsider.events
            try await whileRunning([outsider]) {
                // Four times the longest backoff: four tries at most, not forty.
                let window = ContinuousClock.now + .seconds(4 * timeScale)
                let (seen, reports) = try await within(60, "four seconds of refusals") {
                    () -> ([String], [MultipeerError]) in
                    async let refusals = Self.events(listenerEvents, until: window)
                    let seen = await Self.events(outsiderEvents, until: window)
                    return (seen.map(\.description), await refusals.compactMap(Self.refusal))
                }
                #expect(!seen.contains { $0.contains("joined") || $0.contains(" left") }, "never joined: \(seen)")
                #expect(
                    seen.filter { $0.contains("notInRoster") || $0.contains("roster does not list") }.count == 1,
                    "\(seen)"
                )
                #expect(reports.count == 1, "reported once: \(reports)")
                #expect(reports.first?.code == .notInRoster)
                #expect(outsider.activePeers.isEmpty)
                #expect(
                    seen.contains { $0.hasPrefix("guarded (") && $0.hasSuffix(") is refused") },
                    "known, refused: \(seen)"
                )
                #expect(!seen.contains { $0.hasSuffix(") is active") }, "never active: \(seen)")

                await listener.updateRoster(Roster(keys: [outsider.identity.key]))
                try await waitUntilActive(outsider, listener.peerID)
                try await waitUntilActive(listener, outsider.peerID)
            }
        }
    }

    /// A peer's first message reaches the application after its sender's join, and is answered
    /// the moment it arrives. The message comes on the link the join's resume point came on, and
    /// the two reach the application by different paths: a busy session took the resume point in
    /// later, and its answer failed with `peerNotActive` (the navlog process tests met it under
    /// load); then the message came first, its sender not yet among the active peers (4 times in
    /// 20 trials), until the link held the peer's messages until the join was told.
    @Test func aPeersFirstMessageComesAfterItsJoinAndIsAnsweredAtOnce() async throws {
        for trial in 1...20 {
            let listener = MultipeerSession(configuration: configuration("answerer"), identity: PeerIdentity())
            let questions = listener.messages(of: Note.self)
            try await whileRunning([listener]) {
                let port = try await listeningPort(of: listener)
                // The answerer is kept busy, so that it takes the resume point in late.
                let busy = Task {
                    await withDiscardingTaskGroup { group in
                        for _ in 0..<8 {
                            group.addTask { while !Task.isCancelled { _ = await listener.listeningPort } }
                        }
                    }
                }
                defer { busy.cancel() }
                let asker = MultipeerSession(
                    configuration: configuration("asker", dialling: port),
                    identity: PeerIdentity()
                )
                let answers = asker.messages(of: Note.self)
                try await whileRunning([asker]) {
                    async let answered: Void = within(30, "the answer (trial \(trial))") {
                        for await (peer, question) in questions {
                            #expect(
                                listener.activePeers.contains { $0.id == peer.id },
                                "its sender's join came first (trial \(trial))"
                            )
                            try await listener.send(Note(text: "re: \(question.text)"), to: peer.id)
                            return
                        }
                    }
                    try await waitUntilActive(asker, listener.peerID)
                    try await asker.send(Note(text: "first"), to: listener.peerID)
                    try await answered
                    let answer = try await within(30, "the answer to arrive") {
                        await answers.first { _ in true }?.message
                    }
                    #expect(answer == Note(text: "re: first"))
                }
            }
        }
    }

    /// Every event of `stream` until `deadline` (the window a test watches for what must not happen).
    static func events(_ stream: EventStream, until deadline: ContinuousClock.Instant) async -> [SessionEvent] {
        await withTaskGroup(of: [SessionEvent].self) { group in
            group.addTask {
                var seen: [SessionEvent] = []
                for await event in stream {
                    seen.append(event)
                    if ContinuousClock.now >= deadline { break }
                }
                return seen
            }
            group.addTask {
                try? await Task.sleep(until: deadline)
                return []
            }
            var all: [SessionEvent] = []
            for await part in group {
                all += part
                group.cancelAll()
            }
            return all
        }
    }

    static func refusal(_ event: SessionEvent) -> MultipeerError? {
        if case .authenticationFailed(_, let error) = event { error } else { nil }
    }
}
