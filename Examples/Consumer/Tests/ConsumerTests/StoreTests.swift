import Foundation
import MultipeerSession
import MultipeerSync
import Testing

/// A crew log entry: merged as a whole record (the default).
struct LogEntry: SyncRecord, Equatable {
    var id: String
    var text: String
}

/// A checklist item: merged field by field.
struct ChecklistItem: SyncRecord, Equatable {
    static var merge: SyncMerge { .fieldByField }
    var id: String
    var title: String
    var done: Bool
    var remark: String?
}

/// The captain's device: the only one that may write orders.
let captainIdentity = PeerIdentity()

/// A standing order, written by the captain alone.
struct Order: SyncRecord, Equatable {
    static var writers: SyncWriters { .only([captainIdentity.key]) }
    var id: String
    var text: String
}

/// The same collection as a rogue build declares it: anyone may write.
struct RogueOrder: SyncRecord, Equatable {
    static var collectionName: String { "Order" }
    var id: String
    var text: String
}

/// A notice as a newer build writes it: a field more. Merged field by field.
struct NoticeV2: SyncRecord, Equatable {
    static var collectionName: String { "Notice" }
    static var merge: SyncMerge { .fieldByField }
    var id: String
    var text: String
    var priority: Int
}

/// The same collection as an older build knows it.
struct NoticeV1: SyncRecord, Equatable {
    static var collectionName: String { "Notice" }
    static var merge: SyncMerge { .fieldByField }
    var id: String
    var text: String
}

/// A memo, merged as a whole record, as a newer build writes it, and as an older one knows it.
struct MemoV2: SyncRecord, Equatable {
    static var collectionName: String { "Memo" }
    var id: String
    var text: String
    var attachments: [String]
}

struct MemoV1: SyncRecord, Equatable {
    static var collectionName: String { "Memo" }
    var id: String
    var text: String
}

/// A bulletin as a newer build writes it: its level became a word (schema version 2).
struct BulletinV2: SyncRecord, Equatable {
    static var collectionName: String { "Bulletin" }
    static var schemaVersion: Int { 2 }
    var id: String
    var level: String
}

/// The same collection as an older build knows it: its level a number (schema version 1).
struct BulletinV1: SyncRecord, Equatable {
    static var collectionName: String { "Bulletin" }
    var id: String
    var level: Int
}

/// The log's entries as a build that misreads them would declare them: no entry reads.
struct Misread: SyncRecord {
    static var collectionName: String { "LogEntry" }
    var id: String
    var count: Int
}

/// The store's message type, as a stranger implementing docs/SYNC.md 6 would send it: its
/// bytes in one CBOR byte string, under the store's wire name.
struct RawSyncMessage: MultipeerMessage {
    static var wireName: String { "multipeer.sync.v1" }
    static var wireEncoding: MessageEncoding? { .binary }
    var bytes: Data

    init(_ bytes: [UInt8]) { self.bytes = Data(bytes) }
    init(from decoder: any Decoder) throws { bytes = try decoder.singleValueContainer().decode(Data.self) }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(bytes)
    }
}

/// A session named `name` with `identity` that dials `listener` (once it listens) over loopback.
func dialling(_ listener: MultipeerSession, _ name: String, identity: PeerIdentity) async throws -> MultipeerSession {
    MultipeerSession(
        configuration: configuration(name, dialling: try await listeningPort(of: listener)),
        identity: identity
    )
}

/// Whether `a` comes before `b`, byte by byte: the order of peer IDs in docs/SYNC.md 6.
func precedes(_ a: UUID, _ b: UUID) -> Bool {
    withUnsafeBytes(of: a.uuid) { a in withUnsafeBytes(of: b.uuid) { b in a.lexicographicallyPrecedes(b) } }
}

/// Runs `body` with a new empty directory, removed afterwards.
func withDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID())")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}

/// Runs `stores` while `body` runs, then cancels them and waits for each to stop.
func whileSyncing<T: Sendable>(_ stores: [SyncStore], _ body: () async throws -> T) async throws -> T {
    try await whileRunning(stores.map { store in { try await store.run() } }, body)
}

/// Three stations in a chain over real sessions on loopback: the relief station's session, in
/// the middle, listens; the captain's and the purser's dial it, and never meet each other.
struct Chain {
    let left, middle, right: MultipeerSession
    let captain, relief, purser: SyncStore

    /// Runs the ends' sessions, until both are active with the middle, then the three stores,
    /// while `body` runs.
    func syncing<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await whileRunning([left, right]) {
            try await waitUntilActive(left, middle.peerID)
            try await waitUntilActive(right, middle.peerID)
            return try await whileSyncing([captain, relief, purser], body)
        }
    }
}

