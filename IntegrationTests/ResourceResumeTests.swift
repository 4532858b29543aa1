import Foundation
import Glibc
import MultipeerCore
import MultipeerSession
import MultipeerTLS
import MultipeerTestSupport
import Testing

/// Files between two real sessions through a fault-injecting proxy: broken links and a receiver
/// restarted half way resume the transfer from what the receiver wrote, sending little twice.
/// They move 64 MiB files, hashing and writing them, which beside the other suites delayed
/// their handshakes past their deadlines: scripts/run-tests.sh runs them alone.
@Suite(.enabled(if: runningAlone, "moves 64 MiB files: scripts/run-tests.sh runs it alone"))
struct ResourceResumeTests {
    static let length = 64 << 20

    /// A directory of its own for a test, with a 64 MiB file to send in it.
    struct Scratch: ~Copyable {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent(
            "resource-transfer-\(UUID().uuidString)"
        )
        var source: URL { url.appendingPathComponent("approach.pdf") }
        var inbox: URL { url.appendingPathComponent("inbox") }

        init() throws {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            let block = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 12) })
            var bytes = Data(capacity: ResourceResumeTests.length)
            for index in 0..<(ResourceResumeTests.length >> 20) {
                bytes.append(block.map { $0 &+ UInt8(truncatingIfNeeded: index) }, count: 1 << 20)
            }
            try bytes.write(to: source)
        }

        deinit { try? FileManager.default.removeItem(at: url) }
    }

    static func receiving(_ name: String, into directory: URL, port: Int = 0) -> MultipeerSession.Configuration {
        var configuration = MultipeerSession.Configuration.test(name, discovery: .staticPeers([]))
        configuration.resourceDirectory = directory
        configuration.port = port
        return configuration
    }

    /// Both ends of a transfer under way through a proxy throttled to 16 MiB/s (4 s for the
    /// file: time for what a test does to it to land mid-transfer, however busy the machine).
    struct Throttled: Sendable {
        let receiver: MultipeerSession
        let sender: MultipeerSession
        let senderEvents: EventLog
        let proxy: FaultProxy
        let source: URL
        let transfer: OutgoingResource
        let arriving: IncomingResource
    }

    /// Sends `source` to a receiver into `inbox` through a throttled proxy, and runs `body` with
    /// the transfer under way.
    static func withThrottledTransfer(
        of source: URL,
        into inbox: URL,
        _ body: @escaping @Sendable (Throttled) async throws -> Void
    ) async throws {
        let receiver = MultipeerSession(configuration: receiving("receiver", into: inbox), identity: PeerIdentity())
        let receiverEvents = EventLog(receiver.events)
        try await whileRunning([receiver]) {
            let proxy = try await FaultProxy(forwardingTo: try await receiverEvents.listeningPort())
            proxy.set(.throttle(bytesPerSecond: 16 << 20))
            let sender = MultipeerSession(
                configuration: .test("sender", discovery: .staticPeers(["127.0.0.1:\(proxy.port)"])),
                identity: PeerIdentity()
            )
            let senderEvents = EventLog(sender.events)
            try await whileRunning([sender]) {
                try await senderEvents.waitUntilActive([receiver.peerID])
                var incoming = receiver.incomingResources.makeAsyncIterator()
                let transfer = try await sender.sendResource(at: source, to: receiver.peerID)
                let arriving = try #require(await incoming.next())
                try await body(
                    Throttled(
                        receiver: receiver,
                        sender: sender,
                        senderEvents: senderEvents,
                        proxy: proxy,
                        source: source,
                        transfer: transfer,
                        arriving: arriving
                    )
                )
            }
            proxy.set(.passThrough)
            await proxy.stop()
        }
    }

    /// Waits until `resource`'s progress reaches `bytes`; returns the progress it reached.
    static func progress(of resource: IncomingResource, reaching bytes: Int64) async throws -> Int64 {
        try await withDeadline(.seconds(60)) {
            for await progress in resource.progress where progress.bytesDone >= bytes { return progress.bytesDone }
            return -1
        }
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func resetsDuringATransferResumeItAndSendLittleTwice() async throws {
        let scratch = try Scratch()
        try await Self.withThrottledTransfer(of: scratch.source, into: scratch.inbox) { ends in
            for mark in 1...3 {
                _ = try await Self.progress(of: ends.arriving, reaching: Int64(mark * Self.length / 4))
                await ends.proxy.resetConnections()
                try await ends.senderEvents.waitUntilActive([])
                try await ends.senderEvents.waitUntilActive([ends.receiver.peerID])
            }
            try await withDeadline(.seconds(60)) { try await ends.transfer.completion() }
            let file = try await ends.arriving.file()
            #expect(try Data(contentsOf: file) == Data(contentsOf: ends.source))
            #expect(
                await ends.sender.linkStats(for: ends.receiver.peerID)?.reconnects ?? 0 >= 3,
                "the links really broke"
            )
            let wire = Double(ends.proxy.bytesForwarded) / Double(Self.length)
            #expect(wire < 1.2, "bytes through the proxy, both ways, \(wire)x the file")
        }
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func aReceiverRestartedHalfWayResumesFromWhatItWrote() async throws {
        let scratch = try Scratch()
        let identity = PeerIdentity()
        let first = MultipeerSession(configuration: Self.receiving("receiver", into: scratch.inbox), identity: identity)
        let firstEvents = EventLog(first.events)
        let firstRun = Task { try await first.run() }
        let port = try await firstEvents.listeningPort()
        let proxy = try await FaultProxy(forwardingTo: port)
        proxy.set(.throttle(bytesPerSecond: 16 << 20))  // 4 s for the file: it is stopped half way, not after
        let sender = MultipeerSession(
            configuration: .test("sender", discovery: .staticPeers(["127.0.0.1:\(proxy.port)"])),
            identity: PeerIdentity()
        )
        let senderEvents = EventLog(sender.events)
        try await whileRunning([sender]) {
            try await senderEvents.waitUntilActive([identity.peerID])
            var incoming = first.incomingResources.makeAsyncIterator()
            let transfer = try await sender.sendResource(at: scratch.source, to: identity.peerID)
            let arriving = try #require(await incoming.next())
            _ = try await Self.progress(of: arriving, reaching: Int64(Self.length / 2))
            // Nothing more reaches the receiver from here (a stop takes a while on a slow machine;
            // the transfer must not finish meanwhile), and it stops.
            proxy.set(.blackHole)
            firstRun.cancel()
            _ = try? await firstRun.value
            let interrupted = try await #require(throws: MultipeerError.self) { _ = try await arriving.file() }
            #expect(interrupted.code == .sessionState)
            try await senderEvents.waitUntilActive([])
            proxy.set(.throttle(bytesPerSecond: 16 << 20))
            let before = proxy.bytesForwarded

            // The same device, directory and port, in a new session.
            let second = MultipeerSession(
                configuration: Self.receiving("receiver", into: scratch.inbox, port: port),
                identity: identity
            )
            try await whileRunning([second]) {
                var incoming = second.incomingResources.makeAsyncIterator()
                let resumed = try #require(await incoming.next())
                #expect(resumed.id == transfer.id)
                try await withDeadline(.seconds(60)) { try await transfer.completion() }
                #expect(try Data(contentsOf: try await resumed.file()) == Data(contentsOf: scratch.source))
            }
            let again = Double(proxy.bytesForwarded - before) / Double(Self.length)
            #expect(again < 0.6, "after the restart, \(again)x the file went through the proxy")
        }
        await proxy.stop()
    }
}

