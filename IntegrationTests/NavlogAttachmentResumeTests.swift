import Crypto
import Foundation
import MultipeerCore
import MultipeerSession
import MultipeerTestSupport
import NavlogSync
import Testing

/// A host's attachment on its way from a peer that restarts part way (docs/NAVLOG.md 1a, the
/// store's attachments, docs/SYNC.md 9): the host asks for it again when the peer next joins,
/// takes the peer's new offer (which supersedes the transfer that lost its link,
/// docs/PROTOCOL.md 3c) and keeps the file, resumed from what it had written.
///
/// It hashes and writes a 16 MiB file through a throttled proxy, which loads the machine for
/// seconds: scripts/run-tests.sh runs it alone, as the session's resource resumption tests.
@Suite(.enabled(if: runningAlone, "hashes and writes 16 MiB: scripts/run-tests.sh runs it alone"))
struct NavlogAttachmentResumeTests {
    static let length = 16 << 20

    @Test(.scaledTimeLimit(minutes: 3))
    func anAttachmentFromAPeerThatRestartedPartWayArrivesResumed() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("navlog-resume-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("chart.pdf")
        let block = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 12) })
        var bytes = Data(capacity: Self.length)
        for index in 0..<(Self.length >> 20) {
            bytes.append(contentsOf: block.map { $0 &+ UInt8(truncatingIfNeeded: index) })
        }
        try bytes.write(to: file)
        let hash = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()

        let store = try NavlogStore(path: directory.appendingPathComponent("captain.db").path)
        let host = try await NavlogNode(store: store, configuration: .test("captain", discovery: .staticPeers([])))
        let events = host.events
        try await running({ try await host.run() }) {
            let port = try await collect(events) { $0.contains { if case .listening = $0 { true } else { false } } }
                .compactMap { if case .listening(let port) = $0 { port } else { nil } }[0]
            let proxy = try await FaultProxy(forwardingTo: port)
            proxy.set(.throttle(bytesPerSecond: 2 << 20))  // 8 s for the file: the sender stops a quarter in, not after
            let officerPath = directory.appendingPathComponent("officer.db").path
            let configuration = MultipeerSession.Configuration.test(
                "officer",
                discovery: .staticPeers(["127.0.0.1:\(proxy.port)"])
            )

            // The officer's entry with the file attached; the host takes it and asks for the file.
            let attachment: NavlogAttachment
            do {
                let officer = try await NavlogNode(
                    store: try NavlogStore(path: officerPath),
                    configuration: configuration
                )
                let entry = try await officer.add([.waypoint: "TESAT"])
                attachment = try #require(
                    try await officer.attach(entry.id.uuidString, file: file.path).attachments?.first
                )
                #expect(attachment.sha256 == hash)
                let firstRun = Task { try await officer.run() }
                _ = try await collect(events, timeout: .seconds(60)) { events in
                    events.contains {
                        if case .attachmentProgress(let transfer) = $0 {
                            transfer.bytesDone >= Int64(Self.length / 4)
                        } else {
                            false
                        }
                    }
                }
                // The officer stops a quarter in: nothing more goes through, and its session ends.
                proxy.set(.blackHole)
                firstRun.cancel()
                _ = try? await firstRun.value
            }
            #expect(await host.state(of: attachment) != .held)
            proxy.set(.throttle(bytesPerSecond: 2 << 20))
            let before = proxy.bytesForwarded

            // It comes back, the same device in a new session: it knows nothing of the transfer,
            // and sends the file again only when asked.
            let officer = try await NavlogNode(store: try NavlogStore(path: officerPath), configuration: configuration)
            try await running({ try await officer.run() }) {
                let done = try await collect(events, timeout: .seconds(90)) { events in
                    events.contains {
                        if case .attachmentDone(let transfer, nil) = $0 { transfer.sha256 == hash } else { false }
                    }
                }
                #expect(
                    !done.contains {
                        if case .attachmentDone(_, let error?) = $0 {
                            error.contains("cancel") && !error.contains("restarted")
                        } else {
                            false
                        }
                    },
                    "the new offer was taken, not cancelled: \(done)"
                )
                #expect(await host.state(of: attachment) == .held)
                let again = Double(proxy.bytesForwarded - before) / Double(Self.length)
                #expect(again < 0.9, "after the restart, \(again)x the file went through the proxy: it resumed")
            }
            await proxy.stop()
        }
    }
}
