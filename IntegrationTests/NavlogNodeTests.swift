import Foundation
import MultipeerCore
import MultipeerSession
import MultipeerSync
import MultipeerTestSupport
import NavlogSync
import Testing

/// Navlog hosts (NavlogNodes in this process, over real TLS on loopback), and peers that write
/// in the store what a correct host never would, or run another build.
@Suite struct NavlogNodeTests {
    static func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("navlog-\(UUID()).db").path
    }

    static func remove(_ paths: [String]) {
        for path in paths {
            for suffix in ["", "-wal", "-shm", ".identity"] {
                try? FileManager.default.removeItem(atPath: path + suffix)
            }
            for folder in [".attachments", ".incoming"] { try? FileManager.default.removeItem(atPath: path + folder) }
        }
    }

    /// A captain's host running, and `body` given it, its port, and its events from where the
    /// last call stopped until one batch satisfies the condition.
    static func withCaptain(
        limits: MultipeerSession.Limits = .init(),
        _ body:
            @Sendable (
                NavlogNode, Int,
                @escaping @Sendable (@escaping @Sendable ([NavlogEvent]) -> Bool) async throws -> [NavlogEvent]
            ) async throws -> Void
    ) async throws {
        let path = temporaryPath()
        defer { remove([path]) }
        let node = try await NavlogNode(
            store: try NavlogStore(path: path),
            configuration: .test("captain", discovery: .staticPeers([]), limits: limits)
        )
        let events = node.events
        let next: @Sendable (@escaping @Sendable ([NavlogEvent]) -> Bool) async throws -> [NavlogEvent] = {
            try await collect(events, until: $0)
        }
        try await running({ try await node.run() }) {
            let port = try await next { $0.contains { if case .listening = $0 { true } else { false } } }
                .compactMap { if case .listening(let port) = $0 { port } else { nil } }[0]
            try await body(node, port, next)
        }
    }

    /// A member's station that is no navlog-sync host: a session and a store of its own (in
    /// memory, its wall clock `now`), dialling `port`, running while `body` runs.
    static func withRogue(
        dialling port: Int,
        now: @escaping @Sendable () -> UInt64 = { UInt64(Date().timeIntervalSince1970 * 1_000) },
        _ body: @Sendable (MultipeerSession, SyncCollection<NavlogRecord>) async throws -> Void
    ) async throws {
        let session = MultipeerSession(
            configuration: .test("first officer", discovery: .staticPeers(["127.0.0.1:\(port)"])),
            identity: PeerIdentity()
        )
        let store = try SyncStore(session: session, storage: MemoryStorage(), now: now)
        try await running({ try await store.run() }) {
            try await whileRunning([session]) { try await body(session, store.collection(NavlogRecord.self)) }
        }
    }

    static func record(_ waypoint: String, remarks: String? = nil) -> NavlogRecord {
        NavlogRecord(
            id: UUID(),
            fields: NavlogFields(waypoint: waypoint, remarks: remarks),
            author: "first officer",
            deleted: false,
            attachments: nil
        )
    }

    /// A record a user could not have typed (an escape sequence in its remarks), signed by the
    /// member that wrote it, is reported and not shown; the next one is. A host that joins
    /// later gets both, relayed (the store carries every version whole), and shows the same.
    @Test(.scaledTimeLimit(minutes: 2))
    func aRecordAUserCouldNotHaveTypedIsReportedNotShownAndStillCarried() async throws {
        try await Self.withCaptain { captain, port, next in
            let bad = Self.record("ESCAPE", remarks: "\u{1b}[2J")
            let good = Self.record("NIPAS")
            try await Self.withRogue(dialling: port) { _, log in
                try await log.put(bad)
                try await log.put(good)
                // (Both may come in one batch, in either order. A link's own failures, a dial
                // that races the rogue's on a loaded machine, are no part of this.)
                let seen = try await next { events in
                    events.contains {
                        if case .entryApplied(let entry, _) = $0 { entry.id.uuidString == good.id } else { false }
                    } && events.contains { if case .error("badVersion", _) = $0 { true } else { false } }
                }
                let errors = seen.compactMap {
                    if case .error(let code, let message) = $0, code == "badVersion" { (code, message) } else { nil }
                }
                #expect(errors.count == 1, "\(errors)")
                #expect(
                    errors.first?.1.contains(bad.id) == true && errors.first?.1.contains("control characters") == true
                )
                #expect(try await captain.entries().map(\.id.uuidString) == [good.id])
            }
            // Relief joins later, the rogue gone, and gets both from the captain.
            let path = Self.temporaryPath()
            defer { Self.remove([path]) }
            let relief = try await NavlogNode(
                store: try NavlogStore(path: path),
                configuration: .test("relief", discovery: .staticPeers(["127.0.0.1:\(port)"]))
            )
            let reliefEvents = relief.events
            try await running({ try await relief.run() }) {
                // (The exchange's end and the records' changes are told by two streams: either first.)
                let seen = try await collect(reliefEvents) { events in
                    events.contains { if case .synced = $0 { true } else { false } }
                        && events.contains { if case .error("badVersion", _) = $0 { true } else { false } }
                }
                #expect(seen.contains { if case .synced(_, _, received: 2) = $0 { true } else { false } }, "\(seen)")
                #expect(try await relief.entries() == captain.entries())
            }
        }
    }

    /// A version stamped more than a day ahead is refused by the store and reported, naming the
    /// peer it came from; the host's own next edit is stamped by its own clock.
    @Test(.scaledTimeLimit(minutes: 1))
    func aVersionStampedMoreThanADayAheadIsRefusedNamingThePeer() async throws {
        try await Self.withCaptain { captain, port, next in
            let now = UInt64(Date().timeIntervalSince1970 * 1_000)
            try await Self.withRogue(dialling: port, now: { now + 2 * 86_400_000 }) { _, log in
                try await log.put(Self.record("FUTURE"))
                let seen = try await next {
                    $0.contains { if case .error("clockAhead", _) = $0 { true } else { false } }
                }
                let message = seen.compactMap {
                    if case .error("clockAhead", let message) = $0 { message } else { nil }
                }[0]
                #expect(message.hasPrefix("refused from first officer: "), "\(message)")
                #expect(message.contains("more than a day ahead"))
            }
            #expect(try await captain.entries().isEmpty)
            let own = try await captain.add([.waypoint: "ARNEM"])
            #expect(own.timestamp.milliseconds < now + 60 * 60 * 1_000)
        }
    }

    /// A peer of navlog-sync 0.9 (it reads navlog protocol 1's one message type) is named as
    /// such, `peerTooOld`; a peer of another application that reads no store messages is said
    /// not to sync, `peerNotSyncing`. Neither is sent anything it cannot read.
    @Test(.scaledTimeLimit(minutes: 1))
    func aPeerOfZeroNineIsNamedAndOneOfAnotherApplicationIsSaidNotToSync() async throws {
        try await Self.withCaptain { _, port, next in
            for (types, code, says) in [
                ([ZeroNineMessage.self], "peerTooOld", "runs navlog-sync 0.9"),
                ([Remark.self], "peerNotSyncing", "does not read the store's messages"),
            ] as [([any (Decodable & SendableMetatype).Type], String, String)] {
                var configuration = MultipeerSession.Configuration.test(
                    "first officer",
                    discovery: .staticPeers(["127.0.0.1:\(port)"])
                )
                configuration.messageTypes = types
                let peer = MultipeerSession(configuration: configuration, identity: PeerIdentity())
                let peerEvents = EventLog(peer.events)
                try await whileRunning([peer]) {
                    let seen = try await next { $0.contains { if case .error(code, _) = $0 { true } else { false } } }
                    let message = seen.compactMap { if case .error(code, let message) = $0 { message } else { nil } }[0]
                    #expect(message.contains(says) && message.contains("first officer"), "\(message)")
                    #expect(
                        !peerEvents.history.contains {
                            if case .messageHeld = $0 { true } else if case .messageNotRead = $0 { true } else { false }
                        }
                    )
                }
            }
        }
    }

    /// Two hosts that each lack thousands of the other's entries meet, with outboxes and
    /// streams far too small for their answers: each host must go on reading while its answer
    /// waits for room.
    @Test(.scaledTimeLimit(minutes: 2))
    func twoHostsWhoseAnswersOverflowEveryBufferStillConverge() async throws {
        var limits = MultipeerSession.Limits()
        limits.outbox = BufferLimits(maximumCount: 2, maximumBytes: 1 << 20)
        limits.receiveBuffer = BufferLimits(maximumCount: 2, maximumBytes: 1 << 20)
        let paths = (0..<2).map { _ in Self.temporaryPath() }
        defer { Self.remove(paths) }
        for (index, path) in paths.enumerated() {
            // Each host holds 3,000 entries of its own.
            let node = try await NavlogNode(
                store: try NavlogStore(path: path),
                configuration: .test("host \(index)", discovery: .staticPeers([]))
            )
            try await node.sync.collection(NavlogRecord.self).put(
                (0..<3_000).map { Self.record("H\(index)N\($0)") }
            )
        }
        let first = try await NavlogNode(
            store: try NavlogStore(path: paths[0]),
            configuration: .test("first", discovery: .staticPeers([]), limits: limits)
        )
        let firstEvents = first.events
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await first.run() }
            let port = try await collect(firstEvents) {
                $0.contains { if case .listening = $0 { true } else { false } }
            }
            .compactMap { if case .listening(let port) = $0 { port } else { nil } }[0]
            let second = try await NavlogNode(
                store: try NavlogStore(path: paths[1]),
                configuration: .test("second", discovery: .staticPeers(["127.0.0.1:\(port)"]), limits: limits)
            )
            let secondEvents = second.events
            group.addTask { try await second.run() }
            // Each host receives the other's 3,000: in one exchange, or over several should a
            // link drop on a loaded machine.
            for events in [firstEvents, secondEvents] {
                _ = try await collect(events, timeout: .seconds(90)) { Self.received($0) >= 3_000 }
            }
            #expect(try await first.entries().count == 6_000)
            #expect(try await second.entries() == first.entries())
            group.cancelAll()
        }
    }

    /// How many entries the exchanges among `events` received in all.
    static func received(_ events: [NavlogEvent]) -> Int {
        events.reduce(0) { total, event in
            if case .synced(_, _, let received) = event { total + received } else { total }
        }
    }
}

