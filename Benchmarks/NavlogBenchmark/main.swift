// What navlog-sync's sync costs. First authorship: signing a version, checking one a peer sent
// (NavlogIntake, where a version's signature is verified). Then anti-entropy between two real
// hosts over loopback (TLS, the session, SQLite), for logs of each size given (a tenth of the
// entries tombstones):
//   - a fresh host joins one that holds the log;
//   - two hosts that hold the same log, and 1,000 differences between them (each has 400 new
//     entries the other lacks, and 100 of the shared entries deleted or edited since),
//     reconcile.
// Each case reports the time from the joiner's start until both hosts report the exchange
// done, and the payload bytes the link carried both ways (the session's DATA payloads).
//
//   .build/release/NavlogBenchmark [--entries 1000,10000,100000] [--json PATH]
import BenchmarkSupport
import Foundation
import MultipeerSession
import MultipeerSync
import NavlogSync

let sizes = (Bench.option("--entries") ?? "1000,10000,100000").split(separator: ",").compactMap { Int($0) }
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("navlog-bench-\(UUID())").path
try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: directory) }

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

let now = UInt64(Date().timeIntervalSince1970 * 1000)
let psk = try PreSharedKey(identity: "bench", key: (0..<32).map { UInt8($0) })

/// `count` versions by `identity`, stamped a minute ago (counter `from` on), every tenth a tombstone.
func versions(_ count: Int, by identity: PeerIdentity, author: String, from: Int = 0) throws -> [NavlogEntry] {
    try (from..<from + count).map { number in
        try NavlogEntry(
            id: UUID(),
            fields: NavlogFields(
                leg: 1 + number % 40,
                waypoint: "WP\(number)",
                fuel: 10_000 - number % 5_000,
                remarks: "entry \(number)"
            ),
            author: author,
            origin: identity.peerID,
            timestamp: HLCTimestamp(
                milliseconds: now - 60_000 + UInt64(number >> 16),
                counter: UInt16(number & 0xFFFF)
            ),
            deleted: number % 10 == 9
        ).signed(by: identity)
    }
}

func store(_ name: String, holding entries: [NavlogEntry]) throws -> NavlogStore {
    let store = try NavlogStore(path: "\(directory)/\(name)-\(UUID()).db")
    for start in stride(from: 0, to: entries.count, by: 10_000) {
        _ = try store.merge(Array(entries[start..<min(start + 10_000, entries.count)]))
    }
    return store
}

func configuration(_ name: String, peers: [String]) -> MultipeerSession.Configuration {
    .init(
        serviceType: "_navlog._tcp",
        peer: PeerInfo(displayName: name),
        psk: psk,
        discovery: .staticPeers(peers),
        statsInterval: nil
    )
}

/// Runs a host on `first` and one on `second` that dials it, until each reports the exchange
/// with the other done: the seconds from the second's start, the payload bytes both ways, and
/// what each side received.
func sync(
    _ first: NavlogStore,
    _ second: NavlogStore
) async throws -> (seconds: Double, payloadBytes: Int, joinerReceived: Int, holderReceived: Int) {
    /// What `events` says the host received in its first finished exchange.
    @Sendable func received(_ events: AsyncStream<NavlogEvent>, _ name: String) async throws -> Int {
        for await event in events {
            if case .synced(_, _, let received) = event { return received }
            if case .error(let code, let message) = event {
                throw BenchmarkError("the \(name) failed: \(code): \(message)")
            }
        }
        throw BenchmarkError("the \(name) stopped before it synced")
    }
    let holder = try NavlogNode(store: first, configuration: configuration("holder", peers: []))
    let holderEvents = holder.events
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await holder.run() }
        var port = 0
        for await event in holderEvents {
            if case .listening(let listening) = event {
                port = listening
                break
            }
        }
        let joiner = try NavlogNode(store: second, configuration: configuration("joiner", peers: ["127.0.0.1:\(port)"]))
        let started = ContinuousClock.now
        group.addTask { try await joiner.run() }
        async let joinerReceived = received(joiner.events, "joiner")
        let holderReceived = try await received(holderEvents, "holder")
        let joinerCount = try await joinerReceived
        let elapsed = seconds(ContinuousClock.now - started)
        let quality = await joiner.session.linkStats(for: holder.session.peerID)?.quality
        group.cancelAll()
        return (elapsed, (quality?.bytesIn ?? 0) + (quality?.bytesOut ?? 0), joinerCount, holderReceived)
    }
}

