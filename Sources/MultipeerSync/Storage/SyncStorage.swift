package import MultipeerSession

import struct Foundation.UUID

/// One record of one collection.
package struct RecordKey: Hashable, Sendable, CustomStringConvertible {
    package var collection: String
    package var id: String

    package init(collection: String, id: String) {
        self.collection = collection
        self.id = id
    }

    package var description: String { "\(collection)/\(id)" }
}

/// What a peer is known to hold of this station's versions: every one up to this clock
/// timestamp, and every one this station stored up to this sequence number (its storage numbers
/// each version it stores, in order). Each part only grows.
package struct Holding: Hashable, Sendable {
    package var timestamp: HLCTimestamp
    package var sequence: UInt64

    package init(timestamp: HLCTimestamp, sequence: UInt64) {
        self.timestamp = timestamp
        self.sequence = sequence
    }

    /// The later of each part.
    package func joined(_ other: Holding) -> Holding {
        Holding(timestamp: max(timestamp, other.timestamp), sequence: max(sequence, other.sequence))
    }
}

/// A delete a station collected (docs/SYNC.md 8): its stamp, which still holds the record's
/// delete register, and its version as its origin signed it, which the station gives a peer
/// that offers a write the delete hides.
package struct CollectedDelete: Hashable, Sendable {
    package var stamp: VersionStamp
    /// Nil only for a delete a store collected before it kept them (its storage's migration
    /// v4).
    package var version: SignedVersion?

    package init(stamp: VersionStamp, version: SignedVersion?) {
        self.stamp = stamp
        self.version = version
    }

    package init(_ version: SignedVersion) {
        self.init(stamp: version.stamp, version: version)
    }
}

/// What one durable commit changes: versions kept from now on, versions let go, origins' keys
/// learnt, and the clock's latest timestamp (docs/SYNC.md 2: kept with the writes, so a restart
/// never issues an earlier one). All of it is durable at once, or none of it.
package struct StorageCommit: Sendable {
    package var added: [SignedVersion] = []
    /// The ids (``SignedVersion/id``) of the versions let go.
    package var removed: [[UInt8]] = []
    package var keys: [PeerKey] = []
    package var clock: HLCTimestamp
    /// What peers are now known to hold (docs/SYNC.md 8), joined with what is kept for each.
    package var held: [UUID: Holding] = [:]
    /// The collection horizon, if it moves (kept if later than the one kept).
    package var horizon: HLCTimestamp?
    /// The peer the added versions came from (nil: this station wrote them).
    package var source: UUID?
    /// The deletes collected (docs/SYNC.md 8), each kept by its record if later than the one
    /// kept.
    package var collected: [SignedVersion] = []

    package init(
        added: [SignedVersion] = [],
        removed: [[UInt8]] = [],
        keys: [PeerKey] = [],
        clock: HLCTimestamp,
        held: [UUID: Holding] = [:],
        horizon: HLCTimestamp? = nil
    ) {
        self.added = added
        self.removed = removed
        self.keys = keys
        self.clock = clock
        self.held = held
        self.horizon = horizon
    }
}

