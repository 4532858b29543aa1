// What a test in a simulated world costs in wall time (issue 47): two sessions, one frozen,
// its detection seen, thawed, its rejoining seen; each trial a test as an application writes it
// (a world of its own), and then a second freeze in the same world, so that what a second
// fault costs shows too.
//
//   SimulationBenchmark [--trials N]
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
