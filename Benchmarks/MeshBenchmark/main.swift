// Scale: N sessions in one process reaching a full mesh from a cold start over real
// avahi-daemon and GnuTLS, then holding it idle (pings at the defaults) while we watch the CPU,
// the ping round trips and any link torn down although nothing failed. Then one hub session
// with many idle peer links (static peers, no mDNS). Memory is RSS growth over link endpoints
// (two per link, both in this process). Run it in the discovery sandbox, through `make bench`
// or `scripts/sandbox.sh .build/release/MeshBenchmark`.
//
//   MeshBenchmark [--sizes 2,8,16,32,64] [--hold SECONDS] [--hub PEERS] [--json PATH]
import BenchmarkSupport
import Foundation
import Glibc
import Logging
import MultipeerCore
import MultipeerSession
import MultipeerTLS
import Synchronization

let sizes = Bench.option("--sizes").map { $0.split(separator: ",").compactMap { Int($0) } } ?? [2, 8, 16, 32, 64]
let hold = Duration.seconds(Int(Bench.option("--hold") ?? "60") ?? 60)
/// How long a mesh may take to form before the benchmark gives up and says which sessions are short.
let meshDeadline = Duration.seconds(Int(Bench.option("--mesh-deadline") ?? "120") ?? 120)

struct BenchmarkFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
let hubPeers = Int(Bench.option("--hub") ?? "500") ?? 500
/// For analysis only: another keepalive than the defaults (`--keepalive 750,1500`, milliseconds).
let keepalive =
    Bench.option("--keepalive").map { option -> KeepaliveParameters in
        let parts = option.split(separator: ",").compactMap { Int64($0) }
        return KeepaliveParameters(interval: .milliseconds(parts[0]), timeout: .milliseconds(parts[1]))
    } ?? KeepaliveParameters()

guard ProcessInfo.processInfo.environment["MULTIPEER_SANDBOX"] == "1" else {
    print("MeshBenchmark needs a discovery sandbox of its own: run it through 'make bench' or scripts/sandbox.sh")
    exit(2)
}

let logger = {
    var logger = Logger(label: "mesh")
    logger.logLevel = .warning
    return logger
}()

/// PINGs sent so far on every active link of these sessions.
func pingsSent(_ sessions: [MultipeerSession]) async -> Int {
    var total = 0
    for session in sessions {
        for peer in session.activePeers { total += await session.linkStats(for: peer.id)?.quality.pingsSent ?? 0 }
    }
    return total
}

/// Whether the idle hold is on, and how many peers left during it.
final class HoldState: Sendable {
    let holding = Atomic<Bool>(false)
    let departures = Atomic<Int>(0)
}

/// Runs `sessions` until every one has `expected(index)` active peers, holds them idle, and
/// measures. The event streams are drained all along, so a peer leaving is seen.
func measure(
    _ topology: String,
    _ sessions: [MultipeerSession],
    expected: @escaping @Sendable (Int) -> Int,
    hold holdFor: Duration
) async throws -> MeshResult {
    // Memory freed by the previous topology stays with malloc and would be reused unseen:
    // hand it back first, so the growth is this topology's.
    Bench.returnFreedMemory()
    let before = Bench.residentKiB()
    let clock = ContinuousClock()
    let start = clock.now
    // true: a session sees all its peers; false: the deadline for all of them passed.
    let meshed = AsyncStream<Bool>.makeStream()
    let hold = HoldState()
    return try await withThrowingTaskGroup(of: Void.self) { group in
        for (index, session) in sessions.enumerated() {
            let events = session.events
            group.addTask { try await session.run() }
            group.addTask {
                var active = 0
                var reported = false
                for await event in events {
                    switch event {
                    case .peerJoined: active += 1
                    case .peerLeft:
                        active -= 1
                        if hold.holding.load(ordering: .relaxed) { hold.departures.add(1, ordering: .relaxed) }
                    default: break
                    }
                    if active == expected(index), !reported {
                        reported = true
                        meshed.continuation.yield(true)
                    }
                }
            }
        }
        group.addTask {
            try? await Task.sleep(for: meshDeadline)
            if !Task.isCancelled { meshed.continuation.yield(false) }
        }
        var ready = 0
        for await inTime in meshed.stream {
            guard inTime else {
                var short: [String] = []
                for (index, session) in sessions.enumerated() {
                    let active = session.activePeers.count
                    if active < expected(index) {
                        short.append("session \(index) sees \(active) of \(expected(index))")
                    }
                }
                group.cancelAll()
                throw BenchmarkFailure(
                    "\(topology): not every session saw all its peers within \(meshDeadline): \(short.joined(separator: "; "))"
                )
            }
            ready += 1
            if ready == sessions.count { break }
        }
        let elapsed = clock.now - start
        let growth = Bench.residentKiB() - before
        hold.holding.store(true, ordering: .relaxed)
        let pingsBefore = await pingsSent(sessions)
        let cpuBefore = Bench.cpuSeconds()
        try await Task.sleep(for: holdFor)
        let cpu = Bench.cpuSeconds() - cpuBefore
        let pings = await pingsSent(sessions) - pingsBefore
        hold.holding.store(false, ordering: .relaxed)
        var p99s: [Double] = []
        for session in sessions {
            for peer in session.activePeers {
                if let p99 = await session.linkStats(for: peer.id)?.quality.p99RTT { p99s.append(p99.seconds * 1000) }
            }
        }
        let endpoints = (0..<sessions.count).map(expected).reduce(0, +)
        group.cancelAll()
        try await group.waitForAll()
        return MeshResult(
            topology: topology,
            sessions: sessions.count,
            links: endpoints / 2,
            secondsToFullMesh: elapsed.seconds,
            rssGrowthKiB: growth,
            kibPerLinkEndpoint: growth / Double(endpoints),
            idleCPUPercent: holdFor == .zero ? 0 : cpu / holdFor.seconds * 100,
            holdSeconds: holdFor.seconds,
            medianLinkP99RTTMilliseconds: p99s.isEmpty ? 0 : Bench.percentile(p99s, 0.5),
            worstLinkP99RTTMilliseconds: p99s.max() ?? 0,
            falseTeardowns: hold.departures.load(ordering: .relaxed),
            pingsPerLinkPerSecond: holdFor == .zero ? 0 : Double(pings) / Double(endpoints / 2) / holdFor.seconds
        )
    }
}

