import Foundation
import GRDB
@testable import NavlogSync
import Testing

@Suite struct StoreTests {
    static func temporaryPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("navlog-\(UUID()).db").path
    }

    static func remove(_ path: String) {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    static let entry = NavlogEntry(
        id: UUID(), fields: NavlogFields(leg: 2, waypoint: "NIPAS", planned: "10:40", actual: "10:42", fuel: 11200, altitude: 37000, remarks: "ok"),
        author: "captain", origin: UUID(), timestamp: HLCTimestamp(milliseconds: 1_795_000_000_000, counter: 3))

    @Test func versionsAndThePeerIdentitySurviveReopening() throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let peerID: UUID
        do {
            let store = try NavlogStore(path: path)
            peerID = store.peerID
            #expect(try store.merge([Self.entry]) == [Self.entry])
            // An older version changes nothing; a newer one replaces it.
            var older = Self.entry
            older.timestamp = HLCTimestamp(milliseconds: 1, counter: 0)
            #expect(try store.merge([older]).isEmpty)
        }
        let reopened = try NavlogStore(path: path)
        #expect(reopened.peerID == peerID)
        #expect(try reopened.log() == NavlogLog([Self.entry]))
        #expect(try NavlogStore(readingAt: path).log().live == [Self.entry])
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
        #expect { try NavlogStore(readingAt: path + ".missing") } throws: { ($0 as? NavlogError)?.code == .databaseMissing }
    }

    @Test func aVersion1DatabaseIsMigratedWithItsEntries() throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        do {
            let queue = try DatabaseQueue(path: path)
            try NavlogStore.migrator.migrate(queue, upTo: "v1-entries")
            try queue.write { db in
                try db.execute(
                    sql: "INSERT INTO entry (id, waypoint, author, origin, timestamp, deleted) VALUES (?, 'TESAT', 'relief', ?, 65536, 0)",
                    arguments: [Self.entry.id.uuidString, Self.entry.origin.uuidString])
            }
        }
        let store = try NavlogStore(path: path)
        let migrated = try store.log().live
        #expect(migrated == [NavlogEntry(id: Self.entry.id, fields: NavlogFields(waypoint: "TESAT"), author: "relief", origin: Self.entry.origin, timestamp: HLCTimestamp(milliseconds: 1, counter: 0))])
        #expect(try NavlogStore(path: path + "-other").peerID != store.peerID)
        Self.remove(path + "-other")
    }
}
