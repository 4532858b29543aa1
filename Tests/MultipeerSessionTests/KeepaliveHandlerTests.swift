import Foundation
import MultipeerCore
import MultipeerTLS
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// The link's keepalive on an EmbeddedChannel, under the link's own pipeline but TLS (bytes at
/// the bottom, ``InboundActivityHandler``, the frame decoder, ``LinkHandler``'s HELLO, then
/// ``KeepaliveHandler``), on the embedded loop's clock: what it answers, what it stops, when it
/// pings, and when it gives a silent peer up.
@Suite struct KeepaliveHandlerTests {
    /// A dialler's link whose HELLOs are exchanged, its keepalive running (500 ms interval, 1.5 s timeout).
    struct Link {
        let channel = EmbeddedChannel()
        let keepalive = KeepaliveHandler(
            local: KeepaliveParameters(),
            role: .leading,
            quality: LinkQualityBox(),
            tcpUserTimeout: nil,
            paths: PathMemory()
        )

        init() throws {
            let local = PeerIdentity()
            let remote = PeerIdentity()
            let handlers = channel.pipeline.syncOperations
            try handlers.addHandler(InboundActivityHandler(keepalive: keepalive))
            try handlers.addHandler(ByteToMessageHandler(FrameDecoder(maximumLength: 1 << 20)))
            try handlers.addHandler(
                LinkHandler(
                    localHello: try Hello(identity: local, incarnation: 1, displayName: "local"),
                    identity: local,
                    side: .dialler,
                    expectedPeer: remote.peerID,
                    handshakeTimeout: .seconds(5),
                    eventLoop: channel.eventLoop
                )
            )
            try handlers.addHandler(keepalive)
            try channel.connect(to: SocketAddress(ipAddress: "198.18.0.2", port: 7000)).wait()
            channel.pipeline.fireUserInboundEventTriggered(
                TLSHandshakeCompleted(negotiated: "test", helloExporter: LinkHandlerTests.exporter)
            )
            try receive(.hello(try LinkHandlerTests.hello(of: remote)))
            _ = try written()  // (this side's HELLO)
        }

        /// Ends the channel, whatever state it is in.
        func finish() { _ = try? channel.finish(acceptAlreadyClosed: true) }

        /// `message`'s frame arrives, and the channel asks for the next read as a socket's does.
        func receive(_ message: LinkMessage) throws {
            var bytes = ByteBuffer()
            message.writeFrame(to: &bytes)
            try receive(bytes)
        }

        func receive(_ bytes: ByteBuffer) throws {
            try channel.writeInbound(bytes)
            channel.read()
        }

        /// Everything written since the last call, decoded.
        func written() throws -> [LinkMessage] {
            var bytes = ByteBuffer()
            while var buffer = try channel.readOutbound(as: ByteBuffer.self) { bytes.writeBuffer(&buffer) }
            var decoder = FrameDecoder(maximumLength: 1 << 20)
            var messages: [LinkMessage] = []
            while let frame = try decoder.decode(buffer: &bytes) { messages.append(try LinkMessage(frame: frame)) }
            return messages
        }

        /// The messages handed on above the keepalive since the last call.
        func handedOn() throws -> [LinkMessage] {
            var messages: [LinkMessage] = []
            while let message = try channel.readInbound(as: LinkMessage.self) { messages.append(message) }
            return messages
        }

        /// Moves the loop's clock on by `duration` in 20 ms steps, the keepalive's wake-up grid.
        func advance(by duration: Duration) {
            for _ in 0..<(duration.milliseconds / 20) { channel.embeddedEventLoop.advanceTime(by: .milliseconds(20)) }
        }
    }

    @Test func aPingIsAnsweredWithItsPongAndPingPongAndFlowStopHereWhileOtherMessagesPassOn() throws {
        let link = try Link()
        defer { link.finish() }
        let probe = Probe(nonce: 7, timestamp: 1_000)
        try link.receive(.ping(probe))
        #expect(try link.written().contains(.pong(probe)))
        try link.receive(.pong(Probe(nonce: 8, timestamp: 2_000)))
        try link.receive(.flow(reading: false))
        try link.receive(.flow(reading: true))
        #expect(try link.handedOn().isEmpty, "PING, PONG and FLOW are the keepalive's")
        try link.receive(.ack(3, partial: nil))
        #expect(try link.handedOn() == [.ack(3, partial: nil)])
    }

