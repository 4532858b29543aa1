import Foundation
import MultipeerSession
import MultipeerSessionTesting
import Synchronization
import Testing

@testable import MultipeerSync

/// Stores over real sessions in the simulated world (MultipeerSessionTesting): the network,
/// DNS-SD and the clock simulated, each store's disk a storage in memory. Deterministic by seed.
@Suite struct StoreSimulationTests {
    struct Entry: SyncRecord, Equatable {
        var id: String
        var text: String
    }

    struct Station {
        let host: SimulatedHost
        let session: MultipeerSession
        let storage: MemoryStorage
        let store: SyncStore
        /// The peers its store completed an exchange with (its events say): met, so its
        /// writes from now on are pushed to them as they are made.
        let exchanged: Exchanged
    }

    final class Exchanged: Sendable {
        private let peers = Mutex<Set<UUID>>([])
        func insert(_ peer: UUID) { _ = peers.withLock { $0.insert(peer) } }
        var count: Int { peers.withLock(\.count) }
    }

    static let groupKey = try! PreSharedKey(identity: "store-simulation", passphrase: "simulation tests only")

    /// A station on `host`: its session and store started there, its wall clock the host's.
    static func station(on host: SimulatedHost, storage: MemoryStorage = MemoryStorage()) throws -> Station {
        let session = host.makeSession(
            configuration: MultipeerSession.Configuration(
                serviceType: "_store._tcp",
                peer: PeerInfo(displayName: host.name),
                psk: groupKey
            )
        )
        let store = try SyncStore(session: session, storage: storage) {
            UInt64(host.wallClock.timeIntervalSince1970 * 1_000)
        }
        host.start(session)
        let (exchanged, events) = (Exchanged(), store.events)
        Task(executorPreference: host.executor) { try await store.run() }
        Task(executorPreference: host.executor) {
            for await case .exchanged(let peer) in events { exchanged.insert(peer) }
        }
        return Station(host: host, session: session, storage: storage, store: store, exchanged: exchanged)
    }

    /// Writes `count` entries on `station`, in its host's process, `batch` to a commit.
    static func write(_ count: Int, on station: Station, prefix: String, batch: Int = 1_000) {
        Task(executorPreference: station.host.executor) {
            let entries = (0..<count).map { Entry(id: "\(prefix)-\($0)", text: "\(prefix) wrote \($0)") }
            for start in stride(from: 0, to: count, by: batch) {
                try await station.store.collection(Entry.self).put(entries[start..<min(start + batch, count)])
            }
        }
    }

    /// Three stations, joined, then cut in two (one alone, two together) while each writes;
    /// after the heal, every station holds the same versions (equal fingerprints), every write
    /// of each. A station's clock stepped an hour back while apart changes nothing of that.
    @Test(arguments: 1...6 as ClosedRange<UInt64>)
    func threeStationsConvergeAfterAPartitionHeals(seed: UInt64) async throws {
        let world = SimulatedWorld(seed: seed)
        let stations = try ["captain", "relief", "purser"].map { try Self.station(on: world.addHost($0)) }
        try await world.run(until: { stations.allSatisfy { $0.exchanged.count == 2 } }, within: .seconds(20))

        let cut = await world.partition([stations[0].host])
        stations[2].host.stepClock(by: .seconds(-3_600))
        for (index, station) in stations.enumerated() {
            Self.write(20 + 10 * index, on: station, prefix: station.host.name)
        }
        let written = 20 + 30 + 40
        try await world.run(
            until: { (try? stations[0].storage.items().count) == 20 && (try? stations[1].storage.items().count) == 70 },
            within: .seconds(30)
        )
        #expect(try stations[2].storage.items().count == 70, "the two together share their writes live")
        await cut.heal()

        let converged = try await world.run(
            until: {
                let held = stations.map { (try? $0.storage.items()) ?? [] }
                return held[0].count == written && held.allSatisfy { $0 == held[0] }
            },
            within: .seconds(60)
        )
        let fingerprints = try stations.map { RangeReconciliation.fingerprint(of: try $0.storage.items()[...]) }
        #expect(Set(fingerprints).count == 1, "seed \(seed)")
        world.record("converged \(converged) after the heal")
        await world.shutdown()
    }

    /// A fresh station takes a whole store in one exchange: each side records that the other
    /// holds every version it stored, so when they next meet neither looks through what came
    /// from the other (docs/SYNC.md 6 and 8); what each wrote apart still crosses.
    @Test func aStoreTakenInOneExchangeIsProvedHeldWhole() async throws {
        let world = SimulatedWorld(seed: 3)
        let captain = try Self.station(on: world.addHost("captain"))
        let reliefHost = world.addHost("relief")
        Self.write(300, on: captain, prefix: "log")
        try await world.run(until: { (try? captain.storage.items().count) == 300 }, within: .seconds(20))
        let relief = try Self.station(on: reliefHost)
        try await world.run(
            until: { captain.exchanged.count == 1 && relief.exchanged.count == 1 },
            within: .seconds(30)
        )
        #expect(try relief.storage.items().count == 300)
        for (station, peer) in [(relief, captain), (captain, relief)] {
            let held = try #require(station.storage.held()[peer.session.peerID])
            #expect(held.sequence == station.storage.sequence(), "\(station.host.name): \(held)")
        }

        let cut = await world.partition([captain.host])
        Self.write(5, on: captain, prefix: "apart")
        Self.write(5, on: relief, prefix: "away")
        try await world.run(
            until: { (try? captain.storage.items().count) == 305 && (try? relief.storage.items().count) == 305 },
            within: .seconds(20)
        )
        await cut.heal()
        try await world.run(
            until: { (try? captain.storage.items()) == (try? relief.storage.items()) },
            within: .seconds(60)
        )
        #expect(try captain.storage.items().count == 310)
        await world.shutdown()
    }

    /// The relief station is killed while the captain's writes reach it, and restarts on what
    /// its disk kept: it loses nothing it committed, and gets the rest at the next meeting.
    /// (A thousand versions: signatures are made and checked for real, which a sanitizer's
    /// build makes many times slower.)
    @Test(arguments: 1...2 as ClosedRange<UInt64>)
    func aStationKilledWhileTakingRestartsAndCatchesUp(seed: UInt64) async throws {
        let world = SimulatedWorld(seed: seed)
        let captain = try Self.station(on: world.addHost("captain"))
        let reliefHost = world.addHost("relief")
        let disk = MemoryStorage()
        _ = try Self.station(on: reliefHost, storage: disk)
        try await world.run(until: { captain.exchanged.count == 1 }, within: .seconds(20))
        // (A narrow path: the writes take seconds to arrive, so the kill comes part way.)
        await reliefHost.impair(latency: .milliseconds(5), bandwidth: 50_000)

        Self.write(1_000, on: captain, prefix: "log", batch: 50)
        try await world.run(until: { ((try? disk.items().count) ?? 0) >= 200 }, within: .seconds(30))
        await reliefHost.kill()
        let kept = try disk.items()
        #expect(kept.count < 1_000, "killed part way: \(kept.count) taken")

        reliefHost.restart()
        await reliefHost.repair()
        let relief = try Self.station(on: reliefHost, storage: disk)
        try await world.run(
            until: { ((try? relief.storage.items().count) ?? 0) == 1_000 && relief.session.activePeers.count == 1 },
            within: .seconds(60)
        )
        #expect(Set(kept).isSubset(of: Set(try disk.items())), "nothing it had taken was lost")
        #expect(try disk.items() == captain.storage.items())
        await world.shutdown()
    }
}
