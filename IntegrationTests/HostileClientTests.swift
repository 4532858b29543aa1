import Foundation
import MultipeerCore
import MultipeerTLS
import MultipeerTestSupport
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import MultipeerSession

/// A client with the right key that writes raw bytes inside TLS: no framing and no HELLO of its
/// own, so it can send what a correct peer never would.
enum RawTLSClient {
    /// Connects, completes TLS, writes `bytes` inside it, and returns everything received
    /// (inside TLS) until the server closes.
    static func exchange(port: Int, send bytes: ByteBuffer) async throws -> ByteBuffer {
        let tls = try TLSContext(configuration: TLSConfiguration(psk: LinkFixtures.psk))
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        TLSHandler(engine: TLSEngine(role: .client, context: tls, allocator: channel.allocator))
                    )
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(bytes)
            var received = ByteBuffer()
            do {
                for try await var chunk in inbound { received.writeBuffer(&chunk) }
            } catch {
                // A reset after the server's GOODBYE: what arrived before it is the answer.
            }
            return received
        }
    }

    /// A frame header with `length`, then `value`.
    static func frame(_ type: FrameType, announcing length: UInt32, value: [UInt8] = []) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeMultipleIntegers(type.rawValue, length)
        buffer.writeBytes(value)
        return buffer
    }
}

