import Glibc
package import MultipeerCore
package import MultipeerTLS
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

import struct Foundation.UUID

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
    /// What carries the links: TCP (``SocketTransport``) but in a simulation.
    package var transport: any LinkTransport = SocketTransport()
    /// Where DATA goes: a session's receive windows and subscriptions. Nil for bare links
    /// (tests, benchmarks), whose DATA goes to the channel's reader like every other message.
    var inbox: Inbox?

    package init(
        tls: TLSContext,
        identity: PeerIdentity,
        localHello: Hello,
        maximumFrameLength: Int = Frame.defaultMaximumLength,
        tcpUserTimeout: Duration? = nil
    ) {
        precondition(localHello.key == identity.key, "a HELLO is signed by the identity it names")
        self.tls = tls
        self.identity = identity
        self.localHello = localHello
        self.maximumFrameLength = maximumFrameLength
        self.tcpUserTimeout = tcpUserTimeout
    }

    /// Installs a link's pipeline on a fresh channel: the one place a link is put together.
    /// Runs on its event loop. From the socket up:
    ///
    /// 1. ``FirstBytesDeadline`` (a dial, and inbound connections): the other end says something
    ///    soon, or the connection closes; it leaves at the first bytes.
    /// 2. ``InboundActivityHandler``: bytes arrived, whatever they turn out to be (the keepalive's
    ///    evidence, even in the middle of a large frame).
    /// 3. `TLSHandler` (MultipeerTLS): TLS 1.3 with the group's key; ciphertext below, plaintext
    ///    above, and the exporter value HELLO signs.
    /// 4. `FrameDecoder`: bytes to TLV frames, the first one no larger than a HELLO.
    /// 5. ``LinkHandler``: the HELLO exchange (``LinkStateMachine``), then frames to
    ///    ``LinkMessage``s and back.
    /// 6. ``KeepaliveHandler``: PING, PONG and FLOW, and a silent link's end.
    /// 7. ``DeliveryHandler`` (a session's links; ``LinkDeliveryStateMachine`` decides): DATA and
    ///    FRAGMENT to the application's streams, files' and streams' frames to their owners, this
    ///    side's ACKs and FLOW, the peer's resume point up and its later ACKs to the sender's
    ///    ``PeerDelivery``.
    ///
    /// 8. ``LinkReporter`` (a session's links): the peer's resume point, REJECT and the link's
    ///    end, to the session's run loop.
    ///
    /// A session writes into the pipeline itself: its data frames through the link's one
    /// ``LinkWriter`` (each peer's ``PeerDelivery``, streams, files; a stream's OPEN, WANT and END
    /// go in its turns, in order with its bytes), its control frames at once (a GOODBYE or REJECT
    /// from the actor, the offers, grants and ends of files, the answers about streams this side
    /// does not have). A bare link (tests, benchmarks) has a `NIOAsyncChannel` on top instead of
    /// 7 and 8, which its owner reads and writes.
    /// - Parameters:
    ///   - keyIdentity: For a dialler, the group key it offers (nil: the newest).
    ///   - expectedPeer: For a dialler, the peer discovery placed at the address, if it said.
    ///   - firstBytesTimeout: How soon the other end must send something: for a listener, the
    ///     connection's ClientHello; for a dialler, the answer to its own.
    func configure(
        _ channel: any Channel,
        role: TLSEngine.Role,
        offering keyIdentity: String? = nil,
        expecting expectedPeer: UUID? = nil,
        firstBytesTimeout: Duration? = nil
    ) throws -> PendingLink {
        let engine = try TLSEngine(role: role, context: tls, allocator: channel.allocator, offering: keyIdentity)
        // The message types a session's application reads, as they stand now.
        var hello = localHello
        // (A HELLO lists them, or says every type: the types refused since go in a TYPES after it.)
        if let inbox { hello.reads = inbox.subscriptions.reads.helloList }
        let link = LinkHandler(
            localHello: hello,
            identity: identity,
            side: role == .client ? .dialler : .listener,
            expectedPeer: expectedPeer,
            handshakeTimeout: tls.configuration.handshakeTimeout,
            eventLoop: channel.eventLoop
        )
        let quality = LinkQualityBox()
        let keepalive = KeepaliveHandler(
            local: localHello.keepalive,
            role: role == .client ? .leading : .following,
            quality: quality,
            tcpUserTimeout: tcpUserTimeout,
            paths: paths,
            metrics: inbox?.metrics
        )
        let handlers = channel.pipeline.syncOperations
        // Linux before 6.15 has no such option: its TCP then backs off as it always did.
        try? channel.syncOptions?.setOption(LinkConfiguration.maximumRetransmissionTimeout, value: 1_000)
        try channel.syncOptions?.setOption(
            LinkConfiguration.unsentBytesLowWater,
            value: SocketOptionValue(DataMessage.fragmentLength)
        )
        if let firstBytesTimeout { try handlers.addHandler(FirstBytesDeadline(firstBytesTimeout, role: role)) }
        try handlers.addHandler(InboundActivityHandler(keepalive: keepalive))
        try handlers.addHandler(TLSHandler(engine: engine))
        try handlers.addHandler(
            ByteToMessageHandler(
                FrameDecoder(maximumLength: maximumFrameLength, firstFrameMaximumLength: Hello.maximumLength)
            )
        )
        try handlers.addHandler(link)
        try handlers.addHandler(keepalive)
        let tail: LinkTail
        if let inbox {
            try handlers.addHandler(DeliveryHandler(inbox: inbox))
            let reporter = LinkReporter()
            try handlers.addHandler(reporter)
            tail = .session(LinkReports(reporter, eventLoop: channel.eventLoop))
        } else {
            let asyncChannel = try NIOAsyncChannel<LinkMessage, LinkMessage>(wrappingChannelSynchronously: channel)
            // Nothing can fail from here on, and the close callback runs on this event loop, after
            // this: an async channel nobody claims is always finished.
            let claim = LinkClaim(asyncChannel)
            channel.closeFuture.whenComplete { _ in claim.closeIfAbandoned() }
            tail = .bare(asyncChannel, claim)
        }
        return PendingLink(
            channel: channel,
            tail: tail,
            hello: link.hello,
            remoteAddress: channel.remoteAddress,
            quality: quality,
            announced: MessageTypesRead(hello: hello.reads)
        )
    }

    /// Where the links run: a session's on its own event loop (``Inbox/executor``), a bare
    /// link's on any loop of NIO's shared group.
    var eventLoopGroup: any EventLoopGroup {
        inbox?.executor.eventLoop ?? MultiThreadedEventLoopGroup.singleton
    }

    var transportOptions: TransportOptions {
        TransportOptions(userTimeout: tcpUserTimeout)
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
        (
            ChannelOptions.tcpOption(NIOBSDSocket.Option(rawValue: TCP_USER_TIMEOUT)),
            SocketOptionValue(timeout.nanoseconds / 1_000_000)
        )
    }
}
