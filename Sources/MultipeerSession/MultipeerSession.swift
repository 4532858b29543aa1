import Glibc
import Logging
import MultipeerCore
import MultipeerDiscovery
public import MultipeerTLS
import NIOConcurrencyHelpers
import NIOCore
public import ServiceLifecycle

public import struct Foundation.UUID

/// Keeps this peer connected to every other peer of its group on the local network:
/// advertised and discovered over DNS-SD, authenticated with TLS 1.3 and the group's
/// pre-shared key, talking in `Codable` messages.
///
/// ```swift
/// let session = MultipeerSession(
///     configuration: .init(
///         serviceType: "_navlog._tcp", peer: PeerInfo(displayName: "Captain"), psk: try PreSharedKey(contentsOfFile: "group.key")),
///     identity: try PeerIdentity(loadingOrCreatingFile: "device.identity"))
/// try await withThrowingDiscardingTaskGroup { group in
///     group.addTask { try await session.run() }
///     for await event in session.events { print(event) }
/// }
/// ```
///
/// A peer is *active* when its link has completed TLS and the HELLO exchange and both sides
/// have admitted it (each holds the group key, and each one's roster, if it keeps one, lists
/// the other). The peer with
/// the greater UUID dials; exactly one link per pair remains. ``run()`` does everything until
/// its task is cancelled (or a service group shuts down gracefully); ``suspend()`` and
/// ``resume()`` follow an app into the background and back.
public final actor MultipeerSession {
    /// What the session was made with: its service type, this peer's name, the group keys,
    /// discovery and the limits.
    public nonisolated let configuration: Configuration
    /// This device's key pair, which every HELLO proves.
    public nonisolated let identity: PeerIdentity
    /// This peer's identity, derived from ``identity``'s public key.
    public nonisolated var peerID: UUID { identity.peerID }
    /// Tells this run of the session from earlier ones with the same ``peerID``: the wall-clock
    /// time it was made, in nanoseconds since 1970, so a later run has a greater one.
    public nonisolated let incarnation: UInt64
    /// What the session touches outside itself (``SessionEnvironment/system`` but in a simulation).
    nonisolated let environment: SessionEnvironment
    /// The clock every timer of the session reads.
    nonisolated var clock: any SessionClock { environment.clock }

    /// Where the links hand what they receive: the receive windows, the application's streams
    /// and the metrics.
    let inbox: Inbox
    let logger: Logger
    /// The session's decisions: the peer table, delivery, admission, dials and the lifecycle
    /// (``SessionStateMachine/Lifecycle``, the session's only one).
    var core: SessionStateMachine
    /// The group keys the links start with (``updateKeys(_:)`` replaces them).
    private var keys: KeyRing
    /// What the links and discovery run with while the session runs (suspended or not); nil
    /// before and after.
    private(set) var running: Running?
    /// The GOODBYE the last run said to its links as it stopped: shutdown, or suspended.
    private var goodbye = GoodbyeReason.shutdown
    /// Each peer's delivery, driven by senders and the links' readers, not the actor.
    let deliveries: Deliveries
    /// What the run loop takes, in order (``Input``).
    let runLoop: (stream: AsyncStream<Input>, continuation: AsyncStream<Input>.Continuation)

    /// What the run loop takes: work for a child task of the run, work on the session in
    /// order with the rest (what a link's reader hands over: it never waits for the actor), and
    /// the lifecycle's requests.
    enum Input: Sendable {
        /// Run as a child task of the run. While the session is suspended, it runs cancelled (a
        /// timer ends at once, an attempt fails unreported).
        case task(ChildTask)
        /// Run on the session, in order with the rest.
        case onSession(SessionWork)
        case suspend
        case resume
        case stop
    }

    /// Work the run does in a child task of its own.
    enum ChildTask: Sendable {
        /// One connection attempt of a dial (``SessionStateMachine/Attempt``) as link `id`.
        case attempt(LinkID, SessionStateMachine.Attempt, LinkConfiguration)
        /// A link closed, its GOODBYE saying why.
        case close(LinkHandle, GoodbyeReason)
        /// One of the core's timers, due after a delay.
        case timer(SessionStateMachine.Timer, after: Duration)
    }

    /// Work done on the session, in order with the rest.
    enum SessionWork: Sendable {
        /// A link's report: what its peer sent the session, or its end.
        case linkReported(LinkReporter.Event, on: LinkID, by: Peer)
        /// A message of a type this side does not read, refused (REJECT to its peer).
        case rejected(Rejection, from: Peer)
        /// The message types this side reads changed: its peers are told (TYPES).
        case announceTypes
    }

    /// What a running session's links and discovery run with, and the links it carries.
    final class Running {
        /// The links' configuration, whose TLS context holds the group keys (``updateKeys(_:)``
        /// replaces them there).
        let link: LinkConfiguration
        let discovery: any PeerDiscovery
        /// The links the session carries, to write to them and close them.
        var links: [LinkID: LinkHandle] = [:]

        init(link: LinkConfiguration, discovery: any PeerDiscovery) {
            self.link = link
            self.discovery = discovery
        }
    }

    nonisolated var subscriptions: Subscriptions { inbox.subscriptions }
    nonisolated var metrics: SessionMetrics { inbox.metrics }

    /// Creates a session; nothing happens on the network until ``run()``.
    ///
    /// - Parameters:
    ///   - configuration: The service type, this peer's name, the group key and the limits.
    ///   - identity: This device's key pair; ``peerID`` is derived from it. Load it from a file
    ///     (`PeerIdentity(loadingOrCreatingFile:)`) so the device keeps its ID across restarts:
    ///     its peers then know it again, and what they queued for it reaches it. A new
    ///     `PeerIdentity()` makes a stranger on every run (for tests and one-off tools).
    public init(configuration: Configuration, identity: PeerIdentity) {
        self.init(configuration: configuration, identity: identity, environment: .system)
    }

    /// Creates a session in `environment`: the real world (``SessionEnvironment/system``) or
    /// a simulated one.
    package init(configuration: Configuration, identity: PeerIdentity, environment: SessionEnvironment) {
        self.configuration = configuration
        self.identity = identity
        self.environment = environment
        self.incarnation = environment.incarnation()
        self.core = SessionStateMachine(
            localPeerID: identity.peerID,
            localKey: identity.key,
            backoff: configuration.reconnect,
            roster: configuration.roster,
            keyCount: configuration.keys.keys.count,
            port: configuration.port,
            seed: environment.random.next()
        )
        var logger = configuration.logger
        logger[metadataKey: "multipeer.local.id"] = "\(identity.peerID)"
        self.logger = logger
        let metrics = SessionMetrics(localName: configuration.peer.displayName)
        let end = SessionEnd()
        let deliveries = Deliveries(
            policy: .init(configuration.limits),
            metrics: metrics,
            clock: environment.clock,
            end: end
        )
        self.deliveries = deliveries
        let runLoop = AsyncStream<Input>.makeStream()
        self.runLoop = runLoop
        // (A declaration too long for HELLO fails the run: run() checks it again.)
        let subscriptions = Subscriptions(
            limits: configuration.limits,
            metrics: metrics,
            reads: try? configuration.declaredMessageTypes(),
            rejected: { peer, rejection in runLoop.continuation.yield(.onSession(.rejected(rejection, from: peer))) },
            announce: { runLoop.continuation.yield(.onSession(.announceTypes)) },
            blockingWork: environment.blockingWork,
            readerCheck: environment.readerCheck,
            end: end
        )
        self.inbox = Inbox(
            executor: EventLoopExecutor(environment.eventLoop),
            windows: ReceiveWindows(on: environment.eventLoop),
            subscriptions: subscriptions,
            metrics: metrics,
            resources: Resources(
                peers: deliveries,
                directory: configuration.resourceDirectory,
                partialLifetime: configuration.partialResourceLifetime,
                logger: logger,
                random: environment.random,
                fileQueue: environment.fileQueue,
                clock: environment.clock
            ),
            streams: Streams(random: environment.random, peers: deliveries),
            maximumMessageLength: configuration.limits.maximumMessageLength
        )
        self.keys = configuration.keys
    }

    /// Gone since 0.8.0: a session takes the device's identity, so that a restarted device is
    /// the same peer to the others.
    @available(
        *,
        unavailable,
        message:
            "pass the device's identity: MultipeerSession(configuration:identity: try PeerIdentity(loadingOrCreatingFile: \"device.identity\")); see CHANGELOG.md, 0.8.0"
    )
    public init(configuration: Configuration) {
        fatalError("unavailable")
    }

    /// What happens in the session: first its state now (``SessionEvent/listening(port:)`` while
    /// it listens, ``SessionEvent/peerJoined(_:)`` for each active peer), then each event as it
    /// happens. Each access is a new subscription, bounded (``EventStream``); it ends when the
    /// session stops.
    public nonisolated var events: EventStream { subscriptions.events() }

    /// The thread every link of this session runs on (one event loop of SwiftNIO's shared
    /// group), as a task executor.
    ///
    /// A task that prefers it reads the session's streams and sends on the thread that carries
    /// the bytes: a message reaches it on the thread that read it, and what it sends is written
    /// from there, with no hop to another thread either way. A request and its answer this way
    /// take about half the time they take from Swift's global pool (Benchmarks/README.md has the
    /// figures):
    ///
    /// ```swift
    /// func answerNotes(of session: MultipeerSession) -> Task<Void, any Error> {
    ///     Task(executorPreference: session.executor) {
    ///         for await (peer, note) in session.messages(of: Note.self) {
    ///             try await session.send(Note(text: "seen: \(note.text)"), to: peer.id)
    ///         }
    ///     }
    /// }
    /// ```
    ///
    /// Keep what such a task does between two messages short: while it runs, the session's
    /// links wait (decode large messages, or do slow work, elsewhere).
    public nonisolated var executor: any TaskExecutor { inbox.executor }

    /// The peers whose links are authenticated, HELLO-complete and admitted by both sides, in
    /// order of peer ID. Read from any thread or actor without waiting for the session (a view
    /// can read it as it draws): it changes exactly as ``events`` say, so a reader that has seen
    /// a peer's ``SessionEvent/peerJoined(_:)`` finds it here, and one that has seen its
    /// ``SessionEvent/peerLeft(_:_:)`` does not.
    public nonisolated var activePeers: [Peer] {
        subscriptions.activePeers
    }

    /// Every peer the session knows of, in order of peer ID, and how far each one's link is:
    /// discovered over DNS-SD (or a static endpoint whose HELLO has named its peer), connecting,
    /// refused, or active. For a view of who is around, beside who is connected. Read from any
    /// thread without waiting for the session; it changes exactly as
    /// ``SessionEvent/availablePeerChanged(_:)`` says. Empty while the session is not running
    /// (before ``run()``, suspended, ended).
    ///
    /// A peer known only from its advert shows the name its advert claims, which anyone on the
    /// network can claim: its `AvailablePeer.key` is nil until a HELLO proves who it is.
    ///
    /// ```swift
    /// func showAround(_ session: MultipeerSession) {
    ///     for peer in session.availablePeers {
    ///         let proven = peer.key != nil  // a HELLO proved who it is
    ///         print(peer.displayName, peer.state, proven ? "proven" : "as its advert claims")
    ///     }
    /// }
    /// ```
    public nonisolated var availablePeers: [AvailablePeer] {
        subscriptions.availablePeers
    }

    // MARK: Running

    /// Listens, advertises, browses, dials and accepts until the task is cancelled. Leaves no
    /// task, socket or advertisement behind. A session runs once.
    public func run() async throws {
        try core.begin()
        defer { perform(core.finish()) }
        _ = try configuration.declaredMessageTypes()
        var linkConfiguration = try configuration.linkConfiguration(
            identity: identity,
            incarnation: incarnation,
            keys: keys,
            inbox: inbox
        )
        linkConfiguration.transport = environment.transport
        let discovery = try SessionDiscovery(
            configuration,
            localPeerID: peerID,
            directory: environment.directory,
            logger: logger
        )
        running = Running(link: linkConfiguration, discovery: discovery.source)
        do {
            // A graceful shutdown and cancellation stop alike, in order: GOODBYE on every link,
            // then the listener and the advertisement.
            try await withGracefulShutdownHandler {
                try await runUntilStopped(linkConfiguration, discovery)
            } onGracefulShutdown: { [runLoop] in
                runLoop.continuation.yield(.stop)
            }
        } catch is CancellationError {
            // Cancellation (or a graceful shutdown) is how a session stops, not a failure.
        }
    }

    /// Runs the session, as ``run()`` does, until the process receives SIGINT or SIGTERM (or
    /// the task is cancelled), then stops it gracefully: GOODBYE on every link, so its peers see
    /// it leave at once rather than after their keepalive timeout, then the advertisement
    /// withdrawn and the listener closed; then it returns. For a command-line program or a
    /// daemon: it runs the session in a swift-service-lifecycle `ServiceGroup` of its own, which
    /// logs to ``Configuration/logger``. To run the session beside other services, put it (it is
    /// a `Service`) in a `ServiceGroup` of your own instead.
    ///
    /// ```swift
    /// func serve(_ session: MultipeerSession) async throws {
    ///     // Ctrl-C or `kill` says GOODBYE to every peer before the program ends.
    ///     try await session.runUntilSignalled()
    /// }
    /// ```
    public nonisolated func runUntilSignalled() async throws {
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: self)],
                gracefulShutdownSignals: [.sigint, .sigterm],
                logger: logger
            )
        )
        try await group.run()
    }

    /// The port the session listens on while it runs (the one it chose, when
    /// ``Configuration/port`` is 0); nil before ``run()``, while suspended and once stopped.
    public var listeningPort: Int? {
        switch core.lifecycle {
        case .running(let port), .stopping(let port): port
        case .idle, .suspended, .stopped: nil
        }
    }

    private func runUntilStopped(_ linkConfiguration: LinkConfiguration, _ discovery: SessionDiscovery) async throws {
        var inputs = runLoop.stream.makeAsyncIterator()
        while try await runActive(linkConfiguration, discovery, &inputs) {
            subscriptions.listening(nil)
            // Until resume (or the end), what was handed over before the suspend still runs: on
            // the session, or cancelled (a dial the core asked for then is never made).
            suspended: while let input = await inputs.next(isolation: #isolation) {
                switch input {
                case .resume: break suspended
                case .stop: return
                case .suspend: break
                case .onSession(let work): self.run(work)
                case .task(let task):
                    await withDiscardingTaskGroup { group in
                        group.cancelAll()
                        group.addTask { await self.run(task) }
                    }
                }
            }
            guard !Task.isCancelled else { return }
        }
    }

    /// Takes the session into the background: links and advertisement go, the peer table and
    /// subscriptions stay. Does nothing if the session is not running.
    public func suspend() {
        runLoop.continuation.yield(.suspend)
    }

    /// Brings the session back: listens on the port it had (so peers that dial it by address
    /// find it again; if something took the port meanwhile, ``SessionEvent/listenFailed(port:_:)``
    /// says so and it listens on another, which it advertises), advertises again and dials every
    /// known peer at once.
    public func resume() {
        runLoop.continuation.yield(.resume)
    }

    /// One stretch of running, until suspended (returns true) or stopped (returns false).
    private func runActive(
        _ linkConfiguration: LinkConfiguration,
        _ discovery: SessionDiscovery,
        _ inputs: inout AsyncStream<Input>.Iterator
    ) async throws -> Bool {
        let listener = try await listen(linkConfiguration)
        logger.debug("listening", metadata: ["multipeer.port": "\(listener.port)"])
        subscriptions.listening(listener.port)
        let advertiser = advertise(discovery, port: listener.port)
        perform(core.listening(on: listener.port, now: clock.now))

        return try await withThrowingDiscardingTaskGroup { group in
            group.addTask {
                do {
                    try await listener.run(
                        onLink: { link in await self.serveInbound(link) },
                        onFailure: { address, error in
                            await self.inboundFailed(address?.displayString ?? "unknown", error)
                        }
                    )
                } catch is CancellationError {
                    // Stopping.
                }
            }
            group.addTask {
                for await event in discovery.source.browse() { await self.discovered(event) }
            }
            if let advertiser {
                group.addTask {
                    for await event in advertiser.events { await self.advertisement(event) }
                }
            }
            if let interval = configuration.statsInterval {
                group.addTask {
                    while (try? await self.clock.sleep(for: interval)) != nil { await self.reportStats() }
                }
            }
            var suspended = false
            // Ends with .suspend, .stop, or cancellation.
            loop: while let input = await inputs.next(isolation: #isolation) {
                switch input {
                case .task(let task): group.addTask { await self.run(task) }
                case .onSession(let work): self.run(work)
                case .suspend:
                    suspended = true
                    break loop
                case .stop: break loop
                case .resume: continue
                }
            }
            // Say goodbye on every link, then stop accepting and advertising.
            let reason: GoodbyeReason = suspended ? .suspended : .shutdown
            goodbye = reason
            var closing: [LinkHandle] = []
            perform(
                core.stopRunning(reason, now: clock.now).filter { action in
                    guard case .close(let id, _) = action else { return true }
                    running?.links[id].map { closing.append($0) }
                    return false
                }
            )
            // All at once: each may take up to the GOODBYE timeout, behind a peer that reads slowly.
            let timeout = goodbyeTimeout
            await withDiscardingTaskGroup { goodbyes in
                for handle in closing { goodbyes.addTask { await handle.close(reason, within: timeout) } }
            }
            advertiser?.stop()
            await listener.close()
            core.stoppedListening()
            group.cancelAll()
            return suspended
        }
    }

    /// Binds the listener: the first time to the configured port, where a failure is the run's;
    /// on resume to the port it had (``SessionStateMachine/listenPort``), and if something took
    /// that meanwhile, it is reported (``SessionEvent/listenFailed(port:_:)``) and another is
    /// bound, which is advertised: the session stays reachable by discovery.
    private func listen(_ linkConfiguration: LinkConfiguration) async throws -> PeerListener {
        let listener: PeerListener
        let port = core.listenPort
        do {
            listener = try await PeerListener.bind(
                port: port.number,
                configuration: linkConfiguration,
                limits: configuration.limits
            )
        } catch let error as MultipeerError {
            guard port.resuming else { throw error }
            let resumePort = port.number
            logger.debug(
                "cannot listen on the same port again; listening on another",
                metadata: [
                    "multipeer.port": "\(resumePort)", "multipeer.error": "\(error)",
                ]
            )
            subscriptions.emit(.listenFailed(port: resumePort, error))
            listener = try await PeerListener.bind(
                port: 0,
                configuration: linkConfiguration,
                limits: configuration.limits
            )
        }
        return listener
    }

    // MARK: Links

    /// Takes an inbound link in, and returns once it has closed (the listener counts the
    /// links it accepted until they end: ``Limits/maximumInboundLinks``).
    private nonisolated func serveInbound(_ connection: PeerConnection) async {
        let id = await acceptedLink()
        await carry(id, connection)
        try? await connection.nioChannel.closeFuture.get()
    }

    private func acceptedLink() -> LinkID { core.acceptedLink() }

    /// How soon an endpoint that accepted a dial's connection must answer (send its first
    /// bytes: a peer's ServerHello comes a round trip after the connection): a fifth of the
    /// handshake timeout, 1 s by default. An advert pointing at a sink that accepts TCP and says
    /// nothing costs a dial this much, not the whole handshake timeout.
    static func answerTimeout(_ configuration: LinkConfiguration) -> Duration {
        configuration.tls.configuration.handshakeTimeout / 5
    }

    /// One connection attempt of a dial (``SessionStateMachine/Attempt``): the link it makes is
    /// taken in as link `id` (``carry(_:_:)``); a failure goes to the core, which decides what to
    /// try next. The dial's attempts come one at a time, so two links to the same peer
    /// never race through their handshakes (each side would keep another).
    private nonisolated func attempt(
        _ id: LinkID,
        _ attempt: SessionStateMachine.Attempt,
        _ configuration: LinkConfiguration
    ) async {
        let keys = Array(configuration.tls.keys.keys.reversed())  // the newest first
        let connection: PeerConnection
        do {
            try Task.checkCancellation()
            guard attempt.key < keys.count else {
                throw MultipeerError(
                    .authenticationFailed,
                    "the group keys changed during the dial of \(attempt.endpoint)"
                )
            }
            connection = try await PeerConnection.connect(
                host: attempt.endpoint.host,
                port: attempt.endpoint.port,
                configuration: configuration,
                offering: keys[attempt.key].identity,
                expecting: attempt.peerID,
                answerTimeout: Self.answerTimeout(configuration)
            ).established()
        } catch {
            let failure =
                error as? MultipeerError
                ?? MultipeerError(.connectionFailed, "cannot connect to \(attempt.endpoint)", underlying: "\(error)")
            return await attemptFailed(id, failure)
        }
        await carry(id, connection)
    }

    private func attemptFailed(_ id: LinkID, _ failure: MultipeerError) {
        perform(core.attemptFailed(id, failure, now: clock.now))
    }

    /// Takes an established link in: the core decides whether the session carries it, and from
    /// then on the link reports to the run loop (``LinkReporter``), in order with the rest. A
    /// link the session does not keep (the table keeps another, the roster refuses it, the
    /// session is stopping) is closed here, with its GOODBYE.
    private nonisolated func carry(_ id: LinkID, _ connection: PeerConnection) async {
        // (A cancelled task: the run is ending.)
        if let closing = await linkEstablished(id, connection) ?? (Task.isCancelled ? .shutdown : nil) {
            await LinkHandle.sayGoodbye(closing, on: connection.nioChannel, within: goodbyeTimeout)
            try? await connection.nioChannel.close()
        }
    }

    /// Records an established link and starts its reports; returns the GOODBYE reason if the
    /// link is to close at once.
    private func linkEstablished(_ id: LinkID, _ connection: PeerConnection) -> GoodbyeReason? {
        let peer = Peer(connection.remoteHello)
        connection.reports.report { [runLoop] event in
            runLoop.continuation.yield(.onSession(.linkReported(event, on: id, by: peer)))
        }
        let address = connection.remoteAddress?.displayString ?? "unknown"
        let established = core.linkEstablished(
            id,
            hello: connection.remoteHello,
            announced: connection.announced,
            address: address,
            now: clock.now
        )
        switch established {
        case .refused(let actions):
            perform(actions)
            return .notInRoster
        case .carried(let closing, let actions):
            running?.links[id] = LinkHandle(
                id: id,
                channel: connection.nioChannel,
                writer: LinkWriter(id: id, channel: connection.nioChannel, offload: environment.offload),
                hello: connection.remoteHello,
                quality: connection.quality
            )
            // Made now, not when the peer joins: a send that finds it refusing waits on it for the join.
            _ = deliveries.make(for: connection.remoteHello.peerID)
            metrics.linkOpened()
            perform(actions)
            // A subscription since this side's HELLO was made: the peer hears of it now.
            announceMessageTypes()
            return closing
        }
    }

    /// What a link the session took in reports (``LinkReporter``).
    private func linkReported(_ event: LinkReporter.Event, on id: LinkID, by peer: Peer) {
        switch event {
        case .resumePoint(let sequence, let partial):
            // The first ACK (the link's DeliveryHandler applies the later ones to the peer's
            // delivery itself).
            admitted(id, by: peer.id, through: sequence, partial: partial)
        case .rejected(let rejection):
            rejected(rejection, by: peer.id, on: id)
        case .reads(let types):
            perform(core.peerReads(types, on: id))
        case .closed(let goodbye, let error):
            let failure = error.map {
                $0 as? MultipeerError
                    ?? MultipeerError(.connectionFailed, "the link to \(peer) failed", underlying: "\($0)")
            }
            linkClosed(id, goodbye: goodbye, error: failure)
        }
    }

    private func linkClosed(_ id: LinkID, goodbye: GoodbyeReason?, error: MultipeerError?) {
        if running?.links.removeValue(forKey: id) != nil {
            metrics.linkClosed(goodbye: goodbye, failed: error != nil)
        }
        perform(core.linkClosed(id, goodbye: goodbye, error: error, now: clock.now))
    }

    /// Replaces the group keys (``Configuration/keys``): from now on links are accepted with any
    /// of `keys` and dialled with the newest first. Links already up stay up.
    ///
    /// To rotate a group's key, add the new key to every peer's ring, then remove the old one
    /// from every peer's ring: at each step every pair of peers holds a key in common.
    public func updateKeys(_ keys: KeyRing) throws {
        try running?.link.tls.update(keys)
        self.keys = keys
        logger.debug("group keys updated", metadata: ["multipeer.keys": "\(keys)"])
        perform(core.keysChanged(count: keys.keys.count, now: clock.now))
    }

    /// Replaces the roster (``Configuration/roster``; nil admits any holder of the group key).
    /// Links of active peers it no longer lists close at once (GOODBYE `notInRoster`), and each
    /// leaves with `PeerLeftReason.local(.notInRoster)`; their later links are refused. Peers
    /// refused before are dialled at once, so one it now admits joins now (a peer it knows
    /// only by the connections that peer made, not by discovery, joins at that peer's next dial).
    public func updateRoster(_ roster: Roster?) {
        perform(core.rosterChanged(roster, now: clock.now))
    }

    /// The roster in force: ``Configuration/roster``, or what ``updateRoster(_:)`` last gave;
    /// nil admits any holder of the group key.
    public var roster: Roster? { core.roster }

    /// Whether the active peer `peerID` reads messages of `type`, as its HELLO and TYPES say
    /// (docs/PROTOCOL.md 3e): false when it runs a build whose application does not know them
    /// (a message of the type sent to it fails with `messageTypeNotRead`); nil when the peer is
    /// not active. A peer that lists no types (an earlier release, or an application that
    /// declares none) reads every type but those it refused.
    public func reads<Message>(_ type: Message.Type, peer peerID: UUID) -> Bool? {
        core.peerReads(of: peerID)?.contains(Self.wireName(of: type))
    }

    /// How the link to `peerID` is doing, if the peer is active.
    public func linkStats(for peerID: UUID) -> LinkStats? {
        guard let id = core.joinedLink(of: peerID)?.id, let handle = running?.links[id],
            let presence = core.presence(of: peerID)
        else { return nil }
        return LinkStats(
            quality: handle.quality.quality,
            reconnects: presence.reconnects,
            timeActive: clock.now - presence.since
        )
    }

    private func reportStats() {
        for (peerID, hello) in core.activePeers {
            if let stats = linkStats(for: peerID) { subscriptions.emit(.stats(Peer(hello), stats)) }
        }
    }

    /// How long a closing link's GOODBYE may take (Limits.goodbyeTimeout).
    nonisolated var goodbyeTimeout: TimeAmount { TimeAmount(configuration.limits.goodbyeTimeout) }

    /// An inbound connection failed before its HELLO was through.
    private func inboundFailed(_ address: String, _ error: any Error) {
        let failure =
            error as? MultipeerError
            ?? MultipeerError(.connectionFailed, "the connection with \(address) failed", underlying: "\(error)")
        perform(core.inboundFailed(address: address, failure, now: clock.now))
    }

    // MARK: Discovery

    func discovered(_ event: BrowseEvent) {
        switch event {
        case .found(let advert):
            logger.debug(
                "found",
                metadata: [
                    "multipeer.peer.id": "\(advert.peerID?.uuidString ?? "static")",
                    "multipeer.endpoints": "\(advert.endpoints)",
                ]
            )
            perform(
                core.discovered(
                    DialTarget(
                        peerID: advert.peerID,
                        incarnation: advert.incarnation,
                        endpoints: advert.endpoints.map { DialTarget.Endpoint(host: $0.host, port: $0.port) },
                        displayName: advert.displayName,
                        metadata: advert.metadata
                    ),
                    now: clock.now
                )
            )
        case .lost(let peerID):
            perform(core.lost(peerID, now: clock.now))
        }
    }

    /// Advertises the session listening on `port`; a failure is the application's to hear of,
    /// and the session goes on without an advertisement (its peers can still dial it).
    private func advertise(_ discovery: SessionDiscovery, port: Int) -> (any Advertisement)? {
        do {
            return try discovery.advertise(
                port: port,
                peerID: peerID,
                incarnation: incarnation,
                peer: configuration.peer
            )
        } catch {
            subscriptions.emit(
                .advertisingFailed(
                    error as? MultipeerError
                        ?? MultipeerError(.invalidArgument, "cannot advertise", underlying: "\(error)")
                )
            )
            return nil
        }
    }

    private func advertisement(_ event: AdvertisementEvent) {
        switch event {
        case .established(let name): logger.debug("advertised", metadata: ["multipeer.advert.name": "\(name)"])
        case .renamed(let name):
            logger.debug("advertised under another name", metadata: ["multipeer.advert.name": "\(name)"])
        case .withdrawn:
            logger.debug("advertisement withdrawn: avahi-daemon went away; it comes back with the daemon")
        case .failed(let error): subscriptions.emit(.advertisingFailed(error))
        }
    }

    // MARK: Actions

    /// Runs `task` as a child task of the run (``Input/task(_:)``).
    private nonisolated func spawn(_ task: ChildTask) {
        runLoop.continuation.yield(.task(task))
    }

    /// A child task of the run (``ChildTask``).
    private nonisolated func run(_ task: ChildTask) async {
        switch task {
        case .attempt(let id, let attempt, let configuration):
            await self.attempt(id, attempt, configuration)
        case .close(let handle, let reason):
            await handle.close(reason, within: goodbyeTimeout)
        case .timer(let timer, let delay):
            guard (try? await clock.sleep(for: delay)) != nil else { return }
            await fired(timer)
        }
    }

    /// Work on the session, in order with the rest (``SessionWork``).
    private func run(_ work: SessionWork) {
        switch work {
        case .linkReported(let event, let id, let peer): linkReported(event, on: id, by: peer)
        case .rejected(let rejection, let peer): reject(rejection, from: peer)
        case .announceTypes: announceMessageTypes()
        }
    }

    /// Carries out what the core decided, in order.
    func perform(_ actions: [SessionStateMachine.Action]) {
        for action in actions {
            switch action {
            case .connect(let id, let attempt):
                guard let configuration = running?.link else {
                    perform(
                        core.attemptFailed(
                            id,
                            MultipeerError(.sessionState, "the session is not running"),
                            now: clock.now
                        )
                    )
                    continue
                }
                spawn(.attempt(id, attempt, configuration))
            case .lookUpAgain(let peerID):
                running?.discovery.refresh(peerID)
            case .close(let id, let reason):
                guard let handle = running?.links[id] else { continue }
                spawn(.close(handle, reason))
            case .adopt(let id):
                running?.links[id]?.channel.triggerUserOutboundEvent(LinkAdopted(link: id), promise: nil)
            case .bind(let id, _, let reads):
                guard let handle = running?.links[id] else { continue }
                bind(handle, reads: reads)
            case .unbind(let peerID, let id):
                unbind(peerID, link: id)
            case .admitMessages(let id):
                running?.links[id]?.channel.triggerUserOutboundEvent(MessagesAdmitted(), promise: nil)
            case .sendReject(let id, let rejection):
                running?.links[id]?.channel.writeAndFlush(LinkMessage.reject(rejection), promise: nil)
            case .sendTypes(let id, let reads):
                running?.links[id]?.channel.writeAndFlush(LinkMessage.types(reads), promise: nil)
            case .peerReads(let peerID, let id, let types):
                deliveries[peerID]?.peerReads(types, on: id)
            case .wakeSenders(let peerID):
                deliveries[peerID]?.wake()
            case .schedule(let timer, let delay):
                spawn(.timer(timer, after: delay))
            case .peerJoined(let id, let hello):
                logger.debug(
                    "peer joined",
                    metadata: ["multipeer.peer.id": "\(hello.peerID)", "multipeer.link": "\(id.rawValue)"]
                )
                metrics.activePeers(core.activePeers.count)
                subscriptions.emit(.peerJoined(Peer(hello)))
            case .peerLeft(let hello, let reason):
                logger.debug(
                    "peer left",
                    metadata: ["multipeer.peer.id": "\(hello.peerID)", "multipeer.reason": "\(reason)"]
                )
                metrics.activePeers(core.activePeers.count)
                subscriptions.emit(.peerLeft(Peer(hello), reason))
                if reason == .goodbye(.shutdown) { inbox.streams.peerStopped(hello.peerID) }
            case .report(let report):
                tell(report)
            case .ended:
                // The links still here closed with this side's GOODBYE (their own reports come
                // after the end, and are not counted again).
                for _ in running?.links ?? [:] { metrics.linkClosed(goodbye: goodbye, failed: false) }
                // The flag first, then each part: what a part took in before it ends with the rest.
                running = nil
                deliveries.end.end()
                deliveries.sessionEnded()
                inbox.resources.sessionEnded()
                inbox.streams.sessionEnded()
                subscriptions.sessionEnded()
            }
        }
        for peer in core.availabilityChanges() { subscriptions.emit(.availablePeerChanged(peer)) }
    }

    private func fired(_ timer: SessionStateMachine.Timer) {
        perform(core.fired(timer, now: clock.now))
    }

    /// Tells the application, the logs and the metrics.
    private func tell(_ news: SessionStateMachine.Report) {
        switch news {
        case .connectionFailed(let address, let failure, let inbound, let disposition):
            metrics.connectionFailed(code: failure.code, inbound: inbound)
            switch disposition {
            case .refusedAgain:
                logger.debug(
                    "refused again",
                    metadata: ["multipeer.address": "\(address)", "multipeer.code": "\(failure.code)"]
                )
            case .heldBack:
                break  // reported with the next of its code, or in a second if none comes
            case .reported(let held):
                if held > 0 { tell(.connectionsFailed(count: held, code: failure.code)) }
                logger.debug(
                    "link failed",
                    metadata: ["multipeer.address": "\(address)", "multipeer.error": "\(failure)"]
                )
                if [.authenticationFailed, .identityMismatch, .badSignature, .notInRoster].contains(failure.code) {
                    subscriptions.emit(.authenticationFailed(address: address, failure))
                } else {
                    subscriptions.emit(.connectionFailed(address: address, failure))
                }
            }
        case .connectionsFailed(let count, let code):
            logger.debug(
                "inbound connections failed",
                metadata: ["multipeer.failed": "\(count)", "multipeer.code": "\(code)"]
            )
            subscriptions.emit(.connectionsFailed(count: count, code: code))
        case .rejectedByPeer(let hello, let rejection):
            logger.debug(
                "a message sent did not decode in the peer's application",
                metadata: [
                    "multipeer.peer.id": "\(hello.peerID)", "multipeer.type": "\(rejection.typeName)",
                    "multipeer.sequence": "\(rejection.sequence)", "multipeer.reason": "\(rejection.reason)",
                ]
            )
            metrics.rejected(inbound: false)
            subscriptions.emit(
                .messageRejected(
                    by: Peer(hello),
                    typeName: rejection.typeName,
                    sequence: rejection.sequence,
                    reason: rejection.reason
                )
            )
        case .rejectionNotSent(let peerID, let rejection):
            logger.debug(
                "a message that did not decode here could not be reported to its sender: that incarnation of it is not active",
                metadata: [
                    "multipeer.peer.id": "\(peerID)", "multipeer.type": "\(rejection.typeName)",
                    "multipeer.sequence": "\(rejection.sequence)",
                ]
            )
        case .rejectIgnored(let peerID, let rejection):
            logger.debug(
                "REJECT ignored: not on the peer's link, or for a message not sent",
                metadata: [
                    "multipeer.peer.id": "\(peerID)", "multipeer.sequence": "\(rejection.sequence)",
                ]
            )
        case .rejoined(let peerID, let duration):
            logger.debug(
                "peer back after a failure",
                metadata: ["multipeer.peer.id": "\(peerID)", "multipeer.away": "\(duration)"]
            )
            metrics.rejoined(after: duration)
        case .peerReadsChanged(let hello):
            subscriptions.emit(.peerReadsChanged(Peer(hello)))
        case .typesOutgrown:
            // Once, when the list is outgrown: nothing else tells the application.
            logger.info(
                "the message types subscribed to no longer fit in a list: this session holds other types for a first subscriber from now on, as one that declares none",
                metadata: ["multipeer.limit": "\(MessageTypeList.maximumEncodedLength) bytes"]
            )
        case .linkTimedOut(let id, let peerID, let error):
            logger.debug(
                "link timed out",
                metadata: [
                    "multipeer.peer.id": "\(peerID)", "multipeer.link": "\(id.rawValue)",
                    "multipeer.detail": "\(error.message)",
                ]
            )
        }
    }
}

extension MultipeerSession: Service {}
