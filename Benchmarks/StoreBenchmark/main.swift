// What the replicated store costs as an application meets it (issue 60's figures): two stores,
// each over a real session (TLS over loopback, in this one process), each on a SQLite file.
//
//   put        one `put` of every record, durable when it returns: records a second
//   join       a fresh station joins one holding every record: seconds until it holds them
//              all, the bytes of the store's messages both ways, versions (as sent, compressed;
//              and their own bytes, as signed) and metadata apart
//   differ     both stations hold every record, then each writes `differences / 2` new ones
//              while apart (new sessions, so nothing was queued): seconds until both hold all,
//              round trips (rounds an initiator sent, not the empty one that ends), bytes
//   partition  16 stations in a simulated world (MultipeerSessionTesting), cut in two for 60 s
//              while each half writes 1,000 records: simulated seconds after the heal until
//              every pair is active again, and until every station holds all 2,000
//   memory     a station holding every record (a copy of the captain's file) that never met
//              the captain, in a process of its own: each writes `differences / 2` new ones,
//              then they meet; the station's peak resident memory (VmHWM) over its whole run,
//              seconds, round trips and bytes until both hold all. Alone: it makes its records.
//
// Each phase starts new sessions (the same identities, the same files), so the session's own
// reliable delivery never carries what reconciliation is measured finding.
//
//   .build/release/StoreBenchmark [--records 100000] [--differences 1000,10] [--phases put,join,differ]
//                                 [--json PATH]
//   .build/release/StoreBenchmark --records 1000000 --differences 2 --phases memory [--json PATH]
//   .build/release/StoreBenchmark --phases partition [--seeds 1,2,3,4,5] [--json PATH]
// (join needs put's records, and differ join's.)
import BenchmarkSupport
import Foundation
import MultipeerSession
import MultipeerSync

/// A navigation log entry, about the size of navlog-sync's.
struct Entry: SyncRecord {
    var id: String
    var waypoint: String
    var estimated: String
    var fuelKilograms: Int
    var altitudeFeet: Int
    var remarks: String
}

func entry(_ n: Int, by station: String) -> Entry {
    Entry(
        id: "\(station)-\(n)",
        waypoint: "WPT\(n % 10_000)",
        estimated: "2026-11-29T\(10 + n % 12):\(n % 60):00Z",
        fuelKilograms: 20_000 - n % 20_000,
        altitudeFeet: 35_000 + n % 4_000,
        remarks: "entry \(n) of the benchmark log, written by \(station)"
    )
}

let records = Int(Bench.option("--records") ?? "100000") ?? 100_000
let differenceCounts = (Bench.option("--differences") ?? "1000,10").split(separator: ",").compactMap { Int($0) }
let phases = Set((Bench.option("--phases") ?? "put,join,differ").split(separator: ",").map(String.init))
let groupKey = try PreSharedKey(identity: "store-bench", passphrase: "benchmark only, not a secret")
/// This process's peak resident memory (VmHWM), in KiB.
func peakResidentKiB() -> Double {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
    return line.flatMap { Double($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
}

/// What the station of the memory phase reports on its last line.
struct StationFigures: Codable {
    var peakMiB: Double
    var residentMiB: Double
    var seconds: Double
    var versionBytes: Int
    var signedBytes: Int
    var metadataBytes: Int
    var roundTrips: Int
}

// The memory phase's station (a process of its own): opens the store at `--station`, writes
// `--writes` records, dials the captain at `--dial`, and once it took as many from the captain
// and their exchange completed, prints its figures as JSON and exits.
if let path = Bench.option("--station"), let port = Bench.option("--dial"),
    let writes = Int(Bench.option("--writes") ?? "")
{
    let session = MultipeerSession(
        configuration: configuration("relief", dialling: Int(port)),
        identity: PeerIdentity()
    )
    let store = try SyncStore(session: session, path: path)
    let entries = store.collection(Entry.self)
    try await entries.put((0..<writes).map { entry(records + $0, by: "relief") })
    let (changes, events) = (entries.changes, store.events)
    let start = ContinuousClock.now
    let figures = await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await session.run() }
        group.addTask { try await store.run() }
        await waitFor(changes, count: writes)
        let elapsed = start.duration(to: .now)
        await exchanged(events)
        let traffic = await store.traffic
        group.cancelAll()
        return StationFigures(
            peakMiB: peakResidentKiB() / 1024,
            residentMiB: Bench.residentKiB() / 1024,
            seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            versionBytes: [2, 7].map { traffic.sent[$0]?.bytes ?? 0 }.reduce(0, +),
            signedBytes: traffic.versionBytes,
            metadataBytes: [1, 3].map { traffic.sent[$0]?.bytes ?? 0 }.reduce(0, +),
            roundTrips: traffic.roundTrips
        )
    }
    print(String(decoding: try JSONEncoder().encode(figures), as: UTF8.self))
    exit(0)
}

