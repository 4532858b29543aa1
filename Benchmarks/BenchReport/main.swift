// Reads what the benchmarks wrote to bench-results/ and writes one report: report.json (every
// figure, its baseline and the ratio, the targets, the machine, the raw results) and report.md
// with SVG charts in bench-results/charts/. `make bench` runs it last; run alone it reports
// whatever results are there. With --compare, it compares two reports instead.
//
//   BenchReport [--results DIR]
//   BenchReport --compare OLD/report.json NEW/report.json
import BenchmarkSupport
import Foundation
import MultipeerTestSupport

if let old = Bench.option("--compare") {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: old), index + 1 < arguments.count else {
        print("usage: BenchReport --compare OLD/report.json NEW/report.json")
        exit(64)
    }
    try compareReports(old, arguments[index + 1])
    exit(0)
}

let directory = URL(fileURLWithPath: Bench.option("--results") ?? "bench-results")

func load<T: Decodable>(_ name: String, as type: T.Type) -> T? {
    guard let data = try? Data(contentsOf: directory.appendingPathComponent(name)) else { return nil }
    do {
        return try JSONDecoder().decode(T.self, from: data)
    } catch {
        print(
            "\(name) left out: it does not read as this version's results (from an older benchmark?); run make bench again"
        )
        return nil
    }
}

let link = load("link.json", as: LinkResults.self)
let detection = load("detection.json", as: [DetectionFigures].self)
let detectionNetwork = load("detection-network.json", as: [DetectionFigures].self)
let delivery = load("delivery.json", as: [Goodput].self)
let discovery = load("discovery.json", as: [DiscoverySummary].self)
let mesh = load("mesh.json", as: [MeshResult].self)
let session = load("session.json", as: SessionResults.self)
let sessionLocks = load("session-locks.json", as: LockCounts.self)
let sessionMixed = load("session-mixed.json", as: MixedResults.self)
let navlog = load("navlog.json", as: [NavlogSyncCase].self)
/// The host suite's lossy-link scenario, run several times (navlog-hosts --only "loss and delay").
struct HostsReport: Codable {
    struct Result: Codable {
        var scenario: String
        var teardownsPerMinute: Double?
        var detectionMilliseconds: Double?
        var passed: Bool
    }
    var results: [Result]
}
let lossyLink = load("hosts-loss/report.json", as: HostsReport.self)?.results.filter { $0.scenario == "loss and delay" }
/// How long each part of the run took, seconds (written by Benchmarks/run-all.sh).
let durations: [String: Double] = load("durations.json", as: [String: Double].self) ?? [:]

// MARK: The machine and the commit

/// The output of a command found on PATH, or nil if it failed.
func run(_ command: String, _ arguments: [String]) async -> String? {
    guard let result = try? await runProcess("/usr/bin/env", [command] + arguments), result.status == 0 else {
        return nil
    }
    return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
}

func firstLine(_ text: String?) -> String { text?.split(separator: "\n").first.map(String.init) ?? "unknown" }

let gnutls =
    if let version = link?.machine["gnutls"] { version } else {
        firstLine(await run("pkg-config", ["--modversion", "gnutls"]))
    }
let machine = Bench.machine().merging([
    "gnutls": gnutls,
    "avahi": firstLine(await run("avahi-daemon", ["--version"])),
    "swift": firstLine(await run("swift", ["--version"])),
]) { $1 }

let commit: String = await {
    guard let head = await run("git", ["rev-parse", "--short", "HEAD"]) else { return "unknown" }
    let dirty = !(await run("git", ["status", "--porcelain", "--untracked-files=no"]) ?? "").isEmpty
    return dirty ? "\(head) with local changes" : head
}()

// MARK: Figures beside their baselines

/// One figure of ours beside a baseline measured in the same run. `lowerIsBetter` says which
/// way the ratio reads.
struct Comparison: Codable {
    var area: String
    var figure: String
    var unit: String
    var ours: Double
    var baseline: String
    /// Nil when the baseline did not register the event at all (e.g. a kernel that never noticed).
    var baselineValue: Double?
    /// ours / baseline.
    var ratio: Double?
    var lowerIsBetter: Bool
}

struct Target: Codable {
    var target: String
    var measured: String
    /// Nil when the benchmark that measures it did not run.
    var met: Bool?
}

var comparisons: [Comparison] = []
@MainActor func compare(
    _ area: String,
    _ figure: String,
    _ unit: String,
    ours: Double,
    _ baseline: String,
    _ value: Double?,
    lowerIsBetter: Bool
) {
    comparisons.append(
        Comparison(
            area: area,
            figure: figure,
            unit: unit,
            ours: ours,
            baseline: baseline,
            baselineValue: value,
            ratio: value.map { ours / $0 },
            lowerIsBetter: lowerIsBetter
        )
    )
}

