import Crypto
import Foundation
import GRDB
import MultipeerSession
import MultipeerTLS
import Testing

@testable import MultipeerSync
@testable import NavlogSync

/// A host's database: one writer, readers beside it, and navlog-sync 0.9's databases brought
/// into the store (docs/NAVLOG.md, docs/SYNC.md 11).
@Suite struct StoreTests {
    static func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("navlog-\(UUID()).db").path
    }

    static func remove(_ path: String) {
        for suffix in ["", "-wal", "-shm", ".identity"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        for folder in [".attachments", ".incoming"] { try? FileManager.default.removeItem(atPath: path + folder) }
    }

    static func configuration(_ name: String) throws -> MultipeerSession.Configuration {
        MultipeerSession.Configuration(
            serviceType: "_navlog._tcp",
            peer: PeerInfo(displayName: name),
            psk: try PreSharedKey(key: [UInt8](repeating: 7, count: 32)),
            discovery: .staticPeers([])
        )
    }

    /// A 0.9 database at `path` (its schema made by 0.9's migrations, up to `migration`) holding
    /// `entries` as 0.9 stored them.
    static func zeroNineDatabase(
        at path: String,
        upTo migration: String = "v4-attachments",
        _ entries: [NavlogLegacyEntry]
    ) throws {
        let queue = try DatabaseQueue(path: path)
        try NavlogLegacy.migrator.migrate(queue, upTo: migration)
        try queue.write { db in
            if migration != "v1-entries" {
                try db.execute(sql: "INSERT INTO node (id, peerID) VALUES (1, ?)", arguments: [UUID().uuidString])
            }
            for entry in entries {
                let fields = entry.fields
                var columns =
                    "id, leg, waypoint, planned, actual, fuel, altitude, remarks, author, origin, timestamp, deleted"
                var arguments: [(any DatabaseValueConvertible)?] = [
                    entry.id.uuidString, fields.leg, fields.waypoint, fields.planned, fields.actual, fields.fuel,
                    fields.altitude, fields.remarks, entry.author, entry.origin.uuidString,
                    Int64(bitPattern: entry.timestamp.rawValue), entry.deleted,
                ]
                if migration == "v4-attachments" {
                    columns += ", key, signature, attachments"
                    arguments += [
                        entry.key?.description, entry.signature.map { $0.map { String(format: "%02x", $0) }.joined() },
                        try entry.attachments.map { String(decoding: try JSONEncoder().encode($0), as: UTF8.self) },
                    ]
                }
                try db.execute(
                    sql: "INSERT INTO entry (\(columns)) VALUES (\(databaseQuestionMarks(count: arguments.count)))",
                    arguments: StatementArguments(arguments)
                )
            }
        }
    }

    /// An entry as 0.9 stored it, written and signed by `identity` (nil: unsigned, as 0.9's
    /// first release stored it).
    static func entry(
        _ waypoint: String,
        leg: Int,
        by identity: PeerIdentity,
        signed: Bool = true,
        deleted: Bool = false,
        attachments: [NavlogAttachment]? = nil
    ) throws -> NavlogLegacyEntry {
        var entry = NavlogLegacyEntry(
            id: UUID(),
            fields: NavlogFields(leg: leg, waypoint: waypoint, remarks: "as 0.9 wrote it"),
            author: "crew \(leg)",
            origin: identity.peerID,
            timestamp: HLCTimestamp(milliseconds: 1_795_000_000_000 + UInt64(leg), counter: 1),
            deleted: deleted,
            attachments: attachments
        )
        if signed {
            entry.key = identity.key
            entry.signature = try identity.protocolSignature(for: entry.signedBytes)
        }
        return entry
    }

    /// A 0.9 database opens in this build with every entry, each still signed by the host that
    /// wrote it (format 3, docs/SYNC.md 11), its attached file kept; an entry 0.9's first
    /// release left unsigned is issued again as this host's. The 0.9 tables are let go, and a
    /// second start finds the log in the store alone.
    /// A host over a session made elsewhere needs it made for its store: under the store's
    /// identity, from `NavlogNode.configuration(_:for:)`; any other is refused, saying which.
    @Test func aSessionNotMadeForTheStoreIsRefused() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let store = try NavlogStore(path: path)
        let made = NavlogNode.configuration(try Self.configuration("relief"), for: store)
        for (session, what) in [
            (MultipeerSession(configuration: made, identity: PeerIdentity()), "another identity"),
            (
                MultipeerSession(configuration: try Self.configuration("relief"), identity: store.identity!),
                "its own files"
            ),
        ] {
            do {
                _ = try await NavlogNode(store: store, session: session)
                Issue.record("a session with \(what) was taken")
            } catch {
                #expect(error.code == .sessionMismatch, "\(what): \(error)")
            }
        }
        let node = try await NavlogNode(
            store: store,
            session: MultipeerSession(configuration: made, identity: store.identity!)
        )
        #expect(try await node.entries().isEmpty)
    }

    @Test func aZeroNineDatabaseOpensWithEveryEntrySignedByItsOrigin() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let (captain, officer) = (PeerIdentity(), PeerIdentity())
        let bytes = Array("a weather chart".utf8)
        let chartFile = try SyncAttachment(sha256: Array(SHA256.hash(data: bytes)), length: Int64(bytes.count))
        let folder = path + ".attachments"
        try FileManager.default.createDirectory(atPath: folder + "/incoming", withIntermediateDirectories: true)
        try Data(bytes).write(to: URL(fileURLWithPath: folder + "/" + chartFile.hex))
        let chart = NavlogAttachment(name: "chart.pdf", file: chartFile)
        let entries = [
            try Self.entry("TESAT", leg: 1, by: captain, attachments: [chart]),
            try Self.entry("NIPAS", leg: 2, by: officer),
            try Self.entry("DEKIS", leg: 3, by: officer, deleted: true),
            try Self.entry("BAGSO", leg: 4, by: captain, signed: false),
        ]
        try Self.zeroNineDatabase(at: path, entries)

        let listed = try await NavlogStore(readingAt: path).entries()
        #expect(listed.entries.map(\.fields.waypoint) == ["TESAT", "NIPAS", "BAGSO"], "read as 0.9 left it")

        let store = try NavlogStore(path: path)
        let node = try await NavlogNode(store: store, configuration: try Self.configuration("relief"))
        let shown = try await node.entries()
        #expect(shown.map(\.fields.waypoint) == ["TESAT", "NIPAS", "BAGSO"])
        for (entry, old) in zip(shown.prefix(2), entries.prefix(2)) {
            #expect(entry.id == old.id && entry.origin == old.origin && entry.timestamp == old.timestamp)
            #expect(entry.author == old.author && entry.fields == old.fields && entry.key == old.key)
        }
        #expect(shown[0].attachments == [chart])
        #expect(await node.state(of: chart) == .held, "its file came along")
        #expect(shown[2].origin == store.identity?.peerID, "an unsigned entry is this host's now")

        let storage = try SQLiteStorage(path: path)
        for old in entries.prefix(3) {
            let kept = try storage.versions(of: [
                RecordKey(collection: NavlogRecord.collectionName, id: old.id.uuidString)
            ])
            let version = try #require(kept.values.first?.first)
            #expect(version.bytes == old.version, "kept byte for byte as 0.9 signed it")
            try version.verify(with: try #require(old.key))
        }
        let tables = try await DatabaseQueue(path: path).read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        #expect(!tables.contains("entry") && !tables.contains("node"), "\(tables)")
        #expect(!FileManager.default.fileExists(atPath: folder + "/incoming"))
        #expect(try NavlogStore(readingAt: path).legacy.isEmpty)
        let listedAfter = try await NavlogStore(readingAt: path).entries()
        #expect(listedAfter.entries == shown && listedAfter.files == [chart.sha256: .held])
    }

    /// A database of 0.9's first release (its first schema, nothing signed) is brought in too:
    /// its entries issued again as this host's.
    @Test func aFirstReleaseDatabaseIsBroughtInAsThisHostsEntries() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let old = try Self.entry("TESAT", leg: 1, by: PeerIdentity(), signed: false)
        try Self.zeroNineDatabase(at: path, upTo: "v1-entries", [old])
        let store = try NavlogStore(path: path)
        let node = try await NavlogNode(store: store, configuration: try Self.configuration("relief"))
        let shown = try await node.entries()
        #expect(shown.map(\.id) == [old.id] && shown.first?.fields == old.fields)
        #expect(shown.first?.origin == store.identity?.peerID && shown.first?.key == store.identity?.key)
    }

    /// A version of a 0.9 database altered on disk does not verify: the host does not start,
    /// and says which.
    @Test func anAlteredZeroNineVersionStopsTheHostSayingWhich() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        var altered = try Self.entry("TESAT", leg: 1, by: PeerIdentity())
        altered.fields.remarks = "altered"
        try Self.zeroNineDatabase(at: path, [altered])
        await #expect {
            _ = try await NavlogNode(
                store: try NavlogStore(path: path),
                configuration: try Self.configuration("relief")
            )
        } throws: { error in
            guard let error = error as? NavlogError else { return false }
            return error.code == .databaseCorrupt && error.message.contains("do not verify")
        }
    }

    /// Entries written here survive a restart, signed by this host.
    @Test func entriesSurviveReopening() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let written: NavlogEntry
        do {
            let node = try await NavlogNode(
                store: try NavlogStore(path: path),
                configuration: try Self.configuration("captain")
            )
            written = try await node.add([.waypoint: "TESAT", .leg: "1", .remarks: "light chop"])
            #expect(written.fields == NavlogFields(leg: 1, waypoint: "TESAT", remarks: "light chop"))
        }
        let store = try NavlogStore(path: path)
        let node = try await NavlogNode(store: store, configuration: try Self.configuration("captain"))
        #expect(try await node.entries() == [written])
        #expect(written.origin == store.identity?.peerID && written.key == store.identity?.key)
        #expect(try await NavlogStore(readingAt: path).entries().entries == [written])
    }

    @Test func aSecondWriterIsTurnedAwayButReadersAreNot() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let node = try await NavlogNode(
            store: try NavlogStore(path: path),
            configuration: try Self.configuration("captain")
        )
        try await node.add([.waypoint: "TESAT"])
        #expect { try NavlogStore(path: path) } throws: { ($0 as? NavlogError)?.code == .databaseLocked }
        #expect(try await NavlogStore(readingAt: path).entries().entries.count == 1)
    }

    @Test func aFileThatIsNotADatabaseIsReportedAsCorrupt() throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: path))
        #expect { try NavlogStore(path: path) } throws: { error in
            guard let error = error as? NavlogError else { return false }
            return error.code == .databaseCorrupt && error.message.contains("is not a navlog database")
        }
        #expect { try NavlogStore(readingAt: path) } throws: { ($0 as? NavlogError)?.code == .databaseCorrupt }
        #expect { try NavlogStore(readingAt: path + ".missing") } throws: {
            ($0 as? NavlogError)?.code == .databaseMissing
        }
        // A database of something else entirely is not read as a log.
        let other = Self.temporaryPath()
        defer { Self.remove(other) }
        try DatabaseQueue(path: other).write { db in try db.execute(sql: "CREATE TABLE t (x)") }
        #expect { try NavlogStore(readingAt: other) } throws: { ($0 as? NavlogError)?.code == .databaseCorrupt }
    }
}
