import Glibc
import MultipeerCore
import MultipeerSession
import NIOCore

/// A process's side of a simulated TCP connection: a NIO channel on its host's
/// ``SimulatedEventLoop`` over a ``SimulatedSocket``. The link pipeline runs on it exactly as on
/// a socket channel: reads only when a read is asked for (so the handlers' backpressure holds),
/// as many as four buffers of at most 64 KiB a turn, then a read-complete; EOF and resets close
/// it as NIO's socket channels do.
///
/// Touched only on its event loop (which is on the world's thread), but for the world's
/// notifications, which hop onto it.
final class SimulatedChannel: Channel, ChannelCore, @unchecked Sendable {
    /// How a connection ended, as its reader learns.
    enum Ending {
        case finished
        case reset
    }

    let loop: SimulatedEventLoop
    let socket: SimulatedSocket
    let allocator = ByteBufferAllocator()
    private let closePromise: EventLoopPromise<Void>
    private var _pipeline: ChannelPipeline!
    private var pendingWrites: [(ByteBuffer, EventLoopPromise<Void>?)] = []
    private var flushedCount = 0
    private var open = true
    private var active = false
    private var readRequested = false
    private var readScheduled = false
    private var connectPromise: EventLoopPromise<Void>?
    private var connectTimer: Scheduled<Void>?
    private var autoRead = true
    private let addresses: (local: SocketAddress?, remote: SocketAddress?)

    init(loop: SimulatedEventLoop, socket: SimulatedSocket, remote: (address: String, port: Int)) {
        self.loop = loop
        self.socket = socket
        self.closePromise = loop.makePromise()
        self.addresses = (
            try? SocketAddress(ipAddress: socket.local, port: socket.localPort),
            try? SocketAddress(ipAddress: remote.address, port: remote.port))
        self._pipeline = ChannelPipeline(channel: self)
        socket.channel = self
    }

    // MARK: Channel

    var eventLoop: any EventLoop { loop }
    var pipeline: ChannelPipeline { _pipeline }
    var closeFuture: EventLoopFuture<Void> { closePromise.futureResult }
    var localAddress: SocketAddress? { addresses.local }
    var remoteAddress: SocketAddress? { addresses.remote }
    var parent: (any Channel)? { nil }
    var isWritable: Bool { true }
    var isActive: Bool { active }
    var _channelCore: any ChannelCore { self }

    func setOption<Option: ChannelOption>(_ option: Option, value: Option.Value) -> EventLoopFuture<Void> {
        loop.makeCompletedFuture { try Options(channel: self).setOption(option, value: value) }
    }

    func getOption<Option: ChannelOption>(_ option: Option) -> EventLoopFuture<Option.Value> {
        loop.makeCompletedFuture { try Options(channel: self).getOption(option) }
    }

    var syncOptions: (any NIOSynchronousChannelOptions)? { Options(channel: self) }

    /// Socket options mean nothing here but auto-read; the rest are taken and ignored.
    private struct Options: NIOSynchronousChannelOptions {
        let channel: SimulatedChannel

        func setOption<Option: ChannelOption>(_ option: Option, value: Option.Value) throws {
            if option is ChannelOptions.Types.AutoReadOption { channel.autoRead = value as! Bool }
        }

        func getOption<Option: ChannelOption>(_ option: Option) throws -> Option.Value {
            if option is ChannelOptions.Types.AutoReadOption { return channel.autoRead as! Option.Value }
            throw ChannelError.operationUnsupported
        }
    }

    // MARK: From the world (any job): each hops onto the channel's loop

    /// Something arrived to read, or the connection ended.
    func readable() {
        loop.execute { self.readIfPossible() }
    }

    func connected() {
        loop.execute { self.becomeActive() }
    }

    func connectFailed(_ error: any Error) {
        loop.execute { self.failConnect(error) }
    }

    // MARK: Connecting

    /// Opens the connection to `address:port`; the promise completes when it is established,
    /// refused, or not answered within `timeout`.
    func connect(to address: String, port: Int, timeout: TimeAmount, promise: EventLoopPromise<Void>) {
        loop.preconditionInEventLoop()
        connectPromise = promise
        connectTimer = loop.scheduleTask(in: timeout) {
            self.socket.state = .closed
            self.failConnect(ChannelError.connectTimeout(timeout))
        }
        socket.network.scheduler.enqueue(nil) { self.socket.network.connect(self.socket, to: address, port: port) }
    }

    private func becomeActive() {
        guard open, !active else { return }
        connectTimer?.cancel()
        connectTimer = nil
        active = true
        connectPromise?.succeed(())
        connectPromise = nil
        pipeline.syncOperations.fireChannelActive()
        if autoRead { pipeline.syncOperations.read() }
    }

