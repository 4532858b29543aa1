import Foundation
import MultipeerSession
import MultipeerSync
import Testing

/// A chart: a record that holds a file, fetched at once (the default).
struct Chart: SyncRecord, Equatable {
    var id: String
    var title: String
    var file: SyncAttachment?
}

/// A scan: its file is fetched only when the application asks for it.
struct Scan: SyncRecord, Equatable {
    static var attachments: SyncAttachmentPolicy { .onDemand }
    var id: String
    var file: SyncAttachment
}

/// A session of these tests that takes files, into a folder of `directory`.
func filesConfiguration(_ name: String, in directory: URL, dialling port: Int? = nil) -> MultipeerSession.Configuration
{
    var configuration = configuration(name, dialling: port)
    configuration.resourceDirectory = directory.appendingPathComponent("\(name)-incoming")
    return configuration
}

/// Writes `bytes` to a new file in `directory`, named `name`.
func file(_ name: String, in directory: URL, _ bytes: [UInt8]) throws -> URL {
    let url = directory.appendingPathComponent(name)
    try Data(bytes).write(to: url)
    return url
}

/// Attachments through the public API, over real sessions: files go with their records, from
/// whichever station holds them.
@Suite struct AttachmentTests {
    /// A chain whose middle station carries the collection without reading it (it never opens
    /// it): the captain attaches a chart, and the purser, who never meets the captain, gets the
    /// record and then the file, whole, through the relief station, which keeps a copy; each
    /// store reports the file's transfer, and where the file stands.
    @Test func aFileGoesWithItsRecordThroughAStationThatOnlyCarriesIt() async throws {
        try await withDirectory { directory in
            func path(_ name: String) -> String { directory.appendingPathComponent("\(name).sqlite").path }
            let middle = MultipeerSession(
                configuration: filesConfiguration("relief", in: directory),
                identity: PeerIdentity()
            )
            let relief = try SyncStore(session: middle, path: path("relief"))
            try await whileRunning([middle]) {
                let port = try await listeningPort(of: middle)
                let (left, right) = (
                    MultipeerSession(
                        configuration: filesConfiguration("captain", in: directory, dialling: port),
                        identity: PeerIdentity()
                    ),
                    MultipeerSession(
                        configuration: filesConfiguration("purser", in: directory, dialling: port),
                        identity: PeerIdentity()
                    )
                )
                let captain = try SyncStore(session: left, path: path("captain"))
                let purser = try SyncStore(session: right, path: path("purser"))
                let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
                let (atPurser, purserEvents, reliefEvents) = (
                    purser.collection(Chart.self).changes, purser.events, relief.events
                )
                try await whileRunning([left, right]) {
                    try await waitUntilActive(left, middle.peerID)
                    try await waitUntilActive(right, middle.peerID)
                    try await whileSyncing([captain, relief, purser]) {
                        let attachment = try await captain.attach(fileAt: try file("tesat.pdf", in: directory, bytes))
                        #expect(attachment.length == 300_000)
                        let chart = Chart(id: "tesat", title: "TESAT", file: attachment)
                        try await captain.collection(Chart.self).put(chart)

                        let arrived = try await changes(atPurser) { $0.contains { $0.id == "tesat" } }
                        #expect(arrived.last?.record == chart, "the record, which lists the file")
                        _ = try await event(of: reliefEvents) {
                            if case .attachmentArrived(attachment, from: left.peerID) = $0 { return true }
                            return false
                        }
                        // Its progress, both ways: the purser's file came from relief, whole (told
                        // before it is said to have arrived).
                        _ = try await event(of: purserEvents) {
                            if case .fileTransfer(let transfer) = $0 {
                                return transfer.attachment == attachment && transfer.peer == middle.peerID
                                    && transfer.direction == .incoming && transfer.state == .done
                                    && transfer.progress.bytesDone == 300_000
                            }
                            return false
                        }
                        _ = try await event(of: purserEvents) {
                            if case .attachmentArrived(attachment, from: middle.peerID) = $0 { return true }
                            return false
                        }
                        _ = try await event(of: reliefEvents) {
                            if case .fileTransfer(let transfer) = $0 {
                                return transfer.attachment == attachment && transfer.peer == right.peerID
                                    && transfer.direction == .outgoing && transfer.state == .done
                            }
                            return false
                        }
                        #expect(await purser.fileState(of: attachment) == .held)
                        let copy = try await purser.file(of: attachment)
                        #expect(try Data(contentsOf: copy) == Data(bytes), "whole, its SHA-256 checked")
                        #expect(try Data(contentsOf: try await relief.file(of: attachment)) == Data(bytes))
                        #expect(try await purser.status().missingAttachments == 0)
                    }
                }
                #expect(left.activePeers.allSatisfy { $0.id == middle.peerID }, "the ends never met")
            }
        }
    }

    /// The captain's store, on a session that listens (and takes files), running while `body`
    /// runs with it, its session and the port it listens on.
    static func withCaptain<T: Sendable>(
        in directory: URL,
        _ body: @escaping @Sendable (SyncStore, MultipeerSession, Int) async throws -> T
    ) async throws -> T {
        let listener = MultipeerSession(
            configuration: filesConfiguration("captain", in: directory),
            identity: PeerIdentity()
        )
        let captain = try SyncStore(session: listener, path: directory.appendingPathComponent("captain.sqlite").path)
        return try await whileRunning([listener]) {
            try await body(captain, listener, try await listeningPort(of: listener))
        }
    }

