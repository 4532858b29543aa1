import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

import struct Foundation.UUID

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
    private var stage = Stage.awaitingHello
    private var timers: KeepaliveTimers?
    private var context: ChannelHandlerContext?
    /// What a silent link's wake-ups read of the transport: a socket's TCP_INFO, or what a
    /// simulated connection knows (found once: a conformance check at every wake-up was a
    /// visible part of an idle mesh's cost).
    private var transport: (any TransportInformation)?
    /// The link's event loop, whose clock the keepalive reads (a simulated one in a simulation).
    private var loop: (any EventLoop)?
    /// When the handler was added, on the loop's clock: ``now`` counts from it.
    private var origin = NIODeadline.uptimeNanoseconds(0)
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
    private let paths: PathMemory
    /// A session's metrics: the handshake's time, round trips, the silence a link is given up
    /// after. Nil for a bare link.
    private let metrics: SessionMetrics?

    private enum Stage {
        /// Before the peer's HELLO: nothing is kept alive yet.
        case awaitingHello
        case running(Running)
        /// The link timed out or closed, and what it showed of its path is remembered.
        case ended
    }

    /// A link kept alive. A class, so that the machine is changed where it is: copied out of
    /// the stage and back at every event, its arrays were retained and released each time.
    private final class Running {
        var machine: KeepaliveStateMachine
        /// The peer, for whom the path the machine saw is remembered (``PathMemory``).
        let peer: UUID
        /// The slot of the latest wake-up armed; an earlier arming that comes up is stale.
        var armedSlot: Int64?
        /// This side's PINGs not yet answered nor expired: a wake-up expires old ones in
        /// ``quality`` (under its lock) only while there are any.
        var pingsAwaited = 0

        init(machine: KeepaliveStateMachine, peer: UUID) {
            self.machine = machine
            self.peer = peer
        }
    }

    init(
        local: KeepaliveParameters,
        role: KeepaliveStateMachine.Role,
        quality: LinkQualityBox,
        tcpUserTimeout: Duration?,
        paths: PathMemory,
        metrics: SessionMetrics? = nil
    ) {
        self.paths = paths
        self.metrics = metrics
        self.local = local
        self.role = role
        self.quality = quality
        self.tcpUserTimeout = tcpUserTimeout
    }

    private var now: Duration { since(loopNow) }
    private var loopNow: NIODeadline { loop?.now ?? origin }

    /// `deadline` on the handler's own clock (``now``'s).
    private func since(_ deadline: NIODeadline) -> Duration {
        .nanoseconds(Int64(deadline.uptimeNanoseconds) - Int64(origin.uptimeNanoseconds))
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        loop = context.eventLoop
        origin = context.eventLoop.now
        transport =
            (context.channel as? any TransportInformation)
            ?? (context.channel as? any SocketOptionProvider).map(SocketTransportInformation.init)
        if let address = context.channel.remoteAddress { peer = "peer at \(address.displayString)" }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        end()
        self.context = nil
        transport = nil
    }

    /// The running link's state; nil before the HELLO and once ended.
    private var running: Running? {
        if case .running(let running) = stage { running } else { nil }
    }

    /// The link's keepalive ends: what it showed of the path is remembered for the peer's next link.
    private func end() {
        if case .running(let running) = stage {
            let instant = loopNow
            paths.remember(running.machine.history(now: since(instant)), of: running.peer, now: instant)
        }
        stage = .ended
    }

    /// Bytes arrived (called by ``InboundActivityHandler`` on the same event loop).
    func inboundActivity() {
        guard let running else { return }
        let instant = loopNow
        // Read after the wake-up armed was due: this side's loop did not run meanwhile.
        let late =
            running.armedSlot.map {
                Duration.nanoseconds(Int64(instant.uptimeNanoseconds) - $0 * KeepaliveTimers.slotNanoseconds)
            } ?? .zero
        running.machine.inboundActivity(now: since(instant), late: late)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let hello = event as? HelloCompleted, case .awaitingHello = stage {
            let instant = loopNow
            // (Added as the connection began: a dial's connect, an accepted connection.)
            metrics?.handshake(since(instant), inbound: role == .following)
            let machine = KeepaliveStateMachine(
                parameters: local.stricter(than: hello.remote.keepalive),
                role: role,
                now: since(instant),
                path: paths.recall(hello.remote.peerID, now: instant)
            )
            stage = .running(Running(machine: machine, peer: hello.remote.peerID))
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
            let sample = running?.machine.pingReceived(now: at) ?? nil
            running?.machine.outboundActivity(now: at)
            context.write(wrapOutboundOut(.pong(probe)), promise: nil)
            // This side's round-trip sample, if due, in the PONG's record.
            if let sample { write(ping: sample, at: at, context: context) }
            context.flush()
        case .pong(let probe):
            let at = now
            if let roundTrip = quality.update({ $0.pongReceived(probe, at: at) }) {
                running?.pingsAwaited -= 1
                metrics?.roundTrip(roundTrip)
            }
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
        let at = now
        running?.machine.outboundActivity(now: at)
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
        let at = now
        if let running, running.machine.readingPaused { running.machine.reading(paused: false, now: at) }
        context.read()
    }

    func channelInactive(context: ChannelHandlerContext) {
        end()
        context.fireChannelInactive()
    }

    /// Arms the running machine's next wake-up.
    private func schedule(context: ChannelHandlerContext) {
        let timers = self.timers ?? KeepaliveTimers.on(context.eventLoop)
        self.timers = timers
        let origin = Int64(self.origin.uptimeNanoseconds)
        guard let running else { return }
        running.armedSlot = timers.arm(
            self,
            atUptimeNanoseconds: origin + Self.nextWakeUp(of: &running.machine).nanoseconds
        )
    }

    /// The machine's next wake-up, read through an `inout`: read from the stored property, the
    /// machine was copied (its arrays retained and released) to call across modules, at every
    /// wake-up.
    private static func nextWakeUp(of machine: inout KeepaliveStateMachine) -> Duration {
        machine.nextWakeUp
    }

    /// What the transport showed of the silence that timed a link out, for its error: whether
    /// the peer's host was heard meanwhile, and what was lost.
    static func describe(_ reading: TransportReading?, lossSeen: Bool) -> String {
        guard let reading else { return "" }
        var facts = ["its host last heard \(Duration.milliseconds(reading.sinceHeard.milliseconds)) ago"]
        if let unacknowledged = reading.unacknowledgedSegments {
            facts.append("\(unacknowledged) segments unacknowledged")
        }
        if reading.recoveringLoss { facts.append("this side's TCP repairing a loss") }
        facts.append(lossSeen ? "the path has lost packets" : "the path has lost no packet")
        return "; " + facts.joined(separator: ", ")
    }

    /// Writes a PING of this side's (the caller flushes), and awaits its PONG.
    private func write(ping probe: Probe, at: Duration, context: ChannelHandlerContext) {
        quality.update { $0.pingSent(probe, at: at) }
        running?.pingsAwaited += 1
        context.write(wrapOutboundOut(.ping(probe)), promise: nil)
    }

    /// Called by ``KeepaliveTimers`` when the slot armed comes up.
    func timerFired(slot: Int64) {
        guard let running, running.armedSlot == slot else { return }
        running.armedSlot = nil
        wakeUp(late: .nanoseconds(Int64(loopNow.uptimeNanoseconds) - slot * KeepaliveTimers.slotNanoseconds))
    }

    /// What a wake-up does, decided in the running state.
    private enum WakeUp {
        case wait
        case ping(Probe)
        case timedOut(MultipeerError, silence: Duration)
    }

    private func wakeUp(late: Duration) {
        guard let context else { return }
        let at = now
        let (readRequested, quality, transport) = (self.readRequested, self.quality, self.transport)
        let wakeUp = running.map { running -> WakeUp in
            if !readRequested, !running.machine.readingPaused { running.machine.reading(paused: true, now: at) }
            let parameters = running.machine.parameters
            if running.pingsAwaited > 0 {
                running.pingsAwaited = quality.update { $0.expire(olderThan: parameters.timeout, now: at) }
            }
            switch running.machine.wakeUp(now: at, late: late, transport: transport?.transportReading()) {
            case .wait: return .wait
            case .sendPing(let probe): return .ping(probe)
            case .timedOut:
                let (error, silence) = timeoutError(running.machine, at: at)
                return .timedOut(error, silence: silence)
            }
        }
        switch wakeUp {
        case nil, .wait?:
            break
        case .ping(let probe)?:
            write(ping: probe, at: at, context: context)
            context.flush()
        case .timedOut(let error, let silence)?:
            metrics?.failureDetected(after: silence)
            end()
            context.writeAndFlush(
                wrapOutboundOut(.goodbye(.keepaliveTimeout, "no traffic for \(silence)")),
                promise: nil
            )
            context.fireErrorCaught(error)
            context.close(promise: nil)
            return
        }
        schedule(context: context)
    }

    /// The error a timed-out link fails with: the silence, the keepalive and what the transport
    /// showed of it.
    private func timeoutError(
        _ machine: KeepaliveStateMachine,
        at: Duration
    ) -> (error: MultipeerError, silence: Duration) {
        let parameters = machine.parameters
        // In whole milliseconds: an adapted timeout is no round figure.
        let (timeout, silence) = (
            Duration.milliseconds(machine.timeout.milliseconds),
            Duration.milliseconds(machine.silence(now: at).milliseconds)
        )
        let hung = machine.peerHung
        let evidence = Self.describe(machine.transportInSilence, lossSeen: machine.hasSeenLoss)
        let stalls = machine.recentStalls
        let judged =
            hung
            ? ", its host acknowledging everything sent to it: hung"
            : stalls.count > 0
                ? ", judged from \(stalls.count) stalls of over \(machine.stallThreshold) this path showed, suspicion \((machine.suspicion(of: machine.silence(now: at)) * 10).rounded() / 10)"
                : ""
        let error = MultipeerError(
            .keepaliveTimeout,
            "\(peer) sent nothing for \(silence) (keepalive interval \(parameters.interval), timeout \(hung ? parameters.timeout : timeout)\(judged))"
                + evidence
        )
        return (error, silence)
    }
}

@available(*, unavailable)
extension KeepaliveHandler: Sendable {}
