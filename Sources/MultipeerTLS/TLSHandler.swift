import MultipeerCore
package import NIOCore

/// Fired inbound once the TLS handshake is complete; plaintext flows from then on.
package struct TLSHandshakeCompleted: Sendable {
    /// What was negotiated, e.g. `TLS1.3 ECDHE-PSK X25519 AES-128-GCM`.
    package var negotiated: String
    /// This connection's exporter value for HELLO (``Hello/exporterLabel``): what a HELLO's
    /// signature binds it to.
    package var helloExporter: [UInt8]

    package init(negotiated: String, helloExporter: [UInt8]) {
        self.negotiated = negotiated
        self.helloExporter = helloExporter
    }
}

/// Runs a ``TLSEngine`` over a channel: ciphertext below, plaintext above.
///
/// Writes made before the handshake completes wait for it. Plaintext written between two
/// flushes is encrypted together, so many small frames share a few large records; a write of a
/// record's worth or more is encrypted at once, as it is (after what came before it). A failed
/// handshake sends its alert, fires a ``MultipeerError`` and closes the channel. A connection
/// that ends without the peer's close_notify (a FIN alone, perhaps in the middle of a record),
/// while neither side was closing, fires `uncleanShutdown`: a crash or a cut, not a close.
package final class TLSHandler: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ByteBuffer
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    private enum State {
        case idle
        case handshaking
        case active
        /// The end is expected: this side closes, the peer's close_notify came, or the
        /// connection failed below. Nothing more is read or written.
        case closing
        case closed
    }

    private let engine: TLSEngine
    private var state = State.idle
    private var pendingPlaintext: ByteBuffer?
    private var pendingPromises: [EventLoopPromise<Void>] = []
    private var flushPending = false
    /// The channel's allocator, kept: reaching it through the context costs retains at every read.
    private var allocator = ByteBufferAllocator()
    /// Where a flush waits for the end of the event loop's tick.
    private var tickEnd: TickEndFlushes?

    package init(engine: TLSEngine) {
        self.engine = engine
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        allocator = context.channel.allocator
        tickEnd = TickEndFlushes.on(context.eventLoop)
        if context.channel.isActive { start(context: context) }
    }

    package func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    private func start(context: ChannelHandlerContext) {
        guard case .idle = state else { return }
        if let address = context.channel.remoteAddress {
            engine.peerDescription = "peer at \(address.displayString)"
        }
        state = .handshaking
        advanceHandshake(context: context)
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch state {
        case .idle, .handshaking:
            engine.receive(unwrapInboundIn(data))
            state = .handshaking
            advanceHandshake(context: context)
        case .active:
            engine.receive(unwrapInboundIn(data))
            readRecords(context: context)
        case .closing, .closed:
            break
        }
    }

    package func channelInactive(context: ChannelHandlerContext) {
        switch state {
        case .handshaking:
            context.fireErrorCaught(
                MultipeerError(
                    .closedDuringHandshake,
                    "\(engine.peerDescription) closed the connection during the TLS handshake"
                )
            )
        case .active:
            // Nobody was closing: the stream ended. With the peer's close_notify last, that is
            // its orderly close; without it, a truncation.
            engine.receiveEOF()
            readRecords(context: context)
        case .idle, .closing, .closed:
            break
        }
        state = .closed
        failPendingWrites(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // The connection failed below (a reset, say): that, not its end, is what to report.
        if case .active = state { state = .closing }
        context.fireErrorCaught(error)
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard state != .closed, state != .closing else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        var plaintext = unwrapOutboundIn(data)
        if case .active = state, plaintext.readableBytes >= TLSEngine.maximumRecordPlaintext {
            // Records' worth: encrypted at once, as it is, after what came before it; neither
            // copied into the pending plaintext nor have later writes appended to it (a copy of
            // the whole, since it shares its storage with the outbox's message).
            encryptPending(context: context)
            guard case .active = state else {
                promise?.fail(ChannelError.ioOnClosedChannel)
                return
            }
            pendingPlaintext = plaintext
            if let promise { pendingPromises.append(promise) }
            encryptPending(context: context)
            return
        }
        if pendingPlaintext == nil {
            pendingPlaintext = plaintext
        } else {
            pendingPlaintext!.writeBuffer(&plaintext)
        }
        if let promise { pendingPromises.append(promise) }
    }

    package func flush(context: ChannelHandlerContext) {
        guard case .active = state else {
            flushPending = true
            return
        }
        // A full record's worth is encrypted at once, so the bytes reach the channel and its
        // writability pushes back on the writer. Less waits for the end of this event-loop tick:
        // writes that other threads queued for the tick (an async writer yields one message per
        // task) then share records and one system call instead of one each.
        if (pendingPlaintext?.readableBytes ?? 0) >= TLSEngine.maximumRecordPlaintext {
            encryptPending(context: context)
            return
        }
        guard !flushPending else { return }
        flushPending = true
        tickEnd!.add(self, context)
    }

    /// The end of the event-loop tick a flush waited for (``TickEndFlushes``).
    fileprivate func tickEnded(context: ChannelHandlerContext) {
        if flushPending, case .active = state { encryptPending(context: context) }
    }

    package func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if mode == .all, case .active = state {
            encryptPending(context: context)
            engine.shutdown()
            writeCiphertext(context: context)
            state = .closing
        }
        context.close(mode: mode, promise: promise)
    }

    // MARK: Internals

    private func advanceHandshake(context: ChannelHandlerContext) {
        let result = engine.handshake()
        writeCiphertext(context: context)
        switch result {
        case .incomplete:
            break
        case .complete:
            let exporter: [UInt8]
            do {
                exporter = try engine.exportKeyingMaterial(label: Hello.exporterLabel, length: Hello.exporterLength)
            } catch {
                fail(context: context, error)
                return
            }
            state = .active
            context.fireUserInboundEventTriggered(
                TLSHandshakeCompleted(negotiated: engine.negotiatedDescription, helloExporter: exporter)
            )
            if flushPending { encryptPending(context: context) }
            readRecords(context: context)
        case .failed(let error):
            fail(context: context, error)
        }
    }

    private func readRecords(context: ChannelHandlerContext) {
        var plaintext = allocator.buffer(capacity: 0)
        let result: TLSEngine.ReadResult
        do {
            result = try engine.read(into: &plaintext)
        } catch {
            fail(context: context, error)
            return
        }
        if plaintext.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(plaintext)) }
        // A post-handshake message (key update) may need an answer.
        writeCiphertext(context: context)
        if result == .closed, case .active = state {
            state = .closing
            context.close(promise: nil)
        }
    }

    private func encryptPending(context: ChannelHandlerContext) {
        flushPending = false
        guard let plaintext = pendingPlaintext else { return }
        pendingPlaintext = nil
        let promises = pendingPromises
        pendingPromises = []
        do {
            try engine.write(plaintext)
        } catch {
            promises.forEach { $0.fail(error) }
            fail(context: context, error)
            return
        }
        let promise: EventLoopPromise<Void>? = promises.isEmpty ? nil : context.eventLoop.makePromise()
        if let promise {
            promise.futureResult.whenComplete { result in promises.forEach { $0.completeWith(result) } }
        }
        writeCiphertext(context: context, promise: promise)
    }

    private func writeCiphertext(context: ChannelHandlerContext, promise: EventLoopPromise<Void>? = nil) {
        guard let ciphertext = engine.takeOutbound() else {
            promise?.succeed()
            return
        }
        context.writeAndFlush(wrapOutboundOut(ciphertext), promise: promise)
    }

    private func fail(context: ChannelHandlerContext, _ error: any Error) {
        guard state != .closed else { return }
        state = .closed
        writeCiphertext(context: context)  // the alert
        failPendingWrites(error)
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }

    private func failPendingWrites(_ error: any Error) {
        pendingPlaintext = nil
        let promises = pendingPromises
        pendingPromises = []
        promises.forEach { $0.fail(error) }
    }
}

