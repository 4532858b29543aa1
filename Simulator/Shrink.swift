import Foundation

/// Shrinks a failing world: replays it smaller (a shorter run, fewer hosts, fewer kinds of
/// fault and rarer faults, less traffic, a shorter quiet spell) and keeps each smaller world in
/// which the same promise still breaks, until none smaller breaks it or the time given is spent.
///
/// A seed draws its whole world from the plan, so a smaller plan draws another world, in which
/// the defect may not show: each smaller plan is tried with the seed and with a few seeds drawn
/// from it (VOPR keeps the seeds that fail faster for the same reason). One change keeps the
/// world it shrinks: a run stopped earlier is the same run until it stops, so a promise that
/// broke while the traffic ran breaks again in a run as long as that.
struct Shrinker {
    /// The world that failed, and how.
    var plan: RunPlan
    var promise: Promise
    var brokeAt: Duration?
    /// Wall time to spend.
    var budget: Duration
    /// Worlds tried at once.
    var jobs: Int

    /// Seeds each smaller plan is tried with, beside its own.
    static let otherSeeds = 2

    struct Outcome {
        /// The smallest world found in which the promise still breaks (the original if none).
        var plan: RunPlan
        var tried: Int
        var shrunk: Int
        var wall: Duration
    }

    func shrink() async -> Outcome {
        let clock = ContinuousClock()
        let start = clock.now
        var (smallest, brokeAt) = (plan, self.brokeAt)
        var (tried, shrunk) = (0, 0)
        var progress = true
        while progress, clock.now - start < budget {
            progress = false
            for candidates in Self.reductions(of: smallest, brokeAt: brokeAt) {
                guard clock.now - start < budget else { break }
                // Each plan with its seed and a few others; the first that breaks the promise, in
                // the order tried, wins (whatever finished first: one seed, one result).
                let attempts = candidates.flatMap { candidate in
                    ([candidate.seed] + (1...Self.otherSeeds).map { Self.seed(candidate.seed, $0) }).map {
                        var attempt = candidate
                        attempt.seed = $0
                        return attempt
                    }
                }
                var found: (index: Int, brokeAt: Duration?)?
                for batch in stride(from: 0, to: attempts.count, by: jobs) {
                    guard found == nil, clock.now - start < budget else { break }
                    let indices = batch..<min(batch + jobs, attempts.count)
                    let results = await withTaskGroup(of: (Int, RunResult).self) { group in
                        for index in indices {
                            let attempt = attempts[index]
                            group.addTask { (index, await SimulationRun(plan: attempt).run()) }
                        }
                        return await group.reduce(into: [(Int, RunResult)]()) { $0.append($1) }
                    }
                    tried += results.count
                    found = results.filter { $0.1.violations.contains { $0.promise == promise } }
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
        return Outcome(plan: smallest, tried: tried, shrunk: shrunk, wall: clock.now - start)
    }

    /// Smaller plans than `plan`, each step's alternatives together, the likeliest to keep the
    /// failure and the smallest first.
    static func reductions(of plan: RunPlan, brokeAt: Duration?) -> [[RunPlan]] {
        var steps: [[RunPlan]] = []
        func step(_ changes: [(inout RunPlan) -> Void]) {
            let plans = changes.map { change in
                var smaller = plan
                change(&smaller)
                return smaller
            }
            if !plans.isEmpty { steps.append(plans) }
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
        // Fewer kinds of fault: none, then each half.
        if !plan.faults.isEmpty {
            let half = plan.faults.count / 2
            var halves: [(inout RunPlan) -> Void] = [{ $0.faults = [] }]
            if half > 0 {
                halves.append { $0.faults = Array(plan.faults[..<half]) }
                halves.append { $0.faults = Array(plan.faults[half...]) }
            }
            step(halves)
            step([{ $0.faultEvery = plan.faultEvery * 2 }])
        }
        // Less traffic, a shorter quiet spell.
        if plan.messageRate > 0.25 { step([{ $0.messageRate = plan.messageRate / 2 }]) }
        if plan.quiet >= second * 2 { step([{ $0.quiet = (plan.quiet / 2).rounded(to: second) }]) }
        return steps
    }

    /// The `number`th other seed tried beside `seed` (SplitMix64's finaliser of the two).
    static func seed(_ seed: UInt64, _ number: Int) -> UInt64 {
        var z = seed &+ UInt64(number) &* 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return (z ^ (z >> 31)) % 1_000_000_000
    }
}

extension Duration {
    /// Rounded up to a whole number of `unit`s, at least one.
    fileprivate func rounded(to unit: Duration) -> Duration {
        let units = max(1, Int64((self / unit).rounded(.up)))
        return unit * units
    }
}
