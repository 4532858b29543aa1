// Measures discovery over real avahi-daemons, p50/p95 over 20 trials: the time from
// `advertise` to `found` at a browser already running, from starting a browser (a new
// connection to the daemon) to `found` for a peer already advertising, beside `avahi-browse
// --resolve` started at that moment, and from `stop` to `lost`. On one host, and (when run by
// Benchmarks/discovery-hosts.sh) between two network-namespace hosts joined by a veth pair.
// Run it through `make bench` or that script: it needs a discovery sandbox of its own.
import BenchmarkSupport
import Foundation
import MultipeerDiscovery
import MultipeerTestSupport

struct Trial: Codable {
    var foundMilliseconds: Double
    var runningFoundMilliseconds: Double
    var avahiBrowseMilliseconds: Double
    var lostMilliseconds: Double
}

let trialCount = Bench.option("--trials").flatMap(Int.init) ?? 20
let clock = ContinuousClock()

func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
}

func serviceType() throws -> ServiceType {
    try ServiceType("_mpb\(String(UInt32.random(in: 0...UInt32.max), radix: 16))._tcp")
}

/// Where the advertiser of a trial runs.
protocol AdvertiserHost {
    func advertise(_ peerID: UUID, _ type: ServiceType) async throws
    func stop() async throws
}

/// In this process, on this host's daemon.
final class LocalAdvertiser: AdvertiserHost {
    var advertiser: PeerAdvertiser?

    func advertise(_ peerID: UUID, _ type: ServiceType) async throws {
        advertiser = try PeerAdvertiser(
            serviceType: type,
            port: 7000,
            txt: AdvertTXT(peerID: peerID, incarnation: 1, displayName: "bench"),
            connection: AvahiConnection.shared()
        )
    }

    func stop() async throws {
        advertiser?.stop()
        advertiser = nil
    }
}

/// This program in `--advertiser` mode on another host, driven over its standard input.
final class RemoteAdvertiser: AdvertiserHost {
    let process: BackgroundProcess
    var answers: AsyncStream<String>.AsyncIterator

    init(hostPID: String) throws {
        let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        process = try BackgroundProcess(
            "/usr/bin/nsenter",
            ["-t", hostPID, "-m", "-n", me, "--advertiser"],
            pipes: true
        )
        answers = process.lines!.makeAsyncIterator()
    }

    /// Sends a command and waits for its one-line answer, which comes at once (before the
    /// service is even established).
    func command(_ line: String, expecting reply: String) async throws {
        process.send(line)
        let answer = await answers.next()
        guard answer == reply else { throw BenchmarkError("the advertiser answered \(answer ?? "nothing") to \(line)") }
    }

    func advertise(_ peerID: UUID, _ type: ServiceType) async throws {
        try await command("start \(peerID) \(type)", expecting: "started")
    }

    func stop() async throws {
        try await command("stop", expecting: "stopped")
    }

    deinit {
        process.closeInput()
        _ = process.waitUntilExit()
    }
}

/// Advertises on command: `start UUID TYPE` then `stop`; answers each with a line.
func runAdvertiser() async throws {
    let advertiser = LocalAdvertiser()
    func answer(_ text: String) { FileHandle.standardOutput.write(Data((text + "\n").utf8)) }
    while let line = readLine() {
        let words = line.split(separator: " ").map(String.init)
        if words.first == "start", words.count == 3 {
            try await advertiser.advertise(UUID(uuidString: words[1])!, try ServiceType(words[2]))
            answer("started")
        } else if words.first == "stop" {
            try await advertiser.stop()
            answer("stopped")
        }
    }
}

/// A new process's view of a peer already advertising: a new connection to the daemon and a
/// browser, until the peer is found (resolved).
func discoverRunning(_ peerID: UUID, _ type: ServiceType) async throws -> Duration {
    let start = clock.now
    let connection = try AvahiConnection()
    for await event in PeerBrowser(serviceType: type, localPeerID: UUID(), connection: connection).browse() {
        if case .found(let advert) = event, advert.peerID == peerID { break }
    }
    return clock.now - start
}

