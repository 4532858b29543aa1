package import struct Foundation.UUID
import Glibc
import NIOConcurrencyHelpers
package import MultipeerCore
package import MultipeerTLS
package import NIOCore
import NIOPosix

/// What a listener or dialer needs to set up links: the TLS credentials, this peer's HELLO
/// and the limits.
package struct LinkConfiguration: Sendable {
    package var tls: TLSContext
    package var localHello: Hello
    /// Signs ``localHello`` on every link: the key of its peer ID.
    package var identity: PeerIdentity
    /// The largest frame value accepted; larger frames close the link with `frameTooLarge`.
    package var maximumFrameLength: Int
    /// Sets TCP_USER_TIMEOUT: unacknowledged data older than this fails the connection. Nil: the kernel's default.
    package var tcpUserTimeout: Duration?
    /// What the links of one session remember of the paths to each peer (``PathMemory``).
    package var paths = PathMemory()
    /// Where DATA goes: a session's receive windows and subscriptions. Nil for bare links
    /// (tests, benchmarks), whose DATA goes to the channel's reader like every other message.
    var inbox: Inbox?

    package init(
        tls: TLSContext, identity: PeerIdentity, localHello: Hello, maximumFrameLength: Int = Frame.defaultMaximumLength,
        tcpUserTimeout: Duration? = nil
    ) {
        precondition(localHello.key == identity.key, "a HELLO is signed by the identity it names")
        self.tls = tls
        self.identity = identity
        self.localHello = localHello
        self.maximumFrameLength = maximumFrameLength
        self.tcpUserTimeout = tcpUserTimeout
    }

    /// Installs TLS, framing and the HELLO exchange on a fresh channel. Runs on its event loop.
    /// - Parameters:
    ///   - keyIdentity: For a dialler, the group key it offers (nil: the newest).
    ///   - expectedPeer: For a dialler, the peer discovery placed at the address, if it said.
    ///   - firstBytesTimeout: How soon the other end must send something: for a listener, the
    ///     connection's ClientHello; for a dialler, the answer to its own.
    func configure(
        _ channel: any Channel, role: TLSEngine.Role, offering keyIdentity: String? = nil, expecting expectedPeer: UUID? = nil,
        firstBytesTimeout: Duration? = nil
    ) throws -> PendingLink {
        let engine = try TLSEngine(role: role, context: tls, allocator: channel.allocator, offering: keyIdentity)
        let link = LinkHandler(
            localHello: localHello, identity: identity, side: role == .client ? .dialler : .listener, expectedPeer: expectedPeer,
            handshakeTimeout: tls.configuration.handshakeTimeout, eventLoop: channel.eventLoop)
        let quality = LinkQualityBox()
        let keepalive = KeepaliveHandler(
            local: localHello.keepalive, role: role == .client ? .leading : .following, quality: quality, tcpUserTimeout: tcpUserTimeout,
            paths: paths)
        let handlers = channel.pipeline.syncOperations
        // Linux before 6.15 has no such option: its TCP then backs off as it always did.
        try? channel.syncOptions?.setOption(LinkConfiguration.maximumRetransmissionTimeout, value: 1_000)
        try channel.syncOptions?.setOption(LinkConfiguration.unsentBytesLowWater, value: SocketOptionValue(DataMessage.fragmentLength))
        if let firstBytesTimeout { try handlers.addHandler(FirstBytesDeadline(firstBytesTimeout, role: role)) }
        try handlers.addHandler(InboundActivityHandler(keepalive: keepalive))
        try handlers.addHandler(TLSHandler(engine: engine))
        try handlers.addHandler(ByteToMessageHandler(FrameDecoder(maximumLength: maximumFrameLength, firstFrameMaximumLength: Hello.maximumLength)))
        try handlers.addHandler(link)
        try handlers.addHandler(keepalive)
        if let inbox { try handlers.addHandler(DeliveryHandler(inbox: inbox)) }
        let asyncChannel = try NIOAsyncChannel<LinkMessage, LinkMessage>(wrappingChannelSynchronously: channel)
        // Nothing can fail from here on, and the close callback runs on this event loop, after
        // this: an async channel nobody claims is always finished.
        let claim = LinkClaim(asyncChannel)
        channel.closeFuture.whenComplete { _ in claim.closeIfAbandoned() }
        return PendingLink(channel: asyncChannel, hello: link.hello, remoteAddress: channel.remoteAddress, quality: quality, claim: claim)
    }

    var tcpUserTimeoutOption: (ChannelOptions.Types.SocketOption, SocketOptionValue)? {
        tcpUserTimeout.map(Self.tcpUserTimeoutOption)
    }

    /// TCP_THIN_LINEAR_TIMEOUTS: while few segments are in flight (a link carrying PINGs and
    /// small messages), a lost one is retransmitted at a steady RTO instead of doubling it six
    /// times over, so a lossy path stalls for a few round trips, not for seconds.
    static let thinLinearTimeouts = ChannelOptions.tcpOption(NIOBSDSocket.Option(rawValue: TCP_THIN_LINEAR_TIMEOUTS))

    /// TCP_NOTSENT_LOWAT, set to a fragment's length (256 KiB): the kernel takes no more than
    /// that beyond what it has sent, and the link's batches wait for room in the outbox, where
    /// a small message sent later goes ahead of a large message's remaining fragments. Without
    /// it the socket took up to 4 MB of fragments ahead of the small message on loopback (its
    /// p99 beside 64 MiB messages: about 5 ms; with it, 2.6-3 ms). It bounds only bytes not yet
    /// sent: the bytes in flight are still the congestion window's, so a long or fast path is
    /// not slowed.
    static let unsentBytesLowWater = ChannelOptions.tcpOption(NIOBSDSocket.Option(rawValue: TCP_NOTSENT_LOWAT))

    /// TCP_RTO_MAX_MS (Linux 6.15, not yet in this system's headers), in milliseconds: TCP
    /// retransmits a lost segment at least this often instead of doubling its wait up to two
    /// minutes. At 30 % loss both ends of a link otherwise back off together and the link falls
    /// silent both ways for five seconds and more. 1 s is the least Linux takes.
    static let maximumRetransmissionTimeout = ChannelOptions.tcpOption(NIOBSDSocket.Option(rawValue: 44))

    /// TCP_USER_TIMEOUT of `timeout` (zero: the kernel's default, about 15 minutes).
    static func tcpUserTimeoutOption(_ timeout: Duration) -> (ChannelOptions.Types.SocketOption, SocketOptionValue) {
        (ChannelOptions.tcpOption(NIOBSDSocket.Option(rawValue: TCP_USER_TIMEOUT)), SocketOptionValue(timeout.nanoseconds / 1_000_000))
    }
}

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
        let message = role == .server
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