/// Runs `body` with a chain whose stores are kept in `directory` (the relief station's keeping
/// `reliefKeeps`), the middle's session running and the ends' not yet.
func withChain<T: Sendable>(
    in directory: URL,
    reliefKeeps: SyncScope = .everything,
    _ body: (Chain) async throws -> T
) async throws -> T {
    func path(_ name: String) -> String { directory.appendingPathComponent("\(name).sqlite").path }
    let middle = MultipeerSession(configuration: configuration("relief"), identity: PeerIdentity())
    let relief = try SyncStore(session: middle, path: path("relief"), configuration: .init(keeps: reliefKeeps))
    return try await whileRunning([middle]) {
        let port = try await listeningPort(of: middle)
        let (left, right) = (
            MultipeerSession(configuration: configuration("captain", dialling: port), identity: PeerIdentity()),
            MultipeerSession(configuration: configuration("purser", dialling: port), identity: PeerIdentity())
        )
        let chain = Chain(
            left: left,
            middle: middle,
            right: right,
            captain: try SyncStore(session: left, path: path("captain")),
            relief: relief,
            purser: try SyncStore(session: right, path: path("purser"))
        )
        let result = try await body(chain)
        #expect(left.activePeers.allSatisfy { $0.id == middle.peerID }, "the ends never met")
        return result
    }
}

/// Reads `changes` until `done` says the changes read so far are enough, within 30 s.
func changes<Record: SyncRecord>(
    _ changes: SyncChanges<Record>,
    until done: @escaping @Sendable ([SyncChange<Record>]) -> Bool
) async throws -> [SyncChange<Record>] {
    try await within(30, "changes of \(Record.self)") {
        var seen: [SyncChange<Record>] = []
        for await change in changes {
            seen.append(change)
            if done(seen) { return seen }
        }
        throw TimedOut(what: "changes of \(Record.self) (the store stopped)")
    }
}

/// Waits for the first event of `store` that `matches` says is the one, within 30 s.
func event(
    of events: AsyncStream<SyncEvent>,
    _ matches: @escaping @Sendable (SyncEvent) -> Bool
) async throws -> SyncEvent {
    try await within(30, "a store event") {
        for await event in events where matches(event) { return event }
        throw TimedOut(what: "a store event (the store stopped)")
    }
}

/// The replicated store as an application uses it: `import MultipeerSync`, stores over real
/// sessions on loopback, SQLite files.
@Suite struct StoreTests {
    /// Two stations that wrote before they ever met: at the join, each gets what the other
    /// wrote (reconciliation: nothing was pushed, there was nobody to push to); then every write
    /// arrives live.
    @Test func whatEachWroteBeforeTheyMetArrivesAtTheJoinThenEveryWriteLive() async throws {
        try await withDirectory { directory in
            let listener = MultipeerSession(configuration: configuration("listener"), identity: PeerIdentity())
            let a = try SyncStore(session: listener, path: directory.appendingPathComponent("a.sqlite").path)
            let aLog = a.collection(LogEntry.self)
            try await whileRunning([listener]) {
                let port = try await listeningPort(of: listener)
                let dialler = MultipeerSession(
                    configuration: configuration("dialler", dialling: port),
                    identity: PeerIdentity()
                )
                let b = try SyncStore(session: dialler, path: directory.appendingPathComponent("b.sqlite").path)
                let bLog = b.collection(LogEntry.self)
                let fromA = (0..<300).map { LogEntry(id: "a\(1000 + $0)", text: "captain's entry \($0)") }
                let fromB = (0..<200).map { LogEntry(id: "b\(1000 + $0)", text: "relief's entry \($0)") }
                try await aLog.put(fromA)
                try await bLog.put(fromB)
                #expect(try await aLog.records() == fromA, "durable and readable before any sync")

                let (atA, atB) = (aLog.changes, bLog.changes)
                try await whileRunning([dialler]) {
                    try await whileSyncing([a, b]) {
                        let toB = try await changes(atB) { $0.count == 300 }
                        #expect(toB.allSatisfy { $0.peer == listener.peerID && $0.origin == listener.peerID })
                        let toA = try await changes(atA) { $0.count == 200 }
                        #expect(toA.allSatisfy { $0.peer == dialler.peerID && $0.origin == dialler.peerID })
                        #expect(try await aLog.records() == fromA + fromB, "every record, as written")
                        #expect(try await bLog.records() == fromA + fromB)

                        // Live, both ways: a write, and a delete.
                        try await bLog.put(LogEntry(id: "c", text: "from relief"))
                        let got = try await changes(atA) { $0.contains { $0.id == "c" } }
                        #expect(got.last?.record == LogEntry(id: "c", text: "from relief"))
                        #expect(got.last?.origin == dialler.peerID && got.last?.peer == dialler.peerID)

                        try await aLog.delete(id: "a1000")
                        let deleted = try await changes(atB) { $0.contains { $0.id == "a1000" } }
                        #expect(deleted.last?.record == nil, "a delete arrives as a change with no record")
                        #expect(try await bLog.record(id: "a1000") == nil)
                        #expect(try await bLog.records().count == 500)
                    }
                }
            }
        }
    }

