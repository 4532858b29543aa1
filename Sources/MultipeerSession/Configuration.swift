public import Logging
public import MultipeerCore
public import MultipeerTLS

public import struct Foundation.URL

/// Who this peer is, as others see it: in the DNS-SD TXT record and in HELLO.
public struct PeerInfo: Hashable, Sendable {
    /// A name for people, at most 250 bytes of UTF-8.
    public var displayName: String
    /// Application entries, each `key=value` at most 255 bytes, at most 32 of them.
    public var metadata: [String: String]

    /// A name and metadata, checked against their limits when the session starts.
    public init(displayName: String, metadata: [String: String] = [:]) {
        self.displayName = displayName
        self.metadata = metadata
    }
}

extension MultipeerSession {
    /// Everything a session needs; each section has safe defaults.
    public struct Configuration: Sendable {
        /// The DNS-SD service type naming the group's network, e.g. `_navlog._tcp`: `_name._tcp`,
        /// the name at most 15 letters, digits and hyphens. Checked when the session runs, with
        /// static peers too (``run()`` throws `invalidArgument`).
        public var serviceType: String
        /// This peer's name and metadata.
        public var peer: PeerInfo
        /// The group keys: links are accepted with any, dialled with the newest first. Peers
        /// holding none of them never become active. ``MultipeerSession/updateKeys(_:)`` changes
        /// them while the session runs.
        public var keys: KeyRing
        /// The group key, when there is one (``keys`` holds it alone); reading gives the newest.
        public var psk: PreSharedKey {
            get { keys.newest }
            set { keys = KeyRing(newValue) }
        }
        /// The members admitted, by key or peer ID; nil (the default) admits any holder of the
        /// group key. ``MultipeerSession/updateRoster(_:)`` changes it while the session runs.
        public var roster: Roster?
        /// The TCP port to listen on; 0 (the default) lets the system choose. The session keeps
        /// the port it listens on across ``MultipeerSession/suspend()`` and
        /// ``MultipeerSession/resume()`` (unless something took it meanwhile:
        /// ``SessionEvent/listenFailed(port:_:)``), so peers that dial it by address find it again;
        /// a new session on port 0 gets a new port, so give peers that dial by address a fixed one.
        public var port: Int
        /// How peers are found: Avahi (the default) or a fixed list.
        public var discovery: Discovery
        /// Bounds on what peers and the application may make the session hold, and timeouts.
        public var limits: Limits
        /// How often an idle link is pinged, and how long silence may last. Announced in HELLO;
        /// both sides use the stricter pair. Defaults 500 ms and 1.5 s.
        public var keepalive: KeepaliveParameters
        /// When a lost peer is dialled again: 100 ms at first, growing by 1.6 to at most 10 s.
        public var reconnect: ReconnectParameters
        /// How often a ``SessionEvent/stats(_:_:)`` event reports each active peer's link; nil for never. Default 5 s.
        public var statsInterval: Duration?
        /// Where the session logs, with `multipeer.*` metadata keys: by default the logger of
        /// the task that makes the configuration (`Logger.current`: the one an enclosing
        /// `withLogger` gave, as swift-service-lifecycle's `ServiceGroup` does, else the process's
        /// bootstrapped default). Connection events and the session's decisions are `debug`;
        /// what only a log can say is `info`; a `warning` is said once (see "Observing a Session").
        public var logger: Logger
        /// How messages are encoded, unless their type says (``MultipeerMessage/wireEncoding``):
        /// `MessageEncoding.binary` (the default: CBOR, smaller and faster to write and read) or
        /// `MessageEncoding.json` (readable in a capture, for protocols specified in JSON, and
        /// for peers of a release before the binary encoding, which read JSON only). Messages of
        /// either encoding are received.
        public var messageEncoding = MessageEncoding.binary
        /// The message types this peer's application reads (subscribes to with
        /// ``MultipeerSession/messages(of:)``), its own and its peers' alike, declared so that a
        /// peer running another build never stalls it. Empty (the default): every type is read.
        ///
        /// When you declare them, the session tells each peer in HELLO which types it reads, and
        /// tells them again as the application subscribes to a type not declared. A peer of this
        /// release or later then sends it no other type: its `send` throws `messageTypeNotRead`,
        /// and its `broadcast` skips this peer
        /// (``SessionEvent/broadcastSkipped(to:typeName:_:)``). A message of another type from a
        /// peer of an earlier release is refused as it arrives (its sender is told with REJECT,
        /// and this application with ``SessionEvent/messageNotRead(typeName:from:)``), never held.
        /// Messages of a declared type that arrive before anything subscribes to it (a program
        /// starting) are held for the first subscriber, within ``Limits/unsubscribedMessages``,
        /// and never refused: a full hold stops the links that bring more, as a full stream does.
        ///
        /// Without a declaration, the session cannot tell "not yet subscribed" from "never
        /// read": it holds a type nothing subscribes to within ``Limits/unsubscribedMessages``
        /// and ``Limits/maximumUnsubscribedTypes``, never stopping a link for it, refuses what
        /// comes beyond (its sender is told), and tells its peers of this release, which stop
        /// sending the type until the application subscribes to it. So a type nobody reads never
        /// holds up those that are read, with or without a declaration. Declare the types when
        /// more of a type than the bound may come before your application subscribes to it, or
        /// when peers may run other builds (a fleet upgrading one device at a time):
        ///
        /// ```swift
        /// struct Waypoint: Codable, Sendable { var name: String }
        /// struct Remark: Codable, Sendable { var text: String }
        ///
        /// func configure(_ configuration: inout MultipeerSession.Configuration) {
        ///     configuration.messageTypes = [Waypoint.self, Remark.self]
        /// }
        /// ```
        ///
        /// Each type travels under its ``MultipeerSession/wireName(of:)``. The names together
        /// take at most 6,144 bytes in HELLO (about 200 names of 30 bytes): a session declared
        /// with more fails to start (`invalidArgument`); a subscription beyond them makes the
        /// session read every type from then on.
        public var messageTypes: [any (Decodable & SendableMetatype).Type] = []
        /// Where files peers send arrive (``MultipeerSession/incomingResources``); nil (the
        /// default) refuses them (the sender's transfer fails with `resourceRefused`). Made if it
        /// is not there. Each file is written under a temporary name in its
        /// `.multipeer-resources` folder and moved into the directory only whole, with its
        /// SHA-256 checked; keep the directory across restarts for transfers to resume there.
        public var resourceDirectory: URL?
        /// How long a partial file in the ``resourceDirectory`` is kept with nothing written to
        /// it (its sender did not come back to finish it) before the session removes it, when
        /// it starts; 7 days by default. A transfer resumed within that goes on from what was
        /// written.
        public var partialResourceLifetime: Duration = .seconds(7 * 86_400)

