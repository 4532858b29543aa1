// Measures our link against a C GnuTLS program with the same priority string and against
// plain TCP, in one run: ping-pong round trips with 1 KiB payloads (on two cores: the C
// program's two threads pinned one per core, ours on NIO's two event-loop threads; and on one
// core, in a child process under taskset) and one-way throughput by message size.
// Prints a table and writes JSON. See Benchmarks/README.md.
import BaselineSupport
import BenchmarkSupport
import Foundation
import MultipeerTLS
import MultipeerTestSupport

/// One of the links under test.
enum Link {
    case ours(OurLink)
    case baseline(String, Baseline)

    var name: String {
        switch self {
        case .ours(let link): link.name
        case .baseline(let name, _): name
        }
    }

    func pingPong(payload: Int, iterations: Int, warmup: Int) async throws -> [Double] {
        switch self {
        case .ours(let link): try await link.pingPong(payload: payload, iterations: iterations, warmup: warmup)
        case .baseline(_, let baseline): try baseline.pingPong(payload: payload, iterations: iterations, warmup: warmup)
        }
    }

    func throughput(payload: Int, count: Int) async throws -> Double {
        switch self {
        case .ours(let link): try await link.throughput(payload: payload, count: count)
        case .baseline(_, let baseline): try baseline.throughput(payload: payload, count: count)
        }
    }
}

let quick = Bench.flag("--quick")
/// This is the child that measures round trips on one core (under taskset).
let pinnedChild = Bench.flag("--pinned-round-trips")

let key = (0..<32).map { UInt8($0) }
let psk = try PreSharedKey(identity: "bench", key: key)
let links: [Link] = [
    .ours(OurLink(psk: psk, preferEventLoop: true)),
    .ours(OurLink(psk: psk, preferEventLoop: false)),
    .baseline("C GnuTLS", Baseline(useTLS: true, key: key, spread: !pinnedChild)),
    .baseline("TCP", Baseline(useTLS: false, key: key, spread: !pinnedChild)),
]

func measureRoundTrips(placement: String) async throws -> [RoundTrip] {
    let iterations = quick ? 2_000 : 20_000
    var results: [RoundTrip] = []
    for link in links {
        if !pinnedChild { print("round trips: \(link.name)") }
        let samples = try await link.pingPong(payload: 1024, iterations: iterations, warmup: 500)
        results.append(RoundTrip(placement: placement, link: link.name, samplesNanoseconds: samples))
    }
    return results
}

/// Runs the round trips again in a child process confined to core 0.
func measurePinnedRoundTrips() async throws -> [RoundTrip] {
    let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    let child = try await runProcess(
        "/usr/bin/taskset",
        ["-c", "0", me, "--pinned-round-trips"] + (quick ? ["--quick"] : []),
        timeout: .seconds(600)
    )
    // Its last line is the results (anything before it came from its standard error).
    guard child.status == 0, let json = child.output.split(separator: "\n").last else {
        throw BenchmarkError("the pinned run failed (status \(child.status)):\n\(child.output)")
    }
    return try JSONDecoder().decode([RoundTrip].self, from: Data(json.utf8))
}

func measureThroughput(sizes: [Int], links: [Link]) async throws -> [Throughput] {
    let repeats = quick ? 1 : 3
    var results: [Throughput] = []
    for size in sizes {
        // Enough messages for a run of about a second, bounded for the smallest sizes.
        let count = max(64, min(quick ? 20_000 : 200_000, (quick ? 64 : 512) * 1024 * 1024 / size))
        for link in links {
            print("throughput: \(link.name), \(size)-byte messages")
            var seconds: [Double] = []
            for _ in 0..<repeats { seconds.append(try await link.throughput(payload: size, count: count)) }
            let rate = Double(count) / Bench.percentile(seconds, 0.5)
            results.append(Throughput(payloadBytes: size, link: link.name, messagesPerSecond: rate))
        }
    }
    return results
}

