import Foundation
import MultipeerCore
import MultipeerTLS
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// The link's HELLO stage on an EmbeddedChannel: what LinkHandler writes, what it hands on, and
/// how it fails, with no socket and no clock but the test's.
@Suite struct LinkHandlerTests {
    static let exporter = [UInt8](repeating: 0x5A, count: Hello.exporterLength)

    /// A dialler's LinkHandler on a channel, TLS up (its HELLO written).
    struct Link {
        let channel = EmbeddedChannel()

        /// Ends the channel, whatever state it is in (its pipeline and handlers hold each other until then).
        func finish() { _ = try? channel.finish(acceptAlreadyClosed: true) }
        let local = PeerIdentity()
        let handler: LinkHandler

        init(expecting peer: UUID? = nil, timeout: Duration = .seconds(5)) throws {
            handler = LinkHandler(
                localHello: try Hello(identity: local, incarnation: 1, displayName: "local"),
                identity: local,
                side: .dialler,
                expectedPeer: peer,
                handshakeTimeout: timeout,
                eventLoop: channel.eventLoop
            )
            try channel.pipeline.syncOperations.addHandler(handler)
            try channel.connect(to: SocketAddress(ipAddress: "198.18.0.2", port: 7000)).wait()
            channel.pipeline.fireUserInboundEventTriggered(
                TLSHandshakeCompleted(negotiated: "test", helloExporter: LinkHandlerTests.exporter)
            )
        }
    }

    /// `message` as the frame the decoder below LinkHandler hands it.
    static func frame(_ message: LinkMessage) throws -> Frame {
        var bytes = ByteBuffer()
        message.writeFrame(to: &bytes)
        return try #require(try Self.decode(&bytes))
    }

    static func decode(_ bytes: inout ByteBuffer) throws -> Frame? {
        var decoder = FrameDecoder(maximumLength: 1 << 20)
        return try decoder.decode(buffer: &bytes)
    }

    /// `identity`'s HELLO, speaking as the listener of this connection.
    static func hello(of identity: PeerIdentity, incarnation: UInt64 = 1) throws -> Hello {
        try Hello(identity: identity, incarnation: incarnation, displayName: "remote")
            .signed(exporter: exporter, side: .listener, sign: identity.protocolSignature(for:))
    }

    @Test func itSendsItsHelloSignedForThisConnectionThenTakesThePeersAndHandsOnItsMessages() throws {
        let remote = PeerIdentity()
        let link = try Link(expecting: remote.peerID)
        defer { link.finish() }
        var written = try #require(try link.channel.readOutbound(as: ByteBuffer.self))
        let sent = try #require(try Self.decode(&written))
        guard case .hello(let hello) = try LinkMessage(frame: sent) else {
            Issue.record("a HELLO first")
            return
        }
        #expect(hello.peerID == link.local.peerID)
        #expect(throws: Never.self) {
            try hello.verify(value: sent.value, exporter: Self.exporter, side: .dialler, peer: "the test")
        }

        try link.channel.writeInbound(try Self.frame(.hello(try Self.hello(of: remote))))
        #expect(try link.handler.hello.wait().peerID == remote.peerID)
        try link.channel.writeInbound(try Self.frame(.ack(3, partial: nil)))
        guard case .ack(3, nil)? = try link.channel.readInbound(as: LinkMessage.self) else {
            Issue.record("the ACK, handed on")
            return
        }
    }

    /// A message's trace context goes only to a peer whose HELLO takes it (docs/PROTOCOL.md
    /// 2c): to an earlier release the same message goes as plain DATA.
    @Test(arguments: [true, false])
    func aTraceContextGoesOnlyToAPeerThatTakesIt(peerTakesIt: Bool) throws {
        let remote = PeerIdentity()
        let link = try Link(expecting: remote.peerID)
        defer { link.finish() }
        _ = try link.channel.readOutbound(as: ByteBuffer.self)  // (this side's HELLO)
        var hello = try Hello(identity: remote, incarnation: 1, displayName: "remote", maximumMessageLength: 1 << 20)
        hello.features = peerTakesIt ? .known : [.resources, .streams, .takesTypes]
        hello = try hello.signed(exporter: Self.exporter, side: .listener, sign: remote.protocolSignature(for:))
        try link.channel.writeInbound(try Self.frame(.hello(hello)))
        _ = try link.handler.hello.wait()
        let context = try #require(TraceContext(fitting: ["traceparent": "00-1"]))
        let message = try DataMessage(
            sequence: 1,
            typeName: "Note",
            payload: ByteBuffer(string: "{}"),
            context: context
        )
        try link.channel.writeOutbound(LinkMessage.data(message))
        var written = try #require(try link.channel.readOutbound(as: ByteBuffer.self))
        let frame = try #require(try Self.decode(&written))
        #expect(frame.type == (peerTakesIt ? .dataTraced : .data))
        guard case .data(let sent) = try LinkMessage(frame: frame) else {
            Issue.record("not a message: \(frame.type)")
            return
        }
        #expect(sent.context == (peerTakesIt ? context : nil))
        #expect(sent.payload == message.payload && sent.sequence == 1)
    }

    @Test func aMessageBeforeTheHelloFailsTheHandshakeAndClosesTheLink() throws {
        let link = try Link()
        defer { link.finish() }
        try link.channel.writeInbound(try Self.frame(.ack(1, partial: nil)))
        #expect(throws: MultipeerError.self) { try link.handler.hello.wait() }
        #expect(!link.channel.isActive)
        #expect(try link.channel.readInbound(as: LinkMessage.self) == nil, "nothing handed on")
    }

    @Test func aStalledHandshakeIsCutOffAtItsTimeout() throws {
        let link = try Link(timeout: .seconds(5))
        defer { link.finish() }
        link.channel.embeddedEventLoop.advanceTime(by: .seconds(4))
        #expect(link.channel.isActive)
        link.channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        let error = try #require(throws: MultipeerError.self) { try link.handler.hello.wait() }
        #expect(error.code == .handshakeTimeout)
        #expect(error.message.contains("the HELLO exchange"))
        #expect(!link.channel.isActive)
    }

    @Test func aMalformedFrameOnAnOpenLinkSaysGoodbyeAndCloses() throws {
        let remote = PeerIdentity()
        let link = try Link()
        defer { link.finish() }
        _ = try link.channel.readOutbound(as: ByteBuffer.self)  // this side's HELLO
        try link.channel.writeInbound(try Self.frame(.hello(try Self.hello(of: remote))))
        #expect(throws: MultipeerError.self) {
            try link.channel.writeInbound(Frame(type: .ack, value: ByteBuffer(bytes: [1, 2, 3])))
        }
        var goodbye = try #require(try link.channel.readOutbound(as: ByteBuffer.self))
        guard case .goodbye(.protocolError, _) = try LinkMessage(frame: try #require(try Self.decode(&goodbye))) else {
            Issue.record("GOODBYE, protocol error")
            return
        }
        #expect(!link.channel.isActive)
    }
}
