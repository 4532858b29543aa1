// What a test in a simulated world costs in wall time (issue 47): two sessions, one frozen,
// its detection seen, thawed, its rejoining seen; each trial a test as an application writes it
// (a world of its own), and then a second freeze in the same world, so that what a second
// fault costs shows too.
//
// With --mesh N, a bigger world instead (issue 61): N sessions, full mesh, joined, then M
// simulated minutes idle (pings alone) or busy (every session broadcasting a 200-byte message
// every second, every peer reading), reporting the time compression: simulated seconds a
// wall second.
//
//   SimulationBenchmark [--trials N]
//   SimulationBenchmark --mesh N [--minutes M] [--busy]
import Foundation
import MultipeerSession
import MultipeerSessionTesting

let arguments = CommandLine.arguments
let trials = arguments.firstIndex(of: "--trials").flatMap { Int(arguments[$0 + 1]) } ?? 50
let key = try PreSharedKey(identity: "benchmark", passphrase: "the simulation benchmark's key, not a secret")

func configuration(_ name: String) -> MultipeerSession.Configuration {
    var configuration = MultipeerSession.Configuration(
        serviceType: "_bench._tcp",
        peer: PeerInfo(displayName: name),
        psk: key
    )
    configuration.logger.logLevel = .critical
    return configuration
}

/// One trial: the whole test, and the second freeze-and-thaw alone, in wall time.
func trial(seed: UInt64) async throws -> (test: Duration, again: Duration) {
    let clock = ContinuousClock()
    let start = clock.now
    let world = SimulatedWorld(seed: seed)
    return try await Task(executorPreference: world.executor) {
        let captain = world.addHost("captain")
        let purser = world.addHost("purser")
        let a = captain.makeSession(configuration: configuration("captain"))
        let b = purser.makeSession(configuration: configuration("purser"))
        captain.start(a)
        purser.start(b)
        let together = { @Sendable in a.activePeers.count == 1 && b.activePeers.count == 1 }
        try await world.run(until: together, within: .seconds(10))
        purser.freeze()
        try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))
        purser.thaw()
        try await world.run(until: together, within: .seconds(20))
        let test = clock.now - start
        let again = clock.now
        purser.freeze()
        try await world.run(until: { a.activePeers.isEmpty }, within: .seconds(10))
        purser.thaw()
        try await world.run(until: together, within: .seconds(20))
        let second = clock.now - again
        await world.shutdown()
        return (test, second)
    }.value
}

func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1_000 + Double(duration.components.attoseconds) / 1e15
}

func summary(_ values: [Double]) -> String {
    let sorted = values.sorted()
    let median = sorted[sorted.count / 2]
    return String(
        format: "median %.1f ms (%.1f-%.1f, p90 %.1f)",
        median,
        sorted.first!,
        sorted.last!,
        sorted[sorted.count * 9 / 10]
    )
}

/// A message every session broadcasts in a busy mesh.
struct Tick: Codable, Sendable {
    var from: Int
    var number: Int
    var padding: String
}

/// A mesh of `count` sessions: joined, then `minutes` of simulated time, idle or busy.
func mesh(count: Int, minutes: Int, busy: Bool) async throws {
    let clock = ContinuousClock()
    let start = clock.now
    let world = SimulatedWorld(seed: 1)
    let report = try await Task(executorPreference: world.executor) {
        let hosts = (0..<count).map { world.addHost("host-\($0)") }
        let sessions = hosts.map { $0.makeSession(configuration: configuration($0.name)) }
        for (host, session) in zip(hosts, sessions) {
            host.start(session)
            // Every peer reads what arrives, on its host, as an application does.
            let ticks = session.messages(of: Tick.self)
            Task(executorPreference: host.executor) { for await _ in ticks {} }
        }
        let joined = { @Sendable in sessions.allSatisfy { $0.activePeers.count == count - 1 } }
        let simulatedJoin = try await world.run(until: joined, within: .seconds(120))
        let wallJoin = clock.now - start
        let running = clock.now
        let before = world.now
        if busy {
            let padding = String(repeating: "p", count: 160)
            for second in 0..<(minutes * 60) {
                for (index, session) in sessions.enumerated() {
                    try await session.broadcast(Tick(from: index, number: second, padding: padding))
                }
                await world.run(for: .seconds(1))
            }
        } else {
            await world.run(for: .seconds(Int64(minutes * 60)))
        }
        let simulated = world.now - before
        let wall = clock.now - running
        let together = joined()
        await world.shutdown()
        return (simulatedJoin, wallJoin, simulated, wall, together)
    }.value
    let (simulatedJoin, wallJoin, simulated, wall, together) = report
    let compression = seconds(simulated) / seconds(wall)
    print(
        String(
            format:
                "%d sessions, full mesh (%d links): joined in %.3f s simulated, %.2f s of wall time; %d simulated minutes %@ in %.2f s of wall time: %.0f simulated seconds a wall second; %@",
            count,
            count * (count - 1) / 2,
            seconds(simulatedJoin),
            seconds(wallJoin),
            minutes,
            busy ? "busy (each session broadcasting 200 B a second)" : "idle",
            seconds(wall),
            compression,
            together ? "every pair still active" : "NOT every pair active at the end"
        )
    )
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

if let index = arguments.firstIndex(of: "--mesh"), let count = Int(arguments[index + 1]) {
    let minutes = arguments.firstIndex(of: "--minutes").flatMap { Int(arguments[$0 + 1]) } ?? 10
    try await mesh(count: count, minutes: minutes, busy: arguments.contains("--busy"))
    exit(0)
}

_ = try await trial(seed: 0)  // warm up: GnuTLS and the allocator's first use
var tests: [Double] = []
var seconds: [Double] = []
for seed in 1...UInt64(trials) {
    let (test, again) = try await trial(seed: seed)
    tests.append(milliseconds(test))
    seconds.append(milliseconds(again))
}
print(
    "freeze, detect, thaw, rejoin, a test of its own (world made, two sessions joined): \(summary(tests)), \(trials) trials"
)
print("the same again in that world (a second fault): \(summary(seconds))")