func machine() -> [String: String] {
    Bench.machine().merging(["gnutls": TLSConfiguration.libraryVersion, "mode": quick ? "quick" : "full"]) { $1 }
}

func format(_ value: Double, _ digits: Int = 1) -> String { String(format: "%.\(digits)f", value) }
func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
}

if pinnedChild {
    FileHandle.standardOutput.write(try JSONEncoder().encode(try await measureRoundTrips(placement: "one core")))
    exit(0)
}
if let size = Bench.option("--throughput-only").flatMap(Int.init) {
    // One size, our links only: for profiling (perf record ... --throughput-only 1024).
    for result in try await measureThroughput(sizes: [size], links: Array(links.prefix(2))) {
        print(
            "\(result.link) \(result.payloadBytes) B: \(format(result.messagesPerSecond, 0)) messages/s, \(format(result.megabytesPerSecond)) MB/s"
        )
    }
    exit(0)
}

if Bench.flag("--handshakes-only") {
    let handshakes = Handshakes(
        samples: try await OurLink(psk: psk, preferEventLoop: true).handshakes(count: quick ? 200 : 1_000, warmup: 50)
    )
    print(
        "Link set-up (TCP, TLS 1.3 ECDHE-PSK, HELLO both ways), \(handshakes.count) in a row: p50 \(format(handshakes.p50Microseconds)) µs, p99 \(format(handshakes.p99Microseconds)) µs"
    )
    exit(0)
}

let roundTrips = try await measureRoundTrips(placement: "two cores") + (try await measurePinnedRoundTrips())
print("link set-up")
let handshakes = Handshakes(
    samples: try await OurLink(psk: psk, preferEventLoop: true).handshakes(count: quick ? 200 : 1_000, warmup: 50)
)
let throughput = try await measureThroughput(sizes: [128, 1024, 4096, 9 * 1024, 64 * 1024, 1024 * 1024], links: links)
let report = LinkResults(machine: machine(), roundTrips: roundTrips, throughput: throughput, handshakes: handshakes)

print(
    "Machine: \(report.machine["cpu"]!), \(report.machine["cores"]!) cores, \(report.machine["kernel"]!), GnuTLS \(report.machine["gnutls"]!)"
)
print("'ours': link tasks on the channel's event loop; 'ours/pool': on Swift's global pool.")
print("\nRound trip, 1 KiB payload (µs)")
print(pad("placement", 18) + pad("link", 11) + pad("p50", 9) + pad("p99", 9) + "ours p50 / this p50")
for trip in roundTrips {
    let ourP50 = roundTrips.first { $0.placement == trip.placement && $0.link == "ours" }!.p50Microseconds
    print(
        pad(trip.placement, 18) + pad(trip.link, 11) + pad(format(trip.p50Microseconds), 9)
            + pad(format(trip.p99Microseconds), 9)
            + (trip.link == "ours" ? "" : format(ourP50 / trip.p50Microseconds, 2) + "x")
    )
}
print(
    "\nLink set-up (TCP, TLS 1.3 ECDHE-PSK, HELLO both ways), \(handshakes.count) in a row: p50 \(format(handshakes.p50Microseconds)) µs, p99 \(format(handshakes.p99Microseconds)) µs"
)
print("\nOne-way throughput, one write per message (median of \(quick ? 1 : 3) runs)")
print(pad("payload", 10) + pad("link", 11) + pad("messages/s", 13) + pad("MB/s", 10) + "ours / this")
for result in throughput {
    let ours = throughput.first { $0.payloadBytes == result.payloadBytes && $0.link == "ours" }!.messagesPerSecond
    print(
        pad("\(result.payloadBytes)", 10) + pad(result.link, 11) + pad(format(result.messagesPerSecond, 0), 13)
            + pad(format(result.megabytesPerSecond), 10)
            + (result.link == "ours" ? "" : format(ours / result.messagesPerSecond, 2))
    )
}

print()
try Bench.writeJSON(report, defaultPath: "bench-results/link.json")