let directory = FileManager.default.temporaryDirectory.appendingPathComponent("store-bench-\(getpid())")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: directory) }
let (captainIdentity, reliefIdentity) = (PeerIdentity(), PeerIdentity())
let (captainPath, reliefPath) = (
    directory.appendingPathComponent("captain.sqlite").path, directory.appendingPathComponent("relief.sqlite").path
)

func configuration(_ name: String, dialling port: Int?) -> MultipeerSession.Configuration {
    MultipeerSession.Configuration(
        serviceType: "_storebench._tcp",
        peer: PeerInfo(displayName: name),
        psk: groupKey,
        discovery: .staticPeers(port.map { ["127.0.0.1:\($0)"] } ?? [])
    )
}

struct Figures: Codable {
    var phase: String
    var records: Int
    var seconds: Double
    /// The bytes of the messages that carried versions (kinds 2 and 7), both ways.
    var versionBytes: Int
    /// The versions' own bytes, as signed, both ways.
    var signedBytes: Int
    var metadataBytes: Int
    var roundTrips: Int
    var residentMiB: Double
}

var results: [Figures] = []

/// Runs both stations over new sessions until each took `expected` records from the other: the
/// time from their start, and what the stores sent.
func meet(
    _ phase: String,
    before: (SyncStore, SyncStore) async throws -> Void,
    until expected: (captain: Int, relief: Int)
) async throws -> Figures {
    let captainSession = MultipeerSession(
        configuration: configuration("captain", dialling: nil),
        identity: captainIdentity
    )
    let captain = try SyncStore(session: captainSession, path: captainPath)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await captainSession.run() }
        var port: Int?
        for await event in captainSession.events {
            if case .listening(let listening) = event {
                port = listening
                break
            }
        }
        let reliefSession = MultipeerSession(
            configuration: configuration("relief", dialling: port),
            identity: reliefIdentity
        )
        let relief = try SyncStore(session: reliefSession, path: reliefPath)
        try await before(captain, relief)
        let (atCaptain, atRelief) = (captain.collection(Entry.self).changes, relief.collection(Entry.self).changes)
        let (captainEvents, reliefEvents) = (captain.events, relief.events)
        let start = ContinuousClock.now
        group.addTask { try await reliefSession.run() }
        group.addTask { try await captain.run() }
        group.addTask { try await relief.run() }
        async let captainDone: Void = waitFor(atCaptain, count: expected.captain)
        async let reliefDone: Void = waitFor(atRelief, count: expected.relief)
        _ = await (captainDone, reliefDone)
        let elapsed = start.duration(to: .now)
        // (The exchange's end, once the records arrived: so both record what the other holds.)
        async let captainEnded: Void = exchanged(captainEvents)
        async let reliefEnded: Void = exchanged(reliefEvents)
        _ = await (captainEnded, reliefEnded)
        let traffic = [await captain.traffic, await relief.traffic]
        func bytes(_ kinds: [UInt8]) -> Int {
            traffic.map { t in kinds.map { t.sent[$0]?.bytes ?? 0 }.reduce(0, +) }.reduce(0, +)
        }
        group.cancelAll()
        return Figures(
            phase: phase,
            records: records,
            seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            versionBytes: bytes([2, 7]),
            signedBytes: traffic.map(\.versionBytes).reduce(0, +),
            metadataBytes: bytes([1, 3]),
            roundTrips: traffic.map(\.roundTrips).reduce(0, +),
            residentMiB: Bench.residentKiB() / 1024
        )
    }
}

