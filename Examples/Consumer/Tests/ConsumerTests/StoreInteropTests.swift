import Foundation
import MultipeerSession
import MultipeerSync
import Testing

/// navlog-sync's record shape (docs/NAVLOG.md 1), as an application of its own would declare it.
struct NavlogEntry: SyncRecord, Equatable {
    static var collectionName: String { "navlog.entries" }
    struct Fields: Codable, Equatable {
        var leg: Int?
        var waypoint: String
        var planned, actual: String?
        var fuel, altitude: Int?
        var remarks: String?
    }
    var id: String
    var fields: Fields
    var author: String
    var deleted: Bool
}

/// What the store offers beside reading and writing, through the public API over real
/// sessions: who wrote each record, versions brought in, and peers that do not sync.
@Suite struct StoreInteropTests {
    /// Each record comes with the stamp of the write that made it (its origin, whose key the
    /// store gives), here and at a peer it reached.
    @Test func versionsSayWhichStationWroteEachRecord() async throws {
        try await withDirectory { directory in
            try await withPair { listener, dialler in
                let a = try SyncStore(session: listener, path: directory.appendingPathComponent("a.sqlite").path)
                let b = try SyncStore(session: dialler, path: directory.appendingPathComponent("b.sqlite").path)
                let arriving = b.collection(LogEntry.self).changes
                try await whileSyncing([a, b]) {
                    let entry = LogEntry(id: "climb", text: "climb to FL370")
                    try await a.collection(LogEntry.self).put(entry)
                    _ = try await changes(arriving) { $0.contains { $0.record == entry } }
                    for store in [a, b] {
                        let versions = try await store.collection(LogEntry.self).versions()
                        #expect(versions.map(\.record) == [entry])
                        #expect(versions.first?.stamp.origin == listener.peerID)
                        #expect(
                            try await store.collection(LogEntry.self).version(id: "climb")?.stamp
                                == versions.first?.stamp
                        )
                        #expect(try await store.key(of: listener.peerID) == listener.identity.key)
                    }
                    #expect(try await b.collection(LogEntry.self).version(id: "descend") == nil)
                }
            }
        }
    }

    /// A version of navlog-sync 0.9 (docs/SYNC.md 11's vector) is brought in with its origin's
    /// key and reads as navlog-sync's record, still its origin's; one byte changed, it is
    /// refused and the reason returned.
    @Test func navlogSyncZeroNinesVersionsAreBroughtInStillTheirOrigins() async throws {
        try await withDirectory { directory in
            try await withPair { listener, _ in
                let store = try SyncStore(session: listener, path: directory.appendingPathComponent("a.sqlite").path)
                let key = try PeerKey(hex: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
                var altered = try specVector("sync-version-navlog")
                altered[altered.count - 70] ^= 1
                let refused = try await store.importVersions([altered], keys: [key])
                #expect(refused.map(\.code) == [.badSignature], "\(refused)")
                #expect(try await store.importVersions([try specVector("sync-version-navlog")], keys: [key]).isEmpty)
                let versions = try await store.collection(NavlogEntry.self).versions()
                #expect(
                    versions.map(\.record) == [
                        NavlogEntry(
                            id: "3F2A1B7C-0000-4000-8000-000000000001",
                            fields: .init(
                                leg: 1,
                                waypoint: "TESAT",
                                planned: "10:05",
                                fuel: 12_400,
                                altitude: 37_000,
                                remarks: "light chop"
                            ),
                            author: "captain",
                            deleted: false
                        )
                    ]
                )
                #expect(versions.first?.stamp.origin == key.peerID)
                #expect(try await store.key(of: key.peerID) == key)
            }
        }
    }

    /// A peer whose application reads other message types than the store's (a build without
    /// the store, or whose store has not run yet) is reported when it joins, naming it; the
    /// session says what it reads. Once its store runs (its session then reads the store's
    /// type), the two sync.
    @Test func aPeerThatReadsNoStoreMessagesIsReportedAndSyncedOnceItDoes() async throws {
        try await withDirectory { directory in
            let listener = MultipeerSession(configuration: configuration("captain"), identity: PeerIdentity())
            let store = try SyncStore(session: listener, path: directory.appendingPathComponent("a.sqlite").path)
            var declared = listener.configuration
            declared.messageTypes = [Note.self] + SyncStore.messageTypes
            #expect(declared.messageTypes.count == 2)
            let events = store.events
            try await whileRunning([listener]) {
                let port = try await listeningPort(of: listener)
                var other = configuration("purser", dialling: port)
                other.messageTypes = [Note.self]
                let peer = MultipeerSession(configuration: other, identity: PeerIdentity())
                let late = try SyncStore(session: peer, path: directory.appendingPathComponent("b.sqlite").path)
                let arriving = late.collection(LogEntry.self).changes
                try await whileRunning([peer]) {
                    try await whileSyncing([store]) {
                        let reported = try await event(of: events) {
                            if case .notSyncing(with: peer.peerID, let error) = $0 {
                                return error.code == .peerNotSyncing
                            }
                            return false
                        }
                        #expect("\(reported)".contains("does not read the store's messages"))
                        #expect(await listener.reads(Note.self, peer: peer.peerID) == true)
                        let entry = LogEntry(id: "climb", text: "climb to FL370")
                        try await store.collection(LogEntry.self).put(entry)
                        try await whileSyncing([late]) {
                            _ = try await changes(arriving) { $0.contains { $0.record == entry } }
                        }
                    }
                }
            }
        }
    }
}