func mesh(_ count: Int, psk: PreSharedKey, hold: Duration) async throws -> MeshResult {
    let serviceType = "_mpm\(String(UInt32.random(in: 0...UInt32.max), radix: 16))._tcp"
    let sessions = (0..<count).map {
        MultipeerSession(
            configuration: .init(
                serviceType: serviceType,
                peer: PeerInfo(displayName: "station \($0)"),
                psk: psk,
                keepalive: keepalive,
                logger: logger
            ),
            identity: PeerIdentity()
        )
    }
    return try await measure("full mesh", sessions, expected: { _ in count - 1 }, hold: hold)
}

/// One hub on a fixed port and `peers` sessions that list only the hub (no mDNS).
func hub(_ peers: Int, psk: PreSharedKey, hold: Duration) async throws -> MeshResult {
    let port = Int.random(in: 20_000...40_000)
    let hub = MultipeerSession(
        configuration: .init(
            serviceType: "_mph._tcp",
            peer: PeerInfo(displayName: "hub"),
            psk: psk,
            port: port,
            discovery: .staticPeers([]),
            keepalive: keepalive,
            logger: logger
        ),
        identity: PeerIdentity()
    )
    let spokes = (0..<peers).map {
        MultipeerSession(
            configuration: .init(
                serviceType: "_mph._tcp",
                peer: PeerInfo(displayName: "spoke \($0)"),
                psk: psk,
                discovery: .staticPeers(["127.0.0.1:\(port)"]),
                keepalive: keepalive,
                logger: logger
            ),
            identity: PeerIdentity()
        )
    }
    return try await measure("hub", [hub] + spokes, expected: { $0 == 0 ? peers : 1 }, hold: hold)
}

let psk = try PreSharedKey.generate(identity: "mesh")
// A warm-up mesh of two: the process's first connection to avahi-daemon and first TLS
// handshakes are paid here, not by the first measured size.
var results: [MeshResult] = []
do {
    _ = try await mesh(2, psk: psk, hold: .zero)
    for size in sizes {
        results.append(try await mesh(size, psk: psk, hold: hold))
        print("mesh of \(size) measured")
    }
    if hubPeers > 0 {
        results.append(try await hub(hubPeers, psk: psk, hold: hold))
    }
} catch let failure as BenchmarkFailure {
    FileHandle.standardError.write(Data("MeshBenchmark: \(failure)\n".utf8))
    exit(1)
}

print(
    "Scale, sessions in one process (real avahi-daemon and GnuTLS; the hub's peers use static addresses), held idle \(hold)"
)
func cell(_ text: String, _ width: Int) -> String {
    text.padding(toLength: max(width, text.count + 1), withPad: " ", startingAt: 0)
}
print(
    [
        "topology", "sessions", "links", "s to mesh", "RSS growth KiB", "KiB/endpoint", "idle CPU %", "pings/link/s",
        "link p99 RTT ms (median/worst)", "false teardowns",
    ].map { cell($0, 10) }.joined()
)
for result in results {
    let row = [
        result.topology, "\(result.sessions)", "\(result.links)", String(format: "%.2f", result.secondsToFullMesh),
        String(format: "%.0f", result.rssGrowthKiB), String(format: "%.1f", result.kibPerLinkEndpoint),
        String(format: "%.1f", result.idleCPUPercent), String(format: "%.2f", result.pingsPerLinkPerSecond),
        String(format: "%.2f / %.2f", result.medianLinkP99RTTMilliseconds, result.worstLinkP99RTTMilliseconds),
        "\(result.falseTeardowns)",
    ]
    print(row.map { cell($0, 10) }.joined())
}
try Bench.writeJSON(results, defaultPath: "bench-results/mesh.json")