let baselineLinks = ["C GnuTLS", "TCP"]
if let link {
    for placement in ["two cores", "one core"] {
        guard let ours = link.roundTrips.first(where: { $0.placement == placement && $0.link == "ours" }) else {
            continue
        }
        for name in baselineLinks {
            let other = link.roundTrips.first { $0.placement == placement && $0.link == name }
            compare(
                "link",
                "round trip p50, 1 KiB, \(placement)",
                "µs",
                ours: ours.p50Microseconds,
                name,
                other?.p50Microseconds,
                lowerIsBetter: true
            )
            compare(
                "link",
                "round trip p99, 1 KiB, \(placement)",
                "µs",
                ours: ours.p99Microseconds,
                name,
                other?.p99Microseconds,
                lowerIsBetter: true
            )
        }
    }
    for size in Set(link.throughput.map(\.payloadBytes)).sorted() {
        guard let ours = link.throughput.first(where: { $0.payloadBytes == size && $0.link == "ours" }) else {
            continue
        }
        for name in baselineLinks {
            let other = link.throughput.first { $0.payloadBytes == size && $0.link == name }
            compare(
                "link",
                "throughput, \(sizeName(size)) messages",
                "MB/s",
                ours: ours.megabytesPerSecond,
                name,
                other?.megabytesPerSecond,
                lowerIsBetter: false
            )
        }
    }
}
if let detectionNetwork {
    for fault in ["network black hole", "SIGSTOP"] {
        // Ours in the network for the black hole; a frozen peer process from the local run (a
        // first fault on a peer: the kernel baselines are fresh connections too).
        let ours =
            fault == "SIGSTOP"
            ? detection?.first { $0.fault == "SIGSTOP, first fault" }
            : detectionNetwork.first { $0.fault == "\(fault), first fault" && $0.mechanism == "ours" }
        guard let ours, let p50 = ours.detectionP50Milliseconds else { continue }
        for baseline in detectionNetwork where baseline.fault == fault && baseline.mechanism != "ours" {
            compare(
                "detection",
                "\(fault), detection p50",
                "ms",
                ours: p50,
                baseline.mechanism,
                baseline.detectionP50Milliseconds,
                lowerIsBetter: true
            )
        }
    }
}
if let discovery {
    for placement in discovery {
        compare(
            "discovery",
            "running peer found p50, \(placement.placement)",
            "ms",
            ours: placement.runningFoundP50,
            "avahi-browse --resolve",
            placement.avahiBrowseP50,
            lowerIsBetter: true
        )
        compare(
            "discovery",
            "running peer found p95, \(placement.placement)",
            "ms",
            ours: placement.runningFoundP95,
            "avahi-browse --resolve",
            placement.avahiBrowseP95,
            lowerIsBetter: true
        )
    }
}

func sizeName(_ bytes: Int) -> String {
    bytes >= 1 << 20 ? "\(bytes >> 20) MiB" : bytes >= 1024 ? "\(bytes / 1024) KiB" : "\(bytes) B"
}

// MARK: Targets

func number(_ value: Double, _ digits: Int = 1) -> String { String(format: "%.\(digits)f", value) }

var targets: [Target] = []
@MainActor func target(_ text: String, _ measured: (String, Bool)?) {
    targets.append(Target(target: text, measured: measured?.0 ?? "not measured in this run", met: measured?.1))
}

let onTwoCores = { (name: String) in link?.roundTrips.first { $0.placement == "two cores" && $0.link == name } }
let onOneCore = { (name: String) in link?.roundTrips.first { $0.placement == "one core" && $0.link == name } }
let throughputOf = { (name: String, size: Int) in link?.throughput.first { $0.payloadBytes == size && $0.link == name }
}
for (placement, trip) in [("two cores", onTwoCores), ("one core", onOneCore)] {
    target(
        "Round trip p50 <= 3x the C GnuTLS baseline (\(placement))",
        trip("ours").flatMap { ours in
            trip("C GnuTLS").map { c in
                let ratio = ours.p50Microseconds / c.p50Microseconds
                return (
                    "\(number(ours.p50Microseconds)) µs vs \(number(c.p50Microseconds)) µs: \(number(ratio, 2))x",
                    ratio <= 3
                )
            }
        }
    )
}
target(
    "1 KiB messages/s >= 50 % of the C GnuTLS baseline",
    throughputOf("ours", 1024).flatMap { ours in
        throughputOf("C GnuTLS", 1024).map { c in
            let ratio = ours.messagesPerSecond / c.messagesPerSecond
            return (
                "\(number(ours.messagesPerSecond, 0)) vs \(number(c.messagesPerSecond, 0)) msg/s: \(number(ratio * 100, 0)) %",
                ratio >= 0.5
            )
        }
    }
)
target(
    "1 MiB payloads >= 300 MB/s",
    throughputOf("ours", 1 << 20).map { ("\(number($0.megabytesPerSecond, 0)) MB/s", $0.megabytesPerSecond >= 300) }
)
let silent =
    (detection ?? []).filter { $0.fault.hasPrefix("black hole (proxy)") || $0.fault.hasPrefix("SIGSTOP") }
    + (detectionNetwork ?? []).filter { $0.mechanism == "ours" }