    @Test func aLinkQuietOnThisSidePingsWithinItsInterval() throws {
        let link = try Link()
        defer { link.finish() }
        var pinged = false
        for _ in 0..<30 where !pinged {
            link.advance(by: .milliseconds(20))
            pinged = try link.written().contains { if case .ping = $0 { true } else { false } }
        }
        #expect(pinged, "a PING within 600 ms of quiet")
    }

    @Test func aSilentPeerIsSaidGoodbyeToAndTheLinkFailsWithAKeepaliveTimeout() throws {
        let link = try Link()
        defer { link.finish() }
        link.advance(by: .milliseconds(1_400))
        #expect(link.channel.isActive, "not before the timeout")
        link.advance(by: .milliseconds(200))
        #expect(!link.channel.isActive)
        #expect(try link.written().contains { if case .goodbye(.keepaliveTimeout, _) = $0 { true } else { false } })
        #expect { try link.channel.throwIfErrorCaught() } throws: { error in
            guard let error = error as? MultipeerError, error.code == .keepaliveTimeout else { return false }
            return error.message.contains("sent nothing for")
        }
    }

    @Test func theBytesOfAFrameStillArrivingKeepTheLinkAlive() throws {
        let link = try Link()
        defer { link.finish() }
        // A 512 KiB frame arriving 8 KiB every 300 ms: 30 s of bytes and not one whole frame.
        var frame = ByteBuffer()
        LinkMessage.data(
            try DataMessage(sequence: 1, typeName: "Large", payload: ByteBuffer(repeating: 1, count: 512 << 10))
        ).writeFrame(to: &frame)
        for _ in 0..<10 {
            let slice = frame.readSlice(length: 8 << 10)
            try link.receive(try #require(slice))
            link.advance(by: .milliseconds(300))
        }
        #expect(link.channel.isActive, "3 s of bytes without a whole frame are traffic")
        #expect(try link.handedOn().isEmpty)
        link.advance(by: .milliseconds(1_600))
        #expect(!link.channel.isActive, "and their end is silence")
    }

    @Test func whileThisSideWithholdsReadsThePeersSilenceIsNotHeldAgainstIt() throws {
        let link = try Link()
        defer { link.finish() }
        var frame = ByteBuffer()
        LinkMessage.ack(1, partial: nil).writeFrame(to: &frame)
        try link.channel.writeInbound(frame)  // (and no read asked for after it: a full stream above)
        link.advance(by: .seconds(5))
        #expect(link.channel.isActive, "silence this side asked for is no timeout")
        link.channel.read()
        link.advance(by: .seconds(2))
        #expect(!link.channel.isActive, "reading again, the peer's silence counts")
    }
}

/// The first-bytes deadline on an EmbeddedChannel: a connection that says nothing is closed at
/// it; one that speaks passes on and is left alone.
@Suite struct FirstBytesDeadlineTests {
    func connection(role: TLSEngine.Role) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(FirstBytesDeadline(.seconds(2), role: role))
        try channel.connect(to: SocketAddress(ipAddress: "198.18.0.9", port: 7000)).wait()
        return channel
    }

    @Test(arguments: [TLSEngine.Role.server, .client])
    func aConnectionThatSaysNothingIsClosedAtTheDeadlineWithAHandshakeTimeout(role: TLSEngine.Role) throws {
        let channel = try connection(role: role)
        defer { _ = try? channel.finish(acceptAlreadyClosed: true) }
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(1_990))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(10))
        #expect(!channel.isActive)
        #expect { try channel.throwIfErrorCaught() } throws: { error in
            guard let error = error as? MultipeerError, error.code == .handshakeTimeout else { return false }
            return error.message.contains("198.18.0.9") && error.message.contains("nothing within 2.0 seconds")
        }
    }

    @Test func theFirstBytesPassOnAndTheDeadlineLeavesThePipeline() throws {
        let channel = try connection(role: .server)
        defer { _ = try? channel.finish(acceptAlreadyClosed: true) }
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        try channel.writeInbound(ByteBuffer(bytes: [0x16, 0x03, 0x01]))
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(bytes: [0x16, 0x03, 0x01]))
        #expect(throws: (any Error).self) { try channel.pipeline.syncOperations.handler(type: FirstBytesDeadline.self) }
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(channel.isActive)
        #expect(throws: Never.self) { try channel.throwIfErrorCaught() }
    }
}
