/// A record as a station keeps it, with the stamp of the latest write it holds
/// (``SyncCollection/versions()``).
public struct SyncVersion<Record: SyncRecord>: Sendable {
    /// The record as the application sees it.
    public var record: Record
    /// When the latest write the record holds was made, and which station made it (its
    /// origin, whose key signed it: ``SyncStore/key(of:)``).
    public var stamp: VersionStamp

    /// A record and its stamp (for applications that test their own handling of it).
    public init(record: Record, stamp: VersionStamp) {
        self.record = record
        self.stamp = stamp
    }
}

/// One collection of a ``SyncStore``: its records of type `Record`, kept in sync with every
/// peer's. Get one with ``SyncStore/collection(_:)``; it is a handle, cheap to copy.
public struct SyncCollection<Record: SyncRecord>: Sendable {
    /// The store it belongs to.
    public let store: SyncStore

    /// Writes `record`, replacing the one with its id (field by field: the fields that
    /// changed), durably: it is on disk when this returns, then pushed to the active peers. A
    /// record equal to the one kept writes nothing.
    /// - Throws: `invalidWrite` if the record does not encode or breaks a bound of
    ///   docs/SYNC.md 3 (its id 1 to 1,024 bytes, its version at most 1 MiB); `notKept` if the
    ///   store does not keep the collection (``SyncStore/Configuration/keeps``); `storageFailed`.
    public func put(_ record: Record) async throws(SyncError) {
        try await put([record])
    }

    /// Writes `records` in one durable commit: all of them are on disk when this returns, or
    /// (if it throws) none.
    /// - Throws: as ``put(_:)-(Record)``, for the first record that fails.
    public func put(_ records: some Sequence<Record>) async throws(SyncError) {
        // (One collector bound for the batch: each record's encoding only reads it.)
        let encoded = AttachmentCollector.$current.withValue(AttachmentCollector()) {
            Result { () throws(SyncError) in
                var writes: [(id: String, fields: [String: [UInt8]]?, attachments: [String: Set<SyncAttachment>])] = []
                for record in records {
                    let (fields, attachments) = try RecordFields.encoded(record)
                    writes.append((record.id, fields, attachments))
                }
                return writes
            }
        }
        try await store.write(try encoded.get(), in: Record.collectionName)
    }

    /// Deletes the record with `id`, if there is one: a tombstone, durable when this returns,
    /// that hides every write of it made before, here and on every peer.
    /// - Throws: `notKept` if the store does not keep the collection
    ///   (``SyncStore/Configuration/keeps``); `storageFailed`.
    public func delete(id: String) async throws(SyncError) {
        try await delete(ids: [id])
    }

    /// Deletes the records with `ids` in one durable commit.
    /// - Throws: as ``delete(id:)``.
    public func delete(ids: some Sequence<String>) async throws(SyncError) {
        try await store.write(ids.map { ($0, nil, [:]) }, in: Record.collectionName)
    }

    /// The record with `id`, or nil if there is none (never written, or deleted).
    /// - Throws: `undecodableRecord` if the record kept does not read as a `Record`;
    ///   `storageFailed`.
    public func record(id: String) async throws(SyncError) -> Record? {
        let key = RecordKey(collection: Record.collectionName, id: id)
        guard let fields = try await store.fields(of: [key])[key] else { return nil }
        do throws(SyncError) {
            return try RecordFields.record(Record.self, id: id, from: fields)
        } catch {
            throw store.explained(error, in: Record.collectionName)
        }
    }

    /// The record with `id` and the stamp of the latest write it holds, or nil if there is
    /// none (never written, or deleted).
    /// - Throws: as ``record(id:)``.
    public func version(id: String) async throws(SyncError) -> SyncVersion<Record>? {
        let key = RecordKey(collection: Record.collectionName, id: id)
        guard let (fields, stamp) = try await store.stampedFields(of: key) else { return nil }
        do throws(SyncError) {
            return SyncVersion(record: try RecordFields.record(Record.self, id: id, from: fields), stamp: stamp)
        } catch {
            throw store.explained(error, in: Record.collectionName)
        }
    }