    private func failConnect(_ error: any Error) {
        guard let promise = connectPromise else { return }
        connectPromise = nil
        connectTimer?.cancel()
        connectTimer = nil
        promise.fail(error)
        close0(error: error, mode: .all, promise: nil)
    }

    /// An accepted connection: registered and active at once.
    func accepted() {
        loop.preconditionInEventLoop()
        register0(promise: nil)
        becomeActive()
    }

    // MARK: Reading

    private func readIfPossible() {
        guard open, active, readRequested else { return }
        var reads = 0
        while reads < 4, let buffer = socket.read(limit: 64 * 1_024) {
            reads += 1
            readRequested = false
            pipeline.syncOperations.fireChannelRead(NIOAny(buffer))
            guard open else { return }
        }
        if reads > 0 {
            pipeline.syncOperations.fireChannelReadComplete()
            guard open else { return }
            if autoRead { pipeline.syncOperations.read() }
            return
        }
        switch socket.ending {
        case .finished?:
            close0(error: ChannelError.eof, mode: .all, promise: nil)
        case .reset?:
            let error = IOError(errnoCode: ECONNRESET, reason: "read(descriptor:pointer:size:)")
            pipeline.syncOperations.fireErrorCaught(error)
            close0(error: error, mode: .all, promise: nil)
        case nil:
            break
        }
    }

    // MARK: ChannelCore

    func localAddress0() throws -> SocketAddress {
        guard let local = addresses.local else { throw ChannelError.operationUnsupported }
        return local
    }

    func remoteAddress0() throws -> SocketAddress {
        guard let remote = addresses.remote else { throw ChannelError.operationUnsupported }
        return remote
    }

    func register0(promise: EventLoopPromise<Void>?) {
        promise?.succeed(())
        pipeline.syncOperations.fireChannelRegistered()
    }

    func registerAlreadyConfigured0(promise: EventLoopPromise<Void>?) {
        register0(promise: promise)
    }

    func bind0(to: SocketAddress, promise: EventLoopPromise<Void>?) {
        promise?.fail(ChannelError.operationUnsupported)
    }

    func connect0(to: SocketAddress, promise: EventLoopPromise<Void>?) {
        promise?.fail(ChannelError.operationUnsupported)
    }

    func write0(_ data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard open else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        pendingWrites.append((unwrapData(data, as: ByteBuffer.self), promise))
    }

    func flush0() {
        guard open else { return }
        let writes = pendingWrites
        pendingWrites.removeAll()
        guard !writes.isEmpty else { return }
        var bytes = allocator.buffer(capacity: writes.reduce(0) { $0 + $1.0.readableBytes })
        for (buffer, _) in writes { bytes.writeImmutableBuffer(buffer) }
        let socket = self.socket
        socket.network.scheduler.enqueue(nil) { socket.send(bytes) }
        for (_, promise) in writes { promise?.succeed(()) }
    }

    func read0() {
        guard open else { return }
        readRequested = true
        guard !readScheduled else { return }
        readScheduled = true
        loop.execute {
            self.readScheduled = false
            self.readIfPossible()
        }
    }

    func close0(error: any Error, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard open else {
            promise?.fail(ChannelError.alreadyClosed)
            return
        }
        open = false
        let wasActive = active
        active = false
        let writes = pendingWrites
        pendingWrites.removeAll()
        for (_, promise) in writes { promise?.fail(error) }
        let socket = self.socket
        socket.network.scheduler.enqueue(nil) { socket.close() }
        promise?.succeed(())
        if let connectPromise {
            self.connectPromise = nil
            connectPromise.fail(error)
        }
        if wasActive { pipeline.syncOperations.fireChannelInactive() }
        pipeline.syncOperations.fireChannelUnregistered()
        loop.execute {
            self.removeHandlers(pipeline: self.pipeline)
            self.closePromise.succeed(())
        }
    }

    func triggerUserOutboundEvent0(_ event: Any, promise: EventLoopPromise<Void>?) {
        promise?.fail(ChannelError.operationUnsupported)
    }

    func channelRead0(_ data: NIOAny) {}

    func errorCaught0(error: any Error) {}
}

extension SimulatedChannel: TransportInformation {
    func transportReading() -> TransportReading? {
        let reading = socket.transportReading()
        return TransportReading(
            outOfOrderSegments: 0, retransmittedSegments: 0, sinceHeard: .nanoseconds(reading.sinceHeard),
            sinceDataArrived: .nanoseconds(reading.sinceDataArrived), unacknowledgedSegments: reading.unacknowledged,
            recoveringLoss: false)
    }
}