/// Logs of thousands of entries: signing and storing them loads the machine for seconds, which
/// would starve the keepalives of tests running beside, so the suite runs alone
/// (scripts/run-tests.sh).
@Suite(.enabled(if: runningAlone, "loads the machine for seconds: scripts/run-tests.sh runs it alone"))
struct LargeLogTests {
    /// Two hosts that never met, holding the same 12,000 entries and 20 the other lacks each,
    /// meet: each gets the other's 20, and what they exchange is a small part of what naming
    /// every entry would take (docs/SYNC.md 4).
    @Test(.scaledTimeLimit(minutes: 2))
    func hostsWithLargeLogsExchangeWhatDiffersNotTheirLogs() async throws {
        let paths = (0..<2).map { _ in NavlogNodeTests.temporaryPath() }
        defer { NavlogNodeTests.remove(paths) }
        let shared = (0..<12_000).map { NavlogNodeTests.record("WP\($0)") }
        let first = try await NavlogNode(
            store: try NavlogStore(path: paths[0]),
            configuration: .test("first", discovery: .staticPeers([]))
        )
        try await first.sync.collection(NavlogRecord.self).put(shared)
        try await first.sync.collection(NavlogRecord.self).put((0..<20).map { NavlogNodeTests.record("F\($0)") })
        let firstEvents = first.events
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await first.run() }
            let port = try await collect(firstEvents) {
                $0.contains { if case .listening = $0 { true } else { false } }
            }
            .compactMap { if case .listening(let port) = $0 { port } else { nil } }[0]
            let second = try await NavlogNode(
                store: try NavlogStore(path: paths[1]),
                configuration: .test("second", discovery: .staticPeers(["127.0.0.1:\(port)"]))
            )
            // The shared versions, signed by the first host, brought in as from a backup: the
            // two hosts never met.
            let firstFile = try SQLiteStorage(path: paths[0])
            let keys = Set(shared.map { RecordKey(collection: NavlogRecord.collectionName, id: $0.id) })
            let encoded = try firstFile.versions(of: keys).values.flatMap { $0.map(\.bytes) }
            let firstKey = try #require(first.store.identity).key
            #expect(try await second.sync.importVersions(encoded, keys: [firstKey]).isEmpty)
            try await second.sync.collection(NavlogRecord.self).put((0..<20).map { NavlogNodeTests.record("S\($0)") })
            let secondEvents = second.events
            group.addTask { try await second.run() }
            for events in [firstEvents, secondEvents] {
                let seen = try await collect(events, timeout: .seconds(60)) {
                    $0.contains { if case .synced = $0 { true } else { false } }
                }
                #expect(
                    seen.contains { if case .synced(_, sent: 20, received: 20) = $0 { true } else { false } },
                    "\(seen.suffix(3))"
                )
            }
            #expect(try await first.entries().count == 12_040)
            #expect(try await second.entries() == first.entries())
            let quality = try #require(await second.session.linkStats(for: first.session.peerID)?.quality)
            let naming = 12_040 * 40  // (each version's id and timestamp)
            #expect(
                quality.bytesIn + quality.bytesOut < naming / 5,
                "\(quality.bytesIn + quality.bytesOut) bytes both ways; naming every version: \(naming)"
            )
            group.cancelAll()
        }
    }
}

/// A type of another application's, which navlog-sync does not read.
private struct Remark: Codable, Sendable {
    var text: String
}

/// The one message type of navlog-sync 0.9 (its name on the wire), as a peer of 0.9 declares it.
private struct ZeroNineMessage: MultipeerMessage {
    static var wireName: String { "NavlogSync.NavlogMessage" }
}
