import struct Foundation.UUID
import MultipeerCore
import MultipeerTLS
import NIOCore

/// Runs the HELLO exchange once TLS is up, then turns frames into ``LinkMessage``s and back.
///
/// This side's HELLO is signed with its identity for this TLS connection (its exporter value);
/// the peer's HELLO must prove the ID it claims the same way, or the link is closed with
/// `identityMismatch` or `badSignature` before anyone sees it.
///
/// One timer covers the whole handshake, TLS and HELLO: a peer that stalls anywhere before
/// its HELLO arrives is cut off after the handshake timeout. Errors before the HELLO fail
/// ``hello`` and close the link; errors after it reach the channel's reader and close it,
/// with a best-effort GOODBYE when the peer broke the protocol.
final class LinkHandler: ChannelDuplexHandler {
    typealias InboundIn = Frame
    typealias InboundOut = LinkMessage
    typealias OutboundIn = LinkMessage
    typealias OutboundOut = ByteBuffer

    private enum State {
        case awaitingTLS
        case awaitingHello
        case open
        case closed
    }

    private let localHello: Hello
    private let identity: PeerIdentity
    /// The side this handler's end of the connection is on; the peer's HELLO comes from the other.
    private let side: Hello.Side
    /// Whom the dialler meant to reach, when discovery said: the HELLO must prove that peer.
    private let expectedPeer: UUID?
    /// This connection's exporter value, once TLS is up.
    private var exporter: [UInt8] = []
    private let handshakeTimeout: Duration
    private let helloPromise: EventLoopPromise<Hello>
    private var state = State.awaitingTLS
    private var timeout: Scheduled<Void>?
    private var peer = "the peer"
    /// The channel's allocator, kept: reaching it through the context costs retains at every frame.
    private var allocator = ByteBufferAllocator()

    /// Completes with the peer's HELLO once it has arrived and been checked.
    var hello: EventLoopFuture<Hello> { helloPromise.futureResult }

    init(
        localHello: Hello, identity: PeerIdentity, side: Hello.Side, expectedPeer: UUID? = nil, handshakeTimeout: Duration,
        eventLoop: any EventLoop
    ) {
        self.localHello = localHello
        self.identity = identity
        self.side = side
        self.expectedPeer = expectedPeer
        self.handshakeTimeout = handshakeTimeout
        self.helloPromise = eventLoop.makePromise()
    }

    func handlerAdded(context: ChannelHandlerContext) {
        allocator = context.channel.allocator
        if context.channel.isActive { startTimer(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        startTimer(context: context)
        context.fireChannelActive()
    }

    private func startTimer(context: ChannelHandlerContext) {
        guard timeout == nil, state != .closed else { return }
        if let address = context.channel.remoteAddress { peer = "peer at \(address.displayString)" }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timeout = context.eventLoop.scheduleTask(in: TimeAmount(handshakeTimeout)) {
            let (handler, context) = loopBound.value
            let stage = handler.state == .awaitingTLS ? "the TLS handshake" : "the HELLO exchange"
            handler.failHandshake(context: context, MultipeerError(
                .handshakeTimeout,
                "\(handler.peer) did not complete \(stage) within \(handler.handshakeTimeout)"))
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let completed = event as? TLSHandshakeCompleted, state == .awaitingTLS {
            state = .awaitingHello
            exporter = completed.helloExporter
            do {
                let hello = try localHello.signed(exporter: exporter, side: side, sign: identity.signature(for:))
                context.writeAndFlush(wrapOutboundOut(encode(.hello(hello))), promise: nil)
            } catch {
                failHandshake(context: context, MultipeerError(.tlsFailure, "cannot sign this side's HELLO", underlying: "\(error)"))
                return
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch state {
        case .awaitingTLS, .closed:
            return
        case .awaitingHello:
            do {
                guard frame.type == .hello else {
                    throw MultipeerError(.helloExpected, "\(peer) sent \(frame.type) before its HELLO")
                }
                guard case .hello(let hello) = try LinkMessage(frame: frame) else { return }
                try hello.verify(value: frame.value, exporter: exporter, side: side == .dialler ? .listener : .dialler, peer: peer)
                guard hello.peerID != localHello.peerID else {
                    throw MultipeerError(
                        .selfConnection, "\(peer) is this very peer (\(hello.peerID)): the link reached itself and was closed")
                }
                if let expectedPeer, hello.peerID != expectedPeer {
                    throw MultipeerError(
                        .unexpectedPeer,
                        "\(peer), advertised as peer \(expectedPeer), proved to be peer \(hello.peerID) (\(hello.displayName)): the advert is stale or false, and the link is closed")
                }
                state = .open
                timeout?.cancel()
                context.fireUserInboundEventTriggered(HelloCompleted(remote: hello))
                helloPromise.succeed(hello)
            } catch {
                failHandshake(context: context, error)
            }
        case .open:
            do {
                context.fireChannelRead(wrapInboundOut(try LinkMessage(frame: frame)))
            } catch {
                errorCaught(context: context, error: error)
            }
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let message = unwrapOutboundIn(data)
        guard let bytes = message.messageBytes, bytes >= Self.separatePayload else {
            return context.write(wrapOutboundOut(encode(message)), promise: promise)
        }
        // The frame's head, then its message bytes as they are: TLS encrypts a buffer this large
        // without copying it into a frame first.
        var head = allocator.buffer(capacity: 64)
        let payload = message.writeFrameHead(to: &head)!
        context.write(wrapOutboundOut(head), promise: nil)
        context.write(wrapOutboundOut(payload), promise: promise)
    }

    /// The payload size from which a frame's message bytes are written apart from its head.
    static let separatePayload = TLSEngine.maximumRecordPlaintext

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch state {
        case .awaitingTLS, .awaitingHello:
            failHandshake(context: context, error)
        case .open:
            state = .closed
            if let error = error as? MultipeerError, [.frameTooLarge, .malformedMessage, .truncatedFrame].contains(error.code) {
                let goodbye = encode(.goodbye(.protocolError, error.message))
                context.writeAndFlush(wrapOutboundOut(goodbye), promise: nil)
            }
            context.fireErrorCaught(error)
            context.close(promise: nil)
        case .closed:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if state == .awaitingTLS || state == .awaitingHello {
            failHandshake(context: context, MultipeerError(.closedDuringHandshake, "\(peer) closed the connection before its HELLO"))
        }
        state = .closed
        context.fireChannelInactive()
    }

    private func encode(_ message: LinkMessage) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: 64)
        message.writeFrame(to: &buffer)
        return buffer
    }

    private func failHandshake(context: ChannelHandlerContext, _ error: any Error) {
        guard state != .closed else { return }
        state = .closed
        timeout?.cancel()
        helloPromise.fail(error)
        context.close(promise: nil)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timeout?.cancel()
        helloPromise.fail(ChannelError.ioOnClosedChannel)  // ignored if already completed
    }
}

@available(*, unavailable)
extension LinkHandler: Sendable {}

extension TimeAmount {
    init(_ duration: Duration) {
        self = .nanoseconds(duration.nanoseconds)
    }
}