/// A connection whose TLS and HELLO exchange are still under way.
struct PendingLink: Sendable {
    var channel: NIOAsyncChannel<LinkMessage, LinkMessage>
    var hello: EventLoopFuture<Hello>
    var remoteAddress: SocketAddress?
    var quality: LinkQualityBox
    var claim: LinkClaim

    /// Waits for the handshake and returns the ready link.
    func established() async throws -> PeerConnection {
        claim.claim()
        let hello: Hello
        do {
            hello = try await self.hello.get()
        } catch {
            // Nobody will use the async channel: finish its writer and close it.
            try? await channel.executeThenClose { _, _ in }
            guard error is MultipeerError else {
                // A socket error (a reset, say): the connection ended before the handshake did.
                let peer = remoteAddress.map { "the peer at \($0.displayString)" } ?? "the peer"
                throw MultipeerError(
                    .closedDuringHandshake, "the connection with \(peer) ended during the handshake", underlying: socketErrorReason(error))
            }
            throw error
        }
        return PeerConnection(remoteHello: hello, remoteAddress: remoteAddress, channel: channel, quality: quality)
    }
}

/// One authenticated, HELLO-complete link to a peer: typed messages in and out, with
/// backpressure both ways (NIOAsyncChannel). Use ``channel`` with `executeThenClose`.
package struct PeerConnection: Sendable {
    /// The peer's HELLO: its UUID, incarnation, name and keepalive wishes.
    package let remoteHello: Hello
    package let remoteAddress: SocketAddress?
    package let channel: NIOAsyncChannel<LinkMessage, LinkMessage>
    /// Round trips, loss and traffic, kept up to date by the link's keepalive.
    let quality: LinkQualityBox

    /// Runs tasks on this link's event loop. Tasks that read or write the link should prefer it
    /// (`withTaskExecutorPreference(link.executor)`): each message then stays on one thread,
    /// saving a thread wake-up per message each way (Benchmarks/README.md has the figures).
    package var executor: EventLoopExecutor { EventLoopExecutor(channel.channel.eventLoop) }

    /// Dials `host:port`, runs TLS and the HELLO exchange, and returns the link once both are done.
    ///
    /// - Parameters:
    ///   - keyIdentity: The group key to offer (nil: the newest).
    ///   - expectedPeer: The peer discovery placed at this address: a HELLO proving another is
    ///     refused (`unexpectedPeer`). Nil for an address given without a peer (a static one).
    package static func dial(
        host: String, port: Int, configuration: LinkConfiguration, offering keyIdentity: String? = nil, expecting expectedPeer: UUID? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> PeerConnection {
        try await connect(
            host: host, port: port, configuration: configuration, offering: keyIdentity, expecting: expectedPeer, group: group
        ).established()
    }

    /// How long a TCP connection may take to be accepted: 30 % of the handshake timeout, 1.5 s
    /// by default: long enough for one lost SYN to be sent again (after 1 s), short enough that a
    /// stale address (a host renumbered, its old address answering nobody) does not hold a dial
    /// for the 3 s ARP takes to give up.
    static func connectTimeout(_ configuration: LinkConfiguration) -> Duration {
        configuration.tls.configuration.handshakeTimeout * 3 / 10
    }

    /// Opens the TCP connection to `host:port` and starts TLS and the HELLO exchange on it;
    /// ``PendingLink/established()`` waits for them. With `answerTimeout`, the other end must
    /// answer that soon after accepting the connection.
    static func connect(
        host: String, port: Int, configuration: LinkConfiguration, offering keyIdentity: String?, expecting expectedPeer: UUID?,
        answerTimeout: Duration? = nil, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> PendingLink {
        var bootstrap = ClientBootstrap(group: group)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelOption(LinkConfiguration.thinLinearTimeouts, value: 1)
            .connectTimeout(TimeAmount(Self.connectTimeout(configuration)))
        if let (option, value) = configuration.tcpUserTimeoutOption {
            bootstrap = bootstrap.channelOption(option, value: value)
        }
        do {
            return try await bootstrap.connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try configuration.configure(channel, role: .client, offering: keyIdentity, expecting: expectedPeer, firstBytesTimeout: answerTimeout)
                }
            }
        } catch let error as MultipeerError {
            throw error
        } catch {
            throw MultipeerError(.connectionFailed, "cannot connect to \(host):\(port)", underlying: socketErrorReason(error))
        }
    }
}

