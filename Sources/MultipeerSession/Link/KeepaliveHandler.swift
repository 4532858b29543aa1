import struct Foundation.UUID
import MultipeerCore
import NIOCore
import NIOConcurrencyHelpers

/// Pings the peer when this side has been quiet and closes a silent link, on the link's event
/// loop (``KeepaliveStateMachine`` decides; this handler arms its wake-ups on the loop's
/// ``KeepaliveTimers`` and does the I/O). Answers the peer's PINGs with PONGs and measures round
/// trips from its own. PING, PONG and FLOW stop here, and so does the end of a batch of nothing
/// else; every other message passes on.
///
/// While the peer says it does not read (FLOW, its application is behind), TCP's window towards
/// it closes, and Linux fails a connection whose window stays closed for TCP_USER_TIMEOUT even
/// though the peer answers every probe: so the option is lifted until the peer reads again. The
/// peer's PINGs, which keep coming while it does not read, still prove it alive.
///
/// Liveness is fed by ``InboundActivityHandler`` at the bottom of the pipeline, so any bytes at
/// all, even of a large frame still arriving, count as traffic. While a handler above withholds
/// reads (the application is behind), the peer's silence does not count against it: this side
/// is not listening.
final class KeepaliveHandler: ChannelDuplexHandler {
    typealias InboundIn = LinkMessage
    typealias InboundOut = LinkMessage
    typealias OutboundIn = LinkMessage
    typealias OutboundOut = LinkMessage

    private let local: KeepaliveParameters
    private let role: KeepaliveStateMachine.Role
    private let quality: LinkQualityBox
    /// The link's TCP_USER_TIMEOUT, restored when the peer reads again.
    private let tcpUserTimeout: Duration?
    private var keepalive: KeepaliveStateMachine?
    private var timers: KeepaliveTimers?
    /// The slot of the latest wake-up armed; an earlier arming that comes up is stale.
    private var armedSlot: Int64?
    private var context: ChannelHandlerContext?
    /// The channel's socket, whose TCP_INFO a silent link's wake-ups read (cast once: a
    /// conformance check at every wake-up was a visible part of an idle mesh's cost).
    private var socket: (any SocketOptionProvider)?
    private let origin = NIODeadline.now()
    private var peer = "the peer"
    /// Whether a read was asked for since the last batch arrived. Not while a handler above
    /// withholds reads (the session's full message streams, a bare link's unread messages):
    /// silence from the peer is then this side's doing, and no reason to time the link out.
    private var readRequested = true
    /// Message traffic not yet added to ``quality``.
    private var traffic = MessageTraffic()
    /// A message went on up the pipeline since the last batch ended. A batch of PINGs, PONGs and
    /// FLOWs alone ends here: the handlers above never saw it (nor, on an idle mesh, walk the
    /// end of each).
    private var forwardedInBatch = false
    /// This side's PINGs not yet answered nor expired: a wake-up expires old ones in
    /// ``quality`` (under its lock) only while there are any.
    private var pingsAwaited = 0

    private let paths: PathMemory
    private var remotePeer: UUID?

    init(
        local: KeepaliveParameters, role: KeepaliveStateMachine.Role, quality: LinkQualityBox, tcpUserTimeout: Duration?, paths: PathMemory
    ) {
        self.paths = paths
        self.local = local
        self.role = role
        self.quality = quality
        self.tcpUserTimeout = tcpUserTimeout
    }

