import Foundation
import MultipeerCore
import MultipeerTLS
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

@testable import MultipeerSession

/// A client with the group key that speaks the wire protocol by hand: it completes TLS, learns
/// the connection's exporter value, and sends whatever HELLO a test makes (any ID, any key, any
/// signature), as an impostor or a relay would. What the other side sends comes back as frames.
final class RawPeer: Sendable {
    let channel: any Channel
    private let exporterFuture: EventLoopFuture<[UInt8]>
    let frames: AsyncStream<Frame>
    private let cutter: Cutter

    /// Connects to `host:port` and completes TLS.
    init(host: String = "127.0.0.1", port: Int, psk: PreSharedKey = LinkFixtures.psk) async throws {
        let tls = try TLSContext(configuration: TLSConfiguration(psk: psk))
        let (frames, continuation) = AsyncStream<Frame>.makeStream()
        self.frames = frames
        let promise = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: [UInt8].self)
        exporterFuture = promise.futureResult
        let cutter = Cutter()
        self.cutter = cutter
        channel = try await ClientBootstrap(group: promise.futureResult.eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handlers = channel.pipeline.syncOperations
                    try handlers.addHandler(cutter)
                    try handlers.addHandler(
                        TLSHandler(engine: TLSEngine(role: .client, context: tls, allocator: channel.allocator))
                    )
                    try handlers.addHandler(ByteToMessageHandler(FrameDecoder(maximumLength: 1 << 24)))
                    try handlers.addHandler(Recorder(exporter: promise, frames: continuation))
                }
            }
            .connect(host: host, port: port).get()
    }

    /// This TLS connection's exporter value for HELLO, once TLS is up.
    var exporter: [UInt8] {
        get async throws { try await exporterFuture.get() }
    }

    /// A HELLO frame claiming `peerID`, presenting `key` (by default `identity`'s own), signed with
    /// `identity` for this connection, as the dialler.
    func hello(
        claiming peerID: UUID,
        presenting key: PeerKey? = nil,
        signedBy identity: PeerIdentity,
        incarnation: UInt64,
        name: String = "raw",
        keepalive: KeepaliveParameters = KeepaliveParameters()
    ) async throws -> ByteBuffer {
        let hello = try Hello(
            peerID: peerID,
            key: key ?? identity.key,
            incarnation: incarnation,
            displayName: name,
            keepalive: keepalive
        )
        .signed(exporter: try await exporter, side: .dialler, sign: identity.protocolSignature(for:))
        var frame = ByteBuffer()
        LinkMessage.hello(hello).writeFrame(to: &frame)
        return frame
    }

    /// Writes bytes inside TLS.
    func send(_ bytes: ByteBuffer) async throws {
        try await channel.writeAndFlush(bytes)
    }

    /// Writes messages inside TLS.
    func send(_ messages: LinkMessage...) async throws {
        try await send(contentsOf: messages)
    }

    /// Writes messages inside TLS, in one write.
    func send(contentsOf messages: [LinkMessage]) async throws {
        var bytes = ByteBuffer()
        for message in messages { message.writeFrame(to: &bytes) }
        try await send(bytes)
    }

    func close() async {
        try? await channel.close()
    }

    /// Sends `message` in a TLS record of which only the first half goes out, then ends the
    /// byte stream (FIN) without a close_notify: a peer that crashed mid-record.
    func sendTruncated(_ message: LinkMessage) async throws {
        try await channel.eventLoop.submit { self.cutter.armed = true }.get()
        try? await send(message)
    }

    /// Below TLS: once armed, writes half of the next ciphertext and shuts the output down.
    private final class Cutter: ChannelOutboundHandler, @unchecked Sendable {
        // (@unchecked: `armed` is read and written on the channel's event loop only.)
        typealias OutboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        var armed = false

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            guard armed else { return context.write(data, promise: promise) }
            armed = false
            var ciphertext = unwrapOutboundIn(data)
            let half = ciphertext.readSlice(length: ciphertext.readableBytes / 2)!
            context.writeAndFlush(wrapOutboundOut(half), promise: nil)
            context.close(mode: .output, promise: promise)
        }
    }

    private final class Recorder: ChannelInboundHandler {
        typealias InboundIn = Frame
        let exporter: EventLoopPromise<[UInt8]>
        let frames: AsyncStream<Frame>.Continuation

        init(exporter: EventLoopPromise<[UInt8]>, frames: AsyncStream<Frame>.Continuation) {
            self.exporter = exporter
            self.frames = frames
        }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let completed = event as? TLSHandshakeCompleted { exporter.succeed(completed.helloExporter) }
            context.fireUserInboundEventTriggered(event)
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            frames.yield(unwrapInboundIn(data))
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            exporter.fail(ChannelError.ioOnClosedChannel)
            frames.finish()
        }
    }
}