for (mode, suffix) in [
    ("first fault on a peer", ", first fault"), ("repeated faults on one peer", ", repeated on one peer"),
] {
    let measured = silent.filter { $0.fault.hasSuffix(suffix) }
    target(
        "Silent-link detection p99 <= 2.0 s at defaults, \(mode)",
        measured.isEmpty
            ? nil
            : {
                let worst = measured.max {
                    ($0.detectionP99Milliseconds ?? .infinity) < ($1.detectionP99Milliseconds ?? .infinity)
                }!
                let p99 = worst.detectionP99Milliseconds ?? .infinity
                return ("worst p99 \(number(p99, 0)) ms (\(worst.fault))", p99 <= 2000)
            }()
    )
}
// (peer_left lines at all hosts: a link torn down is reported at both its ends.)
target(
    "Lossy link (30 % loss, 100 ± 50 ms): <= 1 teardown a minute over its runs",
    lossyLink.flatMap { runs in
        let rates = runs.compactMap(\.teardownsPerMinute)
        guard !rates.isEmpty else { return nil }
        let mean = rates.reduce(0, +) / Double(rates.count)
        // Beside it, what the patience costs: the black hole each run ends with, on that lossy link.
        let detections = runs.compactMap(\.detectionMilliseconds).sorted()
        let detected =
            detections.isEmpty
            ? ""
            : "; then black-holed, detected in \(number(detections[detections.count / 2], 0)) ms median (\(number(detections[0], 0))-\(number(detections[detections.count - 1], 0)))"
        return (
            "\(number(mean, 2)) a minute over \(rates.count) runs (\(rates.map { number($0) }.joined(separator: ", ")))"
                + detected, mean <= 1
        )
    }
)
let redials = ((detection ?? []) + (detectionNetwork ?? [])).filter {
    $0.mechanism == "ours" && !$0.fault.hasPrefix("SIGKILL")
}
target(
    "Redial p50 <= 300 ms",
    redials.isEmpty
        ? nil
        : {
            let worst = redials.max { ($0.rejoinP50Milliseconds ?? 0) < ($1.rejoinP50Milliseconds ?? 0) }!
            let p50 = worst.rejoinP50Milliseconds ?? .infinity
            return ("worst p50 \(number(p50, 0)) ms (\(worst.fault))", p50 <= 300)
        }()
)
target(
    "A running peer discovered p95 <= 250 ms",
    discovery.flatMap { summaries in summaries.max { $0.runningFoundP95 < $1.runningFoundP95 } }.map {
        (
            "worst p95 \(number($0.runningFoundP95)) ms (\($0.placement); avahi-browse \(number($0.avahiBrowseP95)) ms)",
            $0.runningFoundP95 <= 250
        )
    }
)
let mesh32 = mesh?.first { $0.topology == "full mesh" && $0.sessions == 32 }
target(
    "32-session mesh complete <= 10 s",
    mesh32.map { ("\(number($0.secondsToFullMesh, 2)) s", $0.secondsToFullMesh <= 10) }
)
target(
    "32-session mesh idle CPU <= 5 % of one core",
    mesh32.map { ("\(number($0.idleCPUPercent)) %", $0.idleCPUPercent <= 5) }
)
target(
    "32-session mesh <= 64 KiB RSS per link endpoint",
    mesh32.map { ("\(number($0.kibPerLinkEndpoint)) KiB", $0.kibPerLinkEndpoint <= 64) }
)
target(
    "Zero false teardowns (every mesh size and the hub)",
    mesh.map { results in
        let total = results.reduce(0) { $0 + $1.falseTeardowns }
        return (
            "\(total) over \(results.count) topologies held \(number(results.map(\.holdSeconds).max() ?? 0, 0)) s",
            total == 0
        )
    }
)

