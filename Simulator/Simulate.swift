import ArgumentParser
import Foundation
import Glibc
import Logging
import MultipeerSession
import MultipeerSessionTesting

/// `make simulate`: draws simulated worlds from seeds and checks the documentation's promises in
/// each (Simulator/README.md).
@main
struct Simulate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "multipeer-simulator",
        abstract:
            "Runs real sessions in simulated worlds drawn from seeds, with random traffic and faults, and checks every promise."
    )

    @Option(name: .customLong("seed"), help: "A seed to run (repeatable); replays that world exactly.")
    var seeds: [UInt64] = []

    @Option(name: .customLong("seeds"), help: "A range of seeds to run, FIRST-LAST.")
    var seedRange: String?

    @Option(help: "Keep drawing seeds (from the first given, or 1) for this many minutes of wall time.")
    var minutes: Double?

    @Option(help: "Simulated seconds of traffic and faults in each world, before it is healed and settles.")
    var duration: Int = 120

    @Option(help: "How many hosts a world has, drawn from MIN-MAX.")
    var hosts: String = "2-8"

    @Option(
        help:
            "A factor on the applications' traffic (messages, files, streams, store writes): shrinking halves it, and a replay gives it."
    )
    var traffic: Double = 1

    @Option(help: "Mean simulated seconds between faults.")
    var faultEvery: Double = 10

    @Option(help: "Messages a second in each world.")
    var messageRate: Double = 10

    @Option(
        name: .customLong("faults"),
        help: ArgumentHelp(
            "The kinds of fault drawn, separated by commas, all, or none: \(SimulatedFault.allCases.map(\.rawValue).joined(separator: ", ")).",
            discussion:
                "A failure's replay command names the kinds its run drew from, so it replays the same world after kinds are added."
        )
    )
    var faultKinds: String = "all"

    @Option(help: "Simulated seconds each world runs healthy at the end, where no link may be torn down.")
    var quietSeconds: Int = 30

    @Option(
        help: ArgumentHelp(
            "Wall-clock minutes to spend shrinking each failing world (0: none).",
            discussion:
                "Smaller worlds (a shorter run, fewer hosts, fewer faults, less traffic) are replayed while the same promise still breaks, and the smallest one's replay command is printed beside the original's."
        )
    )
    var shrinkMinutes: Double = 10

    @Flag(
        help:
            "Plant a defect: a promise of the simulator's own (nothing of 1 KiB or more is sent to a frozen host) that worlds with frozen hosts and traffic break, to see a failure shrunk."
    )
    var plant = false

    @Flag(help: "Print each world's whole trace.")
    var trace = false

    @Flag(help: "Print only the worlds that failed and the summary.")
    var failuresOnly = false

    @Flag(help: "Go on after a broken promise, to see what follows (the world still fails).")
    var keepGoing = false

    @Flag(
        help:
            "Also run each world twice more, each in a process of its own, and fail it unless the two traces agree line for line."
    )
    var checkDeterminism = false

    @Option(
        help:
            "How many worlds run at once, each on a thread of its own (a world runs the same however many run beside it)."
    )
    var jobs: Int = 1

    @Option(help: "How much the sessions log to standard error (trace, debug, info, notice, warning, error, critical).")
    var logLevel: String = "critical"

    mutating func run() async throws {
        Self.requireDeterministicHashing()
        let bounds = hosts.split(separator: "-").compactMap { Int($0) }
        guard let low = bounds.first, let high = bounds.last, low >= 2, high >= low else {
            throw ValidationError("--hosts is MIN-MAX, at least 2 (e.g. 2-8)")
        }
        var queue = seeds
        if let seedRange {
            let ends = seedRange.split(separator: "-").compactMap { UInt64($0) }
            guard ends.count == 2, ends[0] <= ends[1] else {
                throw ValidationError("--seeds is FIRST-LAST (e.g. 1-200)")
            }
            queue += Array(ends[0]...ends[1])
        }
        if queue.isEmpty && minutes == nil { queue = [1] }
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = minutes.map { start + .milliseconds(Int64($0 * 60_000)) }
        guard jobs >= 1 else { throw ValidationError("--jobs is at least 1") }
        var next = (queue.last ?? 0) + 1
        var (runs, failed, sessionTime, simulated, messages, faults) = (0, 0, Duration.zero, Duration.zero, 0, 0)
        var (files, streams, storeWrites) = (0, 0, 0)
        var fullest = Fullest()
        let level = Logger.Level(rawValue: logLevel) ?? .critical
        guard let kinds = SimulatedFault.parse(faultKinds) else {
            throw ValidationError(
                "--faults names kinds of fault separated by commas (\(SimulatedFault.allCases.map(\.rawValue).joined(separator: ", "))), all, or none"
            )
        }
        let workload = Workload(messageRate: messageRate, logLevel: level, plant: plant)
        /// The next world to run, if any.
        func nextPlan() -> ExplorationPlan? {
            let seed: UInt64
            if !queue.isEmpty {
                seed = queue.removeFirst()
            } else if let deadline, clock.now < deadline {
                seed = next
                next += 1
            } else {
                return nil
            }
            return ExplorationPlan(
                seed: seed,
                hosts: low...high,
                duration: .seconds(duration),
                faultEvery: .milliseconds(Int64(faultEvery * 1_000)),
                faults: kinds,
                quiet: .seconds(quietSeconds),
                traffic: traffic
            )
        }
        /// Counts, checks and prints one world's result.
        func process(_ finished: RunResult, wall: Duration) async throws {
            var result = finished
            let seed = result.outcome.plan.seed
            runs += 1
            sessionTime += result.outcome.sessionTime
            simulated += result.outcome.simulated
            messages += result.messages
            files += result.files
            streams += result.streams
            storeWrites += result.storeWrites
            fullest.include(result.fullest)
            faults += result.outcome.faults
            if trace { print(result.outcome.trace) }
            if checkDeterminism {
                // As a replay runs it: each in a process of its own (what a process keeps between
                // worlds, its pool of large payload buffers, is no part of a world's seed).
                let first = try Self.traceInChild(seed: seed, arguments: childArguments)
                let second = try Self.traceInChild(seed: seed, arguments: childArguments)
                if let line = zip(first, second).enumerated().first(where: { $0.element.0 != $0.element.1 }) {
                    result.outcome.broken.append(
                        BrokenPromise(
                            promise: Promise.deterministic.exploration,
                            text:
                                "run twice, the traces part at line \(line.offset): \(line.element.0) | \(line.element.1) (one seed, one run)"
                        )
                    )
                } else if first.count != second.count || first.isEmpty {
                    result.outcome.broken.append(
                        BrokenPromise(
                            promise: Promise.deterministic.exploration,
                            text:
                                "run twice, one trace has \(first.count) lines, the other \(second.count) (one seed, one run)"
                        )
                    )
                }
            }
            let outcome = result.outcome
            if outcome.passed {
                if failuresOnly { return }
                print(
                    "seed \(seed): ok, \(outcome.hosts) hosts, \(Self.seconds(outcome.simulated)) s simulated, \(result.messages) messages, \(result.deliveries) deliveries, \(result.files) files, \(result.streams) streams, \(result.storeWrites) store writes, \(outcome.faults) faults, \(Self.seconds(wall)) s"
                )
            } else {
                failed += 1
                print("seed \(seed): FAILED, \(outcome.hosts) hosts, at \(Self.seconds(outcome.simulated)) s simulated")
                for broken in outcome.broken { print("  broken promise: \(broken)") }
                // Joins, departures, failures and faults (not each peer's availability) until the promise broke.
                let availability = [" is discovered", " is connecting", " is active", " is refused", " is gone"]
                let lines = outcome.traceToFailure.filter { line in !availability.contains { line.text.hasSuffix($0) } }
                print("  the trace's last 40 lines before it broke (--trace prints it all):")
                for line in lines.suffix(40) { print("    \(line)") }
                // The same binary: a seed replays a world exactly on the build that ran it.
                print("  replay: \(Self.replayCommand(outcome.plan, workload))")
                await shrink(outcome)
            }
        }
        /// Shrinks a failed world (SimulationExplorer.shrink) and prints the smallest that fails the same way.
        func shrink(_ outcome: SimulationExplorer.Outcome) async {
            let unshrinkable = [Promise.deterministic, .simulator].map(\.exploration)
            guard shrinkMinutes > 0, let promise = outcome.broken.first?.promise, !unshrinkable.contains(promise)
            else { return }
            print("  shrinking (at most \(shrinkMinutes) minutes; --shrink-minutes 0 skips it) ...")
            let began = ContinuousClock.now
            let shrunk = await SimulationExplorer(plan: outcome.plan).shrink(
                outcome,
                for: .milliseconds(Int64(shrinkMinutes * 60_000)),
                jobs: jobs
            ) { SimulationRun(run: $0, workload: workload) }
            let (from, to) = (outcome.plan, shrunk.plan)
            let tried = "\(shrunk.tried) worlds tried in \(Int(Self.seconds(ContinuousClock.now - began))) s"
            guard shrunk.shrunk > 0 else {
                return print("  no smaller world broke \"\(promise)\" (\(tried))")
            }
            let hosts =
                to.hosts == from.hosts
                ? "\(outcome.hosts) hosts" : "\(to.hosts.lowerBound) hosts (was \(outcome.hosts))"
            func seconds(_ duration: Duration) -> String { "\(Int(Self.seconds(duration))) s" }
            func kinds(_ plan: ExplorationPlan) -> String { SimulatedFault.list(plan.faults) }
            var changes = [hosts, "\(seconds(to.duration)) of traffic (was \(seconds(from.duration)))"]
            if to.faults != from.faults { changes.append("faults \(kinds(to)) (was \(kinds(from)))") }
            if to.faultEvery != from.faultEvery {
                changes.append("a fault every \(Self.seconds(to.faultEvery)) s (was \(Self.seconds(from.faultEvery)))")
            }
            if to.traffic != from.traffic { changes.append("traffic \(to.traffic) (was \(from.traffic))") }
            if to.quiet != from.quiet { changes.append("\(seconds(to.quiet)) quiet (was \(seconds(from.quiet)))") }
            if to.seed != from.seed { changes.append("seed \(to.seed)") }
            print(
                "  shrunk \(shrunk.shrunk) times, \(tried), still breaking \"\(promise)\": \(changes.joined(separator: ", "))"
            )
            print("  replay the smallest: \(Self.replayCommand(to, workload))")
        }
        try await withThrowingTaskGroup(of: (RunResult, Duration).self) { worlds in
            // Up to `jobs` worlds at once (each runs on a thread of its own); each result as it comes.
            func startNext() {
                guard let plan = nextPlan() else { return }
                let keepGoing = keepGoing
                worlds.addTask {
                    let began = ContinuousClock.now
                    let result = await Self.world(plan, workload, keepGoing: keepGoing)
                    return (result, ContinuousClock.now - began)
                }
            }
            for _ in 0..<jobs { startNext() }
            while let (finished, wall) = try await worlds.next() {
                startNext()
                try await process(finished, wall: wall)
            }
        }
        let elapsed = clock.now - start
        print(
            """
            \(runs) worlds, \(failed) failed; \(Self.seconds(simulated)) s simulated, \(String(format: "%.1f", Self.seconds(sessionTime) / 3_600)) session-hours \
            checked, \(messages) messages, \(files) files, \(streams) streams, \(storeWrites) store writes, \(faults) faults, in \(Self.seconds(elapsed)) s of wall time
            fullest stream \(fullest.streamCount) messages, \(fullest.streamBytes) bytes held; fullest hold \(fullest.holdCount) messages, \(fullest.holdBytes) bytes \
            (limits \(SimulationRun.limits.receiveBuffer.maximumCount) messages or \(SimulationRun.limits.receiveBuffer.maximumBytes) bytes, \
            \(SimulationRun.limits.unsubscribedMessages.maximumCount) or \(SimulationRun.limits.unsubscribedMessages.maximumBytes)); \
            most of a file sent again after one break \(fullest.resentAfterABreak) bytes (at most 3 MiB)
            """
        )
        if failed > 0 { throw ExitCode(1) }
    }

    /// Runs `plan`'s world with the simulator's applications in it.
    static func world(_ plan: ExplorationPlan, _ workload: Workload, keepGoing: Bool) async -> RunResult {
        final class Made: @unchecked Sendable { var application: SimulationRun? }
        let made = Made()
        let outcome = await SimulationExplorer(plan: plan).run(plan, keepGoing: keepGoing) { run in
            let application = SimulationRun(run: run, workload: workload)
            made.application = application
            return application
        }
        let application = made.application!
        return RunResult(
            outcome: outcome,
            messages: application.ledger.sentCount,
            deliveries: application.ledger.deliveryCount,
            files: application.transfers.fileCount,
            streams: application.transfers.streamCount,
            storeWrites: application.stores.writeCount,
            fullest: application.fullest
        )
    }

    /// The command that replays `plan`'s world with its trace, on this build.
    static func replayCommand(_ plan: ExplorationPlan, _ workload: Workload) -> String {
        let hosts = "\(plan.hosts.lowerBound)-\(plan.hosts.upperBound)"
        let traffic = plan.traffic == 1 ? "" : " --traffic \(plan.traffic)"
        return
            "\(CommandLine.arguments[0]) --seed \(plan.seed) --duration \(Int(seconds(plan.duration))) --hosts \(hosts) --fault-every \(seconds(plan.faultEvery)) --message-rate \(workload.messageRate)\(traffic) --quiet-seconds \(Int(seconds(plan.quiet))) --faults \(SimulatedFault.list(plan.faults))\(workload.plant ? " --plant" : "") --trace"
    }

    /// The arguments that make a child run the same world.
    var childArguments: [String] {
        var arguments: [String] = ["--duration", String(duration), "--hosts", hosts]
        arguments += ["--fault-every", String(faultEvery), "--message-rate", String(messageRate)]
        arguments += ["--traffic", String(traffic)]
        arguments += ["--quiet-seconds", String(quietSeconds), "--faults", faultKinds, "--trace"]
        return arguments
    }

    /// The trace of `seed`'s world, run by this program in a process of its own.
    static func traceInChild(seed: UInt64, arguments: [String]) throws -> [Substring] {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        child.arguments = ["--seed", String(seed)] + arguments
        let output = Pipe()
        child.standardOutput = output
        child.standardError = FileHandle.nullDevice
        try child.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        child.waitUntilExit()
        let lines: [Substring] = String(decoding: data, as: UTF8.self).split(separator: "\n")
        return lines.filter(isTraceLine)
    }

    /// A line of a trace: "SECONDS.NANOSECONDS host: text".
    static func isTraceLine(_ line: Substring) -> Bool {
        guard let space = line.firstIndex(of: " ") else { return false }
        let time: Substring = line[..<space]
        return time.contains(".") && Double(time) != nil
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// A seed replays a world only where Swift's hashing is deterministic (Set and Dictionary
    /// orders change from run to run otherwise): this program runs itself again with
    /// SWIFT_DETERMINISTIC_HASHING=1 if it was not set.
    static func requireDeterministicHashing() {
        guard ProcessInfo.processInfo.environment["SWIFT_DETERMINISTIC_HASHING"] == nil else { return }
        setenv("SWIFT_DETERMINISTIC_HASHING", "1", 1)
        let arguments = CommandLine.arguments
        var argv = arguments.map { strdup($0) } + [nil]
        execv("/proc/self/exe", &argv)
        perror("multipeer-simulator: cannot run itself again with SWIFT_DETERMINISTIC_HASHING=1")
        Glibc.exit(2)
    }
}
