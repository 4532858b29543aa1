import Foundation

/// Draws simulated worlds from seeds and runs an application in each (``ExploredApplication``):
/// hosts, faults of every kind, the order of work ready at one instant, all from the seed; the
/// package's promises checked beside the application's. A failure says the seed, the promise,
/// the trace, and the plan that replays it; shrinking finds a smaller world that fails the
/// same way.
///
/// ```swift
/// func explore(_ application: @escaping @Sendable (ExplorationRun) -> any ExploredApplication) async {
///     let explorer = SimulationExplorer(plan: ExplorationPlan(hosts: 2...4, duration: .seconds(30)))
///     let failures = await explorer.explore(seeds: 1...20, jobs: 2, shrinking: .seconds(60), application: application)
///     precondition(failures.isEmpty, failures.map(\.description).joined(separator: "\n\n"))
/// }
/// ```
///
/// The testing article's "Worlds drawn from seeds" shows an application written for it.
///
/// A world runs on a thread of its own, in simulated time, and replays exactly from its seed
/// and plan where Swift's hashing is deterministic (`SWIFT_DETERMINISTIC_HASHING=1`).
public struct SimulationExplorer: Sendable {
    /// The plan every world is drawn from (its seed replaced by each one explored).
    public var plan: ExplorationPlan

    /// An explorer of worlds drawn from `plan`.
    public init(plan: ExplorationPlan = ExplorationPlan()) {
        self.plan = plan
    }

    /// How one world went.
    public struct Outcome: Sendable {
        /// The plan it was drawn from, seed and all: it replays the world.
        public var plan: ExplorationPlan
        /// How many hosts it drew.
        public var hosts: Int
        /// The promises broken, in the order they broke; empty if it held them all.
        public var broken: [BrokenPromise]
        /// Every event of every session and every fault, with its simulated time.
        public var trace: SimulationTrace
        /// The trace until the first promise broke while the work ran (all of it otherwise).
        public var traceToFailure: [SimulationTrace.Line]
        /// When the first promise broke, if it broke while the work ran (not while the world
        /// settled after): the same world with its work stopped then breaks it the same way.
        public var brokeAt: Duration?
        /// Faults injected.
        public var faults: Int
        /// Simulated time the sessions ran, summed over them.
        public var sessionTime: Duration
        /// Simulated time the world ran.
        public var simulated: Duration

        /// Whether it held every promise.
        public var passed: Bool { broken.isEmpty }
    }

    /// Runs one world: `plan` (seed and all), with the application `make` makes for it.
    /// Stops at the first broken promise unless `keepGoing`.
    public func run(
        _ plan: ExplorationPlan,
        keepGoing: Bool = false,
        application make: @escaping @Sendable (ExplorationRun) -> any ExploredApplication
    ) async -> Outcome {
        let run = ExplorationRun(plan: plan, stopAtFirst: !keepGoing)
        let hosts = await Task(executorPreference: run.world.executor) {
            let application = make(run)
            await run.drive(application)
            return run.nodes.count
        }.value
        let trace = run.world.trace
        return Outcome(
            plan: plan,
            hosts: hosts,
            broken: run.broken,
            trace: trace,
            traceToFailure: Array(trace.lines.prefix(run.failedAt ?? trace.lines.count)),
            brokeAt: run.brokeAt,
            faults: run.faults,
            sessionTime: run.sessionTime,
            simulated: run.world.now
        )
    }

    /// Runs a world for each seed, `jobs` at a time, and returns those that broke a promise,
    /// each shrunk for up to `shrinking` of wall time (zero: not shrunk).
    public func explore(
        seeds: ClosedRange<UInt64>,
        jobs: Int = 1,
        shrinking: Duration = .zero,
        application make: @escaping @Sendable (ExplorationRun) -> any ExploredApplication
    ) async -> [Failure] {
        var failures: [Failure] = []
        var queue = Array(seeds)
        await withTaskGroup(of: Outcome.self) { group in
            func startNext() {
                guard !queue.isEmpty else { return }
                var plan = self.plan
                plan.seed = queue.removeFirst()
                group.addTask { await run(plan, application: make) }
            }
            for _ in 0..<max(1, jobs) { startNext() }
            while let outcome = await group.next() {
                startNext()
                guard !outcome.passed else { continue }
                var failure = Failure(outcome: outcome)
                if shrinking > .zero {
                    failure.smallest = await shrink(outcome, for: shrinking, jobs: jobs, application: make).plan
                }
                failures.append(failure)
            }
        }
        return failures.sorted { $0.outcome.plan.seed < $1.outcome.plan.seed }
    }

    /// A world that broke a promise: how, and the smallest world found that breaks it too.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// How the world went.
        public var outcome: Outcome
        /// The smallest plan found whose world breaks the same promise, if shrinking found one.
        public var smallest: ExplorationPlan?

        /// The promise that broke first.
        public var promise: ExplorationPromise { outcome.broken[0].promise }