extension ResourceResumeTests {
    @Test(.scaledTimeLimit(minutes: 2))
    func aSenderRestartedHalfWaySendsAgainAndTheReceiverResumes() async throws {
        let scratch = try Scratch()
        let identity = PeerIdentity()
        let receiver = MultipeerSession(
            configuration: Self.receiving("receiver", into: scratch.inbox),
            identity: identity
        )
        let receiverEvents = EventLog(receiver.events)
        try await whileRunning([receiver]) {
            let proxy = try await FaultProxy(forwardingTo: try await receiverEvents.listeningPort())
            proxy.set(.throttle(bytesPerSecond: 16 << 20))
            let senderIdentity = PeerIdentity()
            let dialling = MultipeerSession.Configuration.test(
                "sender",
                discovery: .staticPeers(["127.0.0.1:\(proxy.port)"])
            )
            var incoming = receiver.incomingResources.makeAsyncIterator()
            let first = MultipeerSession(configuration: dialling, identity: senderIdentity)
            let firstEvents = EventLog(first.events)
            let firstRun = Task { try await first.run() }
            try await firstEvents.waitUntilActive([identity.peerID])
            _ = try await first.sendResource(at: scratch.source, to: identity.peerID)
            let interrupted = try #require(await incoming.next())
            _ = try await Self.progress(of: interrupted, reaching: Int64(Self.length / 2))
            proxy.set(.blackHole)
            firstRun.cancel()
            _ = try? await firstRun.value
            try await receiverEvents.waitUntilActive([])
            proxy.set(.throttle(bytesPerSecond: 16 << 20))
            let before = proxy.bytesForwarded

            // The same device again, in a new session: its application sends the file again.
            let second = MultipeerSession(configuration: dialling, identity: senderIdentity)
            let secondEvents = EventLog(second.events)
            try await whileRunning([second]) {
                try await secondEvents.waitUntilActive([identity.peerID])
                let transfer = try await second.sendResource(at: scratch.source, to: identity.peerID)
                let resumed = try #require(await incoming.next())
                #expect(resumed.id == transfer.id && resumed.id != interrupted.id)
                let superseded = try await #require(throws: MultipeerError.self) { _ = try await interrupted.file() }
                #expect(
                    superseded.code == .resourceCancelled && superseded.message.contains("restarted"),
                    "\(superseded)"
                )
                try await withDeadline(.seconds(60)) { try await transfer.completion() }
                #expect(try Data(contentsOf: try await resumed.file()) == Data(contentsOf: scratch.source))
            }
            let again = Double(proxy.bytesForwarded - before) / Double(Self.length)
            #expect(again < 0.6, "after the sender's restart, \(again)x the file went through the proxy")
            await proxy.stop()
        }
    }
}

