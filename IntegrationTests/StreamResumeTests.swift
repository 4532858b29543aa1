import Foundation
import MultipeerSession
import MultipeerTLS
import MultipeerTestSupport
import NIOConcurrencyHelpers
import Testing

/// Byte streams between two real sessions through a fault-injecting proxy: broken links lose and
/// repeat nothing of either direction; a peer that restarts, or stops, ends its streams at the
/// other side with `streamLost`.
@Suite struct StreamResumeTests {
    /// `count` bytes that differ from one to the next, from `seed`.
    static func bytes(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 13 &+ Int(seed)) }
    }

    /// Writes `bytes` to `stream` in 64 KiB writes, then ends it.
    static func write(_ bytes: [UInt8], to stream: PeerStream) async throws {
        var offset = 0
        while offset < bytes.count {
            let next = min(offset + 65_536, bytes.count)
            try await stream.write(bytes[offset..<next])
            offset = next
        }
        try await stream.finish()
    }

    /// Reads `stream` to its end, telling `progress` how many bytes it has read.
    static func read(_ stream: PeerStream, progress: AsyncStream<Int>.Continuation? = nil) async throws -> [UInt8] {
        var all: [UInt8] = []
        for try await bytes in stream {
            all += bytes
            progress?.yield(all.count)
        }
        progress?.finish()
        return all
    }

    /// A receiver, a sender that dials it through a proxy throttled to 8 MiB/s, and `body`.
    static func withProxiedPair(
        receiverIdentity: PeerIdentity = PeerIdentity(),
        receiverPort: Int = 0,
        _ body:
            @escaping @Sendable (
                _ receiver: MultipeerSession, _ sender: MultipeerSession, _ senderEvents: EventLog, _ proxy: FaultProxy
            ) async throws -> Void
    ) async throws {
        var configuration = MultipeerSession.Configuration.test("receiver", discovery: .staticPeers([]))
        configuration.port = receiverPort
        let receiver = MultipeerSession(configuration: configuration, identity: receiverIdentity)
        let receiverEvents = EventLog(receiver.events)
        try await whileRunning([receiver]) {
            let proxy = try await FaultProxy(forwardingTo: try await receiverEvents.listeningPort())
            proxy.set(.throttle(bytesPerSecond: 8 << 20))
            let sender = MultipeerSession(
                configuration: .test("sender", discovery: .staticPeers(["127.0.0.1:\(proxy.port)"])),
                identity: PeerIdentity()
            )
            let senderEvents = EventLog(sender.events)
            try await whileRunning([sender]) {
                try await senderEvents.waitUntilActive([receiver.peerID])
                try await body(receiver, sender, senderEvents, proxy)
            }
            proxy.set(.passThrough)
            await proxy.stop()
        }
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func resetsDuringAStreamLoseAndRepeatNothingEitherWay() async throws {
        let telemetry = Self.bytes(12 << 20, seed: 1)
        let commands = Self.bytes(2 << 20, seed: 2)
        try await Self.withProxiedPair { receiver, sender, senderEvents, proxy in
            let stream = try sender.openStream(named: "telemetry", to: receiver.peerID)
            let writing = Task { try await Self.write(telemetry, to: stream) }
            let accepted = try #require(
                await withDeadline(.seconds(30)) { await receiver.incomingStreams.first { _ in true } }
            )
            let answering = Task { try await Self.write(commands, to: accepted) }
            let (progress, reading) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .bufferingNewest(1))
            let received = Task { try await Self.read(accepted, progress: reading) }
            let replied = Task { try await Self.read(stream) }
            for mark in 1...3 {
                _ = try await withDeadline(.seconds(60)) { await progress.first { $0 >= mark * telemetry.count / 4 } }
                await proxy.resetConnections()
                try await senderEvents.waitUntilActive([])
                try await senderEvents.waitUntilActive([receiver.peerID])
            }
            try await withDeadline(.seconds(60)) {
                try await writing.value
                try await answering.value
            }
            #expect(try await received.value == telemetry, "every byte once, in order")
            #expect(try await replied.value == commands, "and the other way")
            #expect(await sender.linkStats(for: receiver.peerID)?.reconnects ?? 0 >= 3, "the links really broke")
            let wire = Double(proxy.bytesForwarded) / Double(telemetry.count + commands.count)
            #expect(wire < 1.2, "bytes through the proxy, both ways, \(wire)x the streams'")
        }
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func aPeerThatRestartsWithoutAWordLosesItsStreams() async throws {
        let identity = PeerIdentity()
        let first = MultipeerSession(configuration: .test("receiver", discovery: .staticPeers([])), identity: identity)
        let firstEvents = EventLog(first.events)
        let firstRun = Task { try await first.run() }
        let port = try await firstEvents.listeningPort()
        let proxy = try await FaultProxy(forwardingTo: port)
        let sender = MultipeerSession(
            configuration: .test("sender", discovery: .staticPeers(["127.0.0.1:\(proxy.port)"])),
            identity: PeerIdentity()
        )
        let senderEvents = EventLog(sender.events)
        try await whileRunning([sender]) {
            try await senderEvents.waitUntilActive([identity.peerID])
            let stream = try sender.openStream(named: "audio", to: identity.peerID)
            try await stream.write(Self.bytes(1_000, seed: 3))
            let accepted = try #require(
                await withDeadline(.seconds(30)) { await first.incomingStreams.first { _ in true } }
            )
            var reading = accepted.makeAsyncIterator()
            #expect(try await reading.next()?.count == 1_000)
            // The receiver goes without a word reaching the sender (its GOODBYE is lost), and
            // comes back as a new session of the same device on the same port.
            proxy.set(.blackHole)
            firstRun.cancel()
            _ = try? await firstRun.value
            await proxy.resetConnections()
            try await senderEvents.waitUntilActive([])
            proxy.set(.passThrough)
            var configuration = MultipeerSession.Configuration.test("receiver", discovery: .staticPeers([]))
            configuration.port = port
            let second = MultipeerSession(configuration: configuration, identity: identity)
            try await whileRunning([second]) {
                let error = try await withDeadline(.seconds(60)) {
                    try await #require(throws: MultipeerError.self) { for try await _ in stream {} }
                }
                #expect(error.code == .streamLost && error.message.contains("restarted"))
                let writing = try await #require(throws: MultipeerError.self) { try await stream.write([1]) }
                #expect(writing.code == .streamLost)
            }
        }
        await proxy.stop()
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func aPeerWhoseSessionStopsEndsItsStreams() async throws {
        let receiver = MultipeerSession(
            configuration: .test("receiver", discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let receiverEvents = EventLog(receiver.events)
        let receiverRun = Task { try await receiver.run() }
        let port = try await receiverEvents.listeningPort()
        let sender = MultipeerSession(
            configuration: .test("sender", discovery: .staticPeers(["127.0.0.1:\(port)"])),
            identity: PeerIdentity()
        )
        let senderEvents = EventLog(sender.events)
        try await whileRunning([sender]) {
            try await senderEvents.waitUntilActive([receiver.peerID])
            let stream = try sender.openStream(named: "log", to: receiver.peerID)
            let accepted = try #require(
                await withDeadline(.seconds(30)) { await receiver.incomingStreams.first { _ in true } }
            )
            try await accepted.write(Self.bytes(500, seed: 4))
            let read = try await withDeadline(.seconds(30)) { () async throws -> [UInt8]? in
                var reading = stream.makeAsyncIterator()
                return try await reading.next()
            }
            #expect(read == Self.bytes(500, seed: 4))
            // The receiver stops (saying GOODBYE): the sender's stream is lost.
            receiverRun.cancel()
            _ = try? await receiverRun.value
            let error = try await withDeadline(.seconds(30)) {
                try await #require(throws: MultipeerError.self) { for try await _ in stream {} }
            }
            #expect(error.code == .streamLost)
            // The receiver's own side ended too, with its session.
            let local = try await #require(throws: MultipeerError.self) { try await accepted.write([1]) }
            #expect(local.code == .sessionState)
        }
    }
}
