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
        /// TCP_USER_TIMEOUT: data stayed unacknowledged too long.
        case timedOut
    }

    let loop: SimulatedEventLoop
    let socket: SimulatedSocket
    let allocator = ByteBufferAllocator()
    private let closePromise: EventLoopPromise<Void>
    private var _pipeline: ChannelPipeline!
    /// Written, not yet taken by the kernel: up to `flushedCount` of them flushed.
    private var pendingWrites: [(ByteBuffer, EventLoopPromise<Void>?)] = []
    private var flushedCount = 0
    private var pendingBytes = 0
    private var isWritableNow = true
    /// NIO's default high and low water marks for a channel's writability.
    private static let writeWater = (high: 64 << 10, low: 32 << 10)
    private var open = true
    private var active = false
    private var readRequested = false
    private var readScheduled = false
    private var connectPromise: EventLoopPromise<Void>?
    private var connectTimer: Scheduled<Void>?
    private var autoRead = true
    private let addresses: (local: SocketAddress?, remote: SocketAddress?)

    init(loop: SimulatedEventLoop, socket: SimulatedSocket, remote: (address: String, port: Int)) {
        precondition(loop.scheduler.isSchedulerThread)
        self.loop = loop
        self.socket = socket
        self.closePromise = loop.makePromise()
        self.addresses = (
            try? SocketAddress(ipAddress: socket.local, port: socket.localPort),
            try? SocketAddress(ipAddress: remote.address, port: remote.port)
        )
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
    var isWritable: Bool { isWritableNow }
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
            if let option = option as? ChannelOptions.Types.SocketOption, option.level == IPPROTO_TCP,
                option.name == TCP_USER_TIMEOUT
            {
                let milliseconds = Int64(value as! SocketOptionValue)
                channel.socket.userTimeout = milliseconds * 1_000_000
            }
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

    /// The kernel has room for more of what was written.
    func writable() {
        loop.execute { self.flushToKernel() }
    }

    // MARK: Connecting

    /// Opens the connection to `address:port`; the promise completes when it is established,
    /// refused, or not answered within `timeout`.
    func connect(to address: String, port: Int, timeout: TimeAmount, promise: EventLoopPromise<Void>) {
        loop.preconditionInEventLoop()
        connectPromise = promise
        connectTimer = loop.scheduleTask(in: timeout) {
            self.failConnect(ChannelError.connectTimeout(timeout))
        }
        socket.dialling(address, port: port)
        socket.network.connect(socket, to: address, port: port)
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
        flushToKernel()
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
            fail(IOError(errnoCode: ECONNRESET, reason: "read(descriptor:pointer:size:)"))
        case .timedOut?:
            fail(IOError(errnoCode: ETIMEDOUT, reason: "read(descriptor:pointer:size:)"))
        case nil:
            break
        }
    }

    private func fail(_ error: any Error) {
        pipeline.syncOperations.fireErrorCaught(error)
        close0(error: error, mode: .all, promise: nil)
    }

    // MARK: Writing

    /// Hands the kernel what was flushed, as far as it has room; each write's promise succeeds
    /// as the kernel takes it (as a socket channel's does once written to the socket).
    private func flushToKernel() {
        guard open, active else { return }
        var taken: [ByteBuffer] = []
        var room = socket.unsentRoom
        while flushedCount > 0, room > 0 {
            var (buffer, promise) = pendingWrites[0]
            if buffer.readableBytes > room {
                taken.append(buffer.readSlice(length: room)!)
                pendingWrites[0].0 = buffer
                pendingBytes -= room
                room = 0
                break
            }
            room -= buffer.readableBytes
            pendingBytes -= buffer.readableBytes
            taken.append(buffer)
            pendingWrites.removeFirst()
            flushedCount -= 1
            promise?.succeed(())
        }
        if !taken.isEmpty {
            var bytes = allocator.buffer(capacity: taken.reduce(0) { $0 + $1.readableBytes })
            for buffer in taken { bytes.writeImmutableBuffer(buffer) }
            // A system call: the kernel (on this same thread) takes it now.
            socket.write(bytes)
        }
        updateWritability()
    }

    private func updateWritability() {
        if isWritableNow, pendingBytes > Self.writeWater.high {
            isWritableNow = false
            pipeline.syncOperations.fireChannelWritabilityChanged()
        } else if !isWritableNow, pendingBytes < Self.writeWater.low {
            isWritableNow = true
            pipeline.syncOperations.fireChannelWritabilityChanged()
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
        let buffer = unwrapData(data, as: ByteBuffer.self)
        pendingWrites.append((buffer, promise))
        pendingBytes += buffer.readableBytes
    }

    func flush0() {
        flushedCount = pendingWrites.count
        flushToKernel()
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
        flushedCount = 0
        pendingBytes = 0
        for (_, promise) in writes { promise?.fail(error) }
        socket.close()
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
            outOfOrderSegments: reading.outOfOrder,
            retransmittedSegments: reading.retransmitted,
            sinceHeard: .nanoseconds(reading.sinceHeard),
            sinceDataArrived: .nanoseconds(reading.sinceDataArrived),
            unacknowledgedSegments: reading.unacknowledged,
            recoveringLoss: reading.recovering
        )
    }
}
