public import struct Foundation.UUID
import Glibc
import Logging
import MultipeerCore
import MultipeerDiscovery
public import MultipeerTLS
import NIOConcurrencyHelpers
import NIOCore
public import ServiceLifecycle

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
public actor MultipeerSession {
    public nonisolated let configuration: Configuration
    /// This device's key pair, which every HELLO proves.
    public nonisolated let identity: PeerIdentity
    /// This peer's identity, derived from ``identity``'s public key.
    public nonisolated let peerID: UUID
    /// Tells this run of the session from earlier ones with the same ``peerID``: the wall-clock
    /// time it was made, in nanoseconds since 1970, so a later run has a greater one.
    public nonisolated let incarnation: UInt64

    let subscriptions: Subscriptions
    let metrics: SessionMetrics
    var logger: Logger
    private var table: PeerTableStateMachine
    private var links: [LinkID: LinkHandle] = [:]
    /// The dials under way, to tell them of endpoints discovery adds meanwhile.
    private var dials: [LinkID: AsyncStream<AttemptEvent>.Continuation] = [:]
    /// Reliable delivery towards each peer met: its outbox across links, its link's resume
    /// point and flush, its absence, its acknowledgement waits.
    var deliveries: [UUID: PeerDeliveryStateMachine] = [:]
    /// Who is admitted, beyond holding the group key (``Configuration/roster``).
    private var roster: Roster?
    /// The group keys (``Configuration/keys``), and the TLS context using them while running.
    private var keys: KeyRing
    private var tls: TLSContext?
    /// Inbound connections that failed, per code: ten reported at once, then one a second.
    private var inboundFailures: [MultipeerError.Code: ReportThrottle] = [:]
    /// A report of the failures held back is scheduled.
    private var heldFailuresReportDue = false
    /// Refusals retrying cannot change, reported once per peer (or dialled endpoint) and cause,
    /// then only counted, until the roster or keys change or the peer is admitted.
    private var reportedRefusals: Set<Refusal> = []

    /// A refusal reported once: of whom (a peer ID, or a dialled endpoint), and why.
    private struct Refusal: Hashable {
        var peer: String
        var code: MultipeerError.Code
    }
    let senders = SenderWaiters()
    /// Where the session is in its life.
    var lifecycle = Lifecycle.idle
    let receiveWindows = ReceiveWindows()
    /// The port to listen on again on ``resume()``, once the session has listened: the
    /// configured one, or (0 configured) the one the system chose, so a peer that reaches this
    /// session by its address (``Discovery/staticPeers(_:)``) finds it again.
    private var resumePort: Int?
    /// Per peer: when it became active, and how often it came back.
    private var presence: [UUID: (since: ContinuousClock.Instant, reconnects: Int)] = [:]
    nonisolated let work: AsyncStream<Work>.Continuation
    private let workItems: AsyncStream<Work>

    /// Where a session is in its life; ``run()`` moves it along.
    enum Lifecycle: Equatable {
        /// Made, not yet run.
        case idle
        /// Listening on this port, advertising, dialling and accepting.
        case running(port: Int)
        /// Between ``suspend()`` and ``resume()``: no links, no listener, no advertisement;
        /// outboxes and subscriptions kept. Also while the listener is set up again on resume.
        case suspended
        /// ``run()`` has returned (or is returning): nothing runs again.
        case stopped
    }

    enum Work: Sendable {
        case dial(LinkID, DialTarget, Dial)
        case redial(DialTarget.Key, after: Duration)
        /// Ask discovery to look the peer up again.
        case lookUpAgain(UUID)
        case close(LinkHandle, GoodbyeReason)
        case flush(UUID, LinkID)
        case acknowledged(LinkID, UUID, UInt64, PartialMessage?)
        /// Tell the peer that a reliable message from it did not decode here (REJECT).
        case reject(Peer, Rejection)
        /// The peer sent REJECT on the link.
        case rejected(LinkID, UUID, Rejection)
        /// Report the inbound failures held back, after this delay.
        case reportHeldFailures(after: Duration)
        case suspend
        case resume
        case stop
    }

    /// Creates a session; nothing happens on the network until ``run()``.
    ///
    /// - Parameters:
    ///   - configuration: The service type, this peer's name, the group key and the limits.
    ///   - identity: This device's key pair; ``peerID`` is derived from it. Load it from a file
    ///     (`PeerIdentity(loadingOrCreatingFile:)`) so the device keeps its ID across restarts:
    ///     its peers then know it again, and what they queued for it reaches it. A new
    ///     `PeerIdentity()` makes a stranger on every run (for tests and one-off tools).
    public init(configuration: Configuration, identity: PeerIdentity) {
        self.configuration = configuration
        self.identity = identity
        self.peerID = identity.peerID
        self.incarnation = Self.nextIncarnation()
        self.table = PeerTableStateMachine(localPeerID: peerID, backoff: configuration.reconnect.backoff)
        var logger = configuration.logger
        logger[metadataKey: "multipeer.local.id"] = "\(peerID)"
        self.logger = logger
        self.metrics = SessionMetrics(localName: configuration.peer.displayName)
        let (workItems, work) = AsyncStream<Work>.makeStream(of: Work.self)
        (self.workItems, self.work) = (workItems, work)
        self.subscriptions = Subscriptions(limits: configuration.limits, metrics: metrics) { work.yield(.reject($0, $1)) }
        self.roster = configuration.roster
        self.keys = configuration.keys
    }

    private static let lastIncarnation = NIOLockedValueBox<UInt64>(0)

    /// The wall clock in nanoseconds since 1970, and never twice the same in one process: a
    /// restart of the same identity is newer by this measure (docs/PROTOCOL.md, 3).
    private static func nextIncarnation() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let wallClock = UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
        return lastIncarnation.withLockedValue { last in
            last = max(wallClock, last + 1)
            return last
        }
    }

    /// What happens in the session: first its state now (``SessionEvent/listening(port:)`` while
    /// it listens, ``SessionEvent/peerJoined(_:)`` for each active peer), then each event as it
    /// happens. Each access is a new subscription, bounded (``EventStream``); it ends when the
    /// session stops.
    public nonisolated var events: EventStream { subscriptions.events() }

    /// The peers whose links are authenticated, HELLO-complete and admitted by both sides.
    public var activePeers: [Peer] {
        table.activePeers.values.map(Peer.init).sorted { $0.id.uuidString < $1.id.uuidString }
    }

    // MARK: Running

    /// Listens, advertises, browses, dials and accepts until the task is cancelled. Leaves no
    /// task, socket or advertisement behind. A session runs once.
    public func run() async throws {
        guard lifecycle == .idle else { throw MultipeerError(.sessionState, "this session has already run; make a new one") }
        lifecycle = .suspended
        defer {
            releaseWaiters()
            subscriptions.finish()
        }
        let linkConfiguration = try makeLinkConfiguration()
        let discovery = try makeDiscovery()
        do {
            // A graceful shutdown stops in order (GOODBYE on every link, then the listener and the
            // advertisement); cancellation stops at once, each link saying GOODBYE as it goes.
            try await withGracefulShutdownHandler {
                try await runUntilStopped(linkConfiguration, discovery)
            } onGracefulShutdown: { [work] in
                work.yield(.stop)
            }
        } catch is CancellationError {
            // Cancellation (or a graceful shutdown) is how a session stops, not a failure.
        }
    }

    /// The port the session listens on while it runs (the one it chose, when
    /// ``Configuration/port`` is 0); nil before ``run()``, while suspended and once stopped.
    public var listeningPort: Int? {
        if case .running(let port) = lifecycle { port } else { nil }
    }

    private func runUntilStopped(_ linkConfiguration: LinkConfiguration, _ discovery: DiscoverySetup) async throws {
        var items = workItems.makeAsyncIterator()
        while try await runActive(linkConfiguration, discovery, &items) {
            lifecycle = .suspended
            subscriptions.listening(nil)
            // Until resume (or the end), work queued before the suspend is still settled: a dial
            // the table asked for is reported as never made, so the table dials it again on
            // resume instead of waiting for it forever.
            var resumed = false
            suspended: while let item = await items.next(isolation: #isolation) {
                switch item {
                case .resume:
                    resumed = true
                    break suspended
                case .stop: return
                case .dial(let id, _, _): linkClosed(id, goodbye: nil, error: nil)
                case .close(let handle, let reason): await handle.close(reason, within: goodbyeTimeout)
                case .flush(let peerID, let link): deliveries[peerID]?.flushAbandoned(link)
                case .acknowledged(let id, let peerID, let sequence, let partial):
                    acknowledged(through: sequence, partial: partial, by: peerID, on: id)
                case .reject(let peer, let rejection): reject(rejection, from: peer)
                case .rejected(let id, let peerID, let rejection): rejected(rejection, by: peerID, on: id)
                case .reportHeldFailures: reportHeldFailures()
                case .redial, .lookUpAgain, .suspend: break  // the table dials what it must on resume
                }
            }
            guard resumed else { return }
        }
    }

    /// Takes the session into the background: links and advertisement go, the peer table and
    /// subscriptions stay. Does nothing if the session is not running.
    public func suspend() {
        work.yield(.suspend)
    }

    /// Asks for a suspend and, before the run loop sees it, discovers `endpoint`: the dial that
    /// discovery asks for reaches the run loop after the suspend (for a test of that race).
    package func suspend(discoveringMeanwhile endpoint: String) throws {
        work.yield(.suspend)
        for advert in try StaticPeers([endpoint]).adverts { discovered(.found(advert)) }
    }

    /// Brings the session back: listens on the port it had (so peers that dial it by address
    /// find it again; if something took the port meanwhile, ``SessionEvent/listenFailed(port:_:)``
    /// says so and it listens on another, which it advertises), advertises again and dials every
    /// known peer at once.
    public func resume() {
        work.yield(.resume)
    }

    /// One stretch of running, until suspended (returns true) or stopped (returns false).
    private func runActive(
        _ linkConfiguration: LinkConfiguration, _ discovery: DiscoverySetup, _ items: inout AsyncStream<Work>.Iterator
    ) async throws -> Bool {
        let listener = try await listen(linkConfiguration)
        logger.info("listening", metadata: ["multipeer.port": "\(listener.port)"])
        lifecycle = .running(port: listener.port)
        subscriptions.listening(listener.port)
        let advertiser = startAdvertising(discovery, port: listener.port)
        perform(table.restart())

        return try await withThrowingDiscardingTaskGroup { group in
            group.addTask {
                do {
                    try await listener.run(
                        onLink: { link in await self.serveInbound(link) },
                        onFailure: { address, error in await self.handshakeFailed(address?.displayString ?? "unknown", error, inbound: true) })
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
                    while (try? await Task.sleep(for: interval)) != nil { await self.reportStats() }
                }
            }
            var suspended = false
            // Ends with .suspend, .stop, or cancellation.
            loop: while let item = await items.next(isolation: #isolation) {
                switch item {
                case .dial(let id, let target, let dial):
                    group.addTask { await self.dial(id, target, dial, linkConfiguration, discovery.source) }
                case .lookUpAgain(let peerID):
                    discovery.source.refresh(peerID)
                case .redial(let key, let delay):
                    group.addTask {
                        try? await Task.sleep(for: delay)
                        await self.redialDue(key)
                    }
                case .close(let handle, let reason):
                    group.addTask { await handle.close(reason, within: self.goodbyeTimeout) }
                case .flush(let peerID, let link):
                    group.addTask { await self.flush(peerID, on: link) }
                case .acknowledged(let id, let peerID, let sequence, let partial):
                    acknowledged(through: sequence, partial: partial, by: peerID, on: id)
                case .reject(let peer, let rejection):
                    reject(rejection, from: peer)
                case .rejected(let id, let peerID, let rejection):
                    rejected(rejection, by: peerID, on: id)
                case .reportHeldFailures(let delay):
                    group.addTask {
                        try? await Task.sleep(for: delay)
                        await self.reportHeldFailures()
                    }
                case .suspend:
                    suspended = true
                    break loop
                case .stop:
                    break loop
                case .resume:
                    continue
                }
            }
            // Say goodbye on every link, then stop accepting and advertising.
            let reason: GoodbyeReason = suspended ? .suspended : .shutdown
            let stopping = table.stop(reason)
            var closing: [LinkHandle] = []
            for action in stopping {
                if case .close(let id, _) = action, let handle = links[id] { closing.append(handle) } else { perform([action]) }
            }
            // All at once: each may take up to the GOODBYE timeout, behind a peer that reads slowly.
            let timeout = goodbyeTimeout
            await withDiscardingTaskGroup { goodbyes in
                for handle in closing { goodbyes.addTask { await handle.close(reason, within: timeout) } }
            }
            advertiser?.stop()
            await listener.close()
            group.cancelAll()
            return suspended
        }
    }

    /// Binds the listener: the first time to the configured port, where a failure is the run's;
    /// on resume to ``resumePort``, and if something took that meanwhile, it is reported
    /// (``SessionEvent/listenFailed(port:_:)``) and another is bound, which is advertised: the
    /// session stays reachable by discovery.
    private func listen(_ linkConfiguration: LinkConfiguration) async throws -> PeerListener {
        let listener: PeerListener
        do {
            listener = try await PeerListener.bind(port: resumePort ?? configuration.port, configuration: linkConfiguration, limits: configuration.limits)
        } catch let error as MultipeerError {
            guard let resumePort else { throw error }
            logger.warning("cannot listen on the same port again; listening on another", metadata: [
                "multipeer.port": "\(resumePort)", "multipeer.error": "\(error)"])
            subscriptions.emit(.listenFailed(port: resumePort, error))
            listener = try await PeerListener.bind(port: 0, configuration: linkConfiguration, limits: configuration.limits)
        }
        resumePort = configuration.port == 0 ? listener.port : configuration.port
        return listener
    }

    // MARK: Links

    private nonisolated func serveInbound(_ connection: PeerConnection) async {
        let id = await acceptedLink()
        await runLink(id, connection)
    }

    private func acceptedLink() -> LinkID { table.acceptedLink() }

    /// How soon an endpoint that accepted a dial's connection must answer (send its first
    /// bytes: a peer's ServerHello comes a round trip after the connection): a fifth of the
    /// handshake timeout, 1 s by default. An advert pointing at a sink that accepts TCP and says
    /// nothing costs a dial this much, not the whole handshake timeout.
    static func answerTimeout(_ configuration: LinkConfiguration) -> Duration {
        configuration.tls.configuration.handshakeTimeout / 5
    }

    /// A dial's events: made with the dial action, so nothing the table says after it is lost.
    struct Dial: Sendable {
        let stream: AsyncStream<AttemptEvent>
        let events: AsyncStream<AttemptEvent>.Continuation

        init() { (stream, events) = AsyncStream<AttemptEvent>.makeStream() }
    }

    /// What a dial hears: its attempt, and discovery.
    enum AttemptEvent: Sendable {
        /// Discovery named more endpoints of the target.
        case added([DialTarget.Endpoint])
        /// Attempt `index` proved the peer; it carries the link now.
        case established(Int)
        case failed(Int, MultipeerError)
    }

    /// Dials `target`'s endpoints one at a time, best first, and endpoints discovery adds
    /// meanwhile after them, until one proves the peer. One at a time, so two links to the same
    /// peer never race through their handshakes (each side would keep another). Each endpoint
    /// that fails (no TCP answer, no first bytes within ``answerTimeout(_:)``, a refusal, someone
    /// else's HELLO) is reported to the table, which tries it last next time; when all fail,
    /// discovery looks the peer up again.
    private nonisolated func dial(
        _ id: LinkID, _ target: DialTarget, _ dial: Dial, _ configuration: LinkConfiguration, _ discovery: any PeerDiscovery
    ) async {
        var lastError: MultipeerError?
        var endpoints = target.endpoints
        await withTaskGroup(of: Void.self) { group in
            var started = 0
            var linked = false
            func startNext() -> Bool {
                guard started < endpoints.count else { return false }
                let (index, endpoint) = (started, endpoints[started])
                started += 1
                group.addTask { await self.attempt(id, index, endpoint, of: target, configuration, events: dial.events) }
                return true
            }
            if startNext() {
                attempts: for await event in dial.stream {
                    switch event {
                    case .added(let more):
                        endpoints += more
                    case .failed(let index, let error):
                        lastError = error
                        await self.endpointFailed(target.key, endpoints[index], error)
                        if !startNext() { break attempts }
                    case .established(let index):
                        await self.endpointProved(target.key, endpoints[index])
                        linked = true
                        break attempts
                    }
                }
            }
            dial.events.finish()
            // A link made is closed by its own attempt, when it ends: the group waits for it.
            guard !linked else { return }
            if let peerID = target.peerID { discovery.refresh(peerID) }
            await self.linkClosed(id, goodbye: nil, error: lastError)
        }
    }

    /// One endpoint of a dial: the newest group key first, then the older ones (the peer may not
    /// hold the newest yet: a key rotation under way). A refused key is reported only if no key
    /// is taken. The link it makes, it carries until the link ends (as link `id`).
    private nonisolated func attempt(
        _ id: LinkID, _ index: Int, _ endpoint: DialTarget.Endpoint, of target: DialTarget, _ configuration: LinkConfiguration,
        events: AsyncStream<AttemptEvent>.Continuation
    ) async {
        var failure: MultipeerError?
        for key in configuration.tls.keys.keys.reversed() {
            do {
                let connection = try await PeerConnection.connect(
                    host: endpoint.host, port: endpoint.port, configuration: configuration, offering: key.identity, expecting: target.peerID,
                    answerTimeout: Self.answerTimeout(configuration)
                ).established()
                guard case .terminated = events.yield(.established(index)) else { return await runLink(id, connection) }
                // The dial is over (the session is stopping, and the dial reported): close it here.
                try? await connection.channel.executeThenClose { _, _ in
                    await LinkHandle.sayGoodbye(.shutdown, on: connection.channel.channel, within: self.goodbyeTimeout)
                }
                return
            } catch {
                failure = error as? MultipeerError ?? MultipeerError(.connectionFailed, "cannot connect to \(endpoint)", underlying: "\(error)")
                if failure?.code != .authenticationFailed { break }
            }
        }
        if let failure { events.yield(.failed(index, failure)) }
    }

    private func endpointProved(_ key: DialTarget.Key, _ endpoint: DialTarget.Endpoint) {
        table.endpointProved(key, endpoint)
    }

    private func endpointFailed(_ key: DialTarget.Key, _ endpoint: DialTarget.Endpoint, _ failure: MultipeerError) {
        table.endpointFailed(key, endpoint)
        handshakeFailed(endpoint.description, failure, refusalOf: Self.refusalKey(key))
    }

    /// Names a dial target in ``reportedRefusals``.
    private static func refusalKey(_ key: DialTarget.Key) -> String {
        switch key {
        case .peer(let peerID): "\(peerID)"
        case .endpoint(let endpoint): endpoint
        }
    }

    /// Carries one established link until it closes, on the link's event loop.
    private nonisolated func runLink(_ id: LinkID, _ connection: PeerConnection) async {
        let peer = Peer(connection.remoteHello)
        var goodbye: GoodbyeReason?
        var failure: MultipeerError?
        do {
            try await withTaskExecutorPreference(connection.executor) {
                try await connection.channel.executeThenClose { inbound, _ in
                    // Closed at once if the table keeps another link, or the session is stopping.
                    var closing = await self.linkEstablished(id, connection)
                    if closing == nil {
                        do {
                            for try await message in inbound {
                                switch message {
                                case .ack(let sequence, let partial):
                                    // Handed to the run loop: the reader never waits for the actor,
                                    // so a busy sender cannot stall its own link (and its keepalive).
                                    self.work.yield(.acknowledged(id, peer.id, sequence, partial))
                                case .reject(let rejection):
                                    self.work.yield(.rejected(id, peer.id, rejection))
                                case .goodbye(let reason, _):
                                    goodbye = reason
                                    return
                                case .data, .fragment, .hello, .ping, .pong, .flow, .unknown:
                                    break  // DATA went to the subscriptions on the event loop (DeliveryHandler)
                                }
                            }
                        } catch is CancellationError {}
                        if Task.isCancelled { closing = .shutdown }
                    }
                    if let closing { await LinkHandle.sayGoodbye(closing, on: connection.channel.channel, within: goodbyeTimeout) }
                }
            }
        } catch is CancellationError {
            // The session is stopping; the table knows.
        } catch {
            failure = error as? MultipeerError ?? MultipeerError(.connectionFailed, "the link to \(peer) failed", underlying: "\(error)")
        }
        await linkClosed(id, goodbye: goodbye, error: failure)
    }

    /// Records an established link; returns the GOODBYE reason if the link is to close at once.
    private func linkEstablished(_ id: LinkID, _ connection: PeerConnection) -> GoodbyeReason? {
        dials[id] = nil
        let hello = connection.remoteHello
        if let roster, !roster.admits(hello.key) {
            let address = connection.remoteAddress?.displayString ?? "unknown"
            let refusal = MultipeerError(
                .notInRoster,
                "peer \(hello.peerID) at \(address) (\(hello.displayName), key \(hello.key.fingerprint)) proved its key, but the roster does not list it: its link is refused")
            handshakeFailed(address, refusal, refusalOf: "\(hello.peerID)")
            // Never a link of the session (its own task closes it); a dial of it waits long.
            perform(table.linkClosed(id, error: refusal))
            return .notInRoster
        }
        links[id] = LinkHandle(
            id: id, peerID: hello.peerID, address: connection.remoteAddress?.displayString ?? "unknown",
            channel: connection.channel.channel, quality: connection.quality)
        metrics.linkOpened()
        let actions = table.linkEstablished(id, hello: hello)
        var closing: GoodbyeReason?
        perform(actions.filter { action in
            guard case .close(id, let reason) = action else { return true }
            closing = reason  // this very link: its own task closes it
            return false
        })
        // The link the table keeps for the peer (a new peer's, or one that replaced another) takes
        // the peer's receive window and says where the peer resumes; it carries delivery, and the
        // peer joins, once the peer's resume point says it kept the link too (``acknowledged``).
        if table.activeLink(for: hello.peerID) == id {
            connection.channel.channel.triggerUserOutboundEvent(LinkAdopted(), promise: nil)
        }
        return closing
    }

    private func linkClosed(_ id: LinkID, goodbye: GoodbyeReason?, error: MultipeerError?) {
        dials[id] = nil
        if let error, error.code == .keepaliveTimeout, let handle = links[id] {
            // The peer leaves with the reason alone; what the silence showed is told here.
            logger.info("link timed out", metadata: ["multipeer.peer.id": "\(handle.peerID)", "multipeer.link": "\(id.rawValue)", "multipeer.detail": "\(error.message)"])
        }
        if goodbye == .notInRoster, let handle = links[id], !table.isAdmitted(id) {
            // Refused by the peer before it ever took the link: never joined, so never left.
            handshakeFailed(handle.address, MultipeerError(
                .notInRoster,
                "peer \(handle.peerID) at \(handle.address) refused this device: its roster does not list this device's key \(identity.key.fingerprint). It is dialled again only every \(configuration.reconnect.backoff.maximum) or so, until its advert or this session's roster or keys change"),
                refusalOf: "\(handle.peerID)")
        }
        if let handle = links.removeValue(forKey: id) {
            metrics.linkClosed(reason: goodbye.map { "\($0)" } ?? (error == nil ? "closed" : "error"))
            perform(deliveries[handle.peerID]?.linkDown(id, now: .now) ?? [], for: handle.peerID)
            if table.activeLink(for: handle.peerID) == id, table.isJoining(handle.peerID) {
                senders.wake(handle.peerID)  // those waiting for the peer to join on it
            }
        }
        perform(table.linkClosed(id, goodbye: goodbye, error: error))
    }

    /// Replaces the group keys (``Configuration/keys``): from now on links are accepted with any
    /// of `keys` and dialled with the newest first. Links already up stay up.
    ///
    /// To rotate a group's key, add the new key to every peer's ring, then remove the old one
    /// from every peer's ring: at each step every pair of peers holds a key in common.
    public func updateKeys(_ keys: KeyRing) throws {
        try tls?.update(keys)
        self.keys = keys
        logger.info("group keys updated", metadata: ["multipeer.keys": "\(keys)"])
        reconsiderRefusals()
    }

    /// The roster or keys changed: peers refused for who they are, or who this device is, may be
    /// admitted now. They are dialled again at once, and a refusal is reported again.
    private func reconsiderRefusals() {
        reportedRefusals.removeAll()
        perform(table.reconsiderRefusals())
    }

    /// Replaces the roster (``Configuration/roster``; nil admits any holder of the group key).
    /// Links of active peers it no longer lists close at once (GOODBYE `notInRoster`), and each
    /// leaves with `PeerLeftReason.local(.notInRoster)`; their later links are refused.
    public func updateRoster(_ roster: Roster?) {
        self.roster = roster
        defer { reconsiderRefusals() }
        guard let roster else { return }
        for (peerID, hello) in table.activePeers.sorted(by: { $0.key.uuidString < $1.key.uuidString }) where !roster.admits(hello.key) {
            logger.notice("peer removed by the roster", metadata: ["multipeer.peer.id": "\(peerID)", "multipeer.peer.key": "\(hello.key.fingerprint)"])
            perform(table.refuse(peerID, .notInRoster))
        }
    }

    /// How the link to `peerID` is doing, if the peer is active.
    public func linkStats(for peerID: UUID) -> LinkStats? {
        guard let id = table.activeLink(for: peerID), let handle = links[id], let presence = presence[peerID] else { return nil }
        return LinkStats(quality: handle.quality.quality, reconnects: presence.reconnects, timeActive: ContinuousClock.now - presence.since)
    }

    private func reportStats() {
        for (peerID, hello) in table.activePeers {
            if let stats = linkStats(for: peerID) { subscriptions.emit(.stats(Peer(hello), stats)) }
        }
    }

    /// Established links, counting any duplicate not yet closed (for tests).
    package var linkCount: Int { links.count }

    func activePeerIDs() -> [UUID] {
        Array(table.activePeers.keys)
    }

    func channel(for id: LinkID) -> (any Channel)? {
        links[id]?.channel
    }

    /// How long a closing link's GOODBYE may take (Limits.goodbyeTimeout).
    nonisolated var goodbyeTimeout: TimeAmount { TimeAmount(configuration.limits.goodbyeTimeout) }

    private func redialDue(_ key: DialTarget.Key) {
        perform(table.redialDue(key))
    }

    /// A connection failed before its peer became active: one this session dialled, or (when
    /// `inbound`) one made to it, which anyone on the network can make as often as they like.
    /// So inbound failures are reported one by one up to ten at once, then at most once a second
    /// per error code: the event and log line of that one, and
    /// ``SessionEvent/connectionsFailed(count:code:)`` with how many were not reported one by one
    /// since (or, when none comes after a flood, a second later). The
    /// `multipeer_connections_failed_total` metric counts every failure.
    ///
    /// A refusal retrying cannot change (``PeerTableStateMachine/isLastingRefusal(goodbye:error:)``)
    /// of a known peer or dialled target (`refusalOf`) is reported once per peer and code, then
    /// only counted, until the roster or keys change or the peer is admitted.
    private func handshakeFailed(_ address: String, _ error: any Error, inbound: Bool = false, refusalOf peer: String? = nil) {
        let failure = error as? MultipeerError ?? MultipeerError(.connectionFailed, "the connection with \(address) failed", underlying: "\(error)")
        metrics.connectionFailed(code: failure.code, inbound: inbound)
        if let peer, PeerTableStateMachine.isLastingRefusal(goodbye: nil, error: failure),
           !reportedRefusals.insert(Refusal(peer: peer, code: failure.code)).inserted {
            logger.debug("refused again", metadata: ["multipeer.address": "\(address)", "multipeer.code": "\(failure.code)"])
            return
        }
        if inbound {
            guard let count = inboundFailures[failure.code, default: ReportThrottle(burst: 10)].count() else {
                // Held back: reported with the next of its code, or in a second if none comes.
                if !heldFailuresReportDue {
                    heldFailuresReportDue = true
                    work.yield(.reportHeldFailures(after: .seconds(1)))
                }
                return
            }
            if count > 1 {
                logger.notice("inbound connections failed", metadata: ["multipeer.failed": "\(count - 1)", "multipeer.code": "\(failure.code)"])
                subscriptions.emit(.connectionsFailed(count: count - 1, code: failure.code))
            }
        }
        logger.notice("link failed", metadata: ["multipeer.address": "\(address)", "multipeer.error": "\(failure)"])
        if [.authenticationFailed, .identityMismatch, .badSignature, .notInRoster].contains(failure.code) {
            subscriptions.emit(.authenticationFailed(address: address, failure))
        } else {
            subscriptions.emit(.connectionFailed(address: address, failure))
        }
    }

    /// Reports the inbound failures held back since their code's last report.
    private func reportHeldFailures() {
        heldFailuresReportDue = false
        for code in inboundFailures.keys.sorted(by: { $0.description < $1.description }) {
            let count = inboundFailures[code]!.takeHeld()
            guard count > 0 else { continue }
            logger.notice("inbound connections failed", metadata: ["multipeer.failed": "\(count)", "multipeer.code": "\(code)"])
            subscriptions.emit(.connectionsFailed(count: count, code: code))
        }
    }

    // MARK: Discovery

    private func discovered(_ event: BrowseEvent) {
        switch event {
        case .found(let advert):
            logger.debug("found", metadata: ["multipeer.peer.id": "\(advert.peerID?.uuidString ?? "static")", "multipeer.endpoints": "\(advert.endpoints)"])
            perform(table.discovered(DialTarget(
                peerID: advert.peerID, incarnation: advert.incarnation,
                endpoints: advert.endpoints.map { DialTarget.Endpoint(host: $0.host, port: $0.port) })))
        case .lost(let peerID):
            perform(table.lost(peerID))
        }
    }

    private func advertisement(_ event: AdvertisementEvent) {
        switch event {
        case .established(let name): logger.debug("advertised", metadata: ["multipeer.advert.name": "\(name)"])
        case .renamed(let name): logger.info("advertised under another name", metadata: ["multipeer.advert.name": "\(name)"])
        case .withdrawn: logger.warning("advertisement withdrawn: avahi-daemon went away; it comes back with the daemon")
        case .failed(let error): subscriptions.emit(.advertisingFailed(error))
        }
    }

    // MARK: Actions

    /// The peer's resume point arrived on link `id`: the peer admitted it.
    func admitted(_ id: LinkID) {
        perform(table.linkAdmitted(id))
    }

    /// The link kept for `peerID`, and its HELLO, while the peer is active.
    func joinedLink(of peerID: UUID) -> (id: LinkID, hello: Hello)? {
        table.joinedLink(of: peerID)
    }

    /// Whether this side keeps a link for `peerID` that the peer has not admitted yet (its
    /// resume point is on its way); its senders are woken when it is, or when the link closes.
    func isJoining(_ peerID: UUID) -> Bool {
        table.isJoining(peerID)
    }

    private func perform(_ actions: [PeerTableStateMachine.Action]) {
        for action in actions {
            switch action {
            case .dial(let id, let target):
                let dial = Dial()
                dials[id] = dial.events
                work.yield(.dial(id, target, dial))
            case .addEndpoints(let id, let endpoints):
                dials[id]?.yield(.added(endpoints))
            case .lookUpAgain(let peerID):
                work.yield(.lookUpAgain(peerID))
            case .close(let id, let reason):
                if let handle = links[id] { work.yield(.close(handle, reason)) }
            case .linkAdmitted(let id, let hello):
                deliveries[hello.peerID, default: newDelivery(for: hello.peerID)]
                    .linkUp(id, incarnation: hello.incarnation, frameLimit: hello.maximumFrameLength, messageLimit: hello.maximumMessageLength)
                senders.wake(hello.peerID)  // those waiting for the peer to join
            case .peerJoined(let id, let hello):
                reportedRefusals = reportedRefusals.filter { $0.peer != "\(hello.peerID)" }
                let reconnects = presence[hello.peerID].map { $0.reconnects + 1 } ?? 0
                presence[hello.peerID] = (ContinuousClock.now, reconnects)
                logger.info("peer joined", metadata: ["multipeer.peer.id": "\(hello.peerID)", "multipeer.link": "\(id.rawValue)"])
                metrics.activePeers(table.activePeers.count)
                subscriptions.emit(.peerJoined(Peer(hello)))
            case .peerLeft(let hello, let reason):
                logger.info("peer left", metadata: ["multipeer.peer.id": "\(hello.peerID)", "multipeer.reason": "\(reason)"])
                perform(deliveries[hello.peerID]?.linkDown(now: .now) ?? [], for: hello.peerID)
                metrics.activePeers(table.activePeers.count)
                subscriptions.emit(.peerLeft(Peer(hello), reason))
            case .scheduleRedial(let key, let delay):
                work.yield(.redial(key, after: delay))
            }
        }
    }

    // MARK: Setup

    struct DiscoverySetup: Sendable {
        var source: any PeerDiscovery
        var avahi: AvahiConnection?
        var serviceType: ServiceType?
    }

    private func makeDiscovery() throws -> DiscoverySetup {
        switch configuration.discovery {
        case .avahi(let waitForDaemon):
            let serviceType = try ServiceType(configuration.serviceType)
            let connection = try AvahiConnection.shared(waitForDaemon: waitForDaemon, logger: logger)
            return DiscoverySetup(
                source: PeerBrowser(serviceType: serviceType, localPeerID: peerID, connection: connection),
                avahi: connection, serviceType: serviceType)
        case .staticPeers(let endpoints):
            return DiscoverySetup(source: try StaticPeers(endpoints))
        }
    }

    private func startAdvertising(_ discovery: DiscoverySetup, port: Int) -> PeerAdvertiser? {
        guard let connection = discovery.avahi, let serviceType = discovery.serviceType else { return nil }
        do {
            let txt = try AdvertTXT(
                peerID: peerID, incarnation: incarnation, displayName: configuration.peer.displayName,
                metadata: configuration.peer.metadata)
            return try PeerAdvertiser(serviceType: serviceType, port: port, txt: txt, connection: connection)
        } catch let error as MultipeerError {
            subscriptions.emit(.advertisingFailed(error))
            return nil
        } catch {
            return nil
        }
    }

    private func makeLinkConfiguration() throws -> LinkConfiguration {
        let hello = try Hello(
            identity: identity, incarnation: incarnation, displayName: configuration.peer.displayName,
            metadata: configuration.peer.metadata, keepalive: configuration.keepalive,
            maximumFrameLength: configuration.limits.maximumFrameLength,
            maximumMessageLength: configuration.limits.maximumMessageLength)
        let tls = try TLSContext(configuration: TLSConfiguration(keys: keys, handshakeTimeout: configuration.limits.handshakeTimeout))
        self.tls = tls
        // A write stuck on a dead path fails after the keepalive's stall limit (not the
        // configured timeout: on a lossy path TCP's retransmissions stall that long at times,
        // and the keepalive allows for it; a dead link is its keepalive's to find).
        let keepaliveTimeout = configuration.keepalive.timeout > .zero ? configuration.keepalive.timeout : KeepaliveParameters().timeout
        var link = LinkConfiguration(
            tls: tls, identity: identity, localHello: hello, maximumFrameLength: configuration.limits.maximumFrameLength,
            tcpUserTimeout: keepaliveTimeout * KeepaliveStateMachine.stallFactor)
        link.inbox = Inbox(
            windows: receiveWindows, subscriptions: subscriptions, metrics: metrics,
            maximumMessageLength: configuration.limits.maximumMessageLength)
        return link
    }
}

extension MultipeerSession: Service {}

/// What the session keeps of an established link to write to it and close it.
struct LinkHandle: Sendable {
    var id: LinkID
    /// The peer its HELLO named.
    var peerID: UUID
    /// Where the peer is, as its connection says (for errors).
    var address: String
    var channel: any Channel
    var quality: LinkQualityBox

    /// Says GOODBYE (best effort) and closes the link once it is written, or given up after
    /// `timeout`.
    func close(_ reason: GoodbyeReason, within timeout: TimeAmount) async {
        await Self.sayGoodbye(reason, on: channel, within: timeout)
        try? await channel.close()
    }

    /// Says GOODBYE and waits until it is written, or for at most `timeout`, after which the
    /// link is closed: a peer that stopped reading (its socket full) cannot hold a link, or a
    /// session's shutdown, open. The GOODBYE goes straight into the pipeline, not through the
    /// async writer, whose buffer could hold it back and which refuses cancelled tasks.
    static func sayGoodbye(_ reason: GoodbyeReason, on channel: any Channel, within timeout: TimeAmount) async {
        let cutoff = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        try? await channel.writeAndFlush(LinkMessage.goodbye(reason, "\(reason)"))
        cutoff.cancel()
    }
}
