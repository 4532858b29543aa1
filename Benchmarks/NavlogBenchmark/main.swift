// What navlog-sync's sync costs, now that its log is the replicated store's collection
// `navlog.entries` (docs/SYNC.md): two real hosts over loopback (TLS, the session, SQLite), for
// logs of each size given (a tenth of the entries deleted):
//   - a fresh host joins one that holds the log;
//   - the two hosts, having met, are restarted with 1,000 differences between them (each wrote
//     400 new entries the other lacks, and changed 100 of the shared ones) and reconcile.
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

let psk = try PreSharedKey(identity: "bench", key: (0..<32).map { UInt8($0) })

/// `count` entries written by `author` (numbers `from` on), every tenth deleted.
func records(_ count: Int, author: String, from: Int = 0) -> [NavlogRecord] {
    (from..<from + count).map { number in
        NavlogRecord(
            id: UUID(),
            fields: NavlogFields(
                leg: 1 + number % 40,
                waypoint: "WP\(number)",
                fuel: 10_000 - number % 5_000,
                remarks: "entry \(number)"
            ),
            author: author,
            deleted: number % 10 == 9,
            attachments: nil
        )
    }
}

/// Writes `records` into the log of the host on `path` (its own writes, signed by its identity).
func write(_ records: [NavlogRecord], on path: String, as name: String) async throws {
    let node = try await NavlogNode(store: try NavlogStore(path: path), configuration: configuration(name, peers: []))
    for start in stride(from: 0, to: records.count, by: 10_000) {
        try await node.sync.collection(NavlogRecord.self).put(records[start..<min(start + 10_000, records.count)])
    }
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
    _ first: String,
    _ second: String
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
    let holder = try await NavlogNode(
        store: try NavlogStore(path: first),
        configuration: configuration("holder", peers: [])
    )
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
        let joiner = try await NavlogNode(
            store: try NavlogStore(path: second),
            configuration: configuration("joiner", peers: ["127.0.0.1:\(port)"])
        )
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

print("navlog-sync on the replicated store (\(Bench.machine()["cpu"] ?? "?"), release build):")
print("  anti-entropy (time until both hosts are done; payload bytes both ways):")

var cases: [NavlogSyncCase] = []
for size in sizes {
    let (holderPath, joinerPath) = ("\(directory)/holder-\(size).db", "\(directory)/joiner-\(size).db")
    let shared = records(size, author: "captain")
    try await write(shared, on: holderPath, as: "holder")
    let joined = try await sync(holderPath, joinerPath)
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
    func changed(_ entries: ArraySlice<NavlogRecord>, by author: String) -> [NavlogRecord] {
        entries.map { old in
            var new = old
            new.author = author
            new.deleted.toggle()
            return new
        }
    }
    try await write(
        records(400, author: "captain", from: size) + changed(shared.prefix(100), by: "captain"),
        on: holderPath,
        as: "holder"
    )
    try await write(
        records(400, author: "first officer", from: size) + changed(shared.suffix(100), by: "first officer"),
        on: joinerPath,
        as: "joiner"
    )
    let reconciled = try await sync(holderPath, joinerPath)
    precondition(
        reconciled.joinerReceived == 500 && reconciled.holderReceived == 500,
        "each side received the 500 versions it lacked (\(reconciled.joinerReceived), \(reconciled.holderReceived))"
    )
    let differences = NavlogSyncCase(
        entries: size,
        scenario: "1,000 differences, met before",
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
