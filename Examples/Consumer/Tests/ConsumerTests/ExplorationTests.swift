import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Synchronization
import Testing

/// An application's own tests with the testing product's explorer: its hosts, its work, its
/// promises, in worlds drawn from seeds with every kind of fault, the package's promises
/// checked beside its own.
@Suite struct ExplorationTests {
    /// A shared log: every host broadcasts numbered entries, reliably. Its promises: each
    /// receiver's application gets each sender's entries once and in order (per incarnation of
    /// each), and once the world is healed, an entry every host writes reaches every other.
    final class SharedLog: ExploredApplication {
        struct Entry: Codable, Sendable {
            var sender: UInt64
            var number: Int
        }

        /// What each receiver (an incarnation) got from each sender (an incarnation), in order.
        final class Received: Sendable {
            let entries = Mutex<[UInt64: [UInt64: [Int]]]>([:])

            func add(_ entry: Entry, to receiver: UInt64) {
                entries.withLock { $0[receiver, default: [:]][entry.sender, default: []].append(entry.number) }
            }
        }

        static let inOrder = ExplorationPromise("each entry reaches each application once, in order")
        static let reachesAll = ExplorationPromise("once healed, an entry every host writes reaches every other")
        /// Broken on purpose by ``planted``: it shows what a failure says.
        static let neverWhileFrozen = ExplorationPromise("no entry is written while a host is frozen")

        let received = Received()
        var numbers: [UInt64: Int] = [:]
        var random: SimulationRandom
        let planted: Bool

        init(_ run: ExplorationRun, planted: Bool = false) {
            random = SimulationRandom(seed: run.random.next())
            self.planted = planted
        }

        func start(on host: SimulatedHost, in run: ExplorationRun) -> MultipeerSession {
            var configuration = MultipeerSession.Configuration(
                serviceType: "_log._tcp",
                peer: PeerInfo(displayName: host.name),
                psk: groupKey
            )
            configuration.logger.logLevel = .error  // (faults by the hundred: the trace says what happened)
            let session = host.makeSession(configuration: configuration)
            host.start(session)
            let (entries, received, incarnation) = (session.messages(of: Entry.self), received, session.incarnation)
            Task(executorPreference: host.executor) {
                for await (_, entry) in entries { received.add(entry, to: incarnation) }
            }
            return session
        }

        func begin(in run: ExplorationRun) {
            run.schedule(after: random.exponential(mean: .milliseconds(500))) { [unowned self] in
                write(in: run)
                begin(in: run)
            }
        }

        /// A host that runs broadcasts its next entry.
        func write(in run: ExplorationRun) {
            guard let host = run.hosts.filter(run.isRunning).randomElement(using: &random) else { return }
            if planted, run.hosts.contains(where: { run.isAlive($0) && !run.isRunning($0) }) {
                run.broke(Self.neverWhileFrozen, "\(run.world.now) \(host.name) wrote while a host was stopped")
            }
            let session = run.session(on: host)
            let number = numbers[session.incarnation, default: 0] + 1
            numbers[session.incarnation] = number
            Task(executorPreference: host.executor) {
                try? await session.broadcast(Entry(sender: session.incarnation, number: number))
            }
        }

        func check(in run: ExplorationRun) {
            for (receiver, senders) in received.entries.withLock({ $0 }) {
                for (sender, numbers) in senders where zip(numbers, numbers.dropFirst()).contains(where: { $0 >= $1 }) {
                    run.broke(Self.inOrder, "\(run.world.now) \(receiver) got \(sender)'s entries as \(numbers)")
                }
            }
        }

        func settle(in run: ExplorationRun) async {
            // Every host writes one more; every other host's application gets it.
            var written: [(sender: UInt64, number: Int)] = []
            for host in run.hosts {
                let session = run.session(on: host)
                let number = numbers[session.incarnation, default: 0] + 1
                numbers[session.incarnation] = number
                written.append((session.incarnation, number))
                _ = try? await session.broadcast(Entry(sender: session.incarnation, number: number))
            }
            let receivers = run.hosts.map { run.session(on: $0).incarnation }
            let (received, last) = (received, written)
            let arrived = { @Sendable in
                let entries = received.entries.withLock { $0 }
                return receivers.allSatisfy { receiver in
                    last.allSatisfy { $0.sender == receiver || entries[receiver]?[$0.sender]?.last == $0.number }
                }
            }
            if (try? await run.world.run(until: arrived, within: .seconds(30))) == nil {
                run.broke(Self.reachesAll, "\(run.world.now) the last entries did not all arrive within 30 s")
            }
        }
    }

    static let plan = ExplorationPlan(hosts: 2...4, duration: .seconds(30), quiet: .seconds(5))

    @Test func anApplicationHoldsItsPromisesAndThePackagesInWorldsDrawnFromSeeds() async {
        let explorer = SimulationExplorer(plan: Self.plan)
        let failures = await explorer.explore(seeds: 1...12, jobs: 2) { SharedLog($0) }
        #expect(failures.isEmpty, "\(failures.map(\.description).joined(separator: "\n\n"))")
    }

    @Test func aSeedAndAPlanReplayTheSameWorld() async throws {
        try #require(
            ProcessInfo.processInfo.environment["SWIFT_DETERMINISTIC_HASHING"] != nil,
            "a seed replays only with SWIFT_DETERMINISTIC_HASHING=1 (scripts/consumer.sh sets it)"
        )
        var plan = Self.plan
        plan.seed = 7
        let explorer = SimulationExplorer(plan: plan)
        let first = await explorer.run(plan) { SharedLog($0) }
        let second = await explorer.run(plan) { SharedLog($0) }
        #expect(first.faults > 0 && first.trace.lines.count > 50)
        #expect(first.trace.lines == second.trace.lines)
    }

    @Test func aBrokenPromiseSaysTheSeedThePromiseTheTraceAndAPlanThatReplaysItSmaller() async throws {
        let explorer = SimulationExplorer(
            plan: ExplorationPlan(hosts: 4...6, duration: .seconds(60), faultEvery: .seconds(4), quiet: .seconds(5))
        )
        let failures = await explorer.explore(seeds: 1...4, jobs: 2, shrinking: .seconds(120)) {
            SharedLog($0, planted: true)
        }
        let failure = try #require(failures.first, "a host is frozen within a minute of faults in some world")
        #expect(failure.promise == SharedLog.neverWhileFrozen)
        #expect(failure.description.contains("seed \(failure.outcome.plan.seed):"))
        #expect(
            failure.description.contains("replay: ExplorationPlan(seed: \(failure.outcome.plan.seed), hosts: 4...6")
        )
        #expect(failure.description.contains("fault: frozen"), "the trace before it broke")
        let smallest = try #require(failure.smallest, "\(failure)")
        #expect(smallest.hosts.upperBound < failure.outcome.hosts || smallest.duration < failure.outcome.plan.duration)
        #expect(failure.description.contains("the smallest world that breaks it: \(smallest)"))
        // The smallest world, replayed from its plan, breaks the same promise.
        let replayed = await explorer.run(smallest) { SharedLog($0, planted: true) }
        #expect(replayed.broken.first?.promise == SharedLog.neverWhileFrozen)
    }
}
