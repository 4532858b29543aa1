// The multi-host fault suite: three hosts made of network namespaces, each with its own
// avahi-daemon, running navlog-sync; one fault per scenario; detection and rejoin times from
// the JSON events, the logs compared from the databases. Writes a Markdown and a JSON report.
// Needs root. `make hosts-test` runs it; `make test` too, when it can make namespaces.
//
//   navlog-hosts [--binary PATH] [--report DIR] [--only NAME,...] [--loss-seconds N] [--repeat N]
//                [--twin-seeds N] [--twins-only N]
//
// --repeat runs each scenario N times (for percentiles of detection and rejoin times).
// --twin-seeds runs each scenario's simulated twin over N seeds (1 by default): a lossy link's
// teardowns are chance, and the real run's must fall within the twin's over its seeds.
// --twins-only N runs only the simulated twins, over N seeds each, and prints what each found
// (no namespaces, no root).
import Foundation
import Glibc

var options: [String: String] = [:]
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let key = arguments.next() {
    guard key.hasPrefix("--"), let value = arguments.next() else {
        FileHandle.standardError.write(
            Data(
                "usage: navlog-hosts [--binary PATH] [--report DIR] [--only NAME,...] [--loss-seconds N] [--repeat N] [--twin-seeds N] [--twins-only N]\n"
                    .utf8
            )
        )
        exit(64)
    }
    options[String(key.dropFirst(2))] = value
}
let here = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
// Absolute: the hosts run it from their namespaces, where a path relative to here means nothing.
let binary = URL(fileURLWithPath: options["binary"] ?? here.appendingPathComponent("navlog-sync").path)
    .standardizedFileURL.path
let reportDirectory = options["report"] ?? "bench-results/hosts"
let only = options["only"].map { Set($0.split(separator: ",").map(String.init)) }
let lossSeconds = options["loss-seconds"].flatMap(Int.init) ?? 60
let repeats = max(1, options["repeat"].flatMap(Int.init) ?? 1)
let impairTool = here.appendingPathComponent("net-impair").path
let chosen = Scenario.all(lossSeconds: lossSeconds, impairTool: impairTool).filter { only?.contains($0.name) ?? true }

if let twins = options["twins-only"].flatMap(Int.init) {
    for scenario in chosen {
        guard let twin = scenario.twin else { continue }
        for seed in 1...max(1, twins) {
            let outcome = try await SimulatedTwin.run(twin, lasting: .seconds(5), seed: UInt64(seed))
            print("\(scenario.name), seed \(seed): \(Report.simulated(outcome))")
            fflush(nil)
        }
    }
    exit(0)
}

guard FileManager.default.isExecutableFile(atPath: binary) else {
    print("navlog-sync is not at \(binary): build it first (swift build --product navlog-sync), or pass --binary")
    exit(2)
}
guard getuid() == 0 else {
    print("The multi-host suite was not run: it makes network namespaces, which needs root (sudo make hosts-test).")
    exit(77)
}
// Without it the lossy link would be no link at all: a dead one, measured as a lossy one.
guard FileManager.default.isExecutableFile(atPath: impairTool) else {
    print("net-impair is not at \(impairTool): build it beside navlog-hosts (swift build --product net-impair)")
    exit(2)
}

/// The databases and keys of the scenarios; removed at the end, also after an interrupt.
let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("navlog-hosts-\(getpid())").path

// An interrupt removes every namespace made so far (and what runs in them) before exiting.
signal(SIGINT, SIG_IGN)
signal(SIGTERM, SIG_IGN)
let interrupts = [SIGINT, SIGTERM].map { number in
    let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
    source.setEventHandler {
        print("\ninterrupted: removing the namespace hosts")
        HostNetwork.teardownAll()
        CongestionControl.restore()
        try? FileManager.default.removeItem(atPath: scratch)
        exit(130)
    }
    source.resume()
    return source
}

try CongestionControl.allow()
var results: [ScenarioResult] = []
let started = ContinuousClock.now
for scenario in chosen.flatMap({ Array(repeating: $0, count: repeats) }) {
    print("== \(scenario.name): \(scenario.fault)")
    fflush(nil)  // progress shows as it happens, into a file too
    var result = ScenarioResult(scenario: scenario.name, fault: scenario.fault)
    var run: ScenarioRun?
    do {
        let current = try await ScenarioRun(
            name: scenario.name,
            hostNames: scenario.hostNames,
            bystanders: scenario.bystanders,
            ipv6: scenario.ipv6,
            navlogArguments: scenario.navlogArguments,
            binary: binary,
            root: scratch
        )
        run = current
        try await scenario.prepare?(current)
        try await current.startAll()
        try await scenario.body(current, &result)
        result.entriesPerHost = try await current.waitConverged()
        result.entriesTyped = current.typed.count
        if let twin = scenario.twin {
            // The same fault, as long, in a simulated world: the two must agree.
            let lasting = Duration.milliseconds(Int64(result.faultMilliseconds ?? 0))
            let simulated = try await SimulatedTwin.measure(twin, lasting: lasting, seed: UInt64(results.count + 1))
            result.simulated = simulated
            // Reported, not failed: the twin tears lossy links down less often than CUBIC's real
            // ones (docs/SIMULATION.md, "The lossy link"), a known disagreement of issue 61.
            if let teardowns = simulated.teardownsOverSeeds, let measured = result.teardownsPerMinute,
                let problem = SimulatedTwin.Outcome.teardownsDisagree(simulated: teardowns, real: measured)
            {
                print("   the twin's teardowns disagree (reported, not failed): \(problem)")
            }
            if let disagreement = simulated.disagreement(with: result, fault: twin) {
                throw HostSuiteError("the simulated twin disagrees with the real run: \(disagreement)")
            }
        }
        result.passed = true
    } catch {
        result.failure = "\(error)"
        result.entriesTyped = run?.typed.count ?? 0
        if let run {
            for host in run.hosts {
                print("   \(host.name) printed:")
                for line in host.history.joined() { print("     \(line.raw)") }
            }
        }
    }
    await run?.teardown()
    results.append(result)
    print("   " + Report.line(result))
    fflush(nil)
}

CongestionControl.restore()
let report = Report(results: results, duration: ContinuousClock.now - started)
try report.write(to: reportDirectory)
print("\n" + report.markdown)
print("Report written to \(reportDirectory)/report.md and report.json")
_ = interrupts
try? FileManager.default.removeItem(atPath: scratch)
exit(results.allSatisfy(\.passed) ? 0 : 1)
