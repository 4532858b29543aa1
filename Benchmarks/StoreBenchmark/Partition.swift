// The partition phase: stores in a simulated world (MultipeerSessionTesting: the real sessions
// and stores over a simulated network and clock; each store's disk in memory). 16 stations
// meet, are cut into two halves for 60 s of simulated time while each half writes 1,000 new
// records (one every 60 ms, on its stations in turn), then the partition heals: the simulated
// time until every station is active with every other again, and until every station holds
// all 2,000 records.
import Foundation
import MultipeerSession
import MultipeerSessionTesting
import MultipeerSync

struct PartitionFigures: Codable {
    var stations: Int
    var writesPerSide: Int
    var partitionSeconds: Double
    var rejoinedSeconds: Double
    var convergedSeconds: Double
    var wallSeconds: Double
}

func partitionPhase(
    stations count: Int = 16,
    writesPerSide: Int = 1_000,
    seed: UInt64 = 60
) async throws
    -> PartitionFigures
{
    let wall = ContinuousClock.now
    let world = SimulatedWorld(seed: seed)
    return try await Task(executorPreference: world.executor) {
        let hosts = (0..<count).map { world.addHost("station-\($0)") }
        var stores: [(host: SimulatedHost, session: MultipeerSession, storage: MemoryStorage, store: SyncStore)] = []
        for host in hosts {
            var configuration = MultipeerSession.Configuration(
                serviceType: "_partition._tcp",
                peer: PeerInfo(displayName: host.name),
                psk: groupKey
            )
            configuration.logger.logLevel = .critical
            let session = host.makeSession(configuration: configuration)
            let storage = MemoryStorage()
            let store = try SyncStore(
                session: session,
                storage: storage,
                now: { UInt64(max(0, host.wallClock.timeIntervalSince1970 * 1_000)) }
            )
            host.start(session)
            Task(executorPreference: host.executor) { try? await store.run() }
            stores.append((host, session, storage, store))
        }
        let sessions = stores.map(\.session)
        let together = { @Sendable in sessions.allSatisfy { $0.activePeers.count == count - 1 } }
        try await world.run(until: together, within: .seconds(60))
        let halves = (Array(stores.prefix(count / 2)), Array(stores.dropFirst(count / 2)))
        let partition = await world.partition(halves.0.map(\.host), from: halves.1.map(\.host))
        let started = world.now
        for write in 0..<writesPerSide {
            await world.run(for: .milliseconds(60))
            for (side, half) in [halves.0, halves.1].enumerated() {
                let station = half[write % half.count]
                let entry = entry(write, by: "side-\(side)")
                try await world.run(within: .seconds(30)) {
                    try await station.store.collection(Entry.self).put(entry)
                }
            }
        }
        await world.run(for: max(.zero, .seconds(60) - (world.now - started)))
        let partitioned = world.now - started
        await partition.heal()
        let healed = world.now
        // (Records travel through any station that holds them: every station may hold them all
        // before every pair is linked again.)
        let storages = stores.map(\.storage)
        let total = 2 * writesPerSide
        try await world.run(until: { storages.allSatisfy { $0.counts().versions == total } }, within: .seconds(300))
        let converged = world.now - healed
        try await world.run(until: together, within: .seconds(120))
        let rejoined = world.now - healed
        // (Every station the same records: the same versions, so the same fingerprint.)
        let fingerprints = Set(storages.map { RangeReconciliation.fingerprint(of: try! $0.items()) })
        precondition(fingerprints.count == 1, "the stations hold \(total) versions each, but not the same")
        await world.shutdown()
        return PartitionFigures(
            stations: count,
            writesPerSide: writesPerSide,
            partitionSeconds: partitioned.seconds,
            rejoinedSeconds: rejoined.seconds,
            convergedSeconds: converged.seconds,
            wallSeconds: (ContinuousClock.now - wall).seconds
        )
    }.value
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
