import MultipeerSessionTesting
import Synchronization
import Testing

/// Work ready at one instant on several hosts runs in an order drawn from the seed; each host's
/// own work keeps the order it came in.
@Suite struct OrderTests {
    final class Log: Sendable {
        let steps = Mutex<[String]>([])
    }

    /// Three hosts each take three steps at the same simulated instant (a step, then a yield);
    /// returns the steps in the order they ran.
    static func steps(seed: UInt64, order: SimulationOrder) async -> [String] {
        let world = SimulatedWorld(seed: seed, order: order)
        let steps = await Task(executorPreference: world.executor) {
            let log = Log()
            for host in ["a", "b", "c"].map(world.addHost) {
                Task(executorPreference: host.executor) {
                    for step in 0..<3 {
                        log.steps.withLock { $0.append("\(host.name)\(step)") }
                        await Task.yield()
                    }
                }
            }
            await world.run(for: .milliseconds(1))
            return log.steps.withLock { $0 }
        }.value
        await world.shutdown()
        return steps
    }

    @Test func firstInFirstOutRunsWorkAsItBecameReady() async {
        for seed: UInt64 in [1, 2, 3] {
            #expect(
                await Self.steps(seed: seed, order: .firstInFirstOut) == [
                    "a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2", "c2",
                ]
            )
        }
    }

    @Test func drawnOrdersDifferBySeedAndEachSeedKeepsItsOwn() async {
        var orders: Set<[String]> = []
        for seed: UInt64 in 1...20 {
            let steps = await Self.steps(seed: seed, order: .drawn)
            #expect(steps.count == 9)
            for host in ["a", "b", "c"] {
                #expect(
                    steps.filter { $0.hasPrefix(host) } == ["\(host)0", "\(host)1", "\(host)2"],
                    "seed \(seed): \(steps)"
                )
            }
            #expect(await Self.steps(seed: seed, order: .drawn) == steps, "seed \(seed) run twice")
            orders.insert(steps)
        }
        // 1,680 orders keep each host's steps in order; 20 seeds draw more than a handful.
        #expect(orders.count >= 10, "\(orders.count) orders in 20 seeds")
    }
}