/// Waits for an exchange's completion among `events`.
func exchanged(_ events: AsyncStream<SyncEvent>) async {
    for await event in events {
        if case .exchanged = event { return }
    }
}

/// Waits until `changes` brought `count` records from the peer (those it dropped, its reader
/// behind, counted as they are said).
func waitFor(_ changes: SyncChanges<Entry>, count: Int) async {
    guard count > 0 else { return }
    var (arrived, missed) = (Set<String>(), 0)
    for await change in changes {
        missed += change.missed
        if change.peer != nil { arrived.insert(change.id) }
        if arrived.count + missed >= count { return }
    }
}

// The floor every station meets: checking one version's signature, on one core.
do {
    let identity = PeerIdentity()
    let message = [UInt8](repeating: 7, count: 300)
    let signature = try identity.signature(for: message)
    let start = ContinuousClock.now
    let checks = 2_000
    for _ in 0..<checks { precondition(identity.key.isValidSignature(signature, for: message)) }
    let elapsed = start.duration(to: .now)
    let micros =
        (Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12) / Double(checks)
    print(
        String(
            format: "verify: one Ed25519 signature in %.1f µs on one core: %d versions take %.2f s of %d cores at best",
            micros,
            records,
            micros * Double(records) / 1e6 / Double(ProcessInfo.processInfo.activeProcessorCount),
            ProcessInfo.processInfo.activeProcessorCount
        )
    )
}

// Put: one batch of every record, durable.
if phases.contains("put") {
    let store = try SyncStore(
        session: MultipeerSession(configuration: configuration("captain", dialling: nil), identity: captainIdentity),
        path: captainPath
    )
    let entries = (0..<records).map { entry($0, by: "captain") }
    let start = ContinuousClock.now
    try await store.collection(Entry.self).put(entries)
    let elapsed = start.duration(to: .now)
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    print(
        String(
            format: "put: %d records in one durable batch: %.2f s, %.0f records/s",
            records,
            seconds,
            Double(records) / seconds
        )
    )
    results.append(
        Figures(
            phase: "put",
            records: records,
            seconds: seconds,
            versionBytes: 0,
            signedBytes: 0,
            metadataBytes: 0,
            roundTrips: 0,
            residentMiB: Bench.residentKiB() / 1024
        )
    )
}

// Partition: 16 stations in a simulated world, cut in two for 60 s while each half writes; one
// world per seed (`--seeds 1,2,3`).
if phases.contains("partition") {
    for seed in (Bench.option("--seeds") ?? "1,2,3,4,5").split(separator: ",").compactMap({ UInt64($0) }) {
        let figures = try await partitionPhase(seed: seed)
        print(
            String(
                format:
                    "partition (seed %d): %d stations, %d writes on each side of a %.0f s partition: after the heal, every station holding all %d records in %.2f s, every pair active again in %.2f s (simulated; %.1f s of wall time)",
                seed,
                figures.stations,
                figures.writesPerSide,
                figures.partitionSeconds,
                2 * figures.writesPerSide,
                figures.convergedSeconds,
                figures.rejoinedSeconds,
                figures.wallSeconds
            )
        )
        results.append(
            Figures(
                phase: "partition",
                records: 2 * figures.writesPerSide,
                seconds: figures.convergedSeconds,
                versionBytes: 0,
                signedBytes: 0,
                metadataBytes: 0,
                roundTrips: 0,
                residentMiB: Bench.residentKiB() / 1024
            )
        )
    }
}

