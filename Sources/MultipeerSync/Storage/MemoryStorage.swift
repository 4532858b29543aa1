package import MultipeerSession
import NIOConcurrencyHelpers

import struct Foundation.UUID

/// A storage in memory, for tests: what a commit adds is there at once, and gone with the
/// storage.
package final class MemoryStorage: SyncStorage {
    private struct State {
        /// Every version kept, by id.
        var versions: [[UInt8]: SignedVersion] = [:]
        /// The ids of each record's versions.
        var records: [RecordKey: Set<[UInt8]>] = [:]
        var keys: [UUID: PeerKey] = [:]
        var clock = HLCTimestamp(rawValue: 0)
        var horizon = HLCTimestamp(rawValue: 0)
        var held: [UUID: Holding] = [:]
        /// Each kept version's sequence number, and the last one given.
        var sequences: [[UInt8]: UInt64] = [:]
        /// The peer each kept version came from, if it came from one.
        var sources: [[UInt8]: UUID] = [:]
        var sequence: UInt64 = 0
        var collected: [RecordKey: CollectedDelete] = [:]
    }

    private let state = NIOLockedValueBox(State())

    package init() {}

    package func clock() -> HLCTimestamp {
        state.withLockedValue { $0.clock }
    }

    package func versions(of records: Set<RecordKey>) -> [RecordKey: [SignedVersion]] {
        state.withLockedValue { state in
            var found: [RecordKey: [SignedVersion]] = [:]
            for record in records {
                guard let ids = state.records[record] else { continue }
                found[record] = ids.map { state.versions[$0]! }
            }
            return found
        }
    }

    package func versions(withIDs ids: ArraySlice<[UInt8]>, bytes: Int) -> (versions: [SignedVersion], read: Int) {
        state.withLockedValue { state in
            var (found, total, read) = ([SignedVersion](), 0, 0)
            for id in ids where total < bytes {
                read += 1
                guard let version = state.versions[id] else { continue }
                found.append(version)
                total += version.bytes.count
            }
            return (found, read)
        }
    }

    package func kept(_ ids: [[UInt8]]) -> Set<[UInt8]> {
        state.withLockedValue { state in Set(ids.filter { state.versions[$0] != nil }) }
    }

    package func scan(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?,
        _ body: (RangeReconciliation.Item) -> Bool
    ) {
        SortedItems(kept(in: collections).map(\.item)).scan(from: lower, below: upper, body)
    }

    package func count(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?
    ) -> Int {
        kept(in: collections).count { !lower.isAbove($0.item) && upper.isAbove($0.item) }
    }

    package func versions(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?,
        limit: Int,
        bytes: Int
    ) -> [SignedVersion] {
        let versions = kept(in: collections).map { (item: $0.item, version: $0) }
            .filter { !lower.isAbove($0.item) && upper.isAbove($0.item) }
            .sorted { $0.item < $1.item }
            .map(\.version)
        var (page, total) = ([SignedVersion](), 0)
        for version in versions where page.count < limit && (page.isEmpty || total + version.bytes.count <= bytes) {
            page.append(version)
            total += version.bytes.count
        }
        return page
    }

    /// The versions kept of `collections` (nil: of all).
    private func kept(in collections: Set<String>?) -> [SignedVersion] {
        state.withLockedValue { state in
            state.versions.values.filter { version in collections?.contains(version.collection) ?? true }
        }
    }

    package func attachments() -> [SyncAttachment: Set<String>] {
        state.withLockedValue { state in
            var found: [SyncAttachment: Set<String>] = [:]
            for version in state.versions.values {
                for attachment in version.attachments { found[attachment, default: []].insert(version.collection) }
            }
            return found
        }
    }

    package func records(in collection: String) -> [String] {
        state.withLockedValue { state in state.records.keys.filter { $0.collection == collection }.map(\.id).sorted() }
    }

    package func counts() -> (versions: Int, deletes: Int) {
        state.withLockedValue { state in
            (state.versions.count, state.versions.values.filter { $0.change == .delete }.count)
        }
    }

    package func horizon() -> HLCTimestamp {
        state.withLockedValue { $0.horizon }
    }

    package func held() -> [UUID: Holding] {
        state.withLockedValue { $0.held }
    }

    package func sequence() -> UInt64 {
        state.withLockedValue { $0.sequence }
    }

    package func versions(storedAfter sequence: UInt64, notFrom peer: UUID) -> [SignedVersion] {
        state.withLockedValue { state in
            state.sequences.filter { $0.value > sequence && state.sources[$0.key] != peer }
                .sorted { $0.value < $1.value }.compactMap { state.versions[$0.key] }
        }
    }

    package func collected(of records: Set<RecordKey>) -> [RecordKey: CollectedDelete] {
        state.withLockedValue { state in state.collected.filter { records.contains($0.key) } }
    }

    package func tombstones(below horizon: HLCTimestamp) -> [[UInt8]] {
        state.withLockedValue { state in
            state.versions.values.filter { $0.change == .delete && $0.stamp.timestamp < horizon }.map(\.id)
        }
    }

    package func key(of origin: UUID) -> PeerKey? {
        state.withLockedValue { $0.keys[origin] }
    }

    package func commit(_ commit: StorageCommit) {
        state.withLockedValue { state in
            for id in commit.removed {
                guard let version = state.versions.removeValue(forKey: id) else { continue }
                state.sequences[id] = nil
                state.sources[id] = nil
                let record = RecordKey(collection: version.collection, id: version.recordID)
                state.records[record]?.remove(id)
                if state.records[record]?.isEmpty == true { state.records[record] = nil }
            }
            for version in commit.added where state.versions[version.id] == nil {
                state.sequence += 1
                state.sequences[version.id] = state.sequence
                state.sources[version.id] = commit.source
                state.versions[version.id] = version
                state.records[RecordKey(collection: version.collection, id: version.recordID), default: []].insert(
                    version.id
                )
            }
            for key in commit.keys { state.keys[key.peerID] = key }
            state.clock = max(state.clock, commit.clock)
            for (peer, held) in commit.held { state.held[peer] = state.held[peer]?.joined(held) ?? held }
            if let horizon = commit.horizon { state.horizon = max(state.horizon, horizon) }
            for delete in commit.collected {
                let record = RecordKey(collection: delete.collection, id: delete.recordID)
                if state.collected[record].map({ $0.stamp < delete.stamp }) ?? true {
                    state.collected[record] = CollectedDelete(delete)
                }
            }
        }
    }
}