        /// A configuration of one group key, with the defaults of every section not given.
        public init(
            serviceType: String,
            peer: PeerInfo,
            psk: PreSharedKey,
            roster: Roster? = nil,
            port: Int = 0,
            discovery: Discovery = .avahi(),
            limits: Limits = Limits(),
            keepalive: KeepaliveParameters = KeepaliveParameters(),
            reconnect: ReconnectParameters = ReconnectParameters(),
            statsInterval: Duration? = .seconds(5),
            logger: Logger = .current
        ) {
            self.init(
                serviceType: serviceType,
                peer: peer,
                keys: KeyRing(psk),
                roster: roster,
                port: port,
                discovery: discovery,
                limits: limits,
                keepalive: keepalive,
                reconnect: reconnect,
                statsInterval: statsInterval,
                logger: logger
            )
        }

        /// A configuration of several group keys (a key file of more than one, read with
        /// `KeyRing(contentsOfFile:)` while the group rotates its key), with the defaults of
        /// every section not given.
        public init(
            serviceType: String,
            peer: PeerInfo,
            keys: KeyRing,
            roster: Roster? = nil,
            port: Int = 0,
            discovery: Discovery = .avahi(),
            limits: Limits = Limits(),
            keepalive: KeepaliveParameters = KeepaliveParameters(),
            reconnect: ReconnectParameters = ReconnectParameters(),
            statsInterval: Duration? = .seconds(5),
            logger: Logger = .current
        ) {
            self.serviceType = serviceType
            self.peer = peer
            self.keys = keys
            self.roster = roster
            self.port = port
            self.discovery = discovery
            self.limits = limits
            self.keepalive = keepalive
            self.reconnect = reconnect
            self.statsInterval = statsInterval
            self.logger = logger
        }
    }

    /// How a session finds its peers.
    public enum Discovery: Sendable {
        /// DNS-SD through the system's avahi-daemon: advertise this peer and browse for others.
        /// With `waitForDaemon`, a session started before the daemon, or before the D-Bus system
        /// bus it talks over (a machine still booting), waits for both instead of failing: it
        /// looks for the bus every second, and advertises and browses once the daemon is there.
        case avahi(waitForDaemon: Bool = false)
        /// Dial these `host:port` endpoints and advertise nothing, for networks without multicast.
        case staticPeers([String])
    }

