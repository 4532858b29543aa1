import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Synchronization
import Testing

@testable import NavlogSync

/// navlog-sync as an application of the testing product's explorer: a `NavlogNode` on every
/// host, over its own SQLite database (a real file, kept across the host's restarts as a
/// station's disk is), its crew adding entries and editing each other's now and then, in worlds
/// drawn from seeds with every kind of fault. Its promise, the one docs/NAVLOG.md makes: once
/// healed, every host holds the same log, with every entry whose `add` returned anywhere.
///
/// (The store's hybrid logical clock reads the machine's clock here, and the entries' ids are
/// random, so two runs of one seed draw the same faults but not always the same trace.)
@Suite struct NavlogExplorationTests {
    static let groupKey = try! PreSharedKey(identity: "navlog-exploration", passphrase: "simulation tests only")
    static let converges = ExplorationPromise(
        "once healed, every navlog-sync host holds the same log, every entry whose add returned among them"
    )

    final class Crew: ExploredApplication {
        /// What the hosts' tasks share with the test: each host's running node, the ids of the
        /// entries whose `add` returned.
        final class Shared: Sendable {
            let nodes = Mutex<[String: NavlogNode]>([:])
            let added = Mutex<[UUID]>([])
        }

        let folder: URL
        /// Each host's database, opened once: its disk, across the host's restarts.
        var stores: [String: NavlogStore] = [:]
        let shared = Shared()
        var random: SimulationRandom
        var written = 0

        init(_ run: ExplorationRun, in folder: URL) {
            self.folder = folder
            random = SimulationRandom(seed: run.random.next())
        }

        func start(on host: SimulatedHost, in run: ExplorationRun) -> MultipeerSession {
            let store = stores[host.name] ?? open(host)
            stores[host.name] = store
            var configuration = MultipeerSession.Configuration(
                serviceType: "_navlog._tcp",
                peer: PeerInfo(displayName: host.name),
                psk: NavlogExplorationTests.groupKey
            )
            configuration.logger.logLevel = .critical  // (faults make every kind of failure; the trace says what)
            let session = host.makeSession(
                configuration: NavlogNode.configuration(configuration, for: store),
                identity: store.identity
            )
            let (shared, name) = (shared, host.name)
            host.start(session) {
                let node = try await NavlogNode(store: store, session: session)
                shared.nodes.withLock { $0[name] = node }
                try await node.run()
            }
            return session
        }

        /// The host's database, its identity file holding the host's own (drawn from the seed).
        private func open(_ host: SimulatedHost) -> NavlogStore {
            let path = folder.appendingPathComponent("\(host.name).db").path
            try! host.identity.write(toFile: path + ".identity")
            return try! NavlogStore(path: path)
        }

        func willKill(_ host: SimulatedHost, in run: ExplorationRun) {
            _ = shared.nodes.withLock { $0.removeValue(forKey: host.name) }
        }

        func begin(in run: ExplorationRun) {
            run.schedule(after: random.exponential(mean: .milliseconds(500))) { [unowned self] in
                let nodes = shared.nodes.withLock { $0 }
                if let host = run.hosts.filter(run.isRunning).randomElement(using: &random),
                    let node = nodes[host.name]
                {
                    written += 1
                    let (number, shared) = (written, shared)
                    // One action in three edits an entry someone added: the crew correcting
                    // each other, so concurrent versions of one entry meet.
                    let edited = number % 3 == 0 ? shared.added.withLock { $0.randomElement(using: &random) } : nil
                    Task(executorPreference: host.executor) {
                        if let edited {
                            _ = try? await node.edit(edited.uuidString, [.remarks: "\(host.name) #\(number)"])
                        } else if let entry = try? await node.add([.leg: "\(number)", .waypoint: "W\(number)"]) {
                            shared.added.withLock { $0.append(entry.id) }
                        }
                    }
                }
                begin(in: run)
            }
        }

        func settle(in run: ExplorationRun) async {
            let added = Set(shared.added.withLock { $0 })
            if added.count < Int(run.plan.duration.components.seconds) / 2 {
                run.broke(NavlogExplorationTests.converges, "\(run.world.now) only \(added.count) adds returned")
            }
            var logs: [String: [NavlogEntry]] = [:]
            for _ in 0..<60 {
                let nodes = shared.nodes.withLock { $0 }
                logs = (try? await run.world.run(within: .seconds(10)) { await Self.logs(of: nodes) }) ?? [:]
                if logs.count == run.hosts.count, let first = logs.values.first,
                    logs.values.allSatisfy({ $0 == first }), added.isSubset(of: first.map(\.id))
                {
                    return
                }
                await run.world.run(for: .seconds(1))
            }
            let held = logs.sorted { $0.key < $1.key }.map { name, log in
                "\(name) \(log.count) entries, \(added.subtracting(log.map(\.id)).count) of the returned adds missing"
            }
            let same = Set(logs.values).count == 1 ? "the same log" : "logs that differ"
            run.broke(
                NavlogExplorationTests.converges,
                "\(run.world.now) 60 s after the quiet spell \(logs.count) of \(run.hosts.count) hosts answer, with \(same): \(held.joined(separator: "; ")); \(added.count) adds returned"
            )
        }

        private static func logs(of nodes: [String: NavlogNode]) async -> [String: [NavlogEntry]] {
            var logs: [String: [NavlogEntry]] = [:]
            for (name, node) in nodes { logs[name] = try? await node.entries() }
            return logs
        }
    }

    @Test func navlogSyncConvergesInWorldsDrawnFromSeeds() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("navlog-exploration-\(UUID())")
        defer { try? FileManager.default.removeItem(at: folder) }
        let explorer = SimulationExplorer(
            plan: ExplorationPlan(hosts: 2...4, duration: .seconds(40), faultEvery: .seconds(5), quiet: .seconds(5))
        )
        let failures = await explorer.explore(seeds: 1...6, jobs: 2) { run in
            let world = folder.appendingPathComponent("seed \(run.plan.seed)")
            try! FileManager.default.createDirectory(at: world, withIntermediateDirectories: true)
            return Crew(run, in: world)
        }
        #expect(failures.isEmpty, "\(failures.map(\.description).joined(separator: "\n\n"))")
    }
}
