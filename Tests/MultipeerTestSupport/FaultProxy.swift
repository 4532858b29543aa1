import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP proxy on loopback that injects faults between two peers, for tests: pass bytes
/// through, swallow them (a black hole that keeps both connections open), stop reading them,
/// delay them, cut them into 1-byte segments, throttle them, or reset both sides of every
/// connection; for every connection, or one direction of the connections open now.
public final class FaultProxy: Sendable {
    public enum Mode: Sendable, Equatable {
        case passThrough
        /// Forward nothing; keep both TCP connections open, as a dead path does.
        case blackHole
        /// Read nothing, so the sender's writes back up in its socket buffers, as behind a
        /// receiver that stopped reading; the connection stays open.
        case stall
        /// Forward each byte, and a close, this long after it came.
        case delay(Duration)
        /// Forward each byte as its own write (and, with TCP_NODELAY, its own segment).
        case slice
        case throttle(bytesPerSecond: Int)
    }

    /// One direction of a proxied connection.
    public enum Direction: Sendable {
        /// From the dialling side to the proxy's target.
        case towardTarget
        /// From the target back to the dialling side.
        case fromTarget
    }

    private let state: Shared
    private let serverChannel: any Channel
    /// The port peers dial to reach the target through the proxy.
    public let port: Int

    final class Shared: Sendable {
        let mode = NIOLockedValueBox(Mode.passThrough)
        let targetPort: NIOLockedValueBox<Int>
        /// Bytes written on so far, and who waits for a count.
        let forwarded = NIOLockedValueBox(Forwarded())
        init(targetPort: Int) { self.targetPort = NIOLockedValueBox(targetPort) }

        struct Forwarded {
            var bytes = 0
            var waiters: [(id: Int, atLeast: Int, continuation: CheckedContinuation<Void, Never>)] = []
            var nextWaiter = 0
        }

        /// Counts bytes written on, and wakes who waited for the total they reach.
        func count(_ bytes: Int) {
            let woken = forwarded.withLockedValue { state in
                state.bytes += bytes
                let total = state.bytes
                let woken = state.waiters.filter { $0.atLeast <= total }
                state.waiters.removeAll { $0.atLeast <= total }
                return woken
            }
            for waiter in woken { waiter.continuation.resume() }
        }
        /// Each connection's two channels.
        let connections = NIOLockedValueBox<[ObjectIdentifier: (dialling: any Channel, target: any Channel)]>([:])
    }

    /// Starts a proxy on an ephemeral loopback port, forwarding to `targetPort` on loopback.
    public init(forwardingTo targetPort: Int) async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        let state = Shared(targetPort: targetPort)
        self.state = state
        serverChannel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { inbound in
                ClientBootstrap(group: inbound.eventLoop)
                    .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                    .connect(host: "127.0.0.1", port: state.targetPort.withLockedValue { $0 })
                    .flatMapThrowing { outbound in
                        let key = ObjectIdentifier(inbound)
                        state.connections.withLockedValue { $0[key] = (inbound, outbound) }
                        // Forgotten once both sides are closed (one may stay open without the other).
                        inbound.closeFuture.and(outbound.closeFuture).whenComplete { _ in
                            state.connections.withLockedValue { _ = $0.removeValue(forKey: key) }
                        }
                        try inbound.pipeline.syncOperations.addHandler(Forwarder(to: outbound, state: state))
                        try outbound.pipeline.syncOperations.addHandler(Forwarder(to: inbound, state: state))
                    }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = serverChannel.localAddress!.port!
    }

    /// Bytes written on so far (what a throttle or a delay still holds is not), both directions
    /// together.
    public var bytesForwarded: Int { state.forwarded.withLockedValue { $0.bytes } }

