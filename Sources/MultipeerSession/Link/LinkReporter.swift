import MultipeerCore
import NIOCore

/// The top of a session's link: hands the session, in order, what of the link it decides on:
/// the peer's resume point (its first ACK, which admits the link), a REJECT, the message types
/// the peer reads (TYPES), and the link's end
/// with the peer's GOODBYE or the error that ended it. Until the session has taken the link in
/// (``LinkReports/report(to:)``), what comes is held; everything else of a link (DATA, the
/// later ACKs, the keepalive) stays on its event loop, below.
///
/// A GOODBYE or an error closes the link; its end is reported once, after everything it
/// brought before.
final class LinkReporter: ChannelInboundHandler {
    typealias InboundIn = LinkMessage

    /// What the session hears of a link.
    enum Event: Sendable {
        /// The peer's first ACK: where its receive window resumes (see ``DeliveryHandler``).
        case resumePoint(UInt64, PartialMessage?)
        /// The peer refused one of this side's messages.
        case rejected(Rejection)
        /// The peer reads these message types from now on (TYPES).
        case reads(MessageTypesRead)
        /// The link has closed: with the peer's GOODBYE, or after `error`, or neither (the
        /// connection ended, or this side closed it).
        case closed(goodbye: GoodbyeReason?, error: (any Error)?)
    }

    private enum State {
        /// Not taken in yet: the events so far.
        case holding([Event])
        case reporting(@Sendable (Event) -> Void)
        /// The end has been reported.
        case ended
    }

    private var state = State.holding([])
    private var goodbye: GoodbyeReason?
    private var error: (any Error)?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .reject(let rejection):
            report(.rejected(rejection))
        case .types(let types):
            report(.reads(types))
        case .goodbye(let reason, _):
            if goodbye == nil { goodbye = reason }
            context.close(promise: nil)
        case .ack, .data, .fragment, .resourceOffer, .resourceWant, .resourceChunk, .resourceEnd, .streamOpen,
            .streamWant,
            .streamData, .streamEnd,
            .hello, .ping, .pong, .flow, .unknown:
            // (taken below: ACK, DATA, resources and streams by the DeliveryHandler, the rest by the link and keepalive handlers)
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let resume = event as? ResumePointReceived {
            report(.resumePoint(resume.sequence, resume.partial))
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if self.error == nil { self.error = error }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        report(.closed(goodbye: goodbye, error: error))
        context.fireChannelInactive()
    }

    fileprivate func report(to sink: @escaping @Sendable (Event) -> Void) {
        guard case .holding(let held) = state else { preconditionFailure("a link is taken in once") }
        state = .reporting(sink)
        for event in held { report(event) }
    }

    private func report(_ event: Event) {
        switch state {
        case .holding(var held):
            held.append(event)
            state = .holding(held)
        case .reporting(let sink):
            if case .closed = event { state = .ended }
            sink(event)
        case .ended:
            break  // (nothing follows the end)
        }
    }
}

@available(*, unavailable)
extension LinkReporter: Sendable {}

/// A session link's ``LinkReporter``, for the session to take the link in from any thread.
struct LinkReports: Sendable {
    private let reporter: NIOLoopBound<LinkReporter>

    init(_ reporter: LinkReporter, eventLoop: any EventLoop) {
        self.reporter = NIOLoopBound(reporter, eventLoop: eventLoop)
    }

    /// From now on the link's events go to `sink`, on its event loop: first those it held.
    func report(to sink: @escaping @Sendable (LinkReporter.Event) -> Void) {
        let reporter = self.reporter
        reporter.eventLoop.execute { reporter.value.report(to: sink) }
    }
}