/// Bytes that only a hostile or broken client sends, each against a live listener: a typed error
/// for that connection, the connection closed, and the listener still serving good peers.
@Suite struct HostileClientTests {
    /// Sends `bytes` inside TLS to a fresh listener; returns the failure the listener reports,
    /// once it has also served a good peer after it.
    static func failure(afterSending bytes: ByteBuffer) async throws -> MultipeerError {
        try await withTestListener(configuration: LinkFixtures.configuration(name: "server"), onLink: echo) { server in
            _ = try await withDeadline(.seconds(20)) { try await RawTLSClient.exchange(port: server.port, send: bytes) }
            let failure = try #require(try await withDeadline(.seconds(20)) { await server.nextFailure() })
            try await BadPeerTests.expectStillServing(server)
            return failure
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aMegabyteHelloIsRefusedFromItsHeaderAlone() async throws {
        // Only the header: were the 1,000,000 announced bytes awaited, this would hang.
        let failure = try await Self.failure(afterSending: RawTLSClient.frame(.hello, announcing: 1_000_000))
        #expect(failure.code == .frameTooLarge)
        #expect(
            failure.message
                == "a HELLO frame announced 1000000 bytes, more than the limit of 16384 for a link's first frame"
        )
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aHelloWithMissingFieldsIsMalformed() async throws {
        // The version, then 10 of the UUID's 16 bytes and a signature's worth, and the frame ends.
        let value: [UInt8] = [0, 2] + Array(repeating: 0xAB, count: 10 + Hello.signatureLength)
        let failure = try await Self.failure(
            afterSending: RawTLSClient.frame(.hello, announcing: UInt32(value.count), value: value)
        )
        #expect(failure.code == .malformedMessage)
        #expect(failure.message == "HELLO is malformed: it ends before the peer UUID")
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aDataFrameBeforeHelloIsRefused() async throws {
        let failure = try await Self.failure(afterSending: RawTLSClient.frame(.data, announcing: 3, value: [1, 2, 3]))
        #expect(failure.code == .helloExpected)
    }

    /// A real ClientHello sent one byte at a time: the handshake timeout is a deadline for the
    /// whole handshake, not for silence, so trickling bytes does not hold a handshake open.
    @Test(.scaledTimeLimit(minutes: 1))
    func aHandshakeTrickledOneByteAtATimeHitsTheHandshakeTimeout() async throws {
        // Deadlines of 3 s, not 1: the whole integration suite loading two cores once held the
        // first byte's write back past a 1 s deadline, and found the channel closed.
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server", handshakeTimeout: .seconds(3)),
            limits: MultipeerSession.Limits(firstBytesTimeout: .seconds(3)),
            onLink: echo
        ) { server in
            let engine = try TLSEngine(
                role: .client,
                context: TLSContext(configuration: TLSConfiguration(psk: LinkFixtures.psk))
            )
            _ = engine.handshake()
            let clientHello = try #require(engine.takeOutbound())
            // The first byte at once, on the connection's event loop as it connects: a trickle task
            // started late on a busy machine let the first-bytes deadline (another failure) pass
            // first (make test met it twice), and so, once, did this test's own task, written
            // after the connect: its write came more than 3 s later, on a closed channel.
            var remaining = clientHello
            let first = remaining.readSlice(length: 1)!
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(
                host: "127.0.0.1",
                port: server.port
            ).flatMap { channel in channel.writeAndFlush(first).map { channel } }.get()
            // Then a byte every 100 ms (the trickle is the fault, not a wait): the ClientHello would
            // take half a minute, ten times the handshake timeout. Returns how many bytes were left unsent.
            let trickle = Task { [remaining] in
                var remaining = remaining
                while !Task.isCancelled, channel.isActive, let byte = remaining.readSlice(length: 1) {
                    try? await channel.writeAndFlush(byte)
                    try? await Task.sleep(for: .milliseconds(100))
                }
                return remaining.readableBytes
            }
            let failure = try #require(try await withDeadline(.seconds(20)) { await server.nextFailure() })
            #expect(failure.code == .handshakeTimeout)
            #expect(
                failure.message.contains("did not complete the TLS handshake within \(TestTime.scaled(.seconds(3)))"),
                "\(failure)"
            )
            try await withDeadline(.seconds(20)) { try await channel.waitUntilClosed() }
            trickle.cancel()
            #expect(await trickle.value > 0, "cut off before the ClientHello was through")
            try await BadPeerTests.expectStillServing(server)
        }
    }

    /// A session with a good peer and a second peer that, once active, announces a 4 GiB frame,
    /// and a third that, once active, writes garbage under TLS: each bad link is closed with the
    /// error named, and the good peer keeps exchanging messages throughout.
    @Test(.scaledTimeLimit(minutes: 1))
    func badFramesAndGarbageAfterTheHandshakeCloseOnlyThatLink() async throws {
        let server = MultipeerSession(
            configuration: .test("server", discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let serverEvents = EventLog(server.events)
        try await whileRunning([server]) {
            let port = try await serverEvents.listeningPort()
            let good = MultipeerSession(
                configuration: .test("good", discovery: .staticPeers(["127.0.0.1:\(port)"])),
                identity: PeerIdentity()
            )
            try await whileRunning([good]) {
                let inbox = good.messages(of: Note.self)
                _ = try await serverEvents.waitUntilActive([good.peerID])

                // A peer that, once active, announces a 4 GiB frame.
                let hugeConfiguration = try LinkFixtures.configuration(name: "huge")
                let hugeID = hugeConfiguration.localHello.peerID
                let huge = try await PeerConnection.dial(
                    host: "127.0.0.1",
                    port: port,
                    configuration: hugeConfiguration
                )
                // its resume point: the server's link is admitted
                try await huge.channel.channel.writeAndFlush(LinkMessage.ack(0))
                _ = try await serverEvents.waitUntilActive([good.peerID, hugeID])
                try await huge.channel.executeThenClose { inbound, _ in
                    try await Self.writeBelowFraming(
                        RawTLSClient.frame(.data, announcing: .max),
                        on: huge.channel.channel
                    )
                    for try await _ in inbound {}
                }
                let hugeLeft = try await serverEvents.wait { Self.leftReason(hugeID, in: $0) != nil }
                guard case .linkClosed(let hugeError?)? = Self.leftReason(hugeID, in: hugeLeft) else {
                    Issue.record("\(String(describing: Self.leftReason(hugeID, in: hugeLeft)))")
                    return
                }
                #expect(hugeError.code == .frameTooLarge)
                #expect(hugeError.message.contains("a DATA frame announced 4294967295 bytes"))

                // A peer that, once active, writes bytes that are not TLS records.
                let garbageConfiguration = try LinkFixtures.configuration(name: "garbage")
                let garbageID = garbageConfiguration.localHello.peerID
                let garbage = try await PeerConnection.dial(
                    host: "127.0.0.1",
                    port: port,
                    configuration: garbageConfiguration
                )
                try await garbage.channel.channel.writeAndFlush(LinkMessage.ack(0))
                _ = try await serverEvents.waitUntilActive([good.peerID, garbageID])
                try await garbage.channel.executeThenClose { inbound, _ in
                    try await Self.writeBelowTLS(ByteBuffer(repeating: 0x42, count: 64), on: garbage.channel.channel)
                    do { for try await _ in inbound {} } catch {}
                }
                let garbageLeft = Self.leftReason(
                    garbageID,
                    in: try await serverEvents.wait { Self.leftReason(garbageID, in: $0) != nil }
                )
                guard case .linkClosed(let garbageError?)? = garbageLeft else {
                    Issue.record("\(String(describing: garbageLeft))")
                    return
                }
                #expect([.corruptedRecord, .notTLS, .tlsFailure].contains(garbageError.code), "\(garbageError)")

                // The good peer never left and still gets messages.
                #expect(
                    !serverEvents.history.contains {
                        if case .peerLeft(let peer, _) = $0 { peer.id == good.peerID } else { false }
                    }
                )
                try await server.send(Note(text: "still here"), to: good.peerID)
                #expect(try await collect(inbox) { $0.count >= 1 }.first?.message.text == "still here")
            }
        }
    }

    /// A peer that completes TLS, HELLO and its resume ACK, and from then on never reads a byte
    /// (it announces a keepalive long enough not to be timed out meanwhile): what the session
    /// holds for it stays within the outbox limit (and the socket's buffers), `send` says so
    /// with `outboxFull` (and never waits on the deaf socket), another peer is unaffected (a
    /// broadcast, reliable or not, skips the deaf one), and the session still shuts down (its
    /// GOODBYE to the deaf peer, stuck behind the full socket, is given up after a second).
    @Test(.scaledTimeLimit(minutes: 1))
    func aPeerThatNeverReadsIsHeldToTheOutboxLimit() async throws {
        let limits = MultipeerSession.Limits(
            outbox: .init(maximumCount: 64, maximumBytes: 16 << 20),
            failWhenOutboxFull: true,
            unreliableQueue: .init(maximumCount: 1, maximumBytes: 1 << 20)
        )
        let server = MultipeerSession(
            configuration: .test(
                "server",
                discovery: .staticPeers([]),
                limits: limits,
                keepalive: Self.patient
            ),
            identity: PeerIdentity()
        )
        let serverEvents = EventLog(server.events)
        let deafChannel = NIOLockedValueBox<(any Channel)?>(nil)
        try await whileRunning([server]) {
            let port = try await serverEvents.listeningPort()
            let good = MultipeerSession(
                configuration: .test("good", discovery: .staticPeers(["127.0.0.1:\(port)"])),
                identity: PeerIdentity()
            )
            try await whileRunning([good]) {
                let inbox = good.messages(of: Note.self)
                _ = try await serverEvents.waitUntilActive([good.peerID])

                let deafIdentity = PeerIdentity()
                let deafID = deafIdentity.peerID
                let raw = try await RawPeer(port: port)
                let deaf = raw.channel
                deafChannel.withLockedValue { $0 = deaf }
                try await raw.send(
                    try await raw.hello(
                        claiming: deafID,
                        signedBy: deafIdentity,
                        incarnation: 1,
                        name: "deaf",
                        keepalive: Self.patient
                    )
                )
                try await raw.send(.ack(0))
                _ = try await serverEvents.waitUntilActive([good.peerID, deafID])
                // Nothing waits for it yet (its outbox is empty); from here on it reads nothing.
                try await deaf.setOption(.autoRead, value: false).get()

                // 128 KiB messages until the outbox is full: the 65th is refused. (8 MiB in all:
                // more than the sockets' buffers hold, so writes are left waiting.)
                let payload = String(repeating: "x", count: 128 * 1024)
                var accepted = 0
                var refusal: MultipeerError?
                while refusal == nil, accepted < 1_000 {
                    do {
                        try await server.send(Note(text: payload), to: deafID)
                        accepted += 1
                    } catch let error as MultipeerError {
                        refusal = error
                    }
                }
                #expect(accepted == 64)
                #expect(refusal?.code == .outboxFull)
                #expect(refusal?.message.contains("its limit is 64 messages") == true, "\(String(describing: refusal))")
                #expect(await server.outboxCount(for: deafID) == 64)

                // The other peer is unaffected.
                try await server.send(Note(text: "still here"), to: good.peerID)
                #expect(try await collect(inbox) { $0.count >= 1 }.first?.message.text == "still here")
                // A broadcast skips the peer whose outbox is full instead of waiting for it, and
                // an unreliable one the peer whose unreliable queue is full (one message here:
                // the first waits there for good).
                #expect(try await server.broadcast(Note(text: "to everyone")) == 1)
                #expect(try await collect(inbox) { $0.count >= 1 }.first?.message.text == "to everyone")
                #expect(try await server.broadcast(Note(text: "unreliably"), delivery: .unreliable) == 2)
                #expect(try await collect(inbox) { $0.count >= 1 }.first?.message.text == "unreliably")
                #expect(try await server.broadcast(Note(text: "unreliably again"), delivery: .unreliable) == 1)
                #expect(try await collect(inbox) { $0.count >= 1 }.first?.message.text == "unreliably again")
            }
        }
        // The server has stopped (the time limit says if it cannot) with the deaf peer connected.
        try await deafChannel.withLockedValue { $0 }?.close()
    }

    /// A member whose connection ends in the middle of a TLS record, without a close_notify (it
    /// crashed, or the path was cut), leaves with `uncleanShutdown`, not as if it had closed:
    /// the truncation was reported as an orderly "link closed" before.
    @Test(.scaledTimeLimit(minutes: 1))
    func aLinkCutInTheMiddleOfARecordLeavesWithUncleanShutdown() async throws {
        let server = MultipeerSession(
            configuration: .test("server", discovery: .staticPeers([]), keepalive: Self.patient),
            identity: PeerIdentity()
        )
        let serverEvents = EventLog(server.events)
        try await whileRunning([server]) {
            let port = try await serverEvents.listeningPort()
            let identity = PeerIdentity()
            let raw = try await RawPeer(port: port)
            try await raw.send(
                try await raw.hello(
                    claiming: identity.peerID,
                    signedBy: identity,
                    incarnation: 1,
                    name: "cut",
                    keepalive: Self.patient
                )
            )
            try await raw.send(.ack(0))  // its resume point: it joins
            _ = try await serverEvents.waitUntilActive([identity.peerID])
            try await raw.sendTruncated(.ping(Probe(nonce: 1, timestamp: 2)))
            let events = try await serverEvents.wait { events in
                events.contains { if case .peerLeft(let peer, _) = $0 { peer.id == identity.peerID } else { false } }
            }
            let left = events.compactMap { event -> PeerLeftReason? in
                if case .peerLeft(let peer, let reason) = event, peer.id == identity.peerID { reason } else { nil }
            }.first
            guard case .linkClosed(let error?)? = left else {
                Issue.record("left with \(String(describing: left)), not an error")
                return
            }
            #expect(error.code == .uncleanShutdown, "\(error)")
            #expect(error.message.contains("close_notify"), "\(error)")
            await raw.close()
        }
    }

    /// A keepalive under which a silent peer outlives the test.
    static let patient = KeepaliveParameters(interval: .seconds(60), timeout: .seconds(180))

    static func leftReason(_ peerID: UUID, in events: [SessionEvent]) -> PeerLeftReason? {
        events.lazy.compactMap {
            if case .peerLeft(let peer, let reason) = $0, peer.id == peerID { reason } else { nil }
        }.first
    }

    /// Writes `bytes` into the link's TLS, under the framing: the peer decodes them as frames.
    static func writeBelowFraming(_ bytes: ByteBuffer, on channel: any Channel) async throws {
        try await channel.pipeline.context(handlerType: ByteToMessageHandler<FrameDecoder>.self).flatMap { context in
            context.writeAndFlush(NIOAny(bytes))
        }.get()
    }

    /// Writes `bytes` straight onto the socket, under TLS: the peer's TLS reads them as records.
    static func writeBelowTLS(_ bytes: ByteBuffer, on channel: any Channel) async throws {
        try await channel.pipeline.context(handlerType: TLSHandler.self).flatMap { context in
            context.writeAndFlush(NIOAny(bytes))
        }.get()
    }
}