// Memory: a station holding every record, in a process of its own, meets the captain.
if phases.contains("memory") {
    let writes = max(1, (differenceCounts.first ?? 2) / 2)
    let stationPath = directory.appendingPathComponent("station.sqlite").path
    do {
        // (The captain's file, closed, copied: the same versions, and no memory of any peer.)
        let captain = try SyncStore(
            session: MultipeerSession(
                configuration: configuration("captain", dialling: nil),
                identity: captainIdentity
            ),
            path: captainPath
        )
        if try await captain.status().versions < records {
            for batch in stride(from: 0, to: records, by: 100_000) {
                try await captain.collection(Entry.self).put(
                    (batch..<min(records, batch + 100_000)).map { entry($0, by: "captain") }
                )
            }
        }
    }
    for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: captainPath + suffix) {
        try FileManager.default.copyItem(atPath: captainPath + suffix, toPath: stationPath + suffix)
    }
    let captainSession = MultipeerSession(
        configuration: configuration("captain", dialling: nil),
        identity: captainIdentity
    )
    let captain = try SyncStore(session: captainSession, path: captainPath)
    try await captain.collection(Entry.self).put((0..<writes).map { entry(records + writes + $0, by: "captain") })
    let (changes, events) = (captain.collection(Entry.self).changes, captain.events)
    let station = try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await captainSession.run() }
        group.addTask { try await captain.run() }
        var port = 0
        for await event in captainSession.events {
            if case .listening(let listening) = event {
                port = listening
                break
            }
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = [
            "--records", "\(records)", "--station", stationPath, "--dial", "\(port)", "--writes", "\(writes)",
        ]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        await waitFor(changes, count: writes)
        await exchanged(events)
        let lines = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        group.cancelAll()
        guard let line = lines.split(separator: "\n").last(where: { $0.hasPrefix("{") }) else {
            fatalError("the station printed no figures: \(lines)")
        }
        return try JSONDecoder().decode(StationFigures.self, from: Data(line.utf8))
    }
    let traffic = await captain.traffic
    let metadata = station.metadataBytes + [1, 3].map { traffic.sent[$0]?.bytes ?? 0 }.reduce(0, +)
    let roundTrips = station.roundTrips + traffic.roundTrips
    print(
        String(
            format:
                "memory: a station holding %d records meets one it never met, %d differences: peak RSS %.1f MiB (%.1f MiB at the end), %.2f s, metadata %d B, %d round trips",
            records,
            2 * writes,
            station.peakMiB,
            station.residentMiB,
            station.seconds,
            metadata,
            roundTrips
        )
    )
    results.append(
        Figures(
            phase: "memory",
            records: records,
            seconds: station.seconds,
            versionBytes: station.versionBytes + [2, 7].map { traffic.sent[$0]?.bytes ?? 0 }.reduce(0, +),
            signedBytes: station.signedBytes + traffic.versionBytes,
            metadataBytes: metadata,
            roundTrips: roundTrips,
            residentMiB: station.peakMiB
        )
    )
}

guard phases.contains("join") else {
    try Bench.writeJSON(results, defaultPath: "bench-results/store.json")
    try? FileManager.default.removeItem(at: directory)  // (exit runs no defer)
    exit(0)
}

// Join: the relief station, fresh, meets the captain's.
let join = try await meet("join", before: { _, _ in }, until: (0, records))
results.append(join)
print(
    String(
        format:
            "join: a fresh station takes %d records: %.2f s, versions %.1f MB (%.1f MB as signed), metadata %d B, %d round trips, RSS %.0f MiB",
        records,
        join.seconds,
        Double(join.versionBytes) / 1e6,
        Double(join.signedBytes) / 1e6,
        join.metadataBytes,
        join.roundTrips,
        join.residentMiB
    )
)

// Differences: written apart, half on each side.
var total = records
for count in differenceCounts where phases.contains("differ") {
    let half = count / 2
    let base = total
    let figures = try await meet(
        "differ \(count)",
        before: { captain, relief in
            try await captain.collection(Entry.self).put((0..<half).map { entry(base + $0, by: "captain") })
            try await relief.collection(Entry.self).put((0..<(count - half)).map { entry(base + $0, by: "relief") })
        },
        until: (count - half, half)
    )
    total += count
    results.append(figures)
    print(
        String(
            format:
                "differ: %d differences among %d records: %.3f s, metadata %d B, versions %d B (%d B as signed; all bytes %.2fx these), %d round trips",
            count,
            base,
            figures.seconds,
            figures.metadataBytes,
            figures.versionBytes,
            figures.signedBytes,
            Double(figures.metadataBytes + figures.versionBytes) / Double(max(figures.signedBytes, 1)),
            figures.roundTrips
        )
    )
}

try Bench.writeJSON(results, defaultPath: "bench-results/store.json")
