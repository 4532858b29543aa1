import Foundation
import MultipeerSession
import MultipeerSync
import NIOConcurrencyHelpers

/// A line of the log every simulated host's store keeps (merged as a whole record): the
/// simulator's workload of the replicated store (docs/SYNC.md).
struct LogLine: SyncRecord, Equatable {
    var id: String
    var text: String
}

/// What the simulated stores were asked to write and acknowledged, and the store's promises
/// (docs/SYNC.md, the article Keeping records in sync) checked at the end of a world: after
/// healing and a quiet spell every station holds the same records; nothing acknowledged is
/// lost (each record is its latest acknowledged write, or a later one); no deleted record comes
/// back; no version is refused (nobody in these worlds forges or lies).
final class StoreLedger: Sendable {
    /// The records a world's stores write: few, so that writes of one record meet.
    static let records = 40

    /// An acknowledged write: its stamp, and the record it left (nil: deleted).
    struct Write: Sendable {
        var stamp: VersionStamp
        var line: LogLine?
        var host: String
        var at: Duration
    }

    private struct State {
        /// The latest acknowledged write of each record.
        var latest: [String: Write] = [:]
        var writes = 0
    }

    private let state = NIOLockedValueBox(State())

    /// A write's `put` or `delete` returned: it is durable, and this is its stamp.
    func acknowledged(_ id: String, _ write: Write) {
        state.withLockedValue { state in
            state.writes += 1
            if state.latest[id].map({ $0.stamp < write.stamp }) ?? true { state.latest[id] = write }
        }
    }

    var latest: [String: Write] { state.withLockedValue { $0.latest } }
    var writeCount: Int { state.withLockedValue { $0.writes } }

    /// What a station holds of each record: the latest write it took (its stamp), and the
    /// record as the application sees it, read from its storage.
    static func held(
        in storage: MemoryStorage
    ) -> [String: (latest: VersionStamp?, visible: [String: [UInt8]]?)] {
        // (Every record the workload writes: one whose delete was collected has no version left.)
        let ids = Set(storage.records(in: LogLine.collectionName)).union((0..<records).map { "line-\($0)" })
        let keys = Set(ids.map { RecordKey(collection: LogLine.collectionName, id: $0) })
        let versions = storage.versions(of: keys)
        let collected = storage.collected(of: keys)
        var held: [String: (latest: VersionStamp?, visible: [String: [UInt8]]?)] = [:]
        for key in keys {
            let intake = RecordIntake(taking: [], kept: versions[key] ?? [], collected: collected[key]?.stamp)
            if let latest = intake.registers.latest { held[key.id] = (latest, intake.after) }
        }
        return held
    }

    /// Whether every station's records are the same (what the application sees of each).
    static func converged(_ storages: [MemoryStorage]) -> Bool {
        let visible = storages.map { held(in: $0).compactMapValues(\.visible) }
        return visible.dropFirst().allSatisfy { $0 == visible.first }
    }

    /// The promises broken at the end of a world: `stations` are the hosts' names and storages,
    /// converged or not.
    func broken(_ stations: [(name: String, storage: MemoryStorage)], now: Duration) -> [String] {
        var broken: [String] = []
        let held = stations.map { (name: $0.name, records: Self.held(in: $0.storage)) }
        if let first = held.first {
            for other in held.dropFirst() {
                let differing = Set(first.records.keys).union(other.records.keys).filter {
                    first.records[$0]?.visible != other.records[$0]?.visible
                }.sorted()
                if let id = differing.first {
                    broken.append(
                        "\(now) the stores of \(first.name) and \(other.name) differ in \(differing.count) records, \(id) first (after healing and a quiet spell every station holds the same records)"
                    )
                }
            }
        }
        for (id, write) in latest.sorted(by: { $0.key < $1.key }) {
            for station in held {
                let (latest, visible) = station.records[id] ?? (nil, nil)
                guard let latest, latest >= write.stamp else {
                    broken.append(
                        "\(now) \(station.name) holds \(id) as of \(latest.map(String.init(describing:)) ?? "never written"), older than the write \(write.host) acknowledged at \(write.at) (\(write.stamp)): an acknowledged write is never lost"
                    )
                    continue
                }
                guard latest == write.stamp else { continue }  // (a later write, durable but not acknowledged, won)
                let read = visible.flatMap { try? MessageEncoding.decode(LogLine.self, from: $0[""] ?? []) }
                if read != write.line {
                    broken.append(
                        "\(now) \(station.name) holds \(id) as \(read.map { "\"\($0.text)\"" } ?? "deleted"), but its latest write, acknowledged by \(write.host) at \(write.at), left it \(write.line.map { "\"\($0.text)\"" } ?? "deleted")\(write.line == nil ? " (a deleted record never comes back)" : "")"
                    )
                }
            }
        }
        return broken
    }
}
