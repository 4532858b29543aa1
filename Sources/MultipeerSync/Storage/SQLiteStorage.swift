import Foundation
import GRDB
package import MultipeerSession

/// A station's versions, keys and clock in SQLite (through GRDB), in WAL mode with
/// `synchronous = FULL`: a commit is on disk before ``commit(_:)`` returns, so a station killed
/// (SIGKILL, a power cut) restarts with every commit it made and nothing of one it was making.
///
/// Tables: `version` (each kept version's bytes as its origin signed them, by id, indexed by
/// record, by (timestamp, id), the order stations compare in, and deletes by timestamp),
/// `version_attachment` (the attachments each version holds), `origin_key`, `peer_held` (what
/// each peer was last known to hold of this station's: up to a timestamp, and up to a sequence
/// number), `collected` (each record's collected delete: its stamp and signed bytes), and
/// `clock` (one row: the clock's latest timestamp, the last sequence number given to a version
/// stored, and the collection horizon). Timestamps are stored as SQLite's signed 64-bit
/// integers, which order as the clock does until the year 6429.
package final class SQLiteStorage: SyncStorage {
    /// The database file's path.
    package let path: String
    private let database: DatabasePool

    /// Opens the database at `path`, making it and its tables if needed.
    /// - Throws: `storageFailed`, with SQLite's reason.
    package init(path: String) throws(SyncError) {
        self.path = path
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(5)
            configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            database = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(database)
        } catch {
            throw Self.failure(error, path: path, doing: "open")
        }
    }

    /// SQLite's page cache a connection keeps, in KiB (its default).
    static let cacheKiB = 2_000

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-versions") { db in
            try db.execute(
                sql: """
                    CREATE TABLE version (
                        id BLOB PRIMARY KEY NOT NULL,
                        collection TEXT NOT NULL,
                        record TEXT NOT NULL,
                        timestamp INTEGER NOT NULL,
                        bytes BLOB NOT NULL
                    ) WITHOUT ROWID;
                    CREATE INDEX version_record ON version(collection, record);
                    CREATE INDEX version_order ON version(timestamp, id);
                    CREATE TABLE origin_key (origin BLOB PRIMARY KEY NOT NULL, key BLOB NOT NULL) WITHOUT ROWID;
                    CREATE TABLE clock (latest INTEGER NOT NULL);
                    INSERT INTO clock (latest) VALUES (0);
                    """
            )
        }
        migrator.registerMigration("v2-collection") { db in
            try db.execute(
                sql: """
                    ALTER TABLE version ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
                    UPDATE version SET deleted = (substr(bytes, 2, 1) = x'01');
                    CREATE INDEX version_tombstone ON version(timestamp) WHERE deleted = 1;
                    ALTER TABLE clock ADD COLUMN horizon INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE version ADD COLUMN sequence INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE version ADD COLUMN source BLOB;
                    CREATE INDEX version_sequence ON version(sequence);
                    ALTER TABLE clock ADD COLUMN sequence INTEGER NOT NULL DEFAULT 0;
                    CREATE TABLE peer_held (
                        peer BLOB PRIMARY KEY NOT NULL,
                        held INTEGER NOT NULL,
                        held_sequence INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE TABLE collected (
                        collection TEXT NOT NULL,
                        record TEXT NOT NULL,
                        timestamp INTEGER NOT NULL,
                        origin BLOB NOT NULL,
                        PRIMARY KEY (collection, record)
                    ) WITHOUT ROWID;
                    """
            )
        }
        migrator.registerMigration("v3-attachments") { db in
            try db.execute(
                sql: """
                    CREATE TABLE version_attachment (
                        sha256 BLOB NOT NULL,
                        id BLOB NOT NULL,
                        collection TEXT NOT NULL,
                        length INTEGER NOT NULL,
                        PRIMARY KEY (sha256, id)
                    ) WITHOUT ROWID;
                    CREATE INDEX version_attachment_version ON version_attachment(id);
                    """
            )
        }
        migrator.registerMigration("v4-collected-bytes") { db in
            // (A delete collected before keeps its stamp alone: it still hides, and cannot be given.)
            try db.execute(sql: "ALTER TABLE collected ADD COLUMN bytes BLOB")
        }
        return migrator
    }

    package func clock() throws(SyncError) -> HLCTimestamp {
        try reading("read the clock") { db in
            HLCTimestamp(rawValue: UInt64(bitPattern: try Int64.fetchOne(db, sql: "SELECT latest FROM clock") ?? 0))
        }
    }

    package func versions(of records: Set<RecordKey>) throws(SyncError) -> [RecordKey: [SignedVersion]] {
        let rows = try reading("read \(records.count) records") { db in
            var rows: [(RecordKey, Data)] = []
            let statement = try db.cachedStatement(sql: "SELECT bytes FROM version WHERE collection = ? AND record = ?")
            for record in records {
                for bytes in try Data.fetchAll(statement, arguments: [record.collection, record.id]) {
                    rows.append((record, bytes))
                }
            }
            return rows
        }
        var found: [RecordKey: [SignedVersion]] = [:]
        for (record, bytes) in rows {
            found[record, default: []].append(try read(bytes, of: "\(record)"))
        }
        return found
    }

    package func versions(
        withIDs ids: ArraySlice<[UInt8]>,
        bytes: Int
    ) throws(SyncError) -> (
        versions: [SignedVersion], read: Int
    ) {
        let (rows, read) = try reading("read \(ids.count) versions") { db in
            let statement = try db.cachedStatement(sql: "SELECT bytes FROM version WHERE id = ?")
            var (rows, total, read) = ([Data](), 0, 0)
            for id in ids where total < bytes {
                read += 1
                guard let row = try Data.fetchOne(statement, arguments: [Data(id)]) else { continue }
                rows.append(row)
                total += row.count
            }
            return (rows, read)
        }
        return (try rows.map { bytes throws(SyncError) in try self.read(bytes, of: "a version") }, read)
    }

    package func kept(_ ids: [[UInt8]]) throws(SyncError) -> Set<[UInt8]> {
        try reading("look up \(ids.count) versions") { db in
            let statement = try db.cachedStatement(sql: "SELECT 1 FROM version WHERE id = ?")
            return try Set(ids.filter { id in try Bool.fetchOne(statement, arguments: [Data(id)]) != nil })
        }
    }

    package func scan(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?,
        _ body: (RangeReconciliation.Item) -> Bool
    ) throws(SyncError) {
        guard let range = Self.range(from: lower, below: upper, in: collections) else { return }
        try reading("read the versions' order") { db in
            let rows = try Row.fetchCursor(
                db,
                sql: "SELECT timestamp, id FROM version WHERE \(range.sql) ORDER BY timestamp, id",
                arguments: range.arguments
            )
            while let row = try rows.next() {
                let item = try row.withUnsafeData(atIndex: 1) { id in
                    guard let id, id.count == RangeReconciliation.idLength else { throw Self.badID }
                    return RangeReconciliation.Item(timestamp: UInt64(bitPattern: row[0] as Int64), id: id)
                }
                guard body(item) else { return }
            }
        }
    }

    package func count(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?
    ) throws(SyncError) -> Int {
        guard let range = Self.range(from: lower, below: upper, in: collections) else { return 0 }
        return try reading("count the versions") { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM version WHERE \(range.sql)", arguments: range.arguments)
                ?? 0
        }
    }

    package func versions(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?,
        limit: Int,
        bytes: Int
    ) throws(SyncError) -> [SignedVersion] {
        guard let range = Self.range(from: lower, below: upper, in: collections) else { return [] }
        let rows = try reading("read a page of versions") { db in
            let cursor = try Data.fetchCursor(
                db,
                sql: "SELECT bytes FROM version WHERE \(range.sql) ORDER BY timestamp, id LIMIT ?",
                arguments: range.arguments + [limit]
            )
            var (rows, total) = ([Data](), 0)
            while let row = try cursor.next() {
                rows.append(row)
                total += row.count
                if total >= bytes { break }
            }
            return rows
        }
        return try rows.map { bytes throws(SyncError) in try read(bytes, of: "a version") }
    }

    /// The condition on `version`'s index for the versions at or above `lower` and below
    /// `upper` of `collections` (nil: of all), nil if there are none. (A timestamp is kept as a
    /// signed 64-bit integer: a bound beyond `Int64.max` is above every version a station
    /// takes, docs/SYNC.md 2.)
    private static func range(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        in collections: Set<String>?
    ) -> (sql: String, arguments: StatementArguments)? {
        let (least, end) = (lower.least, upper.least)
        guard least.timestamp <= UInt64(Int64.max), lower != .infinity, collections?.isEmpty != true else { return nil }
        var sql = "(timestamp, id) >= (?, ?)"
        var arguments: StatementArguments = [Int64(least.timestamp), Data(least.id)]
        if upper != .infinity, end.timestamp <= UInt64(Int64.max) {
            sql += " AND (timestamp, id) < (?, ?)"
            arguments += [Int64(end.timestamp), Data(end.id)]
        }
        if let collections {
            sql += " AND collection IN (\(Array(repeating: "?", count: collections.count).joined(separator: ", ")))"
            arguments += StatementArguments(collections.sorted())
        }
        return (sql, arguments)
    }

    private func read(_ bytes: Data, of what: String) throws(SyncError) -> SignedVersion {
        do {
            return try SignedVersion(decoding: Array(bytes))
        } catch {
            throw SyncError(.storageFailed, "\(path) holds a version of \(what) that does not read: \(error)")
        }
    }

    package func records(in collection: String) throws(SyncError) -> [String] {
        try reading("list \(collection)") { db in
            try String.fetchAll(
                db,
                sql: "SELECT DISTINCT record FROM version WHERE collection = ? ORDER BY record",
                arguments: [collection]
            )
        }
    }

    package func counts() throws(SyncError) -> (versions: Int, deletes: Int) {
        try reading("count the versions") { db in
            let row = try Row.fetchOne(db, sql: "SELECT count(*), total(deleted) FROM version")
            return (row?[0] ?? 0, Int(row?[1] as Double? ?? 0))
        }
    }

    package func horizon() throws(SyncError) -> HLCTimestamp {
        try reading("read the horizon") { db in
            HLCTimestamp(rawValue: UInt64(bitPattern: try Int64.fetchOne(db, sql: "SELECT horizon FROM clock") ?? 0))
        }
    }

    package func held() throws(SyncError) -> [UUID: Holding] {
        try reading("read what peers hold") { db in
            var held: [UUID: Holding] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT peer, held, held_sequence FROM peer_held") {
                let peer: Data = row[0]
                guard peer.count == 16 else { continue }
                let id = peer.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
                held[id] = Holding(
                    timestamp: HLCTimestamp(rawValue: UInt64(bitPattern: row[1] as Int64)),
                    sequence: UInt64(max(0, row[2] as Int64))
                )
            }
            return held
        }
    }

    package func sequence() throws(SyncError) -> UInt64 {
        try reading("read the sequence") { db in
            UInt64(max(0, try Int64.fetchOne(db, sql: "SELECT sequence FROM clock") ?? 0))
        }
    }

    package func versions(storedAfter sequence: UInt64, notFrom peer: UUID) throws(SyncError) -> [SignedVersion] {
        let rows = try reading("read the versions stored after \(sequence)") { db in
            try Data.fetchAll(
                db,
                sql: "SELECT bytes FROM version WHERE sequence > ? AND source IS NOT ? ORDER BY sequence",
                arguments: [Int64(clamping: sequence), Self.blob(peer)]
            )
        }
        return try rows.map { bytes throws(SyncError) in try read(bytes, of: "a version") }
    }

    package func collected(of records: Set<RecordKey>) throws(SyncError) -> [RecordKey: CollectedDelete] {
        let rows = try reading("read \(records.count) records' collected deletes") { db in
            let statement = try db.cachedStatement(
                sql: "SELECT timestamp, origin, bytes FROM collected WHERE collection = ? AND record = ?"
            )
            return try records.compactMap { record in
                try Row.fetchOne(statement, arguments: [record.collection, record.id]).map { (record, $0) }
            }
        }
        var found: [RecordKey: CollectedDelete] = [:]
        for (record, row) in rows {
            let origin: Data = row[1]
            guard origin.count == 16 else {
                throw SyncError(.storageFailed, "\(path) holds a collected delete of \(record) whose origin is no UUID")
            }
            let bytes: Data? = row[2]
            found[record] = CollectedDelete(
                stamp: VersionStamp(
                    timestamp: HLCTimestamp(rawValue: UInt64(bitPattern: row[0] as Int64)),
                    origin: origin.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
                ),
                version: try bytes.map { bytes throws(SyncError) in try read(bytes, of: "\(record)'s collected delete")
                }
            )
        }
        return found
    }

    package func tombstones(below horizon: HLCTimestamp) throws(SyncError) -> [[UInt8]] {
        try reading("find the deletes to collect") { db in
            try Data.fetchAll(
                db,
                sql: "SELECT id FROM version WHERE deleted = 1 AND timestamp < ?",
                arguments: [Int64(bitPattern: horizon.rawValue)]
            ).map { Array($0) }
        }
    }

    package func attachments() throws(SyncError) -> [SyncAttachment: Set<String>] {
        let rows = try reading("read the attachments") { db in
            try Row.fetchAll(db, sql: "SELECT DISTINCT sha256, length, collection FROM version_attachment")
        }
        var found: [SyncAttachment: Set<String>] = [:]
        for row in rows {
            let sha256: Data = row[0]
            guard let attachment = try? SyncAttachment(sha256: Array(sha256), length: row[1]) else {
                throw SyncError(.storageFailed, "\(path) holds an attachment that is none")
            }
            found[attachment, default: []].insert(row[2])
        }
        return found
    }

    package func key(of origin: UUID) throws(SyncError) -> PeerKey? {
        let raw = try reading("read the key of \(origin)") { db in
            try Data.fetchOne(
                db,
                sql: "SELECT key FROM origin_key WHERE origin = ?",
                arguments: [Self.blob(origin)]
            )
        }
        return raw.flatMap { try? PeerKey(rawRepresentation: $0) }
    }

    package func commit(_ commit: StorageCommit) throws(SyncError) {
        do {
            // (Statements of its own, not the connection's cache: a cached statement keeps the
            // last arguments bound to it, the versions' bytes, for as long as the store lives.)
            try database.write { db in
                // The cache holds what the commit changes, up to 32 MiB (with SQLite's default,
                // 2 MiB, a commit larger than that spills its pages to the log and reads them
                // back: a third of the time of a batch of 100,000 versions), then goes back to
                // the default: a larger commit costs its memory while it runs, not for the
                // store's life.
                let changing = commit.added.reduce(0) { $0 + $1.bytes.count + 160 } >> 10
                if changing > Self.cacheKiB {
                    try db.execute(sql: "PRAGMA cache_size = -\(min(changing * 2, 32 << 10))")
                }
                defer { try? db.execute(sql: "PRAGMA cache_size = -\(Self.cacheKiB)") }
                let delete = try db.makeStatement(sql: "DELETE FROM version WHERE id = ?")
                let unattach = try db.makeStatement(sql: "DELETE FROM version_attachment WHERE id = ?")
                for id in commit.removed {
                    try delete.execute(arguments: [Data(id)])
                    try unattach.execute(arguments: [Data(id)])
                }
                let attach = try db.makeStatement(
                    sql: "INSERT OR IGNORE INTO version_attachment (sha256, id, collection, length) VALUES (?, ?, ?, ?)"
                )
                let insert = try db.makeStatement(
                    sql: """
                        INSERT OR IGNORE INTO version (id, collection, record, timestamp, bytes, deleted, sequence, source)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        """
                )
                var sequence = try Int64.fetchOne(db, sql: "SELECT sequence FROM clock") ?? 0
                for version in commit.added {
                    try insert.execute(arguments: [
                        Data(version.id), version.collection, version.recordID,
                        Int64(bitPattern: version.stamp.timestamp.rawValue), Data(version.bytes),
                        version.change == .delete, sequence + 1, commit.source.map(Self.blob),
                    ])
                    guard db.changesCount > 0 else { continue }
                    sequence += 1
                    for attachment in version.attachments {
                        try attach.execute(arguments: [
                            Data(attachment.sha256), Data(version.id), version.collection, attachment.length,
                        ])
                    }
                }
                try db.execute(sql: "UPDATE clock SET sequence = ?", arguments: [sequence])
                let held = try db.makeStatement(
                    sql: """
                        INSERT INTO peer_held (peer, held, held_sequence) VALUES (?, ?, ?)
                        ON CONFLICT (peer) DO UPDATE SET
                            held = max(held, excluded.held), held_sequence = max(held_sequence, excluded.held_sequence)
                        """
                )
                for (peer, holding) in commit.held {
                    try held.execute(arguments: [
                        Self.blob(peer), Int64(bitPattern: holding.timestamp.rawValue), Int64(holding.sequence),
                    ])
                }
                let collected = try db.makeStatement(
                    sql: """
                        INSERT INTO collected (collection, record, timestamp, origin, bytes) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT (collection, record) DO UPDATE SET
                            timestamp = excluded.timestamp, origin = excluded.origin, bytes = excluded.bytes
                        WHERE (excluded.timestamp, excluded.origin) > (timestamp, origin)
                        """
                )
                for delete in commit.collected {
                    try collected.execute(arguments: [
                        delete.collection, delete.recordID, Int64(bitPattern: delete.stamp.timestamp.rawValue),
                        Self.blob(delete.stamp.origin), Data(delete.bytes),
                    ])
                }
                if let horizon = commit.horizon {
                    try db.execute(
                        sql: "UPDATE clock SET horizon = max(horizon, ?)",
                        arguments: [Int64(bitPattern: horizon.rawValue)]
                    )
                }
                for key in commit.keys {
                    try db.execute(
                        sql: "INSERT OR IGNORE INTO origin_key (origin, key) VALUES (?, ?)",
                        arguments: [Self.blob(key.peerID), Data(key.rawRepresentation)]
                    )
                }
                // (Unsigned order: a later timestamp never replaces with an earlier one.)
                let latest = HLCTimestamp(
                    rawValue: UInt64(bitPattern: try Int64.fetchOne(db, sql: "SELECT latest FROM clock") ?? 0)
                )
                try db.execute(
                    sql: "UPDATE clock SET latest = ?",
                    arguments: [Int64(bitPattern: max(latest, commit.clock).rawValue)]
                )
            }
        } catch {
            throw Self.failure(error, path: path, doing: "commit to")
        }
    }

    private func reading<T>(_ what: String, _ body: (Database) throws -> T) throws(SyncError) -> T {
        do {
            return try database.read(body)
        } catch {
            throw Self.failure(error, path: path, doing: what + " in")
        }
    }

    private static let badID = SyncError(.storageFailed, "a version's id in the database is not 32 bytes")

    private static func blob(_ id: UUID) -> Data {
        withUnsafeBytes(of: id.uuid) { Data($0) }
    }

    private static func failure(_ error: any Error, path: String, doing what: String) -> SyncError {
        SyncError(.storageFailed, "could not \(what) the store's database \(path): \(error)")
    }
}
