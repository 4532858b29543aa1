import Foundation
import GRDB
import Testing

@testable import NavlogSync

@Suite struct StoreTests {
    static func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("navlog-\(UUID()).db").path
    }

    static func remove(_ path: String) {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    static let entry = NavlogEntry(
        id: UUID(),
        fields: NavlogFields(
            leg: 2,
            waypoint: "NIPAS",
            planned: "10:40",
            actual: "10:42",
            fuel: 11200,
            altitude: 37000,
            remarks: "ok"
        ),
        author: "captain",
        origin: UUID(),
        timestamp: HLCTimestamp(milliseconds: 1_795_000_000_000, counter: 3)
    )

    @Test func versionsAndThePeerIdentitySurviveReopening() throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let peerID: UUID
        do {
            let store = try NavlogStore(path: path)
            peerID = store.peerID
            #expect(try store.merge([Self.entry]).applied == [Self.entry])
            // An older version changes nothing; a newer one replaces it.
            var older = Self.entry
            older.timestamp = HLCTimestamp(milliseconds: 1, counter: 0)
            #expect(try store.merge([older]).applied.isEmpty)
        }
        let reopened = try NavlogStore(path: path)
        #expect(reopened.peerID == peerID)
        #expect(try reopened.log() == NavlogLog([Self.entry]))
        #expect(try NavlogStore(readingAt: path).log().live == [Self.entry])
    }

    /// The database keeps what it is given byte for byte: the largest timestamp (stored as a
    /// signed 64-bit integer), combining accents, emoji and a long remark. (Not a NUL: SQLite
    /// cuts text short there, so a version holding one is refused before it gets here,
    /// NavlogIntakeTests.)
    @Test func extremeVersionsSurviveTheDatabaseByteForByte() throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let store = try NavlogStore(path: path)
        let extreme = NavlogEntry(
            id: UUID(),
            fields: NavlogFields(
                leg: .min,
                waypoint: "",
                planned: "",
                fuel: .max,
                altitude: -1,
                remarks: "de\u{301}tour \u{1F6E9} " + String(repeating: "x", count: 100_000)
            ),
            author: "e\u{301}",
            origin: UUID(),
            timestamp: HLCTimestamp(rawValue: .max),
            deleted: true
        )
        #expect(try store.merge([extreme]).applied == [extreme])
        let stored = try #require(try store.log().entries[extreme.id])
        #expect(stored.timestamp == extreme.timestamp)
        #expect(Array(stored.fields.remarks!.utf8) == Array(extreme.fields.remarks!.utf8))
        #expect(Array(stored.author.utf8) == Array(extreme.author.utf8))
        #expect(stored.fields == extreme.fields && stored.deleted)
    }

    @Test func attachmentsSurviveTheDatabaseAndAVersionWithoutThemStaysWithout() throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let store = try NavlogStore(path: path)
        let with = NavlogEntry(
            id: UUID(),
            fields: NavlogFields(waypoint: "TESAT"),
            author: "captain",
            origin: UUID(),
            timestamp: HLCTimestamp(rawValue: 1),
            attachments: [
                NavlogAttachment(
                    name: "chart \u{1F6E9}.pdf",
                    length: 12_345,
                    sha256: String(repeating: "0f", count: 32)
                )
            ]
        )
        let without = NavlogEntry(
            id: UUID(),
            fields: NavlogFields(waypoint: "NIPAS"),
            author: "captain",
            origin: UUID(),
            timestamp: HLCTimestamp(rawValue: 2)
        )
        _ = try store.merge([with, without])
        let log = try NavlogStore(readingAt: path).log()
        #expect(log.entries[with.id] == with)
        #expect(log.entries[without.id]?.attachments == nil)
        #expect(log.entries[with.id]?.signedBytes == with.signedBytes)
        // What a join asks for is read without the rest of the log: the live versions with files.
        var deleted = with
        deleted.id = UUID()
        deleted.deleted = true
        _ = try store.merge([deleted])
        #expect(try store.attachedVersions() == [with])
    }

    @Test func aSecondWriterIsTurnedAwayButReadersAreNot() throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let store = try NavlogStore(path: path)
        _ = try store.merge([Self.entry])
        #expect { try NavlogStore(path: path) } throws: { ($0 as? NavlogError)?.code == .databaseLocked }
        #expect(try NavlogStore(readingAt: path).log().entries.count == 1)
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
    }

    @Test func aVersion1DatabaseIsMigratedWithItsEntries() throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        do {
            let queue = try DatabaseQueue(path: path)
            try NavlogStore.migrator.migrate(queue, upTo: "v1-entries")
            try queue.write { db in
                try db.execute(
                    sql:
                        "INSERT INTO entry (id, waypoint, author, origin, timestamp, deleted) VALUES (?, 'TESAT', 'relief', ?, 65536, 0)",
                    arguments: [Self.entry.id.uuidString, Self.entry.origin.uuidString]
                )
            }
        }
        let store = try NavlogStore(path: path)
        let migrated = try store.log().live
        #expect(
            migrated == [
                NavlogEntry(
                    id: Self.entry.id,
                    fields: NavlogFields(waypoint: "TESAT"),
                    author: "relief",
                    origin: Self.entry.origin,
                    timestamp: HLCTimestamp(milliseconds: 1, counter: 0)
                )
            ]
        )
        #expect(try NavlogStore(path: path + "-other").peerID != store.peerID)
        Self.remove(path + "-other")
    }
}
