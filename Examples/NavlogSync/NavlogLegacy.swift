import Foundation
import GRDB
import MultipeerSession
import MultipeerSync

/// One version of navlog-sync 0.9's log, as its database kept it: the entry, its origin's key
/// and signature (absent on a version of the first release, which signed nothing).
struct NavlogLegacyEntry: Sendable {
    var id: UUID
    var fields: NavlogFields
    var author: String
    var origin: UUID
    var timestamp: HLCTimestamp
    var deleted: Bool
    var attachments: [NavlogAttachment]?
    var key: PeerKey?
    /// 64 bytes, if signed.
    var signature: [UInt8]?

    /// The entry as a host shows it.
    var entry: NavlogEntry {
        NavlogEntry(
            id: id,
            fields: fields,
            author: author,
            origin: origin,
            timestamp: timestamp,
            deleted: deleted,
            attachments: attachments,
            key: key
        )
    }

    /// The version as the store carries it (docs/SYNC.md 11: format 3, the bytes 0.9 signed
    /// and the signature), if it is signed.
    var version: [UInt8]? {
        signature.map { [3] + signedBytes + $0 }
    }

    /// What 0.9 signed (docs/SYNC.md 11): every field of the version in a fixed binary form, the
    /// attachments only when there are any.
    var signedBytes: [UInt8] {
        var bytes = Array("navlog version v1".utf8)
        bytes.reserveCapacity(128)
        func append(_ uuid: UUID) { withUnsafeBytes(of: uuid.uuid) { bytes += $0 } }
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.bigEndian) { bytes += $0 } }
        func append(_ string: String) {
            append(UInt16(truncatingIfNeeded: string.utf8.count))
            bytes += string.utf8
        }
        func append(optional string: String?) {
            guard let string else { return bytes.append(0) }
            bytes.append(1)
            append(string)
        }
        func append(optional number: Int?) {
            guard let number else { return bytes.append(0) }
            bytes.append(1)
            append(Int64(number))
        }
        append(id)
        append(timestamp.rawValue)
        append(origin)
        bytes.append(deleted ? 1 : 0)
        append(author)
        append(fields.waypoint)
        append(optional: fields.leg)
        append(optional: fields.planned)
        append(optional: fields.actual)
        append(optional: fields.fuel)
        append(optional: fields.altitude)
        append(optional: fields.remarks)
        if let attachments, !attachments.isEmpty {
            bytes.append(UInt8(truncatingIfNeeded: attachments.count))
            for attachment in attachments {
                append(attachment.name)
                append(UInt64(bitPattern: attachment.length))
                bytes += attachment.file.sha256
            }
        }
        return bytes
    }
}

/// navlog-sync 0.9's database (its tables `entry` and `node`, GRDB migrations `v1-entries` to
/// `v4-attachments`): read once, when a host of this build first opens it, and let go once its
/// log is in the store.
enum NavlogLegacy {
    /// The versions of the 0.9 log in the database at `path`, brought up to 0.9's last schema
    /// first (with `writable`); none if it holds no such log (a new database, or one whose log
    /// was brought into the store).
    /// - Throws: `databaseCorrupt` if the file is not a database, or a database of neither
    ///   navlog-sync nor the store (read-only); `databaseFailure` for any other failure.
    static func entries(at path: String, writable: Bool) throws(NavlogError) -> [NavlogLegacyEntry] {
        do {
            var configuration = Configuration()
            configuration.readonly = !writable
            configuration.busyMode = .timeout(5)
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            let tables = try queue.read { db in
                Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'"))
            }
            guard tables.contains("entry") else {
                if !writable, !tables.contains("version") {
                    throw NavlogError(.databaseCorrupt, "\(path) is not a navlog database (it has no log)")
                }
                return []
            }
            if writable { try migrator.migrate(queue) }
            return try queue.read { db in
                let columns = Set(try db.columns(in: "entry").map(\.name))
                return try Row.fetchAll(db, sql: "SELECT * FROM entry").map { try entry($0, columns: columns) }
            }
        } catch {
            throw NavlogStore.describe(error, path: path)
        }
    }

    /// Lets go of the 0.9 log once the store holds it: its tables, and the folder where 0.9's
    /// session received files (transfers broken there start again).
    static func remove(at path: String) throws(NavlogError) {
        do {
            let queue = try DatabaseQueue(path: path)
            try queue.write { db in
                try db.execute(sql: "DROP TABLE IF EXISTS entry; DROP TABLE IF EXISTS node")
            }
            try? FileManager.default.removeItem(atPath: path + ".attachments/incoming")
        } catch {
            throw NavlogStore.describe(error, path: path)
        }
    }

    /// 0.9's schema history, to bring a database of an earlier 0.x up to its last.
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
        migrator.registerMigration("v2-node") { db in
            try db.execute(sql: "CREATE TABLE node (id INTEGER PRIMARY KEY CHECK (id = 1), peerID TEXT NOT NULL)")
        }
        migrator.registerMigration("v3-signatures") { db in
            try db.execute(sql: "ALTER TABLE entry ADD COLUMN key TEXT")
            try db.execute(sql: "ALTER TABLE entry ADD COLUMN signature TEXT")
        }
        migrator.registerMigration("v4-attachments") { db in
            try db.execute(sql: "ALTER TABLE entry ADD COLUMN attachments TEXT")
        }
        return migrator
    }

    /// A row of 0.9's `entry` (its columns `columns`: a read-only database may be of an
    /// earlier 0.x).
    private static func entry(_ row: Row, columns: Set<String>) throws -> NavlogLegacyEntry {
        guard let id = UUID(uuidString: row["id"]), let origin = UUID(uuidString: row["origin"]) else {
            throw NavlogError(
                .databaseCorrupt,
                "the entry \(String(describing: row["id"] as String?)) has an id or origin that is not a UUID"
            )
        }
        var entry = NavlogLegacyEntry(
            id: id,
            fields: NavlogFields(
                leg: row["leg"],
                waypoint: row["waypoint"],
                planned: row["planned"],
                actual: row["actual"],
                fuel: row["fuel"],
                altitude: row["altitude"],
                remarks: row["remarks"]
            ),
            author: row["author"],
            origin: origin,
            timestamp: HLCTimestamp(rawValue: UInt64(bitPattern: row["timestamp"])),
            deleted: row["deleted"]
        )
        if columns.contains("signature") {
            entry.key = (row["key"] as String?).flatMap { try? PeerKey(hex: $0) }
            entry.signature = (row["signature"] as String?).flatMap(Self.bytes(hex:))
            if entry.key == nil || entry.signature?.count != 64 { (entry.key, entry.signature) = (nil, nil) }
        }
        if columns.contains("attachments"), let attachments = row["attachments"] as String? {
            entry.attachments = try JSONDecoder().decode([NavlogAttachment].self, from: Data(attachments.utf8))
        }
        return entry
    }

    private static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count.isMultiple(of: 2) else { return nil }
        return stride(from: 0, to: digits.count, by: 2).map { index in
            UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16)
        }.reduce(into: [UInt8]?([])) { bytes, byte in
            if let byte { bytes?.append(byte) } else { bytes = nil }
        }
    }
}