    /// A checklist item changed on two stations apart, a different field on each: once they
    /// meet again, both hold both changes. The relief station comes back as a new session (a
    /// restart), which the captain's session never knew, so its change reaches the captain
    /// only by reconciliation.
    /// A reader that stalls costs the store its buffer and no more: its changes and events
    /// beyond the limits the configuration sets go, oldest first, and the reader is told how
    /// many before what follows, which is the newest, in order.
    @Test func aReaderThatFallsBehindIsToldWhatItMissed() async throws {
        try await withDirectory { directory in
            let session = MultipeerSession(configuration: configuration("captain"), identity: PeerIdentity())
            let store = try SyncStore(
                session: session,
                path: directory.appendingPathComponent("log.sqlite").path,
                configuration: .init(changeBuffer: 8, eventBuffer: 4)
            )
            let log = store.collection(LogEntry.self)
            let (changes, events) = (log.changes, store.events)
            for number in 0..<20 { try await log.put(LogEntry(id: "entry-\(number)", text: "written \(number)")) }
            try await store.collection(ChecklistItem.self).put(ChecklistItem(id: "fuel", title: "Fuel", done: false))
            var read = changes.makeAsyncIterator()
            let first = try #require(await read.next())
            #expect(first.missed == 12 && first.id == "entry-12", "\(first.missed) missed before \(first.id)")
            var rest: [String] = []
            for _ in 0..<7 { rest.append(try #require(await read.next()).id) }
            #expect(
                rest == (13..<20).map { "entry-\($0)" },
                "the rest in order, another collection's write not among them"
            )

            // (Records of the log read as another type: each one that does not read is an event.)
            #expect(try await store.collection(Misread.self).records().isEmpty)
            var told: [SyncEvent] = []
            for await event in events {
                told.append(event)
                if told.count == 5 { break }
            }
            guard case .eventsDropped(let dropped) = told.first else {
                Issue.record("no eventsDropped first: \(told)")
                return
            }
            #expect(dropped == 16, "20 unreadable records told, 4 held")
            #expect(told.dropFirst().allSatisfy { if case .unreadableRecord = $0 { true } else { false } }, "\(told)")
        }
    }

    @Test func fieldsChangedApartOnTwoStationsAreBothKept() async throws {
        try await withDirectory { directory in
            let aPath = directory.appendingPathComponent("a.sqlite").path
            let bPath = directory.appendingPathComponent("b.sqlite").path
            let listener = MultipeerSession(configuration: configuration("listener"), identity: PeerIdentity())
            let a = try SyncStore(session: listener, path: aPath)
            let aItems = a.collection(ChecklistItem.self)
            let relief = PeerIdentity()
            let fuel = ChecklistItem(id: "before-start/fuel", title: "Fuel", done: false, remark: "check both tanks")
            let merged = ChecklistItem(id: fuel.id, title: "Fuel quantity", done: true, remark: nil)
            try await whileRunning([listener]) {
                let port = try await listeningPort(of: listener)
                let first = MultipeerSession(configuration: configuration("dialler", dialling: port), identity: relief)
                let b = try SyncStore(session: first, path: bPath)
                try await aItems.put(fuel)
                let arriving = b.collection(ChecklistItem.self).changes
                try await whileRunning([first]) {
                    try await whileSyncing([a, b]) {
                        _ = try await changes(arriving) { $0.contains { $0.record == fuel } }
                    }
                }

                // Apart: each changes another field.
                var renamed = fuel
                renamed.title = "Fuel quantity"
                try await aItems.put(renamed)
                let second = MultipeerSession(configuration: configuration("dialler", dialling: port), identity: relief)
                let restarted = try SyncStore(session: second, path: bPath)
                let bItems = restarted.collection(ChecklistItem.self)
                var ticked = try #require(try await bItems.record(id: fuel.id))
                #expect(ticked == fuel, "the restarted store has what it took")
                ticked.done = true
                ticked.remark = nil
                try await bItems.put(ticked)

                let (atA, atB) = (aItems.changes, bItems.changes)
                try await whileRunning([second]) {
                    try await whileSyncing([a, restarted]) {
                        _ = try await changes(atA) { $0.last?.record == merged }
                        _ = try await changes(atB) { $0.last?.record == merged }
                    }
                }
                #expect(try await aItems.record(id: fuel.id) == merged)
                #expect(try await bItems.record(id: fuel.id) == merged)
            }
        }
    }

    /// Two stations that met before, each restarted (so no message of either waits in a
    /// session for the other), write apart: a few records each (fewer than reconciliation
    /// splits, the case of id lists, or more) and a delete of the other's. At the next meeting
    /// each gets what the other wrote since, and both hold the same records; and after one of
    /// them is restored from a backup, what it lost is found again.
    @Test(arguments: [3, 40])
    func stationsThatMetBeforeExchangeWhatEachWroteSince(count: Int) async throws {
        try await withDirectory { directory in
            @Sendable func path(_ name: String) -> String { directory.appendingPathComponent("\(name).sqlite").path }
            let (captainIdentity, reliefIdentity) = (PeerIdentity(), PeerIdentity())
            func meet(
                _ body: @escaping @Sendable (SyncStore, SyncStore) async throws -> Void,
                then after: @escaping @Sendable (SyncStore, SyncStore) async throws -> Void = { _, _ in }
            ) async throws {
                let listener = MultipeerSession(configuration: configuration("captain"), identity: captainIdentity)
                let captain = try SyncStore(session: listener, path: path("captain"))
                try await whileRunning([listener]) {
                    let dialler = try await dialling(listener, "relief", identity: reliefIdentity)
                    let relief = try SyncStore(session: dialler, path: path("relief"))
                    try await body(captain, relief)
                    let (atCaptain, atRelief) = (captain.events, relief.events)
                    try await whileRunning([dialler]) {
                        try await whileSyncing([captain, relief]) {
                            for events in [atCaptain, atRelief] {
                                _ = try await event(of: events) {
                                    if case .exchanged = $0 { return true }
                                    return false
                                }
                            }
                            try await after(captain, relief)
                        }
                    }
                }
            }
            @Sendable func entries(_ prefix: String, _ range: Range<Int>) -> [LogEntry] {
                range.map { LogEntry(id: "\(prefix)\($0)", text: "\(prefix) \($0)") }
            }
            try await meet { captain, relief in
                try await captain.collection(LogEntry.self).put(entries("c", 0..<count))
                try await relief.collection(LogEntry.self).put(entries("r", 0..<count))
            }
            try await meet { captain, relief in
                #expect(try await relief.collection(LogEntry.self).records().count == 2 * count, "they met")
                try await captain.collection(LogEntry.self).put(entries("c", count..<count + 3))
                try await relief.collection(LogEntry.self).put(entries("r", count..<count + 2))
                try await relief.collection(LogEntry.self).delete(id: "c0")
            } then: { captain, relief in
                // Each pushed what it wrote since, before the exchange's first round: both count it.
                let (atCaptain, atRelief) = (try await captain.status(), try await relief.status())
                #expect(atCaptain.peers[reliefIdentity.peerID]?.received == 3, "\(atCaptain)")
                #expect(atRelief.peers[captainIdentity.peerID]?.received == 3, "\(atRelief)")
                #expect(
                    atCaptain.peers[reliefIdentity.peerID]?.sent == 3
                        && atRelief.peers[captainIdentity.peerID]?.sent == 3,
                    "\(atCaptain), \(atRelief)"
                )
            }
            // The relief station's device is restored from a backup of before that meeting:
            // the captain's station believes it holds what it took then, which it no longer
            // does. Only comparing what both hold finds it.
            let backup = directory.appendingPathComponent("backup")
            try FileManager.default.createDirectory(at: backup, withIntermediateDirectories: true)
            try await meet { _, _ in
                for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path("relief") + suffix)
                {
                    try FileManager.default.copyItem(
                        atPath: path("relief") + suffix,
                        toPath: backup.path + "/relief.sqlite" + suffix
                    )
                }
            }
            try await meet { captain, _ in
                try await captain.collection(LogEntry.self).put(entries("c", count + 3..<count + 4))
            }
            for suffix in ["", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: path("relief") + suffix)
                if FileManager.default.fileExists(atPath: backup.path + "/relief.sqlite" + suffix) {
                    try FileManager.default.copyItem(
                        atPath: backup.path + "/relief.sqlite" + suffix,
                        toPath: path("relief") + suffix
                    )
                }
            }
            try await meet { _, relief in
                let lost = try await relief.collection(LogEntry.self).record(id: "c\(count + 3)")
                #expect(lost == nil, "restored from before it took it")
            }
            try await meet { captain, relief in
                let final = try await captain.collection(LogEntry.self).records()
                #expect(try await relief.collection(LogEntry.self).records() == final)
                #expect(final.count == 2 * count + 6 - 1)
                #expect(!final.contains { $0.id == "c0" } && final.contains { $0.id == "r\(count + 1)" })
                let status = try await captain.status()
                #expect(status.peers[reliefIdentity.peerID]?.state == .unknown, "a new run: not met in it yet")
            }
        }
    }

    /// A station's store stopped and started again while its session, and its link to the
    /// peer, stay up, so the peer's session sees no join: the two meet again all the same,
    /// whichever has the smaller peer ID (the one that starts their exchange), and what the
    /// peer wrote while the store was stopped arrives.
    @Test(arguments: [false, true])
    func aStoreRestartedOverARunningSessionMeetsItsPeerAgain(restartedIsLarger: Bool) async throws {
        try await withDirectory { directory in
            @Sendable func path(_ name: String) -> String { directory.appendingPathComponent("\(name).sqlite").path }
            let captainIdentity = PeerIdentity()
            var reliefIdentity = PeerIdentity()
            while precedes(reliefIdentity.peerID, captainIdentity.peerID) != restartedIsLarger {
                reliefIdentity = PeerIdentity()
            }
            let listener = MultipeerSession(configuration: configuration("captain"), identity: captainIdentity)
            try await whileRunning([listener]) {
                let dialler = try await dialling(listener, "relief", identity: reliefIdentity)
                let relief = try SyncStore(session: dialler, path: path("relief"))
                try await whileRunning([dialler]) {
                    try await whileSyncing([relief]) {
                        @Sendable func exchanged(_ events: AsyncStream<SyncEvent>, with peer: UUID) async throws {
                            _ = try await event(of: events) {
                                if case .exchanged(let with) = $0 { return with == peer }
                                return false
                            }
                        }
                        try await {
                            let captain = try SyncStore(session: listener, path: path("captain"))
                            let (atCaptain, atRelief) = (captain.events, relief.events)
                            try await whileSyncing([captain]) {
                                try await exchanged(atCaptain, with: dialler.peerID)
                                try await exchanged(atRelief, with: listener.peerID)
                            }
                        }()
                        let entry = LogEntry(id: "meanwhile", text: "written while the captain's store was stopped")
                        try await relief.collection(LogEntry.self).put(entry)
                        let captain = try SyncStore(session: listener, path: path("captain"))
                        let atCaptain = captain.events
                        #expect(listener.activePeers.map(\.id) == [dialler.peerID], "the link stayed up")
                        try await whileSyncing([captain]) {
                            try await exchanged(atCaptain, with: dialler.peerID)
                            #expect(try await captain.collection(LogEntry.self).record(id: "meanwhile") == entry)
                        }
                    }
                }
            }
        }
    }

    /// A station whose build reads a collection as an older schema version hears the newer
    /// one's at the join and says so, once; a record of the newer shape that does not read
    /// here is refused by `record(id:)` naming the newer version, and still kept whole. The
    /// newer station hears nothing of the kind.
    @Test func aStationToldOfANewerSchemaSaysSoAndNamesItWhenARecordDoesNotRead() async throws {
        try await withDirectory { directory in
            let listener = MultipeerSession(configuration: configuration("newer"), identity: PeerIdentity())
            let newer = try SyncStore(session: listener, path: directory.appendingPathComponent("newer.sqlite").path)
            let bulletins = newer.collection(BulletinV2.self)
            try await bulletins.put(BulletinV2(id: "b1", level: "severe"))
            try await whileRunning([listener]) {
                let port = try await listeningPort(of: listener)
                let dialler = MultipeerSession(
                    configuration: configuration("older", dialling: port),
                    identity: PeerIdentity()
                )
                let older = try SyncStore(session: dialler, path: directory.appendingPathComponent("older.sqlite").path)
                let oldBulletins = older.collection(BulletinV1.self)
                let (olderEvents, newerEvents) = (older.events, newer.events)
                try await whileRunning([dialler]) {
                    try await whileSyncing([newer, older]) {
                        let told = try await event(of: olderEvents) {
                            if case .newerSchema("Bulletin", theirs: 2, ours: 1, from: listener.peerID) = $0 {
                                return true
                            }
                            return false
                        }
                        #expect("\(told)".contains("schema version 2"))
                        _ = try await event(of: olderEvents) {
                            if case .exchanged = $0 { return true }
                            return false
                        }
                        _ = try await event(of: newerEvents) {
                            if case .exchanged = $0 { return true }
                            if case .newerSchema = $0 { Issue.record("the newer station was told of a newer schema") }
                            return false
                        }
                        do throws(SyncError) {
                            _ = try await oldBulletins.record(id: "b1")
                            Issue.record("a level of another type read")
                        } catch {
                            #expect(error.code == .undecodableRecord)
                            #expect(error.message.contains("schema version 2"), "\(error)")
                        }
                        #expect(try await older.status().versions == 1, "kept whole all the same")
                    }
                }
            }
        }
    }

    /// A chain: the captain and the purser each meet only the relief station, never each
    /// other. What either wrote, before or after, reaches the other through the relief station
    /// (store and forward), signed by its origin.
    @Test func aChainWhoseEndsNeverMeetConverges() async throws {
        try await withDirectory { directory in
            try await withChain(in: directory) { chain in
                let (captainLog, purserLog) = (
                    chain.captain.collection(LogEntry.self), chain.purser.collection(LogEntry.self)
                )
                try await purserLog.put((0..<20).map { LogEntry(id: "p\($0)", text: "purser's \($0)") })
                let (atCaptain, atPurser) = (captainLog.changes, purserLog.changes)
                try await chain.syncing {
                    let before = try await changes(atCaptain) { $0.count == 20 }
                    #expect(before.allSatisfy { $0.origin == chain.right.peerID && $0.peer == chain.middle.peerID })

                    try await captainLog.put(LogEntry(id: "c1", text: "captain's, live"))
                    let live = try await changes(atPurser) { $0.contains { $0.id == "c1" } }
                    #expect(live.last?.origin == chain.left.peerID && live.last?.peer == chain.middle.peerID)
                }
                let all = try await captainLog.records()
                #expect(all.count == 21)
                #expect(try await purserLog.records() == all)
                #expect(try await chain.relief.collection(LogEntry.self).records() == all)
            }
        }
    }

    /// A station in the middle that keeps only the checklist (`Configuration.keeps`): at the
    /// joins and live, it takes every checklist item and passes them on, and is relayed nothing
    /// else (it refuses nothing; the captain's own log entries reach it, and it leaves them);
    /// both exchanges complete over what the stations share; what it does not keep does not
    /// pass through it, and it cannot write it.
    @Test func aStationKeepingOnlySomeCollectionsIsSentNothingElseAndPassesOnWhatItKeeps() async throws {
        try await withDirectory { directory in
            try await withChain(in: directory, reliefKeeps: .only([ChecklistItem.collectionName])) { chain in
                let (captain, relief, purser) = (chain.captain, chain.relief, chain.purser)
                let (captainLog, purserLog) = (captain.collection(LogEntry.self), purser.collection(LogEntry.self))
                let captainChecklist = captain.collection(ChecklistItem.self)
                try await captainLog.put((0..<20).map { LogEntry(id: "c\($0)", text: "captain's \($0)") })
                try await captainChecklist.put(
                    (0..<5).map { ChecklistItem(id: "c\($0)", title: "item \($0)", done: false) }
                )
                try await purserLog.put((0..<3).map { LogEntry(id: "p\($0)", text: "purser's \($0)") })
                try await purser.collection(ChecklistItem.self).put(
                    ChecklistItem(id: "p0", title: "galley", done: true)
                )
                let (atRelief, atPurser) = (
                    relief.collection(ChecklistItem.self).changes, purser.collection(ChecklistItem.self).changes
                )
                let reliefEvents = relief.events
                try await chain.syncing {
                    _ = try await changes(atRelief) { $0.count == 6 }
                    _ = try await changes(atPurser) { Set($0.map(\.id)).isSuperset(of: ["c0", "c4"]) }

                    try await captainLog.put(LogEntry(id: "live", text: "not for the relief station"))
                    try await captainChecklist.put(ChecklistItem(id: "live", title: "doors", done: true))
                    _ = try await changes(atPurser) { $0.contains { $0.id == "live" } }
                    // A message it refuses, after all that: every refusal before it is reported first.
                    try await chain.left.send(RawSyncMessage([0x07]), to: chain.middle.peerID)
                    let refusals = try await within(30, "the relief station's refusals") {
                        var refusals: [SyncError] = []
                        for await case .refused(let error, _) in reliefEvents {
                            refusals.append(error)
                            if error.code == .malformedMessage { return refusals }
                        }
                        throw TimedOut(what: "the relief station's refusals (the store stopped)")
                    }
                    #expect(refusals.map(\.code) == [.malformedMessage], "\(refusals)")
                    let status = try await relief.status()
                    #expect(status.peers[chain.left.peerID]?.state == .synced)
                    #expect(status.peers[chain.right.peerID]?.state == .synced)
                }
                let checklist = try await captainChecklist.records()
                #expect(checklist.count == 7)
                #expect(try await purser.collection(ChecklistItem.self).records() == checklist)
                #expect(try await relief.collection(ChecklistItem.self).records() == checklist)
                #expect(try await relief.collection(LogEntry.self).records().isEmpty)
                #expect(try await purserLog.records().map(\.id) == ["p0", "p1", "p2"])
                do throws(SyncError) {
                    try await relief.collection(LogEntry.self).put(LogEntry(id: "r", text: "not kept here"))
                    Issue.record("a station wrote a collection it does not keep")
                } catch {
                    #expect(error.code == .notKept && error.message.contains("LogEntry"), "\(error)")
                }
            }
            do throws(SyncError) {
                _ = try SyncStore(
                    session: MultipeerSession(configuration: configuration("misnamed"), identity: PeerIdentity()),
                    path: directory.appendingPathComponent("misnamed.sqlite").path,
                    configuration: .init(keeps: .only([String(repeating: "x", count: 256)]))
                )
                Issue.record("a store kept a collection no station could name")
            } catch {
                #expect(error.code == .invalidConfiguration, "\(error)")
            }
        }
    }

    /// Mixed builds in a chain: the captain's and the purser's stations run a newer build, the
    /// relief station in the middle an older one that knows fewer fields. What the newer write
    /// passes through the older station and arrives whole, its origin's signature valid (the
    /// purser's station took it); the older station reads what it knows, and its own edit of a
    /// notice (merged field by field) keeps the field it does not know.
    @Test func recordsOfANewerBuildPassThroughAnOlderStationWhole() async throws {
        try await withDirectory { directory in
            try await withChain(in: directory) { chain in
                let (captain, relief, purser) = (chain.captain, chain.relief, chain.purser)
                let memo = MemoV2(id: "m1", text: "galley secured", attachments: ["photo-1"])
                let notice = NoticeV2(id: "n1", text: "turbulence expected", priority: 2)
                try await captain.collection(MemoV2.self).put(memo)
                try await captain.collection(NoticeV2.self).put(notice)
                let (atRelief, atPurser) = (
                    relief.collection(NoticeV1.self).changes, purser.collection(NoticeV2.self).changes
                )
                try await chain.syncing {
                    _ = try await changes(atRelief) { $0.contains { $0.id == "n1" } }
                    #expect(
                        try await relief.collection(NoticeV1.self).record(id: "n1")
                            == NoticeV1(id: "n1", text: "turbulence expected")
                    )
                    #expect(
                        try await relief.collection(MemoV1.self).record(id: "m1")
                            == MemoV1(id: "m1", text: "galley secured")
                    )
                    _ = try await changes(atPurser) { $0.contains { $0.record == notice } }

                    try await relief.collection(NoticeV1.self).put(
                        NoticeV1(id: "n1", text: "turbulence: seat belts on")
                    )
                    let edited = NoticeV2(id: "n1", text: "turbulence: seat belts on", priority: 2)
                    _ = try await changes(atPurser) { $0.last?.record == edited }
                }
                #expect(
                    try await purser.collection(MemoV2.self).record(id: "m1") == memo,
                    "every field, through the older station"
                )
                #expect(try await captain.collection(NoticeV2.self).record(id: "n1")?.priority == 2)
            }
        }
    }

    /// Orders are the captain's to write. A rogue build on the relief station writes one
    /// anyway: the purser's station, which carries orders without reading them, refuses it,
    /// naming the relief station, stores nothing of it and never passes it on, so the captain
    /// never sees it; the captain's own order reaches the relief station through the purser's.
    @Test func aVersionByAnOriginThatMayNotWriteIsRefusedAtEveryHop() async throws {
        try await withDirectory { directory in
            func path(_ name: String) -> String { directory.appendingPathComponent("\(name).sqlite").path }
            let middle = MultipeerSession(configuration: configuration("purser"), identity: PeerIdentity())
            let purser = try SyncStore(session: middle, path: path("purser"))
            purser.carry("Order", writers: .only([captainIdentity.key]))
            let events = purser.events
            try await whileRunning([middle]) {
                let port = try await listeningPort(of: middle)
                let captainSession = MultipeerSession(
                    configuration: configuration("captain", dialling: port),
                    identity: captainIdentity
                )
                let reliefSession = MultipeerSession(
                    configuration: configuration("relief", dialling: port),
                    identity: PeerIdentity()
                )
                let captain = try SyncStore(session: captainSession, path: path("captain"))
                let relief = try SyncStore(session: reliefSession, path: path("relief"))
                let (orders, rogue) = (captain.collection(Order.self), relief.collection(RogueOrder.self))
                try await rogue.put(RogueOrder(id: "divert", text: "divert to the nearest field"))

                let error = await #expect(throws: SyncError.self, "the purser may not write orders either") {
                    try await purser.collection(Order.self).put(Order(id: "x", text: "from the purser"))
                }
                #expect(error?.code == .notPermitted)

                let atRelief = rogue.changes
                try await whileRunning([captainSession, reliefSession]) {
                    try await waitUntilActive(captainSession, middle.peerID)
                    try await waitUntilActive(reliefSession, middle.peerID)
                    try await whileSyncing([purser, captain, relief]) {
                        let refused = try await event(of: events) {
                            if case .refused(let error, _) = $0 { return error.code == .notPermitted }
                            return false
                        }
                        guard case .refused(let error, let peer) = refused else { return }
                        #expect(peer == reliefSession.peerID)
                        #expect(error.message.contains("Order") && error.message.contains("\(reliefSession.peerID)"))

                        try await orders.put(Order(id: "climb", text: "climb to FL370"))
                        _ = try await changes(atRelief) { $0.contains { $0.id == "climb" } }
                    }
                }
                #expect(try await orders.records() == [Order(id: "climb", text: "climb to FL370")], "no rogue order")
                #expect(
                    try await purser.collection(Order.self).records() == [Order(id: "climb", text: "climb to FL370")]
                )
            }
        }
    }

    /// Without a roster, a delete is collected once the tombstone lifetime passed (zero here):
    /// its version is let go. The purser's station, away all that time with the record as it
    /// was, comes back and offers it: the captain's station, which collected the delete, never
    /// takes it back, and gives the purser's station the delete it kept, which the purser's
    /// station takes: the entry is gone there too (docs/SYNC.md 8). (The captain's station
    /// restarts meanwhile, so no message of the delete waits in its session for the purser:
    /// only reconciliation meets them.) Status tells who is synced.
    @Test func aStationBackFromLongAwayNeverBringsBackADeletedRecordAndIsGivenTheDelete() async throws {
        try await withDirectory { directory in
            func path(_ name: String) -> String { directory.appendingPathComponent("\(name).sqlite").path }
            let promptly = SyncStore.Configuration(tombstoneLifetime: .zero, collectionInterval: .milliseconds(50))
            let (captainIdentity, purserIdentity) = (PeerIdentity(), PeerIdentity())
            let entry = LogEntry(id: "cabin-report", text: "all seated")
            let first = MultipeerSession(configuration: configuration("captain"), identity: captainIdentity)
            let captainBefore = try SyncStore(session: first, path: path("captain"), configuration: promptly)
            try await whileRunning([first]) {
                let port = try await listeningPort(of: first)
                let away = MultipeerSession(
                    configuration: configuration("purser", dialling: port),
                    identity: purserIdentity
                )
                let purser = try SyncStore(session: away, path: path("purser"), configuration: promptly)
                try await purser.collection(LogEntry.self).put(entry)
                let arriving = captainBefore.collection(LogEntry.self).changes
                try await whileRunning([away]) {
                    try await whileSyncing([captainBefore, purser]) {
                        _ = try await changes(arriving) { $0.contains { $0.record == entry } }
                    }
                }
            }

            // The purser is away; the captain's station restarts, deletes the entry, and the
            // delete is collected.
            let second = MultipeerSession(configuration: configuration("captain"), identity: captainIdentity)
            let captain = try SyncStore(session: second, path: path("captain"), configuration: promptly)
            let captainLog = captain.collection(LogEntry.self)
            let collecting = captain.events
            try await whileSyncing([captain]) {
                try await captainLog.delete(id: entry.id)
                _ = try await event(of: collecting) {
                    if case .collected(let count) = $0 { return count == 1 }
                    return false
                }
            }
            let afterCollection = try await captain.status()
            #expect(afterCollection.deletes == 0 && afterCollection.versions == 0, "\(afterCollection)")
            #expect(afterCollection.horizon > HLCTimestamp(rawValue: 0))

            // Back: the purser's station still holds the entry as it was, and offers it.
            let rejoined = captain.events
            try await whileRunning([second]) {
                let port = try await listeningPort(of: second)
                let back = MultipeerSession(
                    configuration: configuration("purser", dialling: port),
                    identity: purserIdentity
                )
                let returned = try SyncStore(session: back, path: path("purser"), configuration: promptly)
                let purserLog = returned.collection(LogEntry.self)
                #expect(try await purserLog.record(id: entry.id) == entry)
                let given = purserLog.changes
                try await whileRunning([back]) {
                    try await whileSyncing([captain, returned]) {
                        _ = try await event(of: rejoined) {
                            if case .exchanged(let peer) = $0 { return peer == purserIdentity.peerID }
                            return false
                        }
                        let deleted = try await changes(given) { changes in
                            changes.contains { $0.id == entry.id && $0.record == nil }
                        }
                        #expect(deleted.last?.peer == captainIdentity.peerID, "the delete came from the captain")
                        #expect(try await purserLog.record(id: entry.id) == nil, "the purser no longer shows it")
                        let status = try await captain.status()
                        #expect(status.peers[purserIdentity.peerID]?.state == .synced, "\(status)")
                        #expect(status.peers[purserIdentity.peerID]?.isActive == true)
                        #expect(status.peers[purserIdentity.peerID]?.received == 0, "nothing taken: \(status)")
                        #expect(status.isSynced)
                    }
                }
            }
            #expect(try await captainLog.record(id: entry.id) == nil, "the collected delete still holds")
            #expect(try await captain.status().versions == 0, "nothing of the old entry was kept")
        }
    }

    /// A version of docs/SYNC.md's vector whose signature was altered is refused, naming the
    /// peer and the reason; the store goes on taking what is sound.
    @Test func aForgedVersionIsRefusedAndNothingElseIsHurt() async throws {
        try await withDirectory { directory in
            try await withPair { listener, dialler in
                let a = try SyncStore(session: listener, path: directory.appendingPathComponent("a.sqlite").path)
                let b = try SyncStore(session: dialler, path: directory.appendingPathComponent("b.sqlite").path)
                let events = b.events
                var forged = try specVector("sync-versions")
                forged[forged.count - 1] ^= 0x01  // the signature's last byte
                try await whileSyncing([a, b]) {
                    try await listener.send(RawSyncMessage(forged), to: dialler.peerID)
                    let refused = try await event(of: events) {
                        if case .refused = $0 { return true }
                        return false
                    }
                    guard case .refused(let error, let peer) = refused else { return }
                    #expect(error.code == .badSignature)
                    #expect(peer == listener.peerID)

                    let arriving = b.collection(LogEntry.self).changes
                    try await a.collection(LogEntry.self).put(LogEntry(id: "after", text: "still syncing"))
                    _ = try await changes(arriving) { $0.contains { $0.id == "after" } }
                }
                #expect(
                    try await b.collection(LogEntry.self).records() == [LogEntry(id: "after", text: "still syncing")]
                )
            }
        }
    }
}

/// The bytes of the hex vector `name` of docs/SYNC.md.
func specVector(_ name: String) throws -> [UInt8] {
    let spec = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("docs/SYNC.md")
    let text = try String(contentsOf: spec, encoding: .utf8)
    let marker = try #require(text.range(of: "<!-- vector: \(name) -->"))
    let block = text[marker.upperBound...].drop { $0 != "\n" }.dropFirst()
    let body = block.drop { $0 != "\n" }.dropFirst().prefix { $0 != "`" }
    return body.split(whereSeparator: \.isWhitespace).map { UInt8($0, radix: 16)! }
}
