import Foundation
import MultipeerSession
import MultipeerSync
import NIOConcurrencyHelpers

/// A line of the log every simulated host's store keeps (merged as a whole record): the
/// simulator's workload of the replicated store (docs/SYNC.md).
struct LogLine: LogRecord {
    var id: String
    var text: String
}

/// A memo, of the same shape: a second collection, which a host that keeps only the log
/// (``SyncStore/Configuration/keeps``, docs/SYNC.md 6) neither takes nor passes on.
struct LogMemo: LogRecord {
    var id: String
    var text: String
}

/// A record the simulated applications write: an id and a text.
protocol LogRecord: SyncRecord, Equatable {
    init(id: String, text: String)
    var text: String { get }
}

/// What the simulated stores were asked to write and acknowledged, and the store's promises
/// (docs/SYNC.md, the article Keeping records in sync) checked at the end of a world: after
/// healing and a quiet spell every station that keeps a collection holds the same records of
/// it; nothing acknowledged is lost (each record is its latest acknowledged write, or a later
/// one, at every station that keeps it); no deleted record comes back; no version is refused
/// (nobody in these worlds forges or lies, or sends a station what it does not keep).
final class StoreLedger: Sendable {
    /// The records of each collection a world's stores write: few, so that writes of one
    /// record meet.
    static let records = 40
    /// The collections the stores write.
    static let collections = [LogLine.collectionName, LogMemo.collectionName]

    /// A station's name, storage, and the collections it keeps.
    typealias Station = (name: String, storage: MemoryStorage, keeps: SyncScope)

    /// An acknowledged write: its stamp, and the text of the record it left (nil: deleted).
    struct Write: Sendable {
        var stamp: VersionStamp
        var text: String?
        var host: String
        var at: Duration
    }

    private struct State {
        /// The latest acknowledged write of each record.
        var latest: [RecordKey: Write] = [:]
        var writes = 0
    }

    private let state = NIOLockedValueBox(State())

    /// A write's `put` or `delete` returned: it is durable, and this is its stamp.
    func acknowledged(_ id: RecordKey, _ write: Write) {
        state.withLockedValue { state in
            state.writes += 1
            if state.latest[id].map({ $0.stamp < write.stamp }) ?? true { state.latest[id] = write }
        }
    }

    var latest: [RecordKey: Write] { state.withLockedValue { $0.latest } }
    var writeCount: Int { state.withLockedValue { $0.writes } }

    /// What a station holds of each record: the latest write it took (its stamp), and the
    /// record as the application sees it, read from its storage.
    static func held(
        in storage: MemoryStorage,
        of collection: String
    ) -> [String: (latest: VersionStamp?, visible: [String: [UInt8]]?)] {
        // (Every record the workload writes: one whose delete was collected has no version left.)
        let ids = Set(storage.records(in: collection)).union((0..<records).map { "line-\($0)" })
        let keys = Set(ids.map { RecordKey(collection: collection, id: $0) })
        let versions = storage.versions(of: keys)
        let collected = storage.collected(of: keys)
        var held: [String: (latest: VersionStamp?, visible: [String: [UInt8]]?)] = [:]
        for key in keys {
            let intake = RecordIntake(taking: [], kept: versions[key] ?? [], collected: collected[key]?.stamp)
            if let latest = intake.registers.latest { held[key.id] = (latest, intake.after) }
        }
        return held
    }

    /// Whether every station that keeps a collection holds the same records of it (what the
    /// application sees of each).
    static func converged(_ stations: [Station]) -> Bool {
        collections.allSatisfy { collection in
            let visible = stations.filter { $0.keeps.contains(collection) }.map {
                held(in: $0.storage, of: collection).compactMapValues(\.visible)
            }
            return visible.dropFirst().allSatisfy { $0 == visible.first }
        }
    }

    /// The promises broken at the end of a world by `stations`, converged or not.
    func broken(_ stations: [Station], now: Duration) -> [String] {
        var broken: [String] = []
        for collection in Self.collections {
            let held = stations.filter { $0.keeps.contains(collection) }.map {
                (name: $0.name, records: Self.held(in: $0.storage, of: collection))
            }
            if let first = held.first {
                for other in held.dropFirst() {
                    let differing = Set(first.records.keys).union(other.records.keys).filter {
                        first.records[$0]?.visible != other.records[$0]?.visible
                    }.sorted()
                    if let id = differing.first {
                        broken.append(
                            "\(now) the stores of \(first.name) and \(other.name) differ in \(differing.count) records of \(collection), \(id) first (after healing and a quiet spell every station that keeps a collection holds the same records of it)"
                        )
                    }
                }
            }
            let written = latest.filter { $0.key.collection == collection }.sorted { $0.key.id < $1.key.id }
            for (key, write) in written {
                for station in held {
                    let (latest, visible) = station.records[key.id] ?? (nil, nil)
                    guard let latest, latest >= write.stamp else {
                        broken.append(
                            "\(now) \(station.name) holds \(key) as of \(latest.map(String.init(describing:)) ?? "never written"), older than the write \(write.host) acknowledged at \(write.at) (\(write.stamp)): an acknowledged write is never lost"
                        )
                        continue
                    }
                    guard latest == write.stamp else { continue }  // (a later write, durable but not acknowledged, won)
                    let read = visible.flatMap { try? MessageEncoding.decode(LogLine.self, from: $0[""] ?? []) }?.text
                    if read != write.text {
                        broken.append(
                            "\(now) \(station.name) holds \(key) as \(read.map { "\"\($0)\"" } ?? "deleted"), but its latest write, acknowledged by \(write.host) at \(write.at), left it \(write.text.map { "\"\($0)\"" } ?? "deleted")\(write.text == nil ? " (a deleted record never comes back)" : "")"
                        )
                    }
                }
            }
        }
        return broken
    }
}
