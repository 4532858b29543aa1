import MultipeerCore
import MultipeerTLS
import NIOCore

import struct Foundation.UUID

/// Runs the HELLO exchange once TLS is up, then turns frames into ``LinkMessage``s and back: the
/// link's ``LinkStateMachine`` decides, this handler carries it out.
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

    private var machine: LinkStateMachine
    private let localHello: Hello
    private let identity: PeerIdentity
    /// The side this handler's end of the connection is on.
    private let side: Hello.Side
    private let handshakeTimeout: Duration
    private let helloPromise: EventLoopPromise<Hello>
    private var timeout: Scheduled<Void>?
    /// The channel's allocator, kept: reaching it through the context costs retains at every frame.
    private var allocator = ByteBufferAllocator()
    /// The frames written since the last flush, one after another in one buffer, and their
    /// writes' promises: TLS takes them as one write (no buffer of its own for each frame, and
    /// no second copy into TLS's). A flush, a close, or a record's worth passes them on.
    private var unwritten: (frames: ByteBuffer, promises: [EventLoopPromise<Void>]) = (
        ByteBufferAllocator().buffer(capacity: 0), []
    )

    /// Whether the peer's HELLO says it takes trace contexts: to a peer that does not, DATA and
    /// FRAGMENT go without theirs (docs/PROTOCOL.md 2c).
    private var peerTakesTraceContext = false

    /// Completes with the peer's HELLO once it has arrived and been checked.
    var hello: EventLoopFuture<Hello> { helloPromise.futureResult }

    init(
        localHello: Hello,
        identity: PeerIdentity,
        side: Hello.Side,
        expectedPeer: UUID? = nil,
        handshakeTimeout: Duration,
        eventLoop: any EventLoop
    ) {
        self.machine = LinkStateMachine(localPeerID: localHello.peerID, side: side, expectedPeer: expectedPeer)
        self.localHello = localHello
        self.identity = identity
        self.side = side
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
        guard timeout == nil, machine.isHandshaking else { return }
        if let address = context.channel.remoteAddress { machine.peer = "peer at \(address.displayString)" }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timeout = context.eventLoop.scheduleTask(in: TimeAmount(handshakeTimeout)) {
            let (handler, context) = loopBound.value
            handler.run(handler.machine.handshakeTimedOut(after: handler.handshakeTimeout), context: context)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let completed = event as? TLSHandshakeCompleted {
            run(machine.tlsCompleted(exporter: completed.helloExporter), context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        run(machine.received(unwrapInboundIn(data)), context: context)
    }

    /// Carries out what the link's state machine decided.
    private func run(_ action: LinkStateMachine.Action, context: ChannelHandlerContext) {
        switch action {
        case .sendHello(let exporter):
            do {
                let hello = try localHello.signed(
                    exporter: exporter,
                    side: side,
                    sign: identity.protocolSignature(for:)
                )
                writeAndFlush(.hello(hello), context: context)
            } catch {
                run(
                    machine.failed(
                        MultipeerError(.tlsFailure, "cannot sign this side's HELLO", underlying: "\(error)")
                    ),
                    context: context
                )
            }
        case .helloCompleted(let hello):
            timeout?.cancel()
            peerTakesTraceContext = hello.features.contains(.traceContext)
            context.fireUserInboundEventTriggered(HelloCompleted(remote: hello))
            helloPromise.succeed(hello)
        case .failHandshake(let error):
            timeout?.cancel()
            helloPromise.fail(error)
            context.close(promise: nil)
        case .deliver(let message):
            context.fireChannelRead(wrapInboundOut(message))
        case .failLink(let error, let goodbye):
            if let goodbye { writeAndFlush(.goodbye(.protocolError, goodbye), context: context) }
            context.fireErrorCaught(error)
            context.close(promise: nil)
        case .none:
            break
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let written = unwrapOutboundIn(data)
        let message = peerTakesTraceContext ? written : written.withoutTraceContext
        guard let bytes = message.messageBytes, bytes >= Self.separatePayload else {
            if unwritten.promises.isEmpty, unwritten.frames.readableBytes == 0 {
                unwritten.frames = allocator.buffer(
                    capacity: max(Self.framesCapacity, 64 + (message.messageBytes ?? 0))
                )
            }
            message.writeFrame(to: &unwritten.frames)
            if let promise { unwritten.promises.append(promise) }
            if unwritten.frames.readableBytes >= TLSEngine.maximumRecordPlaintext { passOnFrames(context: context) }
            return
        }
        // The frame's head, then its message bytes as they are: TLS encrypts a buffer this large
        // without copying it into a frame first. What was written before goes first.
        passOnFrames(context: context)
        var head = allocator.buffer(capacity: 64)
        let payload = message.writeFrameHead(to: &head)!
        context.write(wrapOutboundOut(head), promise: nil)
        context.write(wrapOutboundOut(payload), promise: promise)
    }

    func flush(context: ChannelHandlerContext) {
        passOnFrames(context: context)
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        passOnFrames(context: context)  // (a GOODBYE written before the close goes out with it)
        context.close(mode: mode, promise: promise)
    }

    /// Hands the frames written since the last flush to TLS as one buffer, whose write completes
    /// each of their writes' promises.
    private func passOnFrames(context: ChannelHandlerContext) {
        guard unwritten.frames.readableBytes > 0 || !unwritten.promises.isEmpty else { return }
        let frames = unwritten.frames
        let promises = unwritten.promises
        unwritten = (allocator.buffer(capacity: 0), [])
        let promise: EventLoopPromise<Void>?
        switch promises.count {
        case 0: promise = nil
        case 1: promise = promises[0]
        default:
            promise = context.eventLoop.makePromise()
            promise!.futureResult.whenComplete { result in promises.forEach { $0.completeWith(result) } }
        }
        context.write(wrapOutboundOut(frames), promise: promise)
    }

    /// The payload size from which a frame's message bytes are written apart from its head.
    static let separatePayload = TLSEngine.maximumRecordPlaintext
    /// The room a flush's frames start with: most of a batch of small messages without regrowing.
    static let framesCapacity = 2_048

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        run(machine.failed(error), context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        run(machine.closed(), context: context)
        context.fireChannelInactive()
    }

    /// Writes a frame of this handler's own after those written before it, and flushes.
    private func writeAndFlush(_ message: LinkMessage, context: ChannelHandlerContext) {
        write(context: context, data: NIOAny(message), promise: nil)
        flush(context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        let promises = unwritten.promises
        unwritten = (allocator.buffer(capacity: 0), [])
        promises.forEach { $0.fail(ChannelError.ioOnClosedChannel) }
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
