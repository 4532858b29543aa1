import Foundation
import GRDB
import MultipeerCore
import MultipeerSession
import Testing

@testable import MultipeerSync

/// What every storage keeps, in SQLite and in memory alike; and SQLite's across a reopening.
@Suite struct StorageTests {
    enum Kind: String, CaseIterable, CustomTestStringConvertible {
        case sqlite, memory
        var testDescription: String { rawValue }
    }

    /// A storage of `kind`, and the path of its file if it has one (removed afterwards).
    static func withStorage(_ kind: Kind, _ body: (any SyncStorage, String?) throws -> Void) throws {
        switch kind {
        case .memory:
            try body(MemoryStorage(), nil)
        case .sqlite:
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("sync-\(UUID()).db").path
            defer {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
            }
            try body(try SQLiteStorage(path: path), path)
        }
    }

    static func version(
        _ record: String,
        _ change: RecordWrite.Change,
        at milliseconds: UInt64,
        in collection: String = "checklist"
    ) -> SignedVersion {
        try! SignedVersion(
            collection: collection,
            recordID: record,
            timestamp: HLCTimestamp(milliseconds: milliseconds, counter: 0),
            change: change,
            signedBy: RecordIntakeTests.captain
        )
    }

    @Test(arguments: Kind.allCases)
    func aCommitIsReadBackAndWhatItLetsGoIsGone(kind: Kind) throws {
        try Self.withStorage(kind) { storage, _ in
            let fuel = Self.version("fuel", .set(["done": [0]]), at: 1)
            let flaps = Self.version("flaps", .set(["done": [0]]), at: 2)
            try storage.commit(
                StorageCommit(
                    added: [fuel, flaps],
                    keys: [RecordIntakeTests.captain.key],
                    clock: flaps.stamp.timestamp
                )
            )
            let record = RecordKey(collection: "checklist", id: "fuel")
            #expect(try storage.versions(of: record) == [fuel])
            #expect(try storage.records(in: "checklist") == ["flaps", "fuel"])
            #expect(try storage.records(in: "other").isEmpty)
            #expect(try storage.key(of: RecordIntakeTests.captain.peerID) == RecordIntakeTests.captain.key)
            #expect(try storage.key(of: UUID()) == nil)
            #expect(try storage.clock() == flaps.stamp.timestamp)

            let done = Self.version("fuel", .set(["done": [1]]), at: 3)
            try storage.commit(StorageCommit(added: [done], removed: [fuel.id], clock: done.stamp.timestamp))
            #expect(try storage.versions(of: record) == [done])
            // A commit with an earlier clock (another station's versions taken in) leaves it.
            try storage.commit(StorageCommit(clock: HLCTimestamp(rawValue: 5)))
            #expect(try storage.clock() == done.stamp.timestamp)
        }
    }

    /// Reconciliation reads a storage range by range, in its order, of every collection or of
    /// some (docs/SYNC.md 6: what two stations that keep different collections reconcile):
    /// every storage reads what the same items sorted in memory hold, for bounds between
    /// items, at items, inside a timestamp's ties, before the start and at infinity; counts
    /// agree; pages of any size and byte budget read each version once, in order.
    @Test(arguments: Kind.allCases, [nil, ["checklist"], ["notes", "crew"], [], ["absent"]] as [Set<String>?])
    func rangesReadWhatTheOrderHolds(kind: Kind, collections: Set<String>?) throws {
        try Self.withStorage(kind) { storage, _ in
            // (Four versions a millisecond: ties ordered by id; three collections interleaved.)
            let names = ["checklist", "notes", "crew"]
            let versions = (0..<200).map {
                Self.version("item-\($0)", .set(["n": [UInt8($0)]]), at: 1 + UInt64($0 / 4), in: names[$0 % 3])
            }
            try storage.commit(StorageCommit(added: versions, clock: versions.last!.stamp.timestamp))
            let sorted = versions.filter { collections?.contains($0.collection) ?? true }.map(\.item).sorted()
            let memory = SortedItems(sorted)
            let items = storage.items(of: collections.map(SyncScope.only) ?? .everything)
            let all = versions.map(\.item)
            var random = SplitMix64(seed: 60)
            var bounds: [RangeReconciliation.Bound] = [.start, .infinity, .init(timestamp: 0, idPrefix: [0xff])]
            for _ in 0..<40 {
                let item = all.randomElement(using: &random)!
                bounds.append(RangeReconciliation.Bound(item))
                bounds.append(
                    .init(
                        timestamp: item.timestamp,
                        idPrefix: Array(item.id.prefix(Int.random(in: 0...3, using: &random)))
                    )
                )
                bounds.append(RangeReconciliation.bound(between: item, and: item.successor!))
            }
            for lower in bounds.shuffled(using: &random).prefix(12) {
                for upper in bounds.shuffled(using: &random).prefix(12) {
                    var (read, expected) = ([RangeReconciliation.Item](), [RangeReconciliation.Item]())
                    try items.scan(from: lower, below: upper) {
                        read.append($0)
                        return true
                    }
                    memory.scan(from: lower, below: upper) {
                        expected.append($0)
                        return true
                    }
                    #expect(read == expected)
                    #expect(expected == sorted.filter { !lower.isAbove($0) && upper.isAbove($0) })
                    #expect(try items.count(from: lower, below: upper) == expected.count)
                }
            }
            for (limit, bytes) in [(1, 1 << 20), (7, 1 << 20), (500, 1), (64, 2_000)] {
                var (lower, paged) = (RangeReconciliation.Bound.start, [RangeReconciliation.Item]())
                while true {
                    let page = try storage.versions(
                        from: lower,
                        below: .infinity,
                        in: collections,
                        limit: limit,
                        bytes: bytes
                    )
                    guard let last = page.last else { break }
                    #expect(page.count <= limit)
                    #expect(page.dropLast().map(\.bytes.count).reduce(0, +) < bytes, "a page stops at its byte budget")
                    paged += page.map(\.item)
                    lower = RangeReconciliation.Bound(last.item.successor!)
                }
                #expect(paged == sorted, "pages of \(limit) versions or \(bytes) bytes")
            }
        }
    }

