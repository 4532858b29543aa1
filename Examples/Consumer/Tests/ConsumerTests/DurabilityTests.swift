import CrewChecklist
import Foundation
import MultipeerSession
import MultipeerSync
import Testing

/// What a store keeps when its process dies: a real `crew-checklist` process, killed with
/// SIGKILL while it takes 10,000 versions, restarts with everything it reported and takes the
/// rest at the next meeting (issue 60 item 9).
@Suite struct DurabilityTests {
    /// The built `crew-checklist` beside this test bundle.
    static let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("crew-checklist")

    /// A `crew-checklist` process for `name` in `directory`, dialling `port`: its stdin, and
    /// the ids of the changes it printed (each taken, durable, before it is printed), as they
    /// come.
    final class Station: @unchecked Sendable {  // (its fields are set once, then read)
        let process = Process()
        let input = Pipe()
        let reported = Reported()

        init(_ name: String, in directory: URL, dialling port: Int) throws {
            process.executableURL = DurabilityTests.binary
            process.arguments = [name, "127.0.0.1:\(port)"]
            process.currentDirectoryURL = directory
            process.standardInput = input
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            let reported = reported
            output.fileHandleForReading.readabilityHandler = { handle in
                let data = handle.availableData
                guard !data.isEmpty else {
                    handle.readabilityHandler = nil
                    return
                }
                reported.add(String(decoding: data, as: UTF8.self))
            }
            try process.run()
        }

        func kill() {
            Glibc.kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }

        /// Ends its input: it stops and exits.
        func finish() {
            try? input.fileHandleForWriting.close()
            process.waitUntilExit()
        }
    }

    /// The ids of the changes a station printed, and who waits for how many.
    final class Reported: @unchecked Sendable {  // (its state is under its lock)
        private let lock = NSLock()
        private var pending = ""
        private var ids: [String] = []
        private var waiting: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

        func add(_ text: String) {
            let ready = lock.withLock {
                pending += text
                while let newline = pending.firstIndex(of: "\n") {
                    let line = pending[..<newline]
                    if line.hasPrefix("~ "), let id = line.dropFirst(2).split(separator: " ").first {
                        ids.append(String(id))
                    }
                    pending = String(pending[pending.index(after: newline)...])
                }
                let ready = waiting.filter { $0.count <= ids.count }
                waiting.removeAll { $0.count <= ids.count }
                return ready
            }
            for waiter in ready { waiter.continuation.resume() }
        }

        /// Returns once `count` changes were printed.
        func wait(for count: Int) async {
            await withCheckedContinuation { continuation in
                let now = lock.withLock {
                    guard ids.count < count else { return true }
                    waiting.append((count, continuation))
                    return false
                }
                if now { continuation.resume() }
            }
        }

        var taken: [String] { lock.withLock { ids } }
    }

    @Test func aStationKilledWhileTakingRestartsWithAllItReportedAndTakesTheRest() async throws {
        try await withDirectory { directory in
            try groupKey.write(toFile: directory.appendingPathComponent("group.key").path)
            let configuration = MultipeerSession.Configuration(
                serviceType: "_crewchecklist._tcp",
                peer: PeerInfo(displayName: "captain"),
                psk: groupKey,
                discovery: .staticPeers([])
            )
            let listener = MultipeerSession(configuration: configuration, identity: PeerIdentity())
            let captain = try SyncStore(
                session: listener,
                path: directory.appendingPathComponent("captain.sqlite").path
            )
            let items = (0..<10_000).map {
                CrewChecklist.ChecklistItem(id: String(format: "item-%05d", $0), title: "item \($0)")
            }
            try await captain.collection(CrewChecklist.ChecklistItem.self).put(items)
            let events = captain.events
            try await whileRunning([listener]) {
                let port = try await listeningPort(of: listener)
                try await whileSyncing([captain]) {
                    let first = try Station("officer", in: directory, dialling: port)
                    try await within(60, "the officer to take a thousand") { await first.reported.wait(for: 1_000) }
                    first.kill()
                    let reported = first.reported.taken
                    #expect(reported.count < 10_000, "killed part way: \(reported.count) reported")

                    let second = try Station("officer", in: directory, dialling: port)
                    _ = try await event(of: events) {
                        if case .exchanged = $0 { return true }
                        return false
                    }
                    second.finish()
                    // (A session never run: the store reads the file.)
                    let reader = MultipeerSession(configuration: configuration, identity: PeerIdentity())
                    let reopened = try SyncStore(
                        session: reader,
                        path: directory.appendingPathComponent("officer.sqlite").path
                    )
                    let held = Set(try await reopened.collection(CrewChecklist.ChecklistItem.self).records().map(\.id))
                    #expect(held.count == 10_000, "the rest taken at the next meeting")
                    #expect(Set(reported).isSubset(of: held), "nothing reported before the kill was lost")
                }
            }
        }
    }
}