/// The same with `avahi-browse --resolve`, from its start to its first resolved line (`=`).
func avahiBrowseRunning(_ type: ServiceType) async throws -> Duration {
    let start = clock.now
    let browse = try BackgroundProcess(
        "/usr/bin/avahi-browse",
        ["--resolve", "--parsable", "--no-db-lookup", "\(type)"],
        pipes: true
    )
    defer { browse.stop() }
    for await line in browse.lines! where line.hasPrefix("=;") { break }
    return clock.now - start
}

func measure(_ placement: String, advertiser: some AdvertiserHost) async throws -> DiscoverySummary {
    var trials: [Trial] = []
    // One warm-up trial (connections to the daemons are made in it), then the measured ones.
    for _ in 0...trialCount {
        let type = try serviceType()
        let peerID = UUID()
        var events = PeerBrowser(serviceType: type, localPeerID: UUID(), connection: try .shared()).browse()
            .makeAsyncIterator()
        let start = clock.now
        try await advertiser.advertise(peerID, type)
        while let event = await events.next() { if case .found(let advert) = event, advert.peerID == peerID { break } }
        let found = clock.now - start
        let running = try await discoverRunning(peerID, type)
        let avahiBrowse = try await avahiBrowseRunning(type)
        let stop = clock.now
        try await advertiser.stop()
        while let event = await events.next() { if case .lost(peerID) = event { break } }
        trials.append(
            Trial(
                foundMilliseconds: milliseconds(found),
                runningFoundMilliseconds: milliseconds(running),
                avahiBrowseMilliseconds: milliseconds(avahiBrowse),
                lostMilliseconds: milliseconds(clock.now - stop)
            )
        )
    }
    trials.removeFirst()
    func p(_ values: KeyPath<Trial, Double>, _ quantile: Double) -> Double {
        Bench.percentile(trials.map { $0[keyPath: values] }, quantile)
    }
    return DiscoverySummary(
        placement: placement,
        trials: trials.count,
        foundP50: p(\.foundMilliseconds, 0.5),
        foundP95: p(\.foundMilliseconds, 0.95),
        runningFoundP50: p(\.runningFoundMilliseconds, 0.5),
        runningFoundP95: p(\.runningFoundMilliseconds, 0.95),
        avahiBrowseP50: p(\.avahiBrowseMilliseconds, 0.5),
        avahiBrowseP95: p(\.avahiBrowseMilliseconds, 0.95),
        lostP50: p(\.lostMilliseconds, 0.5),
        lostP95: p(\.lostMilliseconds, 0.95)
    )
}

if Bench.flag("--advertiser") {
    try await runAdvertiser()
    exit(0)
}
guard ProcessInfo.processInfo.environment["MULTIPEER_SANDBOX"] == "1" else {
    print(
        "DiscoveryBenchmark needs a discovery sandbox of its own: run it through 'make bench' or Benchmarks/discovery-hosts.sh"
    )
    exit(2)
}

var summaries = [try await measure("one host", advertiser: LocalAdvertiser())]
if let remote = ProcessInfo.processInfo.environment["MULTIPEER_REMOTE_HOST_PID"] {
    summaries.append(try await measure("two hosts (veth)", advertiser: try RemoteAdvertiser(hostPID: remote)))
}

print("Discovery over avahi-daemon, \(trialCount) trials each (ms)")
print(
    "placement          advertise->found p50/p95  running peer found p50/p95  avahi-browse p50/p95  stop->lost p50/p95"
)
for summary in summaries {
    let pairs = [
        (summary.foundP50, summary.foundP95), (summary.runningFoundP50, summary.runningFoundP95),
        (summary.avahiBrowseP50, summary.avahiBrowseP95), (summary.lostP50, summary.lostP95),
    ]
    let widths = [26, 28, 22, 0]
    print(
        summary.placement.padding(toLength: 19, withPad: " ", startingAt: 0)
            + zip(pairs, widths).map { pair, width in
                let text = String(format: "%.1f / %.1f", pair.0, pair.1)
                return text.padding(toLength: max(width, text.count), withPad: " ", startingAt: 0)
            }.joined()
    )
}
try Bench.writeJSON(summaries, defaultPath: "bench-results/discovery.json")