    /// Bounds on what a peer may make this session hold.
    public struct Limits: Sendable {
        /// The largest frame accepted or sent, in bytes. Default 1 MiB. A message larger than a
        /// frame goes in fragments (to a peer that takes them, as every peer of this release
        /// does), so this bounds what one frame holds up, not how large a message may be.
        public var maximumFrameLength: Int
        /// The largest message this session takes, in bytes of encoded payload: announced to
        /// each peer, which refuses to send a larger one (`messageTooLarge`). Default 128 MiB.
        /// A message larger than 256 KiB travels in fragments that other messages pass between,
        /// and is put together as it arrives: the receiver holds at most one such message per
        /// peer under reliable delivery and one per link under unreliable, each up to this, and
        /// of the reliable ones at most twice this in all (a peer that has left gives its share
        /// up first, and sends its message again when it comes back).
        public var maximumMessageLength: Int
        /// How long TLS and HELLO together may take. Default 5 s.
        public var handshakeTimeout: Duration
        /// The reliable messages kept per peer until acknowledged. Default 4,096 messages, 8 MiB.
        ///
        /// The count is what a sender of small messages may have in flight: the receiver
        /// acknowledges once per read, and one read brings up to 256 KiB, some 1,600 messages of
        /// 128 bytes. An outbox of fewer made the sender stop for every ACK: 1,024 held 128-byte
        /// messages to 245k a second on loopback, where 4,096 let through 335k
        /// (Benchmarks/README.md, SessionBenchmark).
        public var outbox: BufferLimits
        /// The unreliable messages waiting per peer for its link to take them. Default 256
        /// messages, 1 MiB (or one larger message). While it is full, an unreliable `send` waits
        /// and an unreliable `broadcast` skips the peer; what it holds when the link goes is
        /// dropped and reported (``MessageDropReason/linkLost``).
        public var unreliableQueue: BufferLimits
        /// When a peer's outbox is full: false (the default) makes `send` wait for room; true
        /// makes it throw `outboxFull` at once.
        public var failWhenOutboxFull: Bool
        /// How long a reliable `send` waits for room in the outbox of a peer that has left: once
        /// the peer has been away this long, it throws `peerAway` (what is queued stays, for if
        /// the peer comes back; ``MultipeerSession/forget(peer:)`` drops it). Default 30 s. For a
        /// peer that is active, `send` waits as long as the peer keeps reading, however slowly.
        public var sendTimeout: Duration
        /// Inbound TLS and HELLO exchanges under way at once. Default 64. When a connection
        /// arrives while this many are under way, the oldest handshake of the source (IPv4
        /// address, or IPv6 /64) with the most of them is cut off for it (a `connectionLimit`
        /// failure): a newcomer is always admitted, and a flood takes room only from itself.
        public var maximumHandshakes: Int
        /// Inbound TLS and HELLO exchanges under way at once from one source (an IPv4 address,
        /// or an IPv6 /64 prefix). Default 8. A connection from a source at this limit cuts off
        /// that source's oldest handshake, so one host flooding connections holds at most this
        /// many of ``maximumHandshakes``, and every other host's handshakes go on.
        public var maximumHandshakesPerSource: Int
        /// How soon an inbound connection must send its first bytes (the TLS ClientHello, which
        /// a peer sends as it connects). Default 1 s. A connection that says nothing is closed
        /// then, long before ``handshakeTimeout``.
        public var firstBytesTimeout: Duration
        /// Inbound links at once, handshakes under way included. Default 1,024. (Links this
        /// session dials are not counted: it dials only peers it discovered or was given.)
        public var maximumInboundLinks: Int
        /// How long the GOODBYE that closes a link (at shutdown, or for a link replaced by a
        /// newer one) may take to be written; then the link is closed without it. Default 1 s:
        /// a peer that stopped reading cannot hold a link, or a shutdown, open.
        public var goodbyeTimeout: Duration
        /// What each stream of ``MultipeerSession/messages(of:)`` holds before the links that
        /// feed it stop reading (and TCP pushes back on the senders): default 1,024 messages or
        /// 4 MiB of the memory they keep alive (a message is a slice of the buffer its link read
        /// it into, so each such buffer counts once, at its capacity, however many messages share
        /// it; a message decoded on the link counts its payload); one message larger than the bytes alone in it does not stop
        /// them (its reader takes it next), a second behind it does. Reading resumes at half. One
        /// read of a link may bring more before it stops: at most 256 KiB (four socket reads of
        /// 64 KiB) and the rest of one frame, per link.
        public var receiveBuffer: BufferLimits
        /// What is held, per message type name, for a first subscriber when a message arrives
        /// that nobody subscribed to: default 256 messages or 1 MiB. The full hold of a type the
        /// application reads (declared, or subscribed to once) is a full stream: the links that
        /// bring more stop reading until something subscribes to the type
        /// (``SessionEvent/heldMessagesFull(typeName:from:)``). Of any other type, what comes
        /// beyond is refused (``SessionEvent/messageNotRead(typeName:from:)``; its sender is
        /// told). Nothing held is dropped.
        public var unsubscribedMessages: BufferLimits
        /// How many type names at most have messages held for a first subscriber. Default 16;
        /// a message of one more name nobody subscribed to is refused, unless the application
        /// reads its type: then it is held too, but stops its link at once, until something
        /// subscribes to its type.
        public var maximumUnsubscribedTypes: Int
        /// The events each ``MultipeerSession/events`` stream holds for a slow reader. Default
        /// 1,024; beyond it the oldest `.stats` go first (``SessionEvent/eventsDropped(count:)``).
        public var eventBuffer: Int