    /// A collection fetched on demand: its records arrive, their files do not until the
    /// application asks; then the file comes from the peer that holds it. A file fetched at
    /// once, written after (and larger), arrives first, unasked.
    @Test func anOnDemandFileComesOnlyWhenAsked() async throws {
        try await withDirectory { directory in
            try await Self.withCaptain(in: directory) { captain, _, port in
                let dialler = MultipeerSession(
                    configuration: filesConfiguration("relief", in: directory, dialling: port),
                    identity: PeerIdentity()
                )
                let reliefPath = directory.appendingPathComponent("relief.sqlite").path
                let relief = try SyncStore(session: dialler, path: reliefPath)
                let scan = Scan(
                    id: "scan",
                    file: try await captain.attach(fileAt: try file("scan", in: directory, [1]))
                )
                try await captain.collection(Scan.self).put(scan)
                let big = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0) }
                let chart = Chart(
                    id: "chart",
                    title: "big",
                    file: try await captain.attach(fileAt: try file("chart", in: directory, big))
                )
                try await captain.collection(Chart.self).put(chart)
                let (scans, events) = (relief.collection(Scan.self).changes, relief.events)
                try await whileRunning([dialler]) {
                    try await whileSyncing([captain, relief]) {
                        _ = try await changes(scans) { $0.last?.record == scan }
                        _ = try await event(of: events) {
                            if case .attachmentArrived(chart.file!, _) = $0 { return true }
                            return false
                        }
                        let kept = URL(fileURLWithPath: reliefPath + ".attachments").appendingPathComponent(
                            scan.file.hex
                        )
                        #expect(!FileManager.default.fileExists(atPath: kept.path), "not fetched unasked")
                        #expect(
                            try await relief.status().missingAttachments == 0,
                            "nothing it fetches at once is missing"
                        )

                        let fetched = try await within(30, "the scan's file") { try await relief.file(of: scan.file) }
                        #expect(try Data(contentsOf: fetched) == Data([1]))
                    }
                }
            }
        }
    }

    /// A file offered that no record lists is refused and reported, and the records still
    /// arrive; a file the application asks for that no record lists fails at once, saying so.
    @Test func aFileNoRecordListsIsRefusedAndRecordsStillArrive() async throws {
        try await withDirectory { directory in
            try await Self.withCaptain(in: directory) { captain, listener, port in
                // A stranger's build: no store, a file offered as the store's. And a station.
                let stranger = MultipeerSession(
                    configuration: filesConfiguration("stranger", in: directory, dialling: port),
                    identity: PeerIdentity()
                )
                let dialler = MultipeerSession(
                    configuration: filesConfiguration("relief", in: directory, dialling: port),
                    identity: PeerIdentity()
                )
                let relief = try SyncStore(
                    session: dialler,
                    path: directory.appendingPathComponent("relief.sqlite").path
                )
                let (events, charts) = (captain.events, captain.collection(Chart.self).changes)
                try await whileRunning([stranger, dialler]) {
                    try await whileSyncing([captain, relief]) {
                        try await waitUntilActive(stranger, listener.peerID)
                        let junk = try file("junk", in: directory, [9, 9, 9])
                        _ = try await stranger.sendResource(
                            at: junk,
                            metadata: ["multipeer.sync.attachment": "junk"],
                            to: listener.peerID
                        )
                        let chart = Chart(id: "tesat", title: "TESAT, no chart yet", file: nil)
                        try await relief.collection(Chart.self).put(chart)
                        let refused = try await event(of: events) {
                            if case .refused(let error, from: stranger.peerID) = $0 {
                                return error.code == .attachmentFailed
                            }
                            return false
                        }
                        #expect("\(refused)".contains("no record this station keeps holds"))
                        let arrived = try await changes(charts) { $0.contains { $0.record == chart } }
                        #expect(arrived.last?.peer == dialler.peerID)
                    }
                }
                let unknown = try SyncAttachment(sha256: [UInt8](repeating: 7, count: 32), length: 1)
                await #expect(throws: SyncError.self) { try await captain.file(of: unknown) }
            }
        }
    }

    /// A file goes once no record holds it: a record replaced without it, or deleted.
    @Test func theFileOfAReplacedOrDeletedRecordIsRemoved() async throws {
        try await withDirectory { directory in
            let path = directory.appendingPathComponent("captain.sqlite").path
            let store = try SyncStore(
                session: MultipeerSession(
                    configuration: filesConfiguration("captain", in: directory),
                    identity: PeerIdentity()
                ),
                path: path
            )
            let charts = store.collection(Chart.self)
            let first = try await store.attach(fileAt: try file("a", in: directory, [1, 2, 3]))
            let second = try await store.attach(fileAt: try file("b", in: directory, [4, 5]))
            try await charts.put([Chart(id: "a", title: "A", file: first), Chart(id: "b", title: "B", file: second)])
            let kept = { (attachment: SyncAttachment) in
                FileManager.default.fileExists(atPath: path + ".attachments/" + attachment.hex)
            }
            #expect(kept(first) && kept(second))
            try await charts.put(Chart(id: "a", title: "A, no chart", file: nil))
            #expect(!kept(first), "replaced without it")
            try await charts.delete(id: "b")
            #expect(!kept(second), "deleted")
            await #expect(throws: SyncError.self) { try await store.file(of: first) }
        }
    }
}