    /// Returns once the proxy has written on `count` bytes more than it had when called, or
    /// when the task is cancelled: for faults tied to a transfer's progress, not to the clock.
    public func forwarded(_ count: Int) async {
        let state = self.state
        let id = state.forwarded.withLockedValue {
            $0.nextWaiter += 1
            return $0.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let waiting = state.forwarded.withLockedValue { forwarded in
                    guard !Task.isCancelled else { return false }
                    forwarded.waiters.append((id, forwarded.bytes + count, continuation))
                    return true
                }
                if !waiting { continuation.resume() }
            }
        } onCancel: {
            let cancelled = state.forwarded.withLockedValue { forwarded in
                let waiter = forwarded.waiters.first { $0.id == id }
                forwarded.waiters.removeAll { $0.id == id }
                return waiter
            }
            cancelled?.continuation.resume()
        }
    }

    /// Forwards new connections to another loopback port (a peer that restarted elsewhere).
    public func retarget(to port: Int) {
        state.targetPort.withLockedValue { $0 = port }
    }

    /// Changes what happens to bytes from now on, in both directions.
    public func set(_ mode: Mode) {
        precondition(
            mode != .stall,
            "a stall is for one direction of the connections open now: setOpenConnections(_:to:)"
        )
        state.mode.withLockedValue { $0 = mode }
    }

    /// Changes what happens from now on to the bytes going `direction` on the connections open
    /// now; connections made later, and the other direction, keep the proxy's mode.
    public func setOpenConnections(_ direction: Direction, to mode: Mode) async {
        let readers = state.connections.withLockedValue {
            $0.values.map { direction == .towardTarget ? $0.dialling : $0.target }
        }
        for reader in readers {
            try? await reader.eventLoop.submit {
                try reader.pipeline.syncOperations.handler(type: Forwarder.self).override = mode
                try reader.syncOptions?.setOption(.autoRead, value: mode != .stall)
            }.get()
        }
    }

    /// Resets both sides of every connection (an RST each way), as a crashed middlebox would;
    /// with `onlyTheDiallingSide`, the dialling side's alone, and the target learns of it only
    /// if its direction's mode passes a close on.
    public func resetConnections(onlyTheDiallingSide: Bool = false) async {
        let channels = state.connections.withLockedValue {
            $0.values.flatMap { onlyTheDiallingSide ? [$0.dialling] : [$0.dialling, $0.target] }
        }
        for channel in channels {
            // SO_LINGER with a zero timeout makes close send RST instead of FIN.
            _ = try? await (channel as? any SocketOptionProvider)?.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
            try? await channel.close()
        }
    }

    /// Closes the proxy and every connection through it.
    public func stop() async {
        try? await serverChannel.close()
        let channels = state.connections.withLockedValue { $0.values.flatMap { [$0.dialling, $0.target] } }
        for channel in channels { try? await channel.close() }
    }
}

/// Forwards one direction of a proxied connection according to the proxy's mode.
private final class Forwarder: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let peer: any Channel
    private let state: FaultProxy.Shared
    /// This direction's own mode, in place of the proxy's.
    var override: FaultProxy.Mode?
    private var mode: FaultProxy.Mode { override ?? state.mode.withLockedValue { $0 } }
    /// Bytes waiting for the throttle.
    private var queued = ByteBuffer()
    private var draining: RepeatedTask?

    init(to peer: any Channel, state: FaultProxy.Shared) {
        self.peer = peer
        self.state = state
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        switch mode {
        case .passThrough, .stall:  // (stalled, it reads no more; what it read before goes on)
            state.count(bytes.readableBytes)
            peer.writeAndFlush(bytes, promise: nil)
        case .blackHole:
            break
        case .delay(let delay):
            let (peer, state) = (self.peer, self.state)
            let delayed = bytes
            context.eventLoop.scheduleTask(in: TimeAmount(delay)) {
                state.count(delayed.readableBytes)
                peer.writeAndFlush(delayed, promise: nil)
            }
        case .slice:
            state.count(bytes.readableBytes)
            while let byte = bytes.readSlice(length: 1) {
                peer.writeAndFlush(byte, promise: nil)
            }
        case .throttle(let rate):
            queued.writeBuffer(&bytes)
            startDraining(context: context, rate: rate)
        }
    }

    /// Sends the queue at `rate` bytes per second, in 10 ms steps.
    private func startDraining(context: ChannelHandlerContext, rate: Int) {
        guard draining == nil else { return }
        let perStep = max(1, rate / 100)
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        draining = context.eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(10), delay: .milliseconds(10)) {
            task in
            let forwarder = loopBound.value
            guard let step = forwarder.queued.readSlice(length: min(perStep, forwarder.queued.readableBytes)),
                step.readableBytes > 0
            else {
                task.cancel()
                forwarder.draining = nil
                return
            }
            forwarder.state.count(step.readableBytes)
            forwarder.peer.writeAndFlush(step, promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        draining?.cancel()
        switch mode {
        case .blackHole, .stall:
            break  // the close is swallowed too: the other side learns nothing
        case .delay(let delay):
            let peer = self.peer  // after the bytes delayed before it
            context.eventLoop.scheduleTask(in: TimeAmount(delay)) { peer.close(promise: nil) }
        default:
            peer.close(promise: nil)
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