/// The fastest reliable case of a size (over encodings and fields), as a share of the C baseline.
func apiShare(_ size: Int) -> (String, Bool)? {
    guard
        let best = session?.cases.filter({ $0.delivery == "reliable" && $0.payloadBytes == size }).max(by: {
            $0.messagesPerSecond < $1.messagesPerSecond
        }),
        let share = best.ofBaseline
    else { return nil }
    let c = best.messagesPerSecond / share
    return (
        "\(number(best.messagesPerSecond, 0)) vs \(number(c, 0)) msg/s (\(best.encoding), \(best.field)): \(number(share * 100, 1)) %",
        share >= (size <= 128 ? 0.4 : 0.5)
    )
}
target("API: reliable 1 KiB messages/s >= 50 % of the C GnuTLS baseline", apiShare(1024))
target("API: reliable 128 B messages/s >= 40 % of the C GnuTLS baseline", apiShare(128))
/// The same share from runs that alternate with the C program's (binary, a Data field): the
/// median of the pairs' shares, with the lowest and highest.
func pairedShare(_ size: Int) -> (String, Bool)? {
    guard let paired = session?.pairedShares?.first(where: { $0.payloadBytes == size }) else { return nil }
    let share = paired.share
    return (
        "\(number(share.median * 100, 1)) % (\(number(share.low * 100, 1))-\(number(share.high * 100, 1)) % over \(paired.api.count) pairs; binary, Data)",
        share.median >= (size <= 128 ? 0.4 : 0.5)
    )
}
target("API: reliable 1 KiB messages/s >= 50 % of the C GnuTLS baseline, median of paired runs", pairedShare(1024))
target("API: reliable 128 B messages/s >= 40 % of the C GnuTLS baseline, median of paired runs", pairedShare(128))
/// The API's share of our bare link's messages/s in the same turns: what the session costs.
func ofLink(_ size: Int) -> (String, Bool)? {
    guard let paired = session?.pairedShares?.first(where: { $0.payloadBytes == size }), let share = paired.ofLink,
        let link = paired.link
    else { return nil }
    return (
        "\(number(share.median * 100, 1)) % (\(number(share.low * 100, 1))-\(number(share.high * 100, 1)) % over \(link.count) pairs; link median \(number(spread(link).median, 0)) msg/s)",
        share.median >= 0.75
    )
}
target("API: reliable 1 KiB messages/s >= 75 % of our own link's, median of paired runs", ofLink(1024))
/// A median ratio of paired runs with its spread: "1.23x (1.10-1.40x over 5 pairs".
func ratioText(_ ratio: (median: Double, low: Double, high: Double), pairs: Int) -> String {
    "\(number(ratio.median, 2))x (\(number(ratio.low, 2))-\(number(ratio.high, 2))x over \(pairs) pairs"
}
/// Ours over gRPC Swift 2's messages/s in the same turns (Benchmarks/GRPCBaseline): the median
/// of the pairs' ratios, with the lowest and highest.
func ofGRPC(_ size: Int) -> (String, Bool)? {
    guard let paired = session?.pairedShares?.first(where: { $0.payloadBytes == size }), let ratio = paired.ofGRPC,
        let grpc = paired.grpc
    else { return nil }
    return (
        "\(ratioText(ratio, pairs: grpc.count)); gRPC median \(number(spread(grpc).median, 0)) msg/s)",
        ratio.median >= 1.5
    )
}
target("API: reliable 1 KiB messages/s >= 1.5x gRPC Swift 2's over TLS, median of paired runs", ofGRPC(1024))
target("API: reliable 128 B messages/s >= 1.5x gRPC Swift 2's over TLS, median of paired runs", ofGRPC(128))
target("API: reliable 64 KiB messages/s >= 1.5x gRPC Swift 2's over TLS, median of paired runs", ofGRPC(65536))
let largeCases =
    session?.cases.filter {
        $0.delivery == "reliable" && $0.encoding == "binary" && $0.field == "Data" && $0.payloadBytes >= 1 << 20
    } ?? []
target(
    "API: 1 MiB and 64 MiB messages (Data field) >= 1 GB/s",
    largeCases.isEmpty
        ? nil
        : (
            largeCases.map { "\($0.payloadBytes >> 20) MiB: \(number($0.payloadMegabytesPerSecond, 0)) MB/s" }.joined(
                separator: ", "
            ),
            largeCases.allSatisfy { $0.payloadMegabytesPerSecond >= 1000 }
        )
)
target(
    "API: round trip p50 of a 1 KiB message (the peer's application replying) <= 1.5x the C GnuTLS ping-pong, median of paired runs",
    session?.roundTrip.map {
        let ratio = $0.ratio
        return (
            "\(ratioText(ratio, pairs: $0.pairs.count)); ours p50 \(number($0.pairs.map(\.apiP50Microseconds).sorted()[$0.pairs.count / 2], 1)) µs)",
            ratio.median <= 1.5
        )
    }
)
target(
    "API: the same round trip with both applications' tasks on their sessions' executors (MultipeerSession.executor) <= 1.5x",
    session?.roundTrip.flatMap { trip in
        trip.onExecutorRatio.map { ratio in
            (
                "\(ratioText(ratio, pairs: trip.pairs.count)); ours p50 \(number(trip.pairs.compactMap(\.onExecutorP50Microseconds).sorted()[trip.pairs.count / 2], 1)) µs)",
                ratio.median <= 1.5
            )
        }
    }
)
target(
    "API: round trip p50 of a 1 KiB message <= 0.7x gRPC Swift 2's (a bidirectional stream, the server's handler replying), median of paired runs",
    session?.roundTrip.flatMap { trip in
        trip.grpcRatio.map { ratio in
            (
                "\(ratioText(ratio, pairs: trip.pairs.count)); gRPC p50 \(number(spread(trip.pairs.compactMap(\.grpcP50Microseconds)).median, 1)) µs)",
                ratio.median <= 0.7
            )
        }
    }
)
target(
    "API: lock acquisitions per reliable 1 KiB message, both ends, sent flat out <= 4 (every pthread mutex of the process: the Swift runtime's and GnuTLS's too)",
    sessionLocks.map {
        ("\(number($0.flatOut, 2)) flat out; \(number($0.roundTrip, 1)) a message in round trips", $0.flatOut <= 4)
    }
)
target(
    "API: copies of the payload per reliable 1 KiB message, both ends, sent flat out <= 3 (bytes in memcpy and memmove calls of 256 bytes or more, over 1,024)",
    sessionLocks.flatMap { counts in
        counts.flatOutPayloadCopies.map {
            ("\(number($0, 2)) flat out; \(number(counts.roundTripPayloadCopies ?? .nan, 2)) in round trips", $0 <= 3)
        }
    }
)
let loaded = session?.latency.first { $0.besideLargeMessages }
target(
    "API: a 1 KiB message while 64 MiB ones are in flight arrives p99 <= 5 ms",
    loaded.map {
        ("p99 \(number($0.p99Milliseconds, 2)) ms (p50 \(number($0.p50Milliseconds, 2)) ms)", $0.p99Milliseconds <= 5)
    }
)

