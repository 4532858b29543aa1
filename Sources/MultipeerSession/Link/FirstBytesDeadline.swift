import Glibc
import MultipeerCore
import MultipeerTLS
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

import struct Foundation.UUID

/// Closes a connection whose other end sends nothing within its deadline, with a
/// `handshakeTimeout` failure; leaves the pipeline at the first bytes. A peer sends its
/// ClientHello as it connects, and answers one a round trip later; a stranger holding a
/// connection open (or a sink an advert points at) says nothing.
final class FirstBytesDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let timeout: Duration
    private let role: TLSEngine.Role
    private var timer: Scheduled<Void>?

    init(_ timeout: Duration, role: TLSEngine.Role) {
        self.timeout = timeout
        self.role = role
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        timer?.cancel()
        timer = nil
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    private func start(_ context: ChannelHandlerContext) {
        guard timer == nil else { return }
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        let address = context.channel.remoteAddress?.displayString ?? "unknown"
        let message =
            role == .server
            ? "the connection from \(address) sent nothing within \(timeout) (Limits.firstBytesTimeout)"
            : "\(address) accepted the connection but sent nothing within \(timeout)"
        timer = context.eventLoop.scheduleTask(in: TimeAmount(timeout)) {
            let context = loopBound.value
            context.fireErrorCaught(MultipeerError(.handshakeTimeout, message))
            context.close(promise: nil)
        }
    }
}

@available(*, unavailable)
extension FirstBytesDeadline: Sendable {}