@available(*, unavailable)
extension TLSHandler: Sendable {}

/// The TLS handlers of one event loop whose flushes wait for the end of the loop's tick, and one
/// task that then encrypts for them all: not a task of its own for each (an idle mesh's PINGs
/// and PONGs go out from hundreds of links in the same tick).
private final class TickEndFlushes {
    private let eventLoop: any EventLoop
    private var waiting: [(TLSHandler, ChannelHandlerContext)] = []
    /// The list being flushed, kept for its storage.
    private var flushing: [(TLSHandler, ChannelHandlerContext)] = []

    private init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    private static let loops = PerEventLoop { TickEndFlushes(eventLoop: $0) }

    /// The flushes of `eventLoop` (made on first use).
    static func on(_ eventLoop: any EventLoop) -> TickEndFlushes {
        loops.on(eventLoop)
    }

    func add(_ handler: TLSHandler, _ context: ChannelHandlerContext) {
        waiting.append((handler, context))
        guard waiting.count == 1 else { return }
        let loopBound = NIOLoopBound(self, eventLoop: eventLoop)
        eventLoop.execute { loopBound.value.flush() }
    }

    private func flush() {
        // A handler flushed here may wait again (for the next task): into the other list.
        swap(&waiting, &flushing)
        for (handler, context) in flushing { handler.tickEnded(context: context) }
        flushing.removeAll(keepingCapacity: true)
    }
}

@available(*, unavailable)
extension TickEndFlushes: Sendable {}

extension SocketAddress {
    /// `127.0.0.1:50412` or `[fe80::1%eth0]:50412`.
    package var displayString: String {
        guard let ip = ipAddress, let port else { return description }
        if case .v6 = self { return "[\(ip)]:\(port)" }
        return "\(ip):\(port)"
    }
}
