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
    /// The versions stored: new to this station, each holding a register (what it relays).
    package var kept: [SignedVersion] = []
    /// The deletes this station collected that hide a write the peer offered: the peer lacks
    /// them (docs/SYNC.md 8), and is given them.
    package var hiddenBy: [SignedVersion] = []
}

/// A station's writes and intake over its storage (docs/SYNC.md 1-3): every write stamped by the
/// station's clock and signed by its identity, every version taken checked, and what each
/// commit keeps durable before anyone hears of it. Not thread-safe: its owner calls it one call
/// at a time.
package struct Station {
    package let identity: PeerIdentity
    package let storage: any SyncStorage
    /// Who may write each collection whose rule this station knows; a collection not listed
    /// may be written by any member.
    package var writers: [String: SyncWriters] = [:]
    /// The attachments of the versions let go since the owner last emptied it: their files may
    /// be held by no version now (docs/SYNC.md 9).
    package var released: Set<SyncAttachment> = []
    private var clock: HybridLogicalClock

    /// A station over `storage`, whose clock goes on from the latest timestamp it committed.
    package init(identity: PeerIdentity, storage: any SyncStorage) throws(SyncError) {
        self.identity = identity
        self.storage = storage
        clock = HybridLogicalClock(latest: try storage.clock())
    }

    /// The clock's latest timestamp: no version this station holds is later.
    package var latest: HLCTimestamp { clock.latest }

    /// What this station holds now: every version up to its clock's latest timestamp, and up
    /// to its storage's last sequence number.
    package func holding() throws(SyncError) -> Holding {
        Holding(timestamp: clock.latest, sequence: try storage.sequence())
    }

    /// Records that `peer` holds every version this station held when it held `held` (an
    /// exchange with it completed, docs/SYNC.md 8).
    package func acknowledge(_ peer: UUID, held: Holding) throws(SyncError) {
        try storage.commit(StorageCommit(clock: clock.latest, held: [peer: held]))
    }

    /// Collects the deletes below `horizon` (docs/SYNC.md 8): lets go of their versions (they
    /// no longer take part in reconciliation), keeping each one by its record, so a version
    /// older than it is still not taken, and a peer that offers one is given the delete.
    /// Returns how many were collected.
    @discardableResult
    package func collect(below horizon: HLCTimestamp) throws(SyncError) -> Int {
        let tombstones = try storage.versions(withIDs: try storage.tombstones(below: horizon)[...], bytes: .max)
            .versions
        var commit = StorageCommit(clock: clock.latest, horizon: horizon)
        commit.removed = tombstones.map(\.id)
        commit.collected = tombstones
        try storage.commit(commit)
        return tombstones.count
    }

    /// The records as the application sees them (one absent or deleted is left out).
    package func records(_ keys: Set<RecordKey>) throws(SyncError) -> [RecordKey: [String: [UInt8]]] {
        try stampedRecords(keys).mapValues(\.fields)
    }

    /// The records as the application sees them, each with the stamp of the latest write it
    /// holds (one absent or deleted is left out).
    package func stampedRecords(
        _ keys: Set<RecordKey>
    ) throws(SyncError) -> [RecordKey: (fields: [String: [UInt8]], stamp: VersionStamp)] {
        try storage.versions(of: keys).compactMapValues { versions in
            let intake = RecordIntake(taking: [], kept: versions)
            guard let fields = intake.after, let stamp = intake.registers.latest else { return nil }
            return (fields, stamp)
        }
    }

    /// The record as the application sees it (nil: absent or deleted).
    package func record(_ key: RecordKey) throws(SyncError) -> [String: [UInt8]]? {
        RecordIntake(taking: [], kept: try storage.versions(of: [key])[key] ?? []).after
    }

    /// Writes each change to its record at wall time `now` (milliseconds since 1970): each
    /// stamped after every write this station made or took, signed, and all of them durable in
    /// one commit when it returns. Returns what the application sees change, in the writes'
    /// order.
    /// - Throws: `invalidWrite` if a write breaks a bound of docs/SYNC.md 3 (then nothing is
    ///   written); `storageFailed`.
    package mutating func write(
        _ writes: [(record: RecordKey, change: RecordWrite.Change)],
        now: UInt64
    ) throws(SyncError) -> (changes: [RecordChange], versions: [SignedVersion]) {
        try write(
            writes.map { ($0.record, $0.change, []) },
            kept: try storage.versions(of: Set(writes.map(\.record))),
            now: now
        )
    }

    /// Sets each record's `fields` (nil: deletes it), writing only what changes what the
    /// application sees: nothing for a record that already holds them (or a delete of one that
    /// is absent), and only the fields whose bytes differ; a field the record holds and
    /// `fields` lacks keeps its value (a newer build's field, say). A write holds the
    /// attachments of the fields it writes (`attachments`, by field). Later entries for one
    /// record see earlier ones. Otherwise as ``write(_:now:)``.
    package mutating func put(
        _ records: [(record: RecordKey, fields: [String: [UInt8]]?, attachments: [String: Set<SyncAttachment>])],
        now: UInt64
    ) throws(SyncError) -> (changes: [RecordChange], versions: [SignedVersion]) {
        let kept = try storage.versions(of: Set(records.map(\.record)))
        var current = kept.compactMapValues { RecordIntake(taking: [], kept: $0).after }
        var writes: [(record: RecordKey, change: RecordWrite.Change, attachments: Set<SyncAttachment>)] = []
        for (record, fields, attachments) in records {
            let before = current[record]
            guard let fields else {
                if before != nil { writes.append((record, .delete, [])) }
                current[record] = nil
                continue
            }
            let changed = fields.filter { name, value in before?[name] != value }
            let held = changed.keys.reduce(into: Set<SyncAttachment>()) { $0.formUnion(attachments[$1] ?? []) }
            if !changed.isEmpty { writes.append((record, .set(changed), held)) }
            current[record] = (before ?? [:]).merging(fields) { _, new in new }
        }
        return try write(writes, kept: kept, now: now)
    }

    private mutating func write(
        _ writes: [(record: RecordKey, change: RecordWrite.Change, attachments: Set<SyncAttachment>)],
        kept: [RecordKey: [SignedVersion]],
        now: UInt64
    ) throws(SyncError) -> (changes: [RecordChange], versions: [SignedVersion]) {
        guard !writes.isEmpty else { return ([], []) }
        for (record, _, _) in writes {
            if let writers = writers[record.collection], !writers.allows(identity.peerID) {
                throw SyncError(
                    .notPermitted,
                    "this station (\(identity.peerID)) may not write \(record.collection): its writers are \(writers)"
                )
            }
        }
        var next = clock
        let stamped = writes.map {
            (record: $0.record, change: $0.change, attachments: $0.attachments, timestamp: next.tick(now: now))
        }
        let identity = identity
        let signed = stamped.parallelMap { write in
            Result { () throws(SyncError) in
                try SignedVersion(
                    collection: write.record.collection,
                    recordID: write.record.id,
                    timestamp: write.timestamp,
                    change: write.change,
                    attachments: write.attachments,
                    signedBy: identity
                )
            }
        }
        let versions = try signed.map { result throws(SyncError) in try result.get() }
        var pending: [RecordKey: [SignedVersion]] = [:]
        var commit = StorageCommit(keys: [identity.key], clock: next.latest)
        var changes: [RecordChange] = []
        for version in versions {
            let record = RecordKey(collection: version.collection, id: version.recordID)
            let earlier = (kept[record] ?? []) + (pending[record] ?? [])
            let intake = RecordIntake(taking: [version], kept: earlier)
            pending[record, default: []].append(version)
            changes.append(
                RecordChange(record: record, before: intake.before, after: intake.after, stamp: version.stamp)
            )
        }
        var released: [SyncAttachment] = []
        for (record, written) in pending {
            let intake = RecordIntake(taking: written, kept: kept[record] ?? [])
            commit.added += intake.added
            commit.removed += intake.removed.map(\.id)
            released += intake.removed.flatMap(\.attachments)
        }
        try storage.commit(commit)
        self.released.formUnion(released)
        clock = next
        return (changes, commit.added)
    }

    /// Takes versions `peer` sent, with the keys of their origins (`keys`; a key committed
    /// before serves too), at wall time `now`: each is checked (its origin's signature, a
    /// timestamp at most a day ahead of `now`), and what holds a register is kept, all of the
    /// batch in one durable commit. A version refused is never stored and never stops the rest.
    /// - Parameter verified: Which of `versions` (by position) had their signature checked
    ///   already, with the key this would check it with (``Verification``); the others are
    ///   checked here.
    /// - Throws: `storageFailed`; the refusals are in the result.
    package mutating func take(
        _ versions: [SignedVersion],
        keys: [PeerKey],
        from peer: UUID? = nil,
        now: UInt64,
        verified: [Bool] = []
    ) throws(SyncError) -> Taken {
        var taken = Taken()
        var next = clock
        let offered = Dictionary(keys.map { ($0.peerID, $0) }, uniquingKeysWith: { first, _ in first })
        let records = Set(versions.map { RecordKey(collection: $0.collection, id: $0.recordID) })
        let kept = try storage.versions(of: records)
        let collected = try storage.collected(of: records)
        let held = Set(kept.values.joined().map(\.id))
        var known: [UUID: PeerKey] = [:]
        var accepted: [RecordKey: [SignedVersion]] = [:]
        var learnt: [UUID: PeerKey] = [:]
        var checking: [(version: SignedVersion, key: PeerKey?, verified: Bool)] = []
        // (One held needs no check, nor a second copy of the same bytes. Copies of one id with
        // other signatures are each checked: a forged copy first never shadows a good one.)
        var copies = Set<[UInt8]>()
        for (index, version) in versions.enumerated()
        where !held.contains(version.id) && copies.insert(version.bytes).inserted {
            let origin = version.stamp.origin
            if let writers = writers[version.collection], !writers.allows(origin) {
                taken.refusals.append(
                    SyncError(
                        .notPermitted,
                        "version \(version.stamp) of \(version.collection)/\(version.recordID) was written by \(origin), who may not write \(version.collection) (its writers are \(writers))"
                    )
                )
                continue
            }
            if offered[origin] == nil, known[origin] == nil { known[origin] = try storage.key(of: origin) }
            checking.append((version, offered[origin] ?? known[origin], index < verified.count && verified[index]))
        }
        let checked = checking.parallelMap { version, key, verified in
            Result { () throws(SyncError) in
                guard !verified else { return version }
                guard let key else {
                    throw SyncError(
                        .badSignature,
                        "version \(version.stamp) of \(version.collection)/\(version.recordID) came without its origin's key, and this station has none"
                    )
                }
                try version.verify(with: key)
                return version
            }
        }
        var taking = Set<[UInt8]>()
        for result in checked {
            do throws(SyncError) {
                let version = try result.get()
                guard !taking.contains(version.id) else { continue }  // (a second good copy)
                let origin = version.stamp.origin
                guard next.observe(version.stamp.timestamp, now: now) else {
                    throw SyncError(
                        .clockAhead,
                        "version \(version.stamp) of \(version.collection)/\(version.recordID) is stamped more than a day ahead of this station's clock"
                    )
                }
                if let key = offered[origin] { learnt[origin] = key }
                taking.insert(version.id)
                accepted[RecordKey(collection: version.collection, id: version.recordID), default: []].append(version)
            } catch {
                taken.refusals.append(error)
            }
        }
        var commit = StorageCommit(clock: next.latest)
        var released: [SyncAttachment] = []
        commit.source = peer
        for (record, incoming) in accepted.sorted(by: { $0.key.description < $1.key.description }) {
            let intake = RecordIntake(taking: incoming, kept: kept[record] ?? [], collected: collected[record]?.stamp)
            if let delete = collected[record]?.version, incoming.contains(where: { $0.stamp < delete.stamp }) {
                taken.hiddenBy.append(delete)
            }
            commit.added += intake.added
            commit.removed += intake.removed.map(\.id)
            released += intake.removed.flatMap(\.attachments)
            if intake.changed, let stamp = intake.registers.latest {
                taken.changes.append(
                    RecordChange(record: record, before: intake.before, after: intake.after, stamp: stamp)
                )
            }
        }
        commit.keys = Array(learnt.values)
        try storage.commit(commit)
        self.released.formUnion(released)
        clock = next
        taken.kept = commit.added
        return taken
    }
}
