// Measures how long N sessions in one process take to reach a full mesh from a cold start
// (every session sees N-1 active peers), and the memory that costs: RSS growth divided by
// link endpoints (two per link, both in this process). Real avahi-daemon and GnuTLS: run it in
// the discovery sandbox, through `make bench` or `scripts/sandbox.sh .build/release/MeshBenchmark`.
import BenchmarkSupport
import Foundation
import Glibc
import Logging
import MultipeerCore
import MultipeerSession
import MultipeerTLS

struct MeshResult: Codable {
    var sessions: Int
    var links: Int
    var secondsToFullMesh: Double
    var rssGrowthKiB: Double
    var kibPerLinkEndpoint: Double
}

let sizes = Bench.option("--sizes").map { $0.split(separator: ",").compactMap { Int($0) } } ?? [2, 8, 16, 32]

guard ProcessInfo.processInfo.environment["MULTIPEER_SANDBOX"] == "1" else {
    print("MeshBenchmark needs a discovery sandbox of its own: run it through 'make bench' or scripts/sandbox.sh")
    exit(2)
}


func measure(sessions count: Int, psk: PreSharedKey) async throws -> MeshResult {
    let serviceType = "_mpm\(String(UInt32.random(in: 0...UInt32.max), radix: 16))._tcp"
    let before = Bench.residentKiB()
    var logger = Logger(label: "mesh")
    logger.logLevel = .warning
    let sessions = (0..<count).map {
        MultipeerSession(configuration: .init(
            serviceType: serviceType, peer: PeerInfo(displayName: "station \($0)"), psk: psk, logger: logger))
    }
    let streams = sessions.map(\.events)
    let clock = ContinuousClock()
    let start = clock.now
    return try await withThrowingTaskGroup(of: Void.self) { group in
        for session in sessions { group.addTask { try await session.run() } }
        for stream in streams {
            var active = 0
            for await event in stream {
                if case .peerJoined = event { active += 1 }
                if case .peerLeft = event { active -= 1 }
                if active == count - 1 { break }
            }
        }
        let elapsed = clock.now - start
        let growth = Bench.residentKiB() - before
        group.cancelAll()
        try await group.waitForAll()
        let endpoints = count * (count - 1)
        return MeshResult(
            sessions: count, links: endpoints / 2,
            secondsToFullMesh: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            rssGrowthKiB: growth, kibPerLinkEndpoint: growth / Double(endpoints))
    }
}

let psk = try PreSharedKey.generate(identity: "mesh")
// A warm-up mesh of two: the process's first connection to avahi-daemon and first TLS
// handshakes are paid here, not by the first measured size.
_ = try await measure(sessions: 2, psk: psk)
var results: [MeshResult] = []
for size in sizes {
    results.append(try await measure(sessions: size, psk: psk))
}

print("Full mesh from a cold start, sessions in one process (real avahi-daemon and GnuTLS)")
print("sessions  links  seconds to full mesh  RSS growth (KiB)  KiB per link endpoint")
for result in results {
    print(String(format: "%-10d%-7d%-22.2f%-18.0f%.1f", result.sessions, result.links, result.secondsToFullMesh,
                 result.rssGrowthKiB, result.kibPerLinkEndpoint))
}
try Bench.writeJSON(results, defaultPath: "bench-results/mesh.json")