/// The system's words for why a socket operation failed ("Connection refused", "Address
/// already in use"), rather than NIO's nested description.
func socketErrorReason(_ error: any Error) -> String {
    if let error = error as? NIOConnectionError {
        if let failure = error.connectionErrors.first { return socketErrorReason(failure.error) }
        if let dns = error.dnsAAAAError ?? error.dnsAError { return "name lookup failed: \(dns)" }
    }
    if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
    return "\(error)"
}

/// A link's async channel, held until its owner claims it. NIO can drop a link that its
/// initializer made before anyone sees it (a listener closed, or a connect cancelled, while the
/// connection was being set up); an async channel dropped that way, unfinished, traps when the
/// connection becomes active. Held here instead, it is finished and closed when the connection
/// closes, unless its owner claimed it.
final class LinkClaim: Sendable {
    private let unclaimed: NIOLockedValueBox<NIOAsyncChannel<LinkMessage, LinkMessage>?>

    init(_ channel: NIOAsyncChannel<LinkMessage, LinkMessage>) {
        unclaimed = NIOLockedValueBox(channel)
    }

    /// The owner has the link now and will close it (executeThenClose).
    func claim() {
        _ = unclaimed.withLockedValue { $0.take() }
    }

    /// The connection closed: finishes the link if nobody claimed it (from then on nobody can).
    func closeIfAbandoned() {
        guard let abandoned = unclaimed.withLockedValue({ $0.take() }) else { return }
        // Async by NIO's design; a closed channel makes it quick, and nothing waits for it.
        Task { try? await abandoned.executeThenClose { _, _ in } }
    }
}