extension ResourceResumeTests {
    /// A receiver in a process of its own (multipeer-test-peer), killed with SIGKILL half way
    /// through a transfer and started again with its identity and directory: the transfer
    /// resumes from the blocks it had logged, sending about half the file again.
    @Test(.scaledTimeLimit(minutes: 2))
    func aReceiverKilledHalfWayResumesFromWhatItWrote() async throws {
        let scratch = try Scratch()
        let keyFile = scratch.url.appendingPathComponent("psk.key").path
        try LinkFixtures.psk.write(toFile: keyFile)
        let identityFile = scratch.url.appendingPathComponent("child.identity").path
        let identity = PeerIdentity()
        try identity.write(toFile: identityFile)
        let sender = MultipeerSession(
            configuration: .test("sender", discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let senderEvents = EventLog(sender.events)
        try await whileRunning([sender]) {
            let proxy = try await FaultProxy(forwardingTo: try await senderEvents.listeningPort())
            proxy.set(.throttle(bytesPerSecond: 16 << 20))  // 4 s for the file: it is killed half way, not after
            func startReceiver() throws -> BackgroundProcess {
                try BackgroundProcess(
                    ProcessFaultTests.peerBinary,
                    [
                        "--psk-file", keyFile, "--identity-file", identityFile, "--name", "receiver",
                        "--static", "127.0.0.1:\(proxy.port)", "--resource-dir", scratch.inbox.path,
                    ],
                    pipes: true
                )
            }
            let first = try startReceiver()
            try await senderEvents.waitUntilActive([identity.peerID])
            let transfer = try await sender.sendResource(at: scratch.source, to: identity.peerID)
            let half = try await withDeadline(.seconds(60)) {
                for await line in first.lines! {
                    if line.hasPrefix("resource-progress "), let done = Int(line.dropFirst(18)), done >= Self.length / 2
                    {
                        return done
                    }
                }
                return -1
            }
            #expect(half >= Self.length / 2)
            kill(first.pid, SIGKILL)
            first.stop()
            try await senderEvents.waitUntilActive([])
            let before = proxy.bytesForwarded

            let second = try startReceiver()
            defer { second.stop() }
            try await withDeadline(.seconds(60)) { try await transfer.completion() }
            let file = scratch.inbox.appendingPathComponent(scratch.source.lastPathComponent)
            #expect(try Data(contentsOf: file) == Data(contentsOf: scratch.source))
            let again = Double(proxy.bytesForwarded - before) / Double(Self.length)
            #expect(
                again < 0.6,
                "after the receiver was killed and started again, \(again)x the file went through the proxy"
            )
            proxy.set(.passThrough)
            await proxy.stop()
        }
    }
}

/// Transfers that cannot finish end on both sides with the reason, typed (alone, like
/// ``ResourceResumeTests``).
@Suite(.enabled(if: runningAlone, "moves 64 MiB files: scripts/run-tests.sh runs it alone"))
struct ResourceFailureTests {
    @Test(.scaledTimeLimit(minutes: 2))
    func aFileThatChangesWhileItIsSentFailsTheTransferOnBothSides() async throws {
        let scratch = try ResourceResumeTests.Scratch()
        try await ResourceResumeTests.withThrottledTransfer(of: scratch.source, into: scratch.inbox) { ends in
            _ = try await ResourceResumeTests.progress(of: ends.arriving, reaching: 4 << 20)
            let handle = try FileHandle(forWritingTo: ends.source)
            try handle.seekToEnd()
            handle.write(Data("an edit".utf8))
            try handle.close()
            let senderError = try await #require(throws: MultipeerError.self) { try await ends.transfer.completion() }
            let receiverError = try await #require(throws: MultipeerError.self) { _ = try await ends.arriving.file() }
            #expect(
                senderError.code == .resourceChanged && receiverError.code == .resourceChanged,
                "\(senderError); \(receiverError)"
            )
        }
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func aCancelWhoseEndIsLostWithItsLinkIsSaidAgainNotBegunAnew() async throws {
        let scratch = try ResourceResumeTests.Scratch()
        try await ResourceResumeTests.withThrottledTransfer(of: scratch.source, into: scratch.inbox) { ends in
            _ = try await ResourceResumeTests.progress(of: ends.arriving, reaching: 4 << 20)
            ends.proxy.set(.blackHole)  // the receiver's END goes nowhere
            ends.arriving.cancel()
            let receiverError = try await #require(throws: MultipeerError.self) { _ = try await ends.arriving.file() }
            #expect(receiverError.code == .resourceCancelled)
            await ends.proxy.resetConnections()
            ends.proxy.set(.throttle(bytesPerSecond: 16 << 20))
            // The sender offers the file again on its next link, and hears the END it missed.
            let senderError = try await #require(throws: MultipeerError.self) { try await ends.transfer.completion() }
            #expect(
                senderError.code == .resourceCancelled && senderError.message.contains("the peer cancelled it"),
                "\(senderError)"
            )
        }
    }