target(
    "API: a 1 KiB message while a file and a stream run on the same link (1 GiB and 256 MiB in a full run) arrives p99 <= 5 ms",
    sessionMixed.map {
        (
            "p99 \(number($0.latency.p99Milliseconds, 2)) ms (p50 \(number($0.latency.p50Milliseconds, 2)) ms; \($0.fileBytes >> 20) MiB file, \($0.streamBytes >> 20) MiB stream, the link at \(number($0.linkMegabytesPerSecond, 0)) MB/s)",
            $0.latency.p99Milliseconds <= 5
        )
    }
)

// MARK: Charts

let charts = directory.appendingPathComponent("charts")
try FileManager.default.createDirectory(at: charts, withIntermediateDirectories: true)
var chartFiles: [String: String] = [:]
@MainActor func save(_ name: String, _ svg: String) throws {
    try svg.write(to: charts.appendingPathComponent("\(name).svg"), atomically: true, encoding: .utf8)
    chartFiles[name] = "charts/\(name).svg"
}

let linkNames = ["ours", "ours/pool", "C GnuTLS", "TCP"]
if let link {
    let quantileLabels = RoundTrip.quantiles.map { q in
        q == 0
            ? "min"
            : q >= 0.99
                ? String(format: "p%g", q * 100)
                : q.truncatingRemainder(dividingBy: 0.25) < 1e-9 ? "p\(Int(q * 100))" : ""
    }
    try save(
        "round-trip",
        Chart(
            title: "Round trip, 1 KiB payload, two cores: the distribution",
            unit: "µs",
            categories: quantileLabels,
            series: linkNames.compactMap { name in
                onTwoCores(name).map { Chart.Series(name: name, values: $0.distributionMicroseconds) }
            }
        ).lines()
    )
    let sizes = Set(link.throughput.map(\.payloadBytes)).sorted()
    var throughput = Chart(
        title: "One-way throughput by message size",
        unit: "MB/s (log)",
        categories: sizes.map(sizeName),
        series: ["ours", "C GnuTLS", "TCP"].map { name in
            Chart.Series(name: name, values: sizes.map { throughputOf(name, $0)?.megabytesPerSecond })
        }
    )
    throughput.logarithmic = true
    throughput.reference = (300, "target for 1 MiB: 300 MB/s")
    try save("throughput", throughput.bars())
}
if detection != nil || detectionNetwork != nil {
    let local = detection ?? []
    let network = detectionNetwork ?? []
    let faults = network.filter { $0.mechanism == "ours" }.map(\.fault) + local.map(\.fault)
    let mechanisms = ["ours"] + Array(Set(network.map(\.mechanism)).subtracting(["ours"])).sorted()
    func value(_ fault: String, _ mechanism: String) -> Double? {
        if mechanism == "ours" {
            return (network.first { $0.fault == fault && $0.mechanism == "ours" } ?? local.first { $0.fault == fault })?
                .detectionP99Milliseconds
        }
        // The kernel baselines ran against the network black hole and a frozen process, each a
        // first fault on a fresh connection.
        guard fault.hasSuffix(", first fault") else { return nil }
        let baselineFault = String(fault.dropLast(", first fault".count))
        return network.first { $0.fault == baselineFault && $0.mechanism == mechanism }?.detectionP99Milliseconds
    }
    var chart = Chart(
        title: "Failure detection p99 by fault (defaults: ping after 500 ms quiet, timeout 1.5 s)",
        unit: "ms",
        categories: faults,
        series: mechanisms.map { mechanism in Chart.Series(name: mechanism, values: faults.map { value($0, mechanism) })
        }
    )
    chart.reference = (2000, "target: 2 s")
    chart.missingNote = "not detected / not run"
    try save("detection", chart.bars())
}
if let mesh {
    let labels = mesh.map { $0.topology == "hub" ? "hub + \($0.sessions - 1)" : "\($0.sessions) (\($0.links) links)" }
    var time = Chart(
        title: "Time to a full mesh, cold start",
        unit: "s",
        categories: labels,
        series: [.init(name: "seconds", values: mesh.map(\.secondsToFullMesh))]
    )
    time.reference = (10, "target for 32: 10 s")
    try save("mesh-time", time.bars())
    var memory = Chart(
        title: "Resident memory per link endpoint",
        unit: "KiB",
        categories: labels,
        series: [.init(name: "KiB", values: mesh.map(\.kibPerLinkEndpoint))]
    )
    memory.reference = (64, "target: 64 KiB")
    try save("memory", memory.bars())
    var cpu = Chart(
        title: "Idle CPU with pings at the defaults",
        unit: "% of one core",
        categories: labels,
        series: [.init(name: "%", values: mesh.map(\.idleCPUPercent))]
    )
    cpu.reference = (5, "target for 32: 5 %")
    try save("idle-cpu", cpu.bars())
}
if let discovery {
    try save(
        "discovery",
        Chart(
            title: "Discovering a peer already advertising (start -> resolved)",
            unit: "ms",
            categories: discovery.flatMap { ["\($0.placement) p50", "\($0.placement) p95"] },
            series: [
                .init(
                    name: "ours (new connection + browser)",
                    values: discovery.flatMap { [$0.runningFoundP50, $0.runningFoundP95] }
                ),
                .init(
                    name: "avahi-browse --resolve",
                    values: discovery.flatMap { [$0.avahiBrowseP50, $0.avahiBrowseP95] }
                ),
            ]
        ).bars()
    )
}

