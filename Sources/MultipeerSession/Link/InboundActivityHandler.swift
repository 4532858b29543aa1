import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

import struct Foundation.UUID

/// Sits below TLS and tells the keepalive that bytes arrived, whatever they turn out to be.
final class InboundActivityHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let keepalive: KeepaliveHandler

    init(keepalive: KeepaliveHandler) {
        self.keepalive = keepalive
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        keepalive.inboundActivity()
        context.fireChannelRead(data)
    }
}

@available(*, unavailable)
extension InboundActivityHandler: Sendable {}
