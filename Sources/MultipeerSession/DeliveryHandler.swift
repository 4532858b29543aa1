import Foundation
import MultipeerCore
import NIOCore
import NIOConcurrencyHelpers

/// What this session has delivered from each sender, across that sender's links.
final class ReceiveWindows: Sendable {
    private let windows = NIOLockedValueBox<[UUID: ReceiveWindow]>([:])

    /// The sender's new link said HELLO: a new incarnation starts over. Returns what was delivered.
    func sender(_ peerID: UUID, incarnation: UInt64) -> UInt64 {
        windows.withLockedValue { windows in
            windows[peerID, default: ReceiveWindow(incarnation: incarnation)].sender(incarnation: incarnation)
            return windows[peerID]!.delivered
        }
    }

    func receive(from peerID: UUID, sequence: UInt64) -> ReceiveWindow.Verdict {
        windows.withLockedValue { $0[peerID]?.receive(sequence: sequence) ?? .gap }
    }

    /// What to acknowledge, if anything was delivered since the last acknowledgement.
    func acknowledgement(for peerID: UUID) -> UInt64? {
        windows.withLockedValue { windows in
            guard let window = windows[peerID], window.unacknowledged > 0 else { return nil }
            windows[peerID]!.acknowledged()
            return window.delivered
        }
    }
}

/// Reliable delivery on the receiving side, on the link's event loop: drops duplicates
/// (``ReceiveWindow``), acknowledges what was delivered once per read batch, and, right after
/// HELLO, tells the sender where to resume with an ACK of everything already delivered from its
/// incarnation. A gap (a sequence number skipped) cannot happen on one in-order TCP stream from
/// a correct sender; it closes the link with `outOfSequence`, so that the sender resends from
/// the gap on the next link instead of the stream stalling.
final class DeliveryHandler: ChannelDuplexHandler {
    typealias InboundIn = LinkMessage
    typealias InboundOut = LinkMessage
    typealias OutboundIn = LinkMessage
    typealias OutboundOut = LinkMessage

    private let windows: ReceiveWindows
    private var peerID: UUID?
    /// A gap was seen: the link is closing and reads nothing more.
    private var broken = false
    /// A reliable message was delivered in this read batch (only then is there anything to
    /// acknowledge: a batch of PINGs alone costs no look-up).
    private var deliveredInBatch = false

    init(windows: ReceiveWindows) {
        self.windows = windows
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let hello = event as? HelloCompleted {
            peerID = hello.remote.peerID
            let resume = windows.sender(hello.remote.peerID, incarnation: hello.remote.incarnation)
            context.writeAndFlush(wrapOutboundOut(.ack(resume)), promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !broken else { return }
        guard case .data(let message) = unwrapInboundIn(data), message.sequence > 0, let peerID else {
            context.fireChannelRead(data)  // unreliable DATA and everything else
            return
        }
        switch windows.receive(from: peerID, sequence: message.sequence) {
        case .deliver:
            deliveredInBatch = true
            context.fireChannelRead(data)
        case .duplicate:
            break
        case .gap:
            broken = true
            let error = MultipeerError(
                .outOfSequence, "peer \(peerID) sent reliable message \(message.sequence) with an earlier one missing; the link is closed so that it resends")
            context.writeAndFlush(wrapOutboundOut(.goodbye(.protocolError, error.message)), promise: nil)
            context.fireErrorCaught(error)
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if deliveredInBatch, let peerID {
            deliveredInBatch = false
            if let delivered = windows.acknowledgement(for: peerID) {
                context.writeAndFlush(wrapOutboundOut(.ack(delivered)), promise: nil)
            }
        }
        context.fireChannelReadComplete()
    }
}

@available(*, unavailable)
extension DeliveryHandler: Sendable {}