let signer = PeerIdentity()
let sample = try versions(min(sizes.max() ?? 1_000, 10_000), by: signer, author: "captain")
var start = ContinuousClock.now
for entry in sample { _ = try entry.signed(by: signer) }
let signing = seconds(ContinuousClock.now - start) / Double(sample.count)
start = ContinuousClock.now
for entry in sample { try entry.verify() }
let verifying = seconds(ContinuousClock.now - start) / Double(sample.count)
var clock = HybridLogicalClock()
start = ContinuousClock.now
let intake = NavlogIntake(sample, clock: &clock, now: now)
let checking = seconds(ContinuousClock.now - start) / Double(sample.count)
precondition(intake.accepted.count == sample.count, "every version verifies")

print("navlog-sync (\(Bench.machine()["cpu"] ?? "?"), release build):")
print(String(format: "  signing a version:            %6.1f µs each", signing * 1e6))
print(String(format: "  verifying its signature:      %6.1f µs each", verifying * 1e6))
print(String(format: "  checking a received version:  %6.1f µs each (signature, key, fields, clock)", checking * 1e6))
print("  anti-entropy (time until both hosts are done; payload bytes both ways):")

var cases: [NavlogSyncCase] = []
for size in sizes {
    let holderIdentity = PeerIdentity()
    let joinerIdentity = PeerIdentity()
    let shared = try versions(size, by: holderIdentity, author: "captain")
    let joined = try await sync(try store("holder", holding: shared), try store("joiner", holding: []))
    precondition(
        joined.joinerReceived == size,
        "the fresh host received every entry (\(joined.joinerReceived) of \(size))"
    )
    let fresh = NavlogSyncCase(
        entries: size,
        scenario: "fresh join",
        seconds: joined.seconds,
        payloadBytes: joined.payloadBytes,
        joinerReceived: joined.joinerReceived,
        holderReceived: joined.holderReceived
    )

    // 1,000 differences: 400 new entries on each side, and 100 shared ones changed on each.
    let changed = {
        (entries: ArraySlice<NavlogEntry>, identity: PeerIdentity, author: String) throws -> [NavlogEntry] in
        try entries.map { old in
            try NavlogEntry(
                id: old.id,
                fields: old.fields,
                author: author,
                origin: identity.peerID,
                timestamp: HLCTimestamp(milliseconds: now, counter: 0),
                deleted: !old.deleted
            ).signed(by: identity)
        }
    }
    let holderOnly =
        try versions(400, by: holderIdentity, author: "captain", from: size)
        + changed(shared.prefix(100), holderIdentity, "captain")
    let joinerOnly =
        try versions(400, by: joinerIdentity, author: "first officer")
        + changed(shared.suffix(100), joinerIdentity, "first officer")
    let reconciled = try await sync(
        try store("holder", holding: shared + holderOnly),
        try store("joiner", holding: shared + joinerOnly)
    )
    precondition(
        reconciled.joinerReceived == 500 && reconciled.holderReceived == 500,
        "each side received the 500 versions it lacked (\(reconciled.joinerReceived), \(reconciled.holderReceived))"
    )
    let differences = NavlogSyncCase(
        entries: size,
        scenario: "1,000 differences",
        seconds: reconciled.seconds,
        payloadBytes: reconciled.payloadBytes,
        joinerReceived: reconciled.joinerReceived,
        holderReceived: reconciled.holderReceived
    )
    cases += [fresh, differences]
    for result in [fresh, differences] {
        print(
            String(
                format: "    %7d entries, %-18@ %7.2f s  %10.0f KB",
                result.entries,
                result.scenario as NSString,
                result.seconds,
                Double(result.payloadBytes) / 1e3
            )
        )
    }
}
try Bench.writeJSON(cases, defaultPath: "bench-results/navlog.json")
