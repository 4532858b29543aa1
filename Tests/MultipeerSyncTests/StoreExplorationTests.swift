import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Synchronization
import Testing

@testable import MultipeerSync

/// The replicated store as an application of the testing product's explorer: a store on every
/// host, kept across its restarts on a disk in memory, each writing now and then, in worlds
/// drawn from seeds with every kind of fault. Its promise: once healed, every store holds the
/// same versions, among them every write that returned anywhere.
@Suite struct StoreExplorationTests {
    struct Entry: SyncRecord, Equatable {
        var id: String
        var text: String
    }

    static let groupKey = try! PreSharedKey(identity: "store-exploration", passphrase: "simulation tests only")
    static let converges = ExplorationPromise(
        "once healed, every store holds the same versions, every acknowledged write among them"
    )

    final class Stations: ExploredApplication {
        final class Acknowledged: Sendable {
            let count = Mutex(0)
        }

        /// Each host's disk: kept across its restarts, as a file is.
        var storages: [String: MemoryStorage] = [:]
        var stores: [String: SyncStore] = [:]
        var runs: [String: Task<Void, Never>] = [:]
        let acknowledged = Acknowledged()
        var random: SimulationRandom
        var written = 0

        init(_ run: ExplorationRun) {
            random = SimulationRandom(seed: run.random.next())
        }

        func start(on host: SimulatedHost, in run: ExplorationRun) -> MultipeerSession {
            runs[host.name]?.cancel()
            let storage = storages[host.name] ?? MemoryStorage()
            storages[host.name] = storage
            let session = host.makeSession(
                configuration: MultipeerSession.Configuration(
                    serviceType: "_store._tcp",
                    peer: PeerInfo(displayName: host.name),
                    psk: StoreExplorationTests.groupKey
                )
            )
            let store = try! SyncStore(session: session, storage: storage) {
                UInt64(max(0, host.wallClock.timeIntervalSince1970 * 1_000))
            }
            host.start(session)
            stores[host.name] = store
            runs[host.name] = Task(executorPreference: host.executor) { try? await store.run() }
            return session
        }

        func begin(in run: ExplorationRun) {
            run.schedule(after: random.exponential(mean: .milliseconds(500))) { [unowned self] in
                if let host = run.hosts.filter(run.isRunning).randomElement(using: &random),
                    let store = stores[host.name]
                {
                    written += 1
                    let (entry, acknowledged) = (Entry(id: "e\(written)", text: "\(host.name) wrote"), acknowledged)
                    Task(executorPreference: host.executor) {
                        guard (try? await store.collection(Entry.self).put(entry)) != nil else { return }
                        acknowledged.count.withLock { $0 += 1 }
                    }
                }
                begin(in: run)
            }
        }

        func settle(in run: ExplorationRun) async {
            let (storages, acknowledged) = (Array(storages.values), acknowledged.count.withLock { $0 })
            if acknowledged < Int(run.plan.duration.components.seconds) {
                run.broke(StoreExplorationTests.converges, "\(run.world.now) only \(acknowledged) writes returned")
            }
            let converged = { @Sendable in
                let held = storages.map { (try? $0.items()) ?? [] }
                return held[0].count >= acknowledged && held.allSatisfy { $0 == held[0] }
            }
            if (try? await run.world.run(until: converged, within: .seconds(60))) == nil {
                let counts = storages.map { (try? $0.items().count) ?? -1 }
                run.broke(
                    StoreExplorationTests.converges,
                    "\(run.world.now) 60 s after the quiet spell the stores hold \(counts) versions, \(acknowledged) writes acknowledged"
                )
            }
        }
    }

    @Test func storesConvergeInWorldsDrawnFromSeeds() async {
        let explorer = SimulationExplorer(
            plan: ExplorationPlan(hosts: 2...4, duration: .seconds(40), faultEvery: .seconds(5), quiet: .seconds(5))
        )
        let failures = await explorer.explore(seeds: 1...8, jobs: 2) { Stations($0) }
        #expect(failures.isEmpty, "\(failures.map(\.description).joined(separator: "\n\n"))")
    }
}
