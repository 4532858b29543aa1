// What authorship costs navlog-sync: signing a version, checking one a peer sent (NavlogIntake,
// where a version's signature is verified), and a fresh host joining one that holds 10,000
// signed entries over loopback (TLS, the session, SQLite), until both report the exchange done.
//
//   .build/release/NavlogBenchmark [--entries N]
import BenchmarkSupport
import Foundation
import MultipeerSession
import NavlogSync

let count = Bench.option("--entries").flatMap(Int.init) ?? 10_000
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("navlog-bench-\(UUID())").path
try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: directory) }

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

let holder = try NavlogStore(path: directory + "/holder.db")
let identity = holder.identity!
let now = UInt64(Date().timeIntervalSince1970 * 1000)
let unsigned = (0..<count).map { number in
    NavlogEntry(id: UUID(), fields: NavlogFields(leg: 1 + number % 40, waypoint: "WP\(number)", fuel: 10_000 - number % 5_000, remarks: "entry \(number)"),
                author: "captain", origin: identity.peerID, timestamp: HLCTimestamp(milliseconds: now - 60_000, counter: UInt16(number % 60_000)))
}
var start = ContinuousClock.now
let signed = try unsigned.map { try $0.signed(by: identity) }
let signing = seconds(ContinuousClock.now - start)

start = ContinuousClock.now
for entry in signed { try entry.verify() }
let verifying = seconds(ContinuousClock.now - start)

var clock = HybridLogicalClock()
start = ContinuousClock.now
let intake = NavlogIntake(signed, clock: &clock, now: now)
let checking = seconds(ContinuousClock.now - start)
precondition(intake.accepted.count == count, "every version verifies")

_ = try holder.merge(signed)
let psk = try PreSharedKey(identity: "bench", key: (0..<32).map { UInt8($0) })
func configuration(_ name: String, peers: [String]) -> MultipeerSession.Configuration {
    .init(serviceType: "_navlog._tcp", peer: PeerInfo(displayName: name), psk: psk, discovery: .staticPeers(peers), statsInterval: nil)
}
let first = try NavlogNode(store: holder, configuration: configuration("holder", peers: []))
let firstEvents = first.events
let joinTime: Double = try await withThrowingTaskGroup(of: Void.self) { group in
    group.addTask { try await first.run() }
    var port = 0
    for await event in firstEvents { if case .listening(let listening) = event { port = listening; break } }
    let joiner = try NavlogNode(store: try NavlogStore(path: directory + "/joiner.db"), configuration: configuration("joiner", peers: ["127.0.0.1:\(port)"]))
    let joinerEvents = joiner.events
    let started = ContinuousClock.now
    group.addTask { try await joiner.run() }
    for await event in joinerEvents {
        if case .synced(_, _, let received) = event {
            precondition(received == count, "the joiner received every entry")
            break
        }
    }
    let elapsed = seconds(ContinuousClock.now - started)
    group.cancelAll()
    return elapsed
}

print("navlog-sync, \(count) signed entries (\(Bench.machine()["cpu"] ?? "?"), release build):")
print(String(format: "  signing a version:            %6.1f µs each", signing / Double(count) * 1e6))
print(String(format: "  verifying its signature:      %6.1f µs each", verifying / Double(count) * 1e6))
print(String(format: "  checking a received version:  %6.1f µs each (signature, key, fields, clock)", checking / Double(count) * 1e6))
print(String(format: "  a fresh host joins and syncs:  %6.2f s (TLS, HELLO, digest, %d entries checked and stored)", joinTime, count))