// MARK: report.json

struct Results: Codable {
    var link: LinkResults?
    var detection: [DetectionFigures]?
    var detectionNetwork: [DetectionFigures]?
    var delivery: [Goodput]?
    var discovery: [DiscoverySummary]?
    var mesh: [MeshResult]?
}

struct Report: Codable {
    var generated: String
    var commit: String
    var machine: [String: String]
    var durationSeconds: [String: Double]
    var targets: [Target]
    var comparisons: [Comparison]
    var results: Results
    var charts: [String: String]
}

let generated = ISO8601DateFormatter().string(from: Date())
let report = Report(
    generated: generated,
    commit: commit,
    machine: machine,
    durationSeconds: durations,
    targets: targets,
    comparisons: comparisons,
    results: Results(
        link: link,
        detection: detection,
        detectionNetwork: detectionNetwork,
        delivery: delivery,
        discovery: discovery,
        mesh: mesh
    ),
    charts: chartFiles
)
let encoder = JSONEncoder()
encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
try encoder.encode(report).write(to: directory.appendingPathComponent("report.json"))

// MARK: report.md

var md = "# MultipeerSession benchmark report\n\n"
md += "Commit \(commit), \(generated). Made by `make bench` (Benchmarks/README.md explains every scenario).\n\n"
md += "Machine: \(machine["cpu"]!), \(machine["cores"]!) cores, \(machine["memory"]!); \(machine["kernel"]!); "
md += "GnuTLS \(machine["gnutls"]!); \(machine["avahi"]!); \(machine["swift"]!).\n\n"
if !durations.isEmpty {
    let total = durations.values.reduce(0, +)
    md +=
        "Run time: \(number(total / 60)) min ("
        + durations.sorted { $0.key < $1.key }.map { "\($0.key) \(number($0.value, 0)) s" }.joined(separator: ", ")
        + ").\n\n"
}
md += "## Targets\n\n| target | measured | met |\n|---|---|---|\n"
for t in targets { md += "| \(t.target) | \(t.measured) | \(t.met.map { $0 ? "yes" : "**no**" } ?? "-") |\n" }

func table(_ header: [String], _ rows: [[String]]) -> String {
    "| " + header.joined(separator: " | ") + " |\n|" + header.map { _ in "---|" }.joined() + "\n"
        + rows.map { "| " + $0.joined(separator: " | ") + " |\n" }.joined() + "\n"
}
@MainActor func image(_ name: String, _ alt: String) -> String { chartFiles[name].map { "![\(alt)](\($0))\n\n" } ?? "" }
func optional(_ value: Double?, _ digits: Int = 1) -> String { value.map { number($0, digits) } ?? "-" }

md += "\n## Beside the baselines\n\nRatio = ours / baseline; for times lower is better, for throughput higher.\n\n"
md += table(
    ["area", "figure", "ours", "baseline", "baseline's", "ratio"],
    comparisons.map {
        [
            $0.area, $0.figure, "\(number($0.ours)) \($0.unit)", $0.baseline,
            $0.baselineValue.map { number($0) } ?? "never",
            $0.ratio.map { number($0, 2) + "x" } ?? "-",
        ]
    }
)

md += "## Link: round trips and throughput\n\n"
if let link {
    md +=
        "Our link (SwiftNIO, GnuTLS TLS 1.3 ECDHE-PSK, TLV frames) against a C program with the same GnuTLS priority string and key, and plain TCP; 1 KiB ping-pong round trips (20,000), one-way throughput (median of 3 runs per size).\n\n"
    md += table(
        ["placement", "link", "p50 µs", "p99 µs"],
        link.roundTrips.map { [$0.placement, $0.link, number($0.p50Microseconds), number($0.p99Microseconds)] }
    )
    md += image("round-trip", "Round-trip distribution")
    md += table(
        ["payload", "link", "messages/s", "MB/s"],
        link.throughput.map {
            [sizeName($0.payloadBytes), $0.link, number($0.messagesPerSecond, 0), number($0.megabytesPerSecond)]
        }
    )
    md += image("throughput", "Throughput by message size")
} else {
    md += "Not measured in this run.\n\n"
}