    @Test(
        .enabled(
            if: ProcessInfo.processInfo.environment["MULTIPEER_SANDBOX"] == "1",
            "mounts a tmpfs: needs scripts/sandbox.sh (make test, as root)"
        ),
        .scaledTimeLimit(minutes: 2)
    )
    func aReceiverWhoseDiskFillsEndsTheTransferOnBothSidesAndKeepsWhatItWrote() async throws {
        let scratch = try ResourceResumeTests.Scratch()
        try FileManager.default.createDirectory(at: scratch.inbox, withIntermediateDirectories: true)
        // 16 MiB for a 64 MiB file, in the sandbox's own mount namespace.
        guard mount("tmpfs", scratch.inbox.path, "tmpfs", 0, "size=16m") == 0 else {
            Issue.record("cannot mount a tmpfs on \(scratch.inbox.path): \(String(cString: strerror(errno)))")
            return
        }
        defer { umount(scratch.inbox.path) }
        try await withPair(receivingInto: scratch.inbox) { receiver, sender in
            var incoming = receiver.incomingResources.makeAsyncIterator()
            let transfer = try await sender.sendResource(at: scratch.source, to: receiver.peerID)
            let arriving = try #require(await incoming.next())
            let senderError = try await #require(throws: MultipeerError.self) { try await transfer.completion() }
            let receiverError = try await #require(throws: MultipeerError.self) { _ = try await arriving.file() }
            #expect(
                senderError.code == .resourceDiskFull && receiverError.code == .resourceDiskFull,
                "\(senderError); \(receiverError)"
            )
            let kept = try FileManager.default.contentsOfDirectory(
                atPath: scratch.inbox.appendingPathComponent(".multipeer-resources").path
            )
            #expect(
                kept.contains { $0.hasSuffix(".partial") },
                "what was written is kept, to resume once there is room: \(kept)"
            )
        }
    }

    /// A receiver into `directory` and a sender that met it, directly on loopback.
    func withPair(
        receivingInto directory: URL,
        _ body: @escaping @Sendable (MultipeerSession, MultipeerSession) async throws -> Void
    ) async throws {
        let receiver = MultipeerSession(
            configuration: ResourceResumeTests.receiving("receiver", into: directory),
            identity: PeerIdentity()
        )
        let receiverEvents = EventLog(receiver.events)
        try await whileRunning([receiver]) {
            let port = try await receiverEvents.listeningPort()
            let sender = MultipeerSession(
                configuration: .test("sender", discovery: .staticPeers(["127.0.0.1:\(port)"])),
                identity: PeerIdentity()
            )
            let senderEvents = EventLog(sender.events)
            try await whileRunning([sender]) {
                try await senderEvents.waitUntilActive([receiver.peerID])
                try await body(receiver, sender)
            }
        }
    }
}