    /// Closed and opened again (a restart), SQLite holds every commit and the clock.
    /// A want's answer reads the versions it names a message's bytes at a time: in the order
    /// named, up to and including the one that reaches the bytes given, passing over ids not
    /// kept; what is left is read next.
    @Test(arguments: Kind.allCases)
    func versionsNamedAreReadUpToTheBytesGiven(kind: Kind) throws {
        try Self.withStorage(kind) { storage, _ in
            let versions = (1...3).map {
                Self.version("item \($0)", .set(["note": Array(repeating: 7, count: 500)]), at: UInt64($0))
            }
            try storage.commit(
                StorageCommit(
                    added: versions,
                    keys: [RecordIntakeTests.captain.key],
                    clock: versions[2].stamp.timestamp
                )
            )
            let missing = [UInt8](repeating: 1, count: 32)
            let ids = [versions[0].id, missing, versions[1].id, versions[2].id]
            let size = versions[0].bytes.count
            let first = try storage.versions(withIDs: ids[...], bytes: size + 1)
            #expect(first.versions == [versions[0], versions[1]], "the second reaches the bytes, and is the last")
            #expect(first.read == 3, "the id not kept was passed over")
            let rest = try storage.versions(withIDs: ids.dropFirst(first.read), bytes: size + 1)
            #expect(rest.versions == [versions[2]] && rest.read == 1)
            #expect(try storage.versions(withIDs: ids[...], bytes: .max).versions == versions)
        }
    }

    @Test func aReopenedDatabaseHoldsEveryCommit() throws {
        try Self.withStorage(.sqlite) { storage, path in
            let fuel = Self.version("fuel", .set(["done": [1]]), at: 7)
            try storage.commit(
                StorageCommit(added: [fuel], keys: [RecordIntakeTests.captain.key], clock: fuel.stamp.timestamp)
            )
            let reopened = try SQLiteStorage(path: path!)
            #expect(try reopened.versions(of: RecordKey(collection: "checklist", id: "fuel")) == [fuel])
            #expect(try reopened.clock() == fuel.stamp.timestamp)
            #expect(try reopened.key(of: RecordIntakeTests.captain.peerID) == RecordIntakeTests.captain.key)
        }
    }

    /// A delete collected before the storage kept collected deletes' bytes (migration v4) keeps
    /// its stamp, which still hides, and has no version to give; one collected after has both,
    /// and a later delete of the record replaces an earlier one, never the other way.
    @Test func aDeleteCollectedBeforeMigrationFourKeepsItsStamp() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sync-\(UUID()).db").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let old = Self.version("fuel", .delete, at: 7)
        let queue = try DatabaseQueue(path: path)
        try SQLiteStorage.migrator.migrate(queue, upTo: "v3-attachments")
        try queue.write { db in
            try db.execute(
                sql: "INSERT INTO collected (collection, record, timestamp, origin) VALUES (?, ?, ?, ?)",
                arguments: [
                    "checklist", "fuel", Int64(old.stamp.timestamp.rawValue),
                    withUnsafeBytes(of: old.stamp.origin.uuid) { Data($0) },
                ]
            )
        }
        let storage = try SQLiteStorage(path: path)
        let fuel = RecordKey(collection: "checklist", id: "fuel")
        #expect(try storage.collected(of: [fuel]) == [fuel: CollectedDelete(stamp: old.stamp, version: nil)])
        let later = Self.version("fuel", .delete, at: 9)
        for delete in [later, old] {
            var commit = StorageCommit(clock: later.stamp.timestamp)
            commit.collected = [delete]
            try storage.commit(commit)
        }
        #expect(try storage.collected(of: [fuel]) == [fuel: CollectedDelete(later)])
    }

    /// A database that is not one, or a version altered on disk, is a typed failure naming the file.
    @Test func aDamagedDatabaseIsAStorageFailureNamingTheFile() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sync-\(UUID()).db").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data("not a database, but long enough to look like a header of one".utf8).write(
            to: URL(fileURLWithPath: path)
        )
        do {
            _ = try SQLiteStorage(path: path)
            Issue.record("a file that is no database opened")
        } catch {
            #expect(error.code == .storageFailed && error.message.contains(path), "\(error)")
        }
        try Self.withStorage(.sqlite) { storage, path in
            let fuel = Self.version("fuel", .set(["done": [1]]), at: 7)
            try storage.commit(StorageCommit(added: [fuel], clock: fuel.stamp.timestamp))
            try DatabaseQueue(path: path!).write { db in
                try db.execute(sql: "UPDATE version SET bytes = x'02'")
            }
            do throws(SyncError) {
                _ = try storage.versions(of: RecordKey(collection: "checklist", id: "fuel"))
                Issue.record("an altered version read")
            } catch {
                #expect(error.code == .storageFailed && error.message.contains("does not read"), "\(error)")
            }
        }
    }
}