        /// The seed, the promises broken, the trace's last 40 lines before the first broke,
        /// and the plans that replay it (`SimulationExplorer().run(plan) { ... }`).
        public var description: String {
            var lines = ["seed \(outcome.plan.seed): \(outcome.hosts) hosts, broke \"\(promise)\""]
            lines += outcome.broken.map { "  \($0.text)" }
            lines.append("  the trace's last 40 lines before it broke:")
            lines += outcome.traceToFailure.suffix(40).map { "    \($0)" }
            lines.append("  replay: \(outcome.plan)")
            if let smallest { lines.append("  the smallest world that breaks it: \(smallest)") }
            return lines.joined(separator: "\n")
        }
    }

    /// What shrinking found.
    public struct Shrunk: Sendable {
        /// The smallest plan found whose world breaks the promise (the original if none).
        public var plan: ExplorationPlan
        /// Worlds run, and how many times a smaller one broke the promise.
        public var tried: Int
        public var shrunk: Int
    }

    /// Seeds each smaller plan is tried with, beside its own.
    static let otherSeeds = 2

    /// Shrinks a failed world: replays it smaller (a shorter run, fewer hosts, fewer kinds of
    /// fault and rarer faults, less traffic, a shorter quiet spell) and keeps each smaller
    /// world in which the same promise still breaks, until none smaller breaks it or `budget`
    /// of wall time is spent.
    ///
    /// A seed draws its whole world from the plan, so a smaller plan draws another world, in
    /// which the defect may not show: each smaller plan is tried with its seed and with two
    /// seeds drawn from it (VOPR keeps the seeds that fail faster for the same reason). One
    /// change keeps the world: a run whose work stops earlier is the same run until it stops,
    /// so a promise that broke while the work ran breaks again in a run as long as that.
    public func shrink(
        _ failed: Outcome,
        for budget: Duration,
        jobs: Int = 1,
        application make: @escaping @Sendable (ExplorationRun) -> any ExploredApplication
    ) async -> Shrunk {
        guard let promise = failed.broken.first?.promise else { return Shrunk(plan: failed.plan, tried: 0, shrunk: 0) }
        let clock = ContinuousClock()
        let start = clock.now
        var (smallest, brokeAt) = (failed.plan, failed.brokeAt)
        var (tried, shrunk) = (0, 0)
        var progress = true
        while progress, clock.now - start < budget {
            progress = false
            for candidates in Self.reductions(of: smallest, brokeAt: brokeAt) {
                guard clock.now - start < budget else { break }
                // Each plan with its seed and a few others; the first that breaks the promise, in
                // the order tried, wins (whatever finished first: one seed, one result).
                let attempts = candidates.flatMap { candidate in
                    ([candidate.seed] + Self.seeds(beside: candidate.seed)).map {
                        var attempt = candidate
                        attempt.seed = $0
                        return attempt
                    }
                }
                var found: (index: Int, brokeAt: Duration?)?
                for batch in stride(from: 0, to: attempts.count, by: max(1, jobs)) {
                    guard found == nil, clock.now - start < budget else { break }
                    let indices = batch..<min(batch + max(1, jobs), attempts.count)
                    let outcomes = await withTaskGroup(of: (Int, Outcome).self) { group in
                        for index in indices {
                            let attempt = attempts[index]
                            group.addTask { (index, await run(attempt, application: make)) }
                        }
                        return await group.reduce(into: [(Int, Outcome)]()) { $0.append($1) }
                    }
                    tried += outcomes.count
                    found = outcomes.filter { $0.1.broken.contains { $0.promise == promise } }
                        .min { $0.0 < $1.0 }.map { ($0.0, $0.1.brokeAt) }
                }
                if let found {
                    (smallest, brokeAt) = (attempts[found.index], found.brokeAt)
                    shrunk += 1
                    progress = true
                    break
                }
            }
        }
        return Shrunk(plan: smallest, tried: tried, shrunk: shrunk)
    }

    /// Smaller plans than `plan`, each step's alternatives together, the likeliest to keep the
    /// failure and the smallest first.
    static func reductions(of plan: ExplorationPlan, brokeAt: Duration?) -> [[ExplorationPlan]] {
        var steps: [[ExplorationPlan]] = []
        func step(_ changes: [(inout ExplorationPlan) -> Void]) {
            steps.append(
                changes.map { change in
                    var smaller = plan
                    change(&smaller)
                    return smaller
                }
            )
        }
        // Shorter: as long as it took to break (the same run until then), else half.
        let second = Duration.seconds(1)
        let shorter =
            brokeAt.map { ($0 + second).rounded(to: second) }.flatMap { $0 < plan.duration ? $0 : nil }
            ?? (plan.duration >= second * 2 ? (plan.duration / 2).rounded(to: second) : nil)
        if let shorter { step([{ $0.duration = shorter }]) }
        // Fewer hosts: the fewest first.
        if plan.hosts.upperBound > 2 {
            step((2..<plan.hosts.upperBound).map { count in { $0.hosts = count...count } })
        }
        // Fewer kinds of fault: none, then each half; then rarer.
        if !plan.faults.isEmpty {
            let half = plan.faults.count / 2
            var halves: [(inout ExplorationPlan) -> Void] = [{ $0.faults = [] }]
            if half > 0 {
                halves.append { $0.faults = Array(plan.faults[..<half]) }
                halves.append { $0.faults = Array(plan.faults[half...]) }
            }
            step(halves)
            step([{ $0.faultEvery = plan.faultEvery * 2 }])
        }
        // Less work, a shorter quiet spell.
        if plan.traffic > 1.0 / 64 { step([{ $0.traffic = plan.traffic / 2 }]) }
        if plan.quiet >= second * 2 { step([{ $0.quiet = (plan.quiet / 2).rounded(to: second) }]) }
        return steps
    }

    /// The other seeds tried beside `seed`: drawn from it, under a billion (to read and type).
    static func seeds(beside seed: UInt64) -> [UInt64] {
        var generator = SimulationRandom(seed: seed)
        return (0..<otherSeeds).map { _ in generator.next() % 1_000_000_000 }
    }
}

extension Duration {
    /// Rounded up to a whole number of `unit`s, at least one.
    fileprivate func rounded(to unit: Duration) -> Duration {
        unit * max(1, Int64((self / unit).rounded(.up)))
    }
}