/// Where a station keeps its versions, its origins' keys and its clock: SQLite by default
/// (``SQLiteStorage``), memory for tests (``MemoryStorage``). A seam: the store decides, a
/// storage keeps. Every method may be called from any thread.
package protocol SyncStorage: Sendable, ReconciliationItems {
    /// The clock's latest timestamp, as last committed (0 for a new store).
    func clock() throws(SyncError) -> HLCTimestamp
    /// The versions kept of each of `records` (a record of which none is kept is left out),
    /// in no particular order, read at one instant.
    func versions(of records: Set<RecordKey>) throws(SyncError) -> [RecordKey: [SignedVersion]]
    /// The versions kept among `ids` (``SignedVersion/id``), read in the order of `ids` until
    /// their bytes reach `bytes` (the version that reaches it is the last one read), and how
    /// many of `ids` were looked up; an id not kept (never, or let go since) is passed over.
    /// So a read holds at most `bytes` and one version (``SignedVersion/maximumLength``).
    func versions(
        withIDs ids: ArraySlice<[UInt8]>,
        bytes: Int
    ) throws(SyncError) -> (
        versions: [SignedVersion], read: Int
    )
    /// Those of `ids` (``SignedVersion/id``) of versions kept.
    func kept(_ ids: [[UInt8]]) throws(SyncError) -> Set<[UInt8]>
    /// A page of the versions kept at or above `lower` and below `upper` of `collections` (nil:
    /// of every collection), in the order reconciliation reads them (docs/SYNC.md 4: by
    /// timestamp, then id): the first `limit` of them, or fewer if their bytes reach `bytes`
    /// (but at least one, if there is one). Empty: there are no more.
    func versions(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?,
        limit: Int,
        bytes: Int
    ) throws(SyncError) -> [SignedVersion]
    /// Calls `body` with each item of `collections` (nil: of every collection) at or above
    /// `lower` and below `upper`, in ascending order, until it returns false.
    func scan(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?,
        _ body: (RangeReconciliation.Item) -> Bool
    ) throws(SyncError)
    /// How many items of `collections` (nil: of every collection) lie at or above `lower` and
    /// below `upper`.
    func count(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?
    ) throws(SyncError) -> Int
    /// The ids of the records of `collection` of which a version is kept, in ascending order.
    func records(in collection: String) throws(SyncError) -> [String]
    /// How many versions are kept, and how many of them are deletes.
    func counts() throws(SyncError) -> (versions: Int, deletes: Int)
    /// The collection horizon (docs/SYNC.md 8): 0 until something was collected.
    func horizon() throws(SyncError) -> HLCTimestamp
    /// For each peer, what it was last known to hold of this station's versions.
    func held() throws(SyncError) -> [UUID: Holding]
    /// The sequence number of the last version stored (0 if none was).
    func sequence() throws(SyncError) -> UInt64
    /// The versions still kept that were stored after sequence number `sequence`, in the order
    /// they were stored, but those that came from `peer` (``StorageCommit/source``).
    func versions(storedAfter sequence: UInt64, notFrom peer: UUID) throws(SyncError) -> [SignedVersion]
    /// Each of `records`' collected delete, if it has one.
    func collected(of records: Set<RecordKey>) throws(SyncError) -> [RecordKey: CollectedDelete]
    /// The ids of the deletes kept whose timestamp is below `horizon`.
    func tombstones(below horizon: HLCTimestamp) throws(SyncError) -> [[UInt8]]
    /// The attachments the versions kept hold (docs/SYNC.md 9), each with the collections of
    /// the versions that hold it.
    func attachments() throws(SyncError) -> [SyncAttachment: Set<String>]
    /// The key of `origin`, if one was committed.
    func key(of origin: UUID) throws(SyncError) -> PeerKey?
    /// Makes `commit` durable, all of it or none of it, numbering its new versions in order
    /// after the last.
    func commit(_ commit: StorageCommit) throws(SyncError)
}

extension SyncStorage {
    package func scan(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        _ body: (RangeReconciliation.Item) -> Bool
    ) throws(SyncError) {
        try scan(from: lower, below: upper, in: nil, body)
    }

    package func count(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound
    ) throws(SyncError) -> Int {
        try count(from: lower, below: upper, in: nil)
    }

    /// The items of the collections of `scope` alone, as reconciliation reads them.
    package func items(of scope: SyncScope) -> ScopedItems {
        ScopedItems(storage: self, collections: scope.collections)
    }

    /// Every version kept, as reconciliation orders them (docs/SYNC.md 4), in ascending order.
    package func items() throws(SyncError) -> [RangeReconciliation.Item] {
        var items: [RangeReconciliation.Item] = []
        try scan(from: .start, below: .infinity) { item in
            items.append(item)
            return true
        }
        return items
    }
}

/// A storage's items of some collections (nil: of all), as reconciliation reads them: what two
/// stations that keep different collections reconcile (docs/SYNC.md 6).
package struct ScopedItems: ReconciliationItems {
    let storage: any SyncStorage
    let collections: Set<String>?

    package func scan(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        _ body: (RangeReconciliation.Item) -> Bool
    ) throws(SyncError) {
        try storage.scan(from: lower, below: upper, in: collections, body)
    }

    package func count(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound
    ) throws(SyncError) -> Int {
        try storage.count(from: lower, below: upper, in: collections)
    }
}