if let session {
    md += "## The public API: send -> messages(of:)\n\n"
    md +=
        "Two sessions in one process over loopback, one task sending flat out, one reader (SessionBenchmark); payload bytes are the field's, CPU is the whole process's per message; the share is of the C GnuTLS program's frames/s at the same size, in the same run.\n\n"
    md += table(
        ["delivery", "encoding", "field", "payload B", "messages/s", "MB/s", "CPU µs / message", "of C GnuTLS"],
        session.cases.map {
            [
                $0.delivery, $0.encoding, $0.field, "\($0.payloadBytes)", number($0.messagesPerSecond, 0),
                number($0.payloadMegabytesPerSecond),
                number($0.cpuMicrosecondsPerMessage), $0.ofBaseline.map { "\(number($0 * 100, 0)) %" } ?? "-",
            ]
        }
    )
    md +=
        "The C GnuTLS program's rate is the median of its runs (nine since the runs were kept; three before): from one run to the next it moves with how often its reader catches up and sleeps.\n\n"
    md += table(
        ["C GnuTLS frames of", "messages/s (median)", "MB/s", "slowest run", "fastest run"],
        session.baselines.map {
            [
                "\($0.payloadBytes) B", number($0.messagesPerSecond, 0), number($0.megabytesPerSecond),
                $0.slowestMessagesPerSecond.map { number($0, 0) } ?? "-",
                $0.fastestMessagesPerSecond.map { number($0, 0) } ?? "-",
            ]
        }
    )
    if let trip = session.roundTrip {
        md +=
            "Round trip of a \(trip.payloadBytes)-byte message through the API (send, the peer's application sends it back as it reads it, the reply read; reliable, binary, a Data field), runs alternating with the C GnuTLS program's ping-pong of frames of the same size (a thread per core):\n\n"
        md +=
            "On executors: both applications' tasks prefer their sessions' executors (`MultipeerSession.executor`).\n\n"
        md += table(
            [
                "run", "API p50 µs", "API p99 µs", "on executors p50 µs", "on executors p99 µs", "C GnuTLS p50 µs",
                "ratio", "on executors", "gRPC Swift 2 p50 µs", "p99 µs",
            ],
            trip.pairs.enumerated().map { index, pair in
                [
                    "\(index + 1)", number(pair.apiP50Microseconds, 1), number(pair.apiP99Microseconds, 1),
                    pair.onExecutorP50Microseconds.map { number($0, 1) } ?? "-",
                    pair.onExecutorP99Microseconds.map { number($0, 1) } ?? "-",
                    number(pair.cP50Microseconds, 1), "\(number(pair.ratio, 2))x",
                    pair.onExecutorRatio.map { "\(number($0, 2))x" } ?? "-",
                    pair.grpcP50Microseconds.map { number($0, 1) } ?? "-",
                    pair.grpcP99Microseconds.map { number($0, 1) } ?? "-",
                ]
            }
        )
    }
    if let pairs = session.pairedShares, !pairs.isEmpty {
        md +=
            "Reliable binary messages (a Data field) in turns: five runs of ours of 2 s, each followed by a run of our bare link (PeerConnection's frames one way, one write each: what the API could carry at most), one of the C GnuTLS program and one of gRPC Swift 2 (Benchmarks/GRPCBaseline: one bidirectional stream over TLS 1.3, raw bytes, counted as the server's handler reads them).\n\n"
        md += table(
            [
                "payload B", "ours msg/s (median)", "our link (median)", "share of the link", "C GnuTLS (median)",
                "share of C", "gRPC Swift 2 (median)", "ours over gRPC",
            ],
            pairs.map { pair in
                let (share, grpc) = (pair.share, pair.ofGRPC)
                return [
                    "\(pair.payloadBytes)", number(spread(pair.api).median, 0),
                    pair.link.map { number(spread($0).median, 0) } ?? "-",
                    pair.ofLink.map {
                        "\(number($0.median * 100, 0)) % (\(number($0.low * 100, 0))-\(number($0.high * 100, 0)) %)"
                    } ?? "-",
                    number(spread(pair.c).median, 0),
                    "\(number(share.median * 100, 0)) % (\(number(share.low * 100, 0))-\(number(share.high * 100, 0)) %)",
                    pair.grpc.map { number(spread($0).median, 0) } ?? "-",
                    grpc.map { "\(number($0.median, 2))x (\(number($0.low, 2))-\(number($0.high, 2))x)" } ?? "-",
                ]
            }
        )
    }
    md +=
        "Beside 64 MiB messages, after a warm-up that lasts until their payload buffers are mapped (SessionBenchmark's `warmUp()`); buffers mapped afresh while the probes ran are counted.\n\n"
    md += table(
        ["1 KiB message every 2 ms", "p50 ms", "p99 ms", "max ms", "messages", "fresh mappings"],
        session.latency.map {
            [
                $0.besideLargeMessages ? "while 64 MiB messages are in flight" : "alone", number($0.p50Milliseconds, 2),
                number($0.p99Milliseconds, 2),
                number($0.maxMilliseconds, 2), "\($0.count)", "\($0.freshMappings)",
            ]
        }
    )
}