    private var now: Duration { .nanoseconds(Int64(NIODeadline.now().uptimeNanoseconds) - Int64(origin.uptimeNanoseconds)) }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        socket = context.channel as? any SocketOptionProvider
        if let address = context.channel.remoteAddress { peer = "peer at \(address.displayString)" }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        armedSlot = nil
        self.context = nil
        socket = nil
    }

    /// Bytes arrived (called by ``InboundActivityHandler`` on the same event loop).
    func inboundActivity() {
        keepalive?.inboundActivity(now: now)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let hello = event as? HelloCompleted {
            remotePeer = hello.remote.peerID
            keepalive = KeepaliveStateMachine(
                parameters: local.stricter(than: hello.remote.keepalive), role: role, now: now, path: paths.recall(hello.remote.peerID))
            schedule(context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let message = unwrapInboundIn(data)
        switch message {
        case .ping(let probe):
            // Written from here, the PONG does not pass this handler's `write`: count it here.
            let at = now
            let sample = keepalive?.pingReceived(now: at) ?? nil
            keepalive?.outboundActivity(now: at)
            context.write(wrapOutboundOut(.pong(probe)), promise: nil)
            // This side's round-trip sample, if due, in the PONG's record.
            if let sample { write(ping: sample, at: at, context: context) }
            context.flush()
        case .pong(let probe):
            let at = now
            if quality.update({ $0.pongReceived(probe, at: at) }) != nil { pingsAwaited -= 1 }
        case .flow(let reading):
            if let tcpUserTimeout {
                let (option, value) = LinkConfiguration.tcpUserTimeoutOption(reading ? tcpUserTimeout : .zero)
                try? context.channel.syncOptions?.setOption(option, value: value)
            }
        default:
            if let bytes = message.messageBytes {
                traffic.framesIn += 1
                traffic.bytesIn += bytes
            }
            forwardedInBatch = true
            context.fireChannelRead(data)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if let bytes = unwrapOutboundIn(data).messageBytes {
            traffic.framesOut += 1
            traffic.bytesOut += bytes
        }
        context.write(data, promise: promise)
    }

    func flush(context: ChannelHandlerContext) {
        // Once a batch of writes, not once a message: the clock and the quality's lock.
        keepalive?.outboundActivity(now: now)
        countTraffic()
        context.flush()
    }

    /// Adds the message traffic counted since the last time to the link's quality.
    private func countTraffic() {
        guard !traffic.isEmpty else { return }
        let counted = traffic
        traffic = MessageTraffic()
        quality.update { $0.count(counted) }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        countTraffic()
        // The channel asks for the next read right after this, unless a handler above withholds it.
        readRequested = false
        if forwardedInBatch {
            forwardedInBatch = false
            context.fireChannelReadComplete()
        }
    }

    func read(context: ChannelHandlerContext) {
        readRequested = true
        if keepalive?.readingPaused == true { keepalive!.reading(paused: false, now: now) }
        context.read()
    }

    func channelInactive(context: ChannelHandlerContext) {
        armedSlot = nil
        if let keepalive, let remotePeer { paths.remember(keepalive.history, of: remotePeer) }
        keepalive = nil
        context.fireChannelInactive()
    }

    private func schedule(context: ChannelHandlerContext) {
        guard let nextWakeUp = Self.nextWakeUp(of: &keepalive) else { return }
        let timers = self.timers ?? KeepaliveTimers.on(context.eventLoop)
        self.timers = timers
        armedSlot = timers.arm(self, atUptimeNanoseconds: Int64(origin.uptimeNanoseconds) + nextWakeUp.nanoseconds)
    }

    /// What the transport showed of the silence that timed a link out, for its error: whether
    /// the peer's host was heard meanwhile, and what was lost.
    static func describe(_ reading: TransportReading?, lossSeen: Bool) -> String {
        guard let reading else { return "" }
        var facts = ["its host last heard \(Duration.milliseconds(reading.sinceHeard.milliseconds)) ago"]
        if let unacknowledged = reading.unacknowledgedSegments { facts.append("\(unacknowledged) segments unacknowledged") }
        if reading.recoveringLoss { facts.append("this side's TCP repairing a loss") }
        facts.append(lossSeen ? "the path has lost packets" : "the path has lost no packet")
        return "; " + facts.joined(separator: ", ")
    }

    /// Writes a PING of this side's (the caller flushes), and awaits its PONG.
    private func write(ping probe: Probe, at: Duration, context: ChannelHandlerContext) {
        quality.update { $0.pingSent(probe, at: at) }
        pingsAwaited += 1
        context.write(wrapOutboundOut(.ping(probe)), promise: nil)
    }

    /// The machine's next wake-up, read through an `inout`: read from the stored property, the
    /// machine was copied (its arrays retained and released) to call across modules, at every
    /// wake-up; so was it with `if let`.
    private static func nextWakeUp(of keepalive: inout KeepaliveStateMachine?) -> Duration? {
        keepalive?.nextWakeUp
    }

    /// Called by ``KeepaliveTimers`` when the slot armed comes up.
    func timerFired(slot: Int64) {
        guard slot == armedSlot else { return }
        armedSlot = nil
        wakeUp(late: .nanoseconds(Int64(NIODeadline.now().uptimeNanoseconds) - slot * KeepaliveTimers.slotNanoseconds))
    }

    private func wakeUp(late: Duration) {
        guard let context, keepalive != nil else { return }
        let at = now
        if !readRequested, !keepalive!.readingPaused { keepalive!.reading(paused: true, now: at) }
        let parameters = keepalive!.parameters
        if pingsAwaited > 0 { pingsAwaited = quality.update { $0.expire(olderThan: parameters.timeout, now: at) } }
        switch keepalive!.wakeUp(now: at, late: late, transport: socket?.transportReading()) {
        case .wait:
            break
        case .sendPing(let probe):
            write(ping: probe, at: at, context: context)
            context.flush()
        case .timedOut:
            // In whole milliseconds: an adapted timeout is no round figure.
            let (timeout, silence) = (Duration.milliseconds(keepalive!.timeout.milliseconds), Duration.milliseconds(keepalive!.silence(now: at).milliseconds))
            let hung = keepalive!.peerHung
            let evidence = Self.describe(keepalive!.transportInSilence, lossSeen: keepalive!.hasSeenLoss)
            if let remotePeer { paths.remember(keepalive!.history, of: remotePeer) }
            keepalive = nil
            let adapted = hung
                ? ", its host acknowledging everything sent to it: hung"
                : timeout > parameters.timeout ? ", adapted from \(parameters.timeout) to the silences this link has shown" : ""
            let error = MultipeerError(
                .keepaliveTimeout,
                "\(peer) sent nothing for \(silence) (keepalive interval \(parameters.interval), timeout \(hung ? parameters.timeout : timeout)\(adapted))"
                    + evidence)
            context.writeAndFlush(wrapOutboundOut(.goodbye(.keepaliveTimeout, "no traffic for \(silence)")), promise: nil)
            context.fireErrorCaught(error)
            context.close(promise: nil)
            return
        }
        schedule(context: context)
    }
}

@available(*, unavailable)
extension KeepaliveHandler: Sendable {}
