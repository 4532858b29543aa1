public import Foundation
import GRDB
import Glibc
public import MultipeerSession

/// The log on disk: SQLite through GRDB, in WAL mode so `navlog-sync list` reads while `run`
/// writes. A version is committed (synchronous=FULL) before anyone is told it exists, so a
/// restart, even after SIGKILL or a power cut, loses nothing that was acknowledged.
public final class NavlogStore: Sendable {
    /// The path of the database file.
    public let path: String
    /// This host's peer ID: its ``identity``'s, recorded in the database.
    public let peerID: UUID
    /// This host's key pair, kept in its identity file beside the database (nil when the store
    /// is opened read-only).
    public let identity: PeerIdentity?
    private let database: any DatabaseWriter
    /// The descriptor holding the exclusive lock that keeps a second writer out; open as long
    /// as this store lives (closing it early would also drop SQLite's own locks on the file).
    private let lockDescriptor: Int32?

    /// Opens (creating if needed) the database for a running host. Only one process may hold a
    /// database this way: a second gets `databaseLocked`.
    ///
    /// - Parameter identityFile: The host's identity (key pair) file, made on first use;
    ///   by default the database's path with `.identity` appended.
    public init(path: String, identityFile: String? = nil) throws(NavlogError) {
        self.path = path
        let identityFile = identityFile ?? path + ".identity"
        do {
            identity = try PeerIdentity(loadingOrCreatingFile: identityFile)
        } catch {
            throw NavlogError(.identityFile, "\(error)")
        }
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw NavlogError(.databaseFailure, "cannot open the database \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            close(descriptor)
            throw NavlogError(
                .databaseLocked,
                "the database \(path) is in use by another navlog-sync run; stop it, or give this one its own --data file"
            )
        }
        lockDescriptor = descriptor
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(5)
            configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            let pool = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(pool)
            database = pool
            peerID = try pool.write { [identity] db in try Self.record(identity!.peerID, db) }
        } catch {
            close(descriptor)
            throw Self.describe(error, path: path)
        }
    }

    /// Opens an existing database read-only, beside a running host or without one.
    public init(readingAt path: String) throws(NavlogError) {
        self.path = path
        lockDescriptor = nil
        identity = nil
        guard FileManager.default.fileExists(atPath: path) else {
            throw NavlogError(
                .databaseMissing,
                "there is no database at \(path); `navlog-sync run --data \(path)` makes one"
            )
        }
        do {
            var configuration = Configuration()
            configuration.readonly = true
            configuration.busyMode = .timeout(5)
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            let (applied, id) = try queue.read { db in
                (try Self.migrator.appliedIdentifiers(db), try String.fetchOne(db, sql: "SELECT peerID FROM node"))
            }
            guard applied.contains("v1-entries") else {
                throw NavlogError(.databaseCorrupt, "\(path) is not a navlog database (it has no entry table)")
            }
            database = queue
            peerID = id.flatMap(UUID.init(uuidString:)) ?? UUID()
        } catch {
            throw Self.describe(error, path: path)
        }
    }

    deinit {
        if let lockDescriptor { close(lockDescriptor) }
    }

    /// Every version held, tombstones included.
    public func log() throws(NavlogError) -> NavlogLog {
        do {
            return NavlogLog(
                try database.read { db in try Row.fetchAll(db, sql: "SELECT * FROM entry").map(Self.entry) }
            )
        } catch {
            throw Self.describe(error, path: path)
        }
    }

    /// The live versions (not tombstones) that carry attachments, in log order: what a host asks
    /// its peers for and offers them, read without the rest of the log (a join read the whole
    /// log, and each file offered read it again).
    public func attachedVersions() throws(NavlogError) -> [NavlogEntry] {
        do {
            return try database.read { db in
                try Row.fetchAll(db, sql: "SELECT * FROM entry WHERE attachments IS NOT NULL AND deleted = 0").map(
                    Self.entry
                )
            }.sorted(by: NavlogLog.logOrder)
        } catch {
            throw Self.describe(error, path: path)
        }
    }

    /// The versions held of these entries (of those held), in no particular order.
    public func versions(of ids: some Collection<UUID>) throws(NavlogError) -> [NavlogEntry] {
        guard !ids.isEmpty else { return [] }
        do {
            return try database.read { db in
                try Row.fetchAll(
                    db,
                    sql: "SELECT * FROM entry WHERE id IN (\(databaseQuestionMarks(count: ids.count)))",
                    arguments: StatementArguments(ids.map(\.uuidString))
                ).map(Self.entry)
            }
        } catch {
            throw Self.describe(error, path: path)
        }
    }

    /// What a merge did.
    public struct Merged: Sendable {
        /// The versions that changed the log.
        public var applied: [NavlogEntry] = []
        /// Versions that met another with the same version stamp and other content (only a
        /// faulty or rogue origin writes such): the one that wins by content was kept.
        public var conflicts: [NavlogEntry] = []
    }

    /// Merges versions in, in one durable transaction.
    public func merge(_ incoming: [NavlogEntry]) throws(NavlogError) -> Merged {
        do {
            return try database.write { db in
                var merged = Merged()
                for entry in incoming {
                    let row = try Row.fetchOne(
                        db,
                        sql: "SELECT * FROM entry WHERE id = ?",
                        arguments: [entry.id.uuidString]
                    )
                    if let row {
                        let current = try Self.entry(row)
                        if current.version == entry.version, current.signedBytes != entry.signedBytes {
                            merged.conflicts.append(entry)
                        }
                        if !entry.wins(over: current) { continue }
                    }
                    try Self.save(entry, db)
                    merged.applied.append(entry)
                }
                return merged
            }
        } catch {
            throw Self.describe(error, path: path)
        }
    }

    // MARK: Schema

    /// The schema's history; a database of any earlier version is brought up to date on open.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-entries") { db in
            try db.execute(
                sql: """
                    CREATE TABLE entry (
                        id TEXT PRIMARY KEY NOT NULL,
                        leg INTEGER, waypoint TEXT NOT NULL, planned TEXT, actual TEXT,
                        fuel INTEGER, altitude INTEGER, remarks TEXT,
                        author TEXT NOT NULL, origin TEXT NOT NULL, timestamp INTEGER NOT NULL, deleted BOOLEAN NOT NULL
                    )
                    """
            )
        }
        // The host's identity moved into the database so that a restart keeps it.
        migrator.registerMigration("v2-node") { db in
            try db.execute(sql: "CREATE TABLE node (id INTEGER PRIMARY KEY CHECK (id = 1), peerID TEXT NOT NULL)")
        }
        // Versions are signed by their origin (protocol v2). Versions stored before have neither:
        // the host re-issues them as its own, signed (NavlogNode), and peers refuse them unsigned.
        migrator.registerMigration("v3-signatures") { db in
            try db.execute(sql: "ALTER TABLE entry ADD COLUMN key TEXT")
            try db.execute(sql: "ALTER TABLE entry ADD COLUMN signature TEXT")
        }
        // Files attached to entries (docs/NAVLOG.md 1a): the version's list, as its JSON.
        migrator.registerMigration("v4-attachments") { db in
            try db.execute(sql: "ALTER TABLE entry ADD COLUMN attachments TEXT")
        }
        return migrator
    }

    /// Records the host's peer ID. A database from before identities held a random ID: it is
    /// replaced by the identity's (the host rejoins as a new peer; versions it wrote keep the old
    /// ID as their origin, which stays unique, so they order and merge as before).
    private static func record(_ id: UUID, _ db: Database) throws -> UUID {
        try db.execute(sql: "INSERT OR REPLACE INTO node (id, peerID) VALUES (1, ?)", arguments: [id.uuidString])
        return id
    }

    private static func save(_ entry: NavlogEntry, _ db: Database) throws {
        let fields = entry.fields
        try db.execute(
            sql: """
                INSERT OR REPLACE INTO entry
                (id, leg, waypoint, planned, actual, fuel, altitude, remarks, author, origin, timestamp, deleted, key, signature, attachments)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                entry.id.uuidString, fields.leg, fields.waypoint, fields.planned, fields.actual, fields.fuel,
                fields.altitude, fields.remarks, entry.author, entry.origin.uuidString,
                Int64(bitPattern: entry.timestamp.rawValue), entry.deleted,
                entry.key?.description, entry.signature,
                try entry.attachments.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) },
            ]
        )
    }

    private static func entry(_ row: Row) throws -> NavlogEntry {
        guard let id = UUID(uuidString: row["id"]), let origin = UUID(uuidString: row["origin"]) else {
            throw NavlogError(
                .databaseCorrupt,
                "the entry \(String(describing: row["id"] as String?)) has an id or origin that is not a UUID"
            )
        }
        let fields = NavlogFields(
            leg: row["leg"],
            waypoint: row["waypoint"],
            planned: row["planned"],
            actual: row["actual"],
            fuel: row["fuel"],
            altitude: row["altitude"],
            remarks: row["remarks"]
        )
        var entry = NavlogEntry(
            id: id,
            fields: fields,
            author: row["author"],
            origin: origin,
            timestamp: HLCTimestamp(rawValue: UInt64(bitPattern: row["timestamp"])),
            deleted: row["deleted"]
        )
        entry.key = (row["key"] as String?).flatMap { try? PeerKey(hex: $0) }
        entry.signature = row["signature"]
        if let attachments = row["attachments"] as String? {
            entry.attachments = try JSONDecoder().decode([NavlogAttachment].self, from: Data(attachments.utf8))
        }
        return entry
    }

    /// One sentence per SQLite failure a user can meet.
    static func describe(_ error: any Error, path: String) -> NavlogError {
        if let error = error as? NavlogError { return error }
        guard let error = error as? DatabaseError else {
            return NavlogError(.databaseFailure, "the database \(path) failed: \(error)")
        }
        let reason = error.message ?? "\(error.resultCode)"
        switch error.resultCode {
        case .SQLITE_NOTADB, .SQLITE_CORRUPT:
            return NavlogError(
                .databaseCorrupt,
                "\(path) is not a navlog database or is damaged (SQLite: \(reason)); move it away to start a new one"
            )
        case .SQLITE_BUSY, .SQLITE_LOCKED:
            return NavlogError(
                .databaseLocked,
                "the database \(path) stayed locked by another process for 5 s (SQLite: \(reason))"
            )
        case .SQLITE_CANTOPEN, .SQLITE_PERM, .SQLITE_READONLY:
            return NavlogError(
                .databaseFailure,
                "cannot open the database \(path) (SQLite: \(reason)); check the path and its permissions"
            )
        default:
            return NavlogError(.databaseFailure, "the database \(path) failed (SQLite: \(reason))")
        }
    }
}