        /// Limits with the defaults each property states.
        public init(
            maximumFrameLength: Int = 1 << 20,
            handshakeTimeout: Duration = .seconds(5),
            outbox: BufferLimits = BufferLimits(maximumCount: 4_096, maximumBytes: 8 << 20),
            failWhenOutboxFull: Bool = false,
            maximumHandshakes: Int = 64,
            maximumInboundLinks: Int = 1_024,
            goodbyeTimeout: Duration = .seconds(1),
            receiveBuffer: BufferLimits = BufferLimits(maximumCount: 1_024, maximumBytes: 4 << 20),
            unsubscribedMessages: BufferLimits = BufferLimits(maximumCount: 256, maximumBytes: 1 << 20),
            maximumUnsubscribedTypes: Int = 16,
            eventBuffer: Int = 1_024,
            sendTimeout: Duration = .seconds(30),
            maximumHandshakesPerSource: Int = 8,
            firstBytesTimeout: Duration = .seconds(1),
            maximumMessageLength: Int = 128 << 20,
            unreliableQueue: BufferLimits = BufferLimits(maximumCount: 256, maximumBytes: 1 << 20)
        ) {
            self.unreliableQueue = unreliableQueue
            self.maximumMessageLength = maximumMessageLength
            self.maximumHandshakesPerSource = maximumHandshakesPerSource
            self.firstBytesTimeout = firstBytesTimeout
            self.sendTimeout = sendTimeout
            self.receiveBuffer = receiveBuffer
            self.unsubscribedMessages = unsubscribedMessages
            self.maximumUnsubscribedTypes = maximumUnsubscribedTypes
            self.eventBuffer = eventBuffer
            self.maximumFrameLength = maximumFrameLength
            self.handshakeTimeout = handshakeTimeout
            self.outbox = outbox
            self.failWhenOutboxFull = failWhenOutboxFull
            self.maximumHandshakes = maximumHandshakes
            self.maximumInboundLinks = maximumInboundLinks
            self.goodbyeTimeout = goodbyeTimeout
        }
    }
}

extension MultipeerSession.Configuration {
    /// The wire names of ``messageTypes``; nil when none are declared (every type is read).
    /// - Throws: `invalidArgument` if they take more room than HELLO has for them.
    func declaredMessageTypes() throws -> MessageTypeList? {
        guard !messageTypes.isEmpty else { return nil }
        do {
            return try MessageTypeList(messageTypes.map { MultipeerSession.wireName(of: $0) })
        } catch let error as MultipeerError {
            throw MultipeerError(.invalidArgument, "Configuration.messageTypes: \(error.message)")
        }
    }

    /// What the links of a session with this configuration run with: its HELLO (signed by
    /// `identity`, announcing `incarnation`), the TLS context of `keys`, and `inbox` for what
    /// they deliver.
    func linkConfiguration(
        identity: PeerIdentity,
        incarnation: UInt64,
        keys: KeyRing,
        inbox: Inbox
    ) throws -> LinkConfiguration {
        var hello = try Hello(
            identity: identity,
            incarnation: incarnation,
            displayName: peer.displayName,
            metadata: peer.metadata,
            keepalive: keepalive,
            maximumFrameLength: limits.maximumFrameLength,
            maximumMessageLength: limits.maximumMessageLength
        )
        hello.features = .known
        let tls = try TLSContext(configuration: TLSConfiguration(keys: keys, handshakeTimeout: limits.handshakeTimeout))
        // A write stuck on a dead path fails on its own after four times the keepalive's stall
        // limit: a backstop for a side that does not read (whose keepalive times nothing out),
        // since a dead link is its keepalive's to find. Not sooner: Linux counts the time from
        // the first retransmission of a loss episode, and a file sent over a lossy path stays in
        // one for as long as it streams (the host suite's lossy link lost connections to it
        // 20 s into a 1 MiB transfer at the stall limit, 15 s, with data arriving throughout).
        let keepaliveTimeout = keepalive.timeout > .zero ? keepalive.timeout : KeepaliveParameters().timeout
        var link = LinkConfiguration(
            tls: tls,
            identity: identity,
            localHello: hello,
            maximumFrameLength: limits.maximumFrameLength,
            tcpUserTimeout: keepaliveTimeout * KeepaliveStateMachine.stallFactor * 4
        )
        link.inbox = inbox
        return link
    }
}