    /// Every record, in ascending order of ids. One that does not read as a `Record` is left
    /// out and reported (``SyncEvent/unreadableRecord(_:)``).
    /// - Throws: `storageFailed`.
    public func records() async throws(SyncError) -> [Record] {
        try await records(where: { _ in true })
    }

    /// The records for which `isIncluded` is true, in ascending order of ids.
    /// - Throws: `storageFailed`.
    public func records(where isIncluded: (Record) -> Bool) async throws(SyncError) -> [Record] {
        try await versions().compactMap { isIncluded($0.record) ? $0.record : nil }
    }

    /// Every record with the stamp of the latest write it holds (when, and which station wrote
    /// it), in ascending order of ids. One that does not read as a `Record` is left out and
    /// reported (``SyncEvent/unreadableRecord(_:)``).
    /// - Throws: `storageFailed`.
    public func versions() async throws(SyncError) -> [SyncVersion<Record>] {
        var found: [SyncVersion<Record>] = []
        for (id, fields, stamp) in try await store.fields(in: Record.collectionName) {
            do throws(SyncError) {
                found.append(
                    SyncVersion(record: try RecordFields.record(Record.self, id: id, from: fields), stamp: stamp)
                )
            } catch {
                store.report(.unreadableRecord(store.explained(error, in: Record.collectionName)))
            }
        }
        return found
    }

    /// Every change of this collection from now on, this station's writes and what it takes
    /// from peers, in the order they were made durable. Each access is a new sequence; it
    /// holds what its reader has not taken, at most ``SyncStore/Configuration/changeBuffer``
    /// changes: a reader that falls further behind loses the oldest, and the next change it
    /// reads says how many (``SyncChange/missed``). A change whose record does not read as a
    /// `Record` is left out and reported (``SyncEvent/unreadableRecord(_:)``).
    public var changes: SyncChanges<Record> {
        SyncChanges(store: store, changes: store.changes(of: Record.collectionName))
    }
}

/// The changes of one collection (``SyncCollection/changes``), as they are made durable. It
/// holds at most ``SyncStore/Configuration/changeBuffer`` changes its reader has not taken:
/// beyond it the oldest go, and the next change read says how many (``SyncChange/missed``).
public struct SyncChanges<Record: SyncRecord>: AsyncSequence, Sendable {
    public typealias Element = SyncChange<Record>
    public typealias Failure = Never

    let store: SyncStore
    let changes: SubscriberBuffer<StoreChange>

    public func makeAsyncIterator() -> Iterator {
        Iterator(store: store, changes: changes)
    }

    /// Reads the changes.
    public struct Iterator: AsyncIteratorProtocol {
        let store: SyncStore
        let changes: SubscriberBuffer<StoreChange>

        /// The next change: it waits for one until its task is cancelled (then nil).
        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async -> SyncChange<Record>? {
            var missed = 0
            while let read = await changes.next() {
                guard case .element(let change) = read else {
                    if case .dropped(let count) = read { missed += count }
                    continue
                }
                let id = change.change.record.id
                guard let fields = change.change.after else {
                    return SyncChange(
                        id: id,
                        record: nil,
                        stamp: change.change.stamp,
                        peer: change.peer,
                        missed: missed
                    )
                }
                do throws(SyncError) {
                    let record = try RecordFields.record(Record.self, id: id, from: fields)
                    return SyncChange(
                        id: id,
                        record: record,
                        stamp: change.change.stamp,
                        peer: change.peer,
                        missed: missed
                    )
                } catch {
                    store.report(.unreadableRecord(store.explained(error, in: Record.collectionName)))
                }
            }
            return nil
        }

        /// The next change: it waits for one until its task is cancelled (then nil).
        public mutating func next() async -> SyncChange<Record>? {
            await next(isolation: nil)
        }
    }
}