if let navlog {
    md += "## navlog-sync on the replicated store\n\n"
    md +=
        "Two navlog-sync hosts over loopback (NavlogBenchmark): a fresh host joining one that holds the log, then the two, having met, restarted with 1,000 differences between them; until both report the exchange done, and the session's payload bytes both ways. Logs of signed entries, a tenth deleted.\n\n"
    md += table(
        ["entries", "case", "seconds", "payload MB", "versions received (joiner / holder)"],
        navlog.map {
            [
                "\($0.entries)", $0.scenario, number($0.seconds, 2), number(Double($0.payloadBytes) / 1e6, 2),
                "\($0.joinerReceived) / \($0.holderReceived)",
            ]
        }
    )
}

md += "## Failure detection and redial\n\n"
let allDetection = (detectionNetwork ?? []) + (detection ?? [])
if !allDetection.isEmpty {
    md +=
        "Fault -> `peerLeft` and heal -> `peerJoined` at the defaults. \"network\" faults run between two namespace hosts; the kernel baselines are a TCP connection with keepalive (idle 2 s, a probe a second, 3 probes) and one with TCP_USER_TIMEOUT 1.5 s and a byte written every 500 ms.\n\n"
    md += table(
        ["fault", "mechanism", "trials", "detection p50 ms", "p99 ms", "rejoin p50 ms", "p99 ms"],
        allDetection.map {
            let missing = $0.limitSeconds.map { "not in \(number($0, 0)) s" } ?? "-"
            return [
                $0.fault, $0.mechanism, "\($0.trials)", $0.detectionP50Milliseconds.map { number($0) } ?? missing,
                $0.detectionP99Milliseconds.map { number($0) } ?? missing, optional($0.rejoinP50Milliseconds),
                optional($0.rejoinP99Milliseconds),
            ]
        }
    )
    md += image("detection", "Detection by fault")
} else {
    md += "Not measured in this run.\n\n"
}

md += "## Discovery\n\n"
if let discovery {
    md +=
        "Over real avahi-daemons (namespace hosts, ms): a new advertisement reaching a running browser is set by multicast DNS's probing (RFC 6762 8.1); a peer already advertising is found as soon as a new client asks its daemon.\n\n"
    md += table(
        [
            "placement", "trials", "advertise -> found p50 / p95", "running peer found p50 / p95",
            "avahi-browse p50 / p95", "stop -> lost p50 / p95",
        ],
        discovery.map {
            [
                $0.placement, "\($0.trials)", "\(number($0.foundP50)) / \(number($0.foundP95))",
                "\(number($0.runningFoundP50)) / \(number($0.runningFoundP95))",
                "\(number($0.avahiBrowseP50)) / \(number($0.avahiBrowseP95))",
                "\(number($0.lostP50)) / \(number($0.lostP95))",
            ]
        }
    )
    md += image("discovery", "Discovery of a running peer")
} else {
    md += "Not measured in this run (needs root for its namespace hosts).\n\n"
}

md += "## Scale: sessions in one process\n\n"
if let mesh {
    md +=
        "Every session in one process (both ends of every link), real avahi-daemon and GnuTLS; the hub's peers use static addresses. Held idle with pings at the defaults.\n\n"
    md += table(
        [
            "topology", "sessions", "links", "s to mesh", "KiB / link endpoint", "idle CPU %", "PINGs / link / s",
            "link p99 RTT median / worst ms", "false teardowns", "hold s",
        ],
        mesh.map {
            [
                $0.topology, "\($0.sessions)", "\($0.links)", number($0.secondsToFullMesh, 2),
                number($0.kibPerLinkEndpoint), number($0.idleCPUPercent),
                number($0.pingsPerLinkPerSecond, 2),
                "\(number($0.medianLinkP99RTTMilliseconds, 2)) / \(number($0.worstLinkP99RTTMilliseconds, 2))",
                "\($0.falseTeardowns)", number($0.holdSeconds, 0),
            ]
        }
    )
    md +=
        image("mesh-time", "Time to full mesh") + image("memory", "Memory per link endpoint")
        + image("idle-cpu", "Idle CPU")
} else {
    md += "Not measured in this run (needs root for its discovery sandbox).\n\n"
}

md += "## Reliable delivery\n\n"
if let delivery {
    md += table(
        [
            "scenario", "messages/s", "delivered", "lost", "out of order", "wire bytes / payload byte",
            "RSS growth KiB", "most ahead",
        ],
        delivery.map {
            [
                $0.scenario, number($0.messagesPerSecond, 0), "\($0.messagesDelivered)", "\($0.lost)",
                "\($0.outOfOrder)", number($0.wireBytesPerPayloadByte, 2),
                number($0.rssGrowthKiB, 0), $0.maximumBacklog.map { "\($0)" } ?? "-",
            ]
        }
    )
} else {
    md += "Not measured in this run.\n\n"
}
try md.write(to: directory.appendingPathComponent("report.md"), atomically: true, encoding: .utf8)

print("Targets:")
for t in targets { print("  \(t.met.map { $0 ? "met   " : "MISSED" } ?? "-     ") \(t.target): \(t.measured)") }
print("Report: \(directory.path)/report.md and report.json, charts in \(charts.path)")
