package import MultipeerSession

import struct Foundation.UUID

/// A change the application sees: a record as it was and as it is, and the write that made it.
package struct RecordChange: Hashable, Sendable {
    package var record: RecordKey
    package var before: [String: [UInt8]]?
    package var after: [String: [UInt8]]?
    /// The latest write taken for the record in the commit that changed it.
    package var stamp: VersionStamp
}

/// What taking a batch of versions from a peer did: the changes the application sees, and the
/// versions refused, each with its reason (never stored, never relayed).
package struct Taken: Sendable {
    package var changes: [RecordChange] = []
    package var refusals: [SyncError] = []
}

/// A station's writes and intake over its storage (docs/SYNC.md 1-3): every write stamped by the
/// station's clock and signed by its identity, every version taken checked, and what each
/// commit keeps durable before anyone hears of it. Not thread-safe: its owner calls it one call
/// at a time.
package struct Station {
    package let identity: PeerIdentity
    package let storage: any SyncStorage
    private var clock: HybridLogicalClock

    /// A station over `storage`, whose clock goes on from the latest timestamp it committed.
    package init(identity: PeerIdentity, storage: any SyncStorage) throws(SyncError) {
        self.identity = identity
        self.storage = storage
        clock = HybridLogicalClock(latest: try storage.clock())
    }

    /// The record as the application sees it (nil: absent or deleted).
    package func record(_ key: RecordKey) throws(SyncError) -> [String: [UInt8]]? {
        RecordIntake(taking: [], kept: try storage.versions(of: key)).after
    }

    /// Writes `change` to `record` at wall time `now` (milliseconds since 1970): stamped after
    /// every write this station made or took, signed, and durable when it returns.
    /// - Throws: `invalidWrite` if the write breaks a bound of docs/SYNC.md 3; `storageFailed`.
    package mutating func write(
        _ change: RecordWrite.Change,
        to record: RecordKey,
        now: UInt64
    )
        throws(SyncError) -> RecordChange
    {
        var next = clock
        let version = try SignedVersion(
            collection: record.collection,
            recordID: record.id,
            timestamp: next.tick(now: now),
            change: change,
            signedBy: identity
        )
        let intake = RecordIntake(taking: [version], kept: try storage.versions(of: record))
        try storage.commit(
            StorageCommit(
                added: intake.added,
                removed: intake.removed.map(\.id),
                keys: [identity.key],
                clock: version.stamp.timestamp
            )
        )
        clock = next
        return RecordChange(record: record, before: intake.before, after: intake.after, stamp: version.stamp)
    }

    /// Takes versions a peer sent, with the keys of their origins (`keys`; a key committed
    /// before serves too), at wall time `now`: each is checked (its origin's signature, a
    /// timestamp at most a day ahead of `now`), and what holds a register is kept, all of the
    /// batch in one durable commit. A version refused is never stored and never stops the rest.
    /// - Throws: `storageFailed`; the refusals are in the result.
    package mutating func take(_ versions: [SignedVersion], keys: [PeerKey], now: UInt64) throws(SyncError) -> Taken {
        var taken = Taken()
        var next = clock
        let offered = Dictionary(keys.map { ($0.peerID, $0) }, uniquingKeysWith: { first, _ in first })
        var accepted: [RecordKey: [SignedVersion]] = [:]
        var learnt: [UUID: PeerKey] = [:]
        for version in versions {
            do throws(SyncError) {
                let origin = version.stamp.origin
                let known = offered[origin] == nil ? try storage.key(of: origin) : nil
                guard let key = offered[origin] ?? known else {
                    throw SyncError(
                        .badSignature,
                        "version \(version.stamp) of \(version.collection)/\(version.recordID) came without its origin's key, and this station has none"
                    )
                }
                try version.verify(with: key)
                guard next.observe(version.stamp.timestamp, now: now) else {
                    throw SyncError(
                        .clockAhead,
                        "version \(version.stamp) of \(version.collection)/\(version.recordID) is stamped more than a day ahead of this station's clock"
                    )
                }
                if offered[origin] != nil { learnt[origin] = key }
                accepted[RecordKey(collection: version.collection, id: version.recordID), default: []].append(version)
            } catch {
                taken.refusals.append(error)
            }
        }
        var commit = StorageCommit(clock: next.latest)
        for (record, incoming) in accepted.sorted(by: { $0.key.description < $1.key.description }) {
            let intake = RecordIntake(taking: incoming, kept: try storage.versions(of: record))
            commit.added += intake.added
            commit.removed += intake.removed.map(\.id)
            if intake.changed, let stamp = intake.registers.latest {
                taken.changes.append(
                    RecordChange(record: record, before: intake.before, after: intake.after, stamp: stamp)
                )
            }
        }
        commit.keys = Array(learnt.values)
        try storage.commit(commit)
        clock = next
        return taken
    }
}
