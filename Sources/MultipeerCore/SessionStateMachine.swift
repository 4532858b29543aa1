package import struct Foundation.UUID

/// The session's decisions, without I/O: what a ``PeerTableStateMachine`` decides about links,
/// composed with admission (the roster, and refusals reported once), the sequence of a dial
/// (endpoints in the order they earned, each with the newest group key first, then the older
/// ones), which link each peer's delivery goes on (``Action/bind(_:_:reads:)``), the reports of
/// failed connections (inbound ones throttled), presence, and the session's lifecycle. The shell
/// (the `MultipeerSession` actor) feeds it what happened, with the time, and carries out the
/// ``Action``s it returns, in order.
///
/// Each peer's delivery (its ``PeerDeliveryStateMachine``) is not here: senders and the link's
/// reader drive it from their own tasks, behind a lock of its own, so a message does not wait
/// for the session. This core says only when a peer's delivery moves onto a link and off it.
package struct SessionStateMachine: Sendable {
    /// Where a session is in its life.
    package enum Lifecycle: Equatable, Sendable {
        /// Made, not yet run.
        case idle
        /// Listening on this port, advertising, dialling and accepting.
        case running(port: Int)
        /// Stopping running (a suspend or the end): saying GOODBYE on every link; the listener
        /// still holds its port until ``stoppedListening()``.
        case stopping(port: Int)
        /// Not listening: before the first listener is up, and between a suspend and a resume
        /// (no links, no listener, no advertisement; outboxes and subscriptions kept).
        case suspended
        /// The run has ended: nothing runs again.
        case stopped
    }

    /// One connection attempt of a dial: an endpoint, offering one of the group's keys.
    package struct Attempt: Equatable, Sendable {
        package var endpoint: DialTarget.Endpoint
        /// The peer the advert names (nil for a static endpoint): a HELLO naming another fails.
        package var peerID: UUID?
        /// Which group key to offer: 0 the newest, then the older ones in turn.
        package var key: Int

        package init(endpoint: DialTarget.Endpoint, peerID: UUID?, key: Int) {
            self.endpoint = endpoint
            self.peerID = peerID
            self.key = key
        }
    }

    /// Something the shell calls back about (``fired(_:now:)``) once a delay has passed.
    package enum Timer: Hashable, Sendable {
        /// A redial of the target is due.
        case redial(DialTarget.Key)
        /// The inbound failures held back are to be reported.
        case heldFailuresReport
    }

    package enum Action: Equatable, Sendable {
        /// Connect to the attempt's endpoint as link `id`, offering its key; report the outcome
        /// with ``linkEstablished(_:hello:address:now:)`` or ``attemptFailed(_:_:now:)``.
        case connect(LinkID, Attempt)
        /// Ask discovery to look the peer up again: its link failed, and it may have moved.
        case lookUpAgain(UUID)
        /// Close the link, saying GOODBYE with the reason first.
        case close(LinkID, GoodbyeReason)
        /// The link is the one kept for its peer: it takes the peer's receive window and sends
        /// where the peer resumes.
        case adopt(LinkID)
        /// Both sides admitted the link: the peer's delivery goes on it, from the resume point
        /// that admitted it (apply that ACK to the delivery next), sending only the message types
        /// the peer reads.
        case bind(LinkID, Hello, reads: MessageTypesRead)
        /// The peer's delivery leaves link `id` (nil: whatever link it is on); unreliable
        /// messages waiting for it are lost.
        case unbind(UUID, LinkID?)
        /// Send REJECT on the link.
        case sendReject(LinkID, Rejection)
        /// Tell the link's peer which message types this side reads now (TYPES).
        case sendTypes(LinkID, MessageTypesRead)
        /// The peer says on link `id` which message types it reads from now on: its delivery
        /// on that link sends only those.
        case peerReads(UUID, LinkID, MessageTypesRead)
        /// Wake the senders waiting for the peer to join (its joining link closed).
        case wakeSenders(UUID)
        /// Call back about the timer after the delay.
        case schedule(Timer, after: Duration)
        /// The peer is active now, on this link.
        case peerJoined(LinkID, Hello)
        /// The application may have what link `id` brings from now on: the peer's joining, if it
        /// joined with the link, has been told (the actions before this one), so no message of a
        /// peer reaches the application before its ``peerJoined(_:_:)``.
        case admitMessages(LinkID)
        case peerLeft(Hello, PeerLeftReason)
        /// Tell the application, the logs or the metrics.
        case report(Report)
        /// The run has ended: what the session holds for the application ends with it (senders,
        /// transfers, streams and subscriptions fail or finish), and nothing is taken in again.
        case ended
    }

    /// What the shell tells the application, the logs or the metrics.
    package enum Report: Equatable, Sendable {
        /// A connection failed before its peer became active. Every one is counted; how it is
        /// told is its disposition's.
        case connectionFailed(address: String, MultipeerError, inbound: Bool, Disposition)
        /// Inbound connections of this code failed, and were not reported one by one.
        case connectionsFailed(count: Int, code: MultipeerError.Code)
        /// The peer could not decode a reliable message this side sent it.
        case rejectedByPeer(Hello, Rejection)
        /// A reliable message from this peer did not decode here, and the incarnation that sent
        /// it is not active, so it cannot be told.
        case rejectionNotSent(UUID, Rejection)
        /// A REJECT that was not on the peer's kept link, or named a message not sent.
        case rejectIgnored(UUID, Rejection)
        /// The link's keepalive found it silent: what the silence showed.
        case linkTimedOut(LinkID, UUID, MultipeerError)
        /// The peer is active again (reported before its join), `after` it left on a failure
        /// (a keepalive timed out, its link failed, or it said GOODBYE for any reason but its
        /// shutdown or suspend): how long the redial took to bring it back.
        case rejoined(UUID, after: Duration)
        /// What the active peer reads changed (its TYPES, on the link it joined on).
        case peerReadsChanged(Hello)
        /// The message types this side reads no longer fit in a list: from now on it reads
        /// every type but those it refused, and holds the others for a first subscriber.
        case typesOutgrown
    }

    /// How a failed connection is told.
    package enum Disposition: Equatable, Sendable {
        /// As an event and a log line; `held` failures of its code held back before it are
        /// reported first (``Report/connectionsFailed(count:code:)``).
        case reported(held: Int)
        /// The same lasting refusal of the same peer again: logged at debug level only.
        case refusedAgain
        /// One of a flood of inbound failures: counted, reported later with the others.
        case heldBack
    }

    /// What ``linkEstablished(_:hello:address:now:)`` made of a link.
    package enum Establishment: Equatable, Sendable {
        /// The session carries the link; `closing`, if set, is the GOODBYE its own task closes
        /// it with at once (another link is kept for the peer, or the session is stopping).
        case carried(closing: GoodbyeReason?, [Action])
        /// The roster refused the peer: the link is no link of the session; close it with
        /// GOODBYE `notInRoster`.
        case refused([Action])
    }

    /// A peer's presence in this session, kept from its first join.
    private struct Presence {
        /// When it became active this time.
        var since: ContinuousClock.Instant
        /// How often it became active again after leaving.
        var reconnects: Int
        /// When it left on a failure, until it is back.
        var failedAt: ContinuousClock.Instant?
    }

    /// A dial under way: its target's endpoints, best first, and the attempt at hand.
    private struct Dial {
        var target: DialTarget
        var endpoint = 0
        var key = 0
        /// The key ring its key indexes (``keyRing``): a ring changed since reorders the keys.
        var ring: Int

        var attempt: Attempt { Attempt(endpoint: target.endpoints[endpoint], peerID: target.peerID, key: key) }
    }

    /// A link the session carries (it finished TLS and HELLO, and the roster admitted it).
    private struct Carried {
        var peerID: UUID
        /// Where the peer is, as its connection says (for reports).
        var address: String
        /// The message types this side last told the peer it reads (in HELLO, then TYPES).
        var announced: MessageTypesRead
        /// The message types the peer last said it reads (its HELLO, then TYPES).
        var peerReads: MessageTypesRead
        /// Whether the peer takes TYPES (its HELLO said so): it hears when what this side reads changes.
        var peerTakesTypes: Bool
    }

    /// A lasting refusal reported once: of whom (a peer ID, or a dialled endpoint), and why.
    private struct Refusal: Hashable {
        var peer: String
        var code: MultipeerError.Code
    }

    package let localPeerID: UUID
    /// This device's key, named in a refusal by a peer's roster.
    private let localKey: PeerKey
    /// How redials back off (its maximum is named in a refusal).
    private let backoff: ReconnectParameters
    package private(set) var lifecycle = Lifecycle.idle
    private var table: PeerTableStateMachine
    private var dials: [LinkID: Dial] = [:]
    private var carried: [LinkID: Carried] = [:]
    /// Who is admitted beyond holding the group key; nil admits every holder.
    package private(set) var roster: Roster?
    /// How many group keys a dial may offer.
    private var keyCount: Int
    /// Counts the key rings held: one more at every change (``keysChanged(count:now:)``).
    private var keyRing = 0
    /// The port configured (0: any the system chooses).
    private let configuredPort: Int
    /// The port to listen on again on a resume, once the session has listened: the configured
    /// one, or (0 configured) the one the system chose, so a peer that reaches this session by
    /// its address finds it again.
    private var resumePort: Int?
    /// Lasting refusals reported once per peer (or dialled endpoint) and cause, then only
    /// counted, until the roster or keys change or the peer is admitted.
    private var reportedRefusals: Set<Refusal> = []
    /// Inbound failures per code: ten reported at once, then one a second.
    private var inboundFailures: [MultipeerError.Code: ReportThrottle] = [:]
    private var heldFailuresReportDue = false
    /// Per peer: when it became active, how often it came back, and when it last left on a
    /// failure (until it is back).
    private var presence: [UUID: Presence] = [:]
    /// The availability the shell was last told of (``availabilityChanges()``).
    private var availability: [UUID: AvailablePeer] = [:]

    /// - Parameters:
    ///   - keyCount: How many group keys the session holds (``keysChanged(count:now:)``).
    ///   - port: The port configured (0: any the system chooses).
    ///   - seed: Seeds the backoff jitter, so tests can repeat a run exactly.
    package init(
        localPeerID: UUID,
        localKey: PeerKey,
        backoff: ReconnectParameters,
        roster: Roster?,
        keyCount: Int,
        port: Int = 0,
        seed: UInt64 = .random(in: 0...UInt64.max)
    ) {
        self.configuredPort = port
        self.localPeerID = localPeerID
        self.localKey = localKey
        self.backoff = backoff
        self.roster = roster
        self.keyCount = keyCount
        self.table = PeerTableStateMachine(localPeerID: localPeerID, backoff: backoff, seed: seed)
    }

    // MARK: Lifecycle

    /// The run begins: throws `sessionState` if the session has run before.
    package mutating func begin() throws {
        guard lifecycle == .idle else {
            throw MultipeerError(.sessionState, "this session has already run; make a new one")
        }
        lifecycle = .suspended
    }

    /// Where to listen: the configured port the first time, then the one the session had
    /// (`resuming`: if something took it meanwhile, another will do).
    package var listenPort: (number: Int, resuming: Bool) {
        resumePort.map { ($0, true) } ?? (configuredPort, false)
    }

    /// The listener is up on `port`: dial every known target that is this side's to dial.
    package mutating func listening(on port: Int, now: ContinuousClock.Instant) -> [Action] {
        precondition(lifecycle == .suspended, "listening while \(lifecycle)")
        lifecycle = .running(port: port)
        resumePort = configuredPort == 0 ? port : configuredPort
        return perform(table.restart(), now: now)
    }

    /// The session stops running (a suspend or the end): every link closes with `reason`,
    /// every active peer leaves, nothing is dialled until ``listening(on:now:)``. Dials under way
    /// are the shell's to cancel; their failures are not reported.
    package mutating func stopRunning(_ reason: GoodbyeReason, now: ContinuousClock.Instant) -> [Action] {
        guard case .running(let port) = lifecycle else { return [] }
        lifecycle = .stopping(port: port)
        return perform(table.stop(reason), now: now)
    }

    /// The listener has let its port go: the session is suspended (or about to end).
    package mutating func stoppedListening() {
        guard case .stopping = lifecycle else { return }
        lifecycle = .suspended
    }

    /// The run has ended (after ``stopRunning(_:now:)`` and ``stoppedListening()``, or before it
    /// ever listened).
    package mutating func finish() -> [Action] {
        precondition(lifecycle != .idle, "a session that never began cannot end")
        lifecycle = .stopped
        return [.ended]
    }

    private var isRunning: Bool {
        if case .running = lifecycle { true } else { false }
    }

    // MARK: Discovery

    package mutating func discovered(_ target: DialTarget, now: ContinuousClock.Instant) -> [Action] {
        perform(table.discovered(target), now: now)
    }

    package mutating func lost(_ peerID: UUID, now: ContinuousClock.Instant) -> [Action] {
        perform(table.lost(peerID), now: now)
    }

    /// A scheduled timer is due.
    package mutating func fired(_ timer: Timer, now: ContinuousClock.Instant) -> [Action] {
        switch timer {
        case .redial(let key): perform(table.redialDue(key), now: now)
        case .heldFailuresReport: heldFailuresDue()
        }
    }

    // MARK: Links

    /// A new ID for an inbound connection the shell accepted.
    package mutating func acceptedLink() -> LinkID { table.acceptedLink() }

    /// An attempt of dial `id` failed. An attempt refused for its key (`authenticationFailed`)
    /// is made again with the next older key; otherwise the endpoint failed (it is reported,
    /// and tried last next time) and the next endpoint is tried. When none is left, the dial
    /// failed: discovery looks the peer up again, and the table decides when to dial again.
    package mutating func attemptFailed(_ id: LinkID, _ error: MultipeerError, now: ContinuousClock.Instant) -> [Action]
    {
        guard var dial = dials[id] else { return [] }
        guard isRunning else {
            // Cancelled by a suspend or the end: never made, and not reported.
            dials[id] = nil
            return perform(table.linkClosed(id), now: now)
        }
        if error.code == .authenticationFailed, dial.ring != keyRing || dial.key + 1 < keyCount {
            // The next older key; or, when the keys changed while this attempt was under way
            // (its key may be gone, a new one come), the newest key of the ring held now.
            dial.key = dial.ring == keyRing ? dial.key + 1 : 0
            dial.ring = keyRing
            dials[id] = dial
            return [.connect(id, dial.attempt)]
        }
        let endpoint = dial.target.endpoints[dial.endpoint]
        table.endpointFailed(dial.target.key, endpoint)
        var actions = connectionFailed(
            endpoint.description,
            error,
            inbound: false,
            refusalOf: Self.name(dial.target.key),
            now: now
        )
        dial.endpoint += 1
        dial.key = 0
        dial.ring = keyRing
        if dial.endpoint < dial.target.endpoints.count {
            dials[id] = dial
            return actions + [.connect(id, dial.attempt)]
        }
        dials[id] = nil
        if let peerID = dial.target.peerID { actions.append(.lookUpAgain(peerID)) }
        return actions + perform(table.linkClosed(id, error: error), now: now)
    }

    /// Link `id` finished TLS and HELLO (an inbound one, or an attempt of a dial, whose endpoint
    /// proved the peer); this side's HELLO on it said it reads `announced`.
    package mutating func linkEstablished(
        _ id: LinkID,
        hello: Hello,
        announced: MessageTypesRead = .every,
        address: String,
        now: ContinuousClock.Instant
    ) -> Establishment {
        if let dial = dials.removeValue(forKey: id) {
            table.endpointProved(dial.target.key, dial.target.endpoints[dial.endpoint])
        }
        if let roster, !roster.admits(hello.key) {
            let refusal = MultipeerError(
                .notInRoster,
                "peer \(hello.peerID) at \(address) (\(hello.displayName), key \(hello.key.fingerprint)) proved its key, but the roster does not list it: its link is refused"
            )
            // Never a link of the session; a dial of it waits long.
            let actions = connectionFailed(address, refusal, inbound: false, refusalOf: "\(hello.peerID)", now: now)
            return .refused(actions + perform(table.linkClosed(id, error: refusal, provedPeer: hello.peerID), now: now))
        }
        carried[id] = Carried(
            peerID: hello.peerID,
            address: address,
            announced: announced,
            peerReads: MessageTypesRead(hello: hello.reads),
            peerTakesTypes: hello.takesTypes
        )
        var closing: GoodbyeReason?
        var actions = perform(table.linkEstablished(id, hello: hello), now: now).filter { action in
            guard case .close(id, let reason) = action else { return true }
            closing = reason  // this very link: the session closes it as it takes it in
            return false
        }
        // The link the table keeps for the peer (a new peer's, or one that replaced another) takes
        // the peer's receive window and says where the peer resumes; it carries delivery, and the
        // peer joins, once the peer's resume point says it kept the link too (``acknowledged``).
        if table.activeLink(for: hello.peerID) == id { actions.append(.adopt(id)) }
        return .carried(closing: closing, actions)
    }

    /// Link `id` closed (or a dial of it failed for good). `goodbye` is the reason the peer gave.
    package mutating func linkClosed(
        _ id: LinkID,
        goodbye: GoodbyeReason?,
        error: MultipeerError?,
        now: ContinuousClock.Instant
    ) -> [Action] {
        dials[id] = nil
        var actions: [Action] = []
        if let link = carried.removeValue(forKey: id) {
            if let error, error.code == .keepaliveTimeout {
                // The peer leaves with the reason alone; what the silence showed is told here.
                actions.append(.report(.linkTimedOut(id, link.peerID, error)))
            }
            if goodbye == .notInRoster, !table.isAdmitted(id) {
                // Refused by the peer before it ever took the link: never joined, so never left.
                actions += connectionFailed(
                    link.address,
                    MultipeerError(
                        .notInRoster,
                        "peer \(link.peerID) at \(link.address) refused this device: its roster does not list this device's key \(localKey.fingerprint). It is dialled again only every \(backoff.maximumDelay) or so, until its advert or this session's roster or keys change"
                    ),
                    inbound: false,
                    refusalOf: "\(link.peerID)",
                    now: now
                )
            }
            actions.append(.unbind(link.peerID, id))
            if table.activeLink(for: link.peerID) == id, table.isJoining(link.peerID) {
                actions.append(.wakeSenders(link.peerID))  // those waiting for the peer to join on it
            }
        }
        return actions + perform(table.linkClosed(id, goodbye: goodbye, error: error), now: now)
    }

    /// Whether the session carries link `id` (established, admitted by the roster, not closed).
    package func carries(_ id: LinkID) -> Bool { carried[id] != nil }

    /// An inbound connection failed before its peer's link was established: anyone on the
    /// network can make those as often as they like, so they are throttled.
    package mutating func inboundFailed(
        address: String,
        _ error: MultipeerError,
        now: ContinuousClock.Instant
    ) -> [Action] {
        connectionFailed(address, error, inbound: true, refusalOf: nil, now: now)
    }

    // MARK: Admission

    /// The roster changed (nil admits every holder of the group key): peers it no longer lists
    /// are refused, the active ones and those still joining (their links close with GOODBYE
    /// `notInRoster`; the active ones leave), and refused peers are dialled again at once (until
    /// they join: ``PeerTableStateMachine/reconsiderRefusals()``).
    package mutating func rosterChanged(_ roster: Roster?, now: ContinuousClock.Instant) -> [Action] {
        self.roster = roster
        var actions: [Action] = []
        if let roster {
            // (A joining peer's HELLO passed the roster before: left alone, it joined when its
            // resume point came, after its removal.)
            for (peerID, hello) in table.keptPeers.sorted(by: { $0.key.uuidString < $1.key.uuidString })
            where !roster.admits(hello.key) {
                actions += perform(table.refuse(peerID, .notInRoster), now: now)
            }
        }
        return actions + reconsiderRefusals(now: now)
    }

    /// The group keys changed: a dial offers `count` keys from now on (an attempt under way
    /// that fails on its key is made again with the newest), and refused peers are dialled
    /// again at once.
    package mutating func keysChanged(count: Int, now: ContinuousClock.Instant) -> [Action] {
        keyCount = count
        keyRing += 1
        return reconsiderRefusals(now: now)
    }

    private mutating func reconsiderRefusals(now: ContinuousClock.Instant) -> [Action] {
        reportedRefusals.removeAll()
        return perform(table.reconsiderRefusals(), now: now)
    }

    /// Reports a connection that failed before its peer became active: a lasting refusal
    /// (``PeerTableStateMachine/isLastingRefusal(goodbye:error:)``) of a known peer or dialled
    /// target (`refusalOf`) once per peer and code; inbound ones ten at once, then at most one a
    /// second per code, with the count of those held back (or, when none comes after a flood, a
    /// second later).
    private mutating func connectionFailed(
        _ address: String,
        _ error: MultipeerError,
        inbound: Bool,
        refusalOf peer: String?,
        now: ContinuousClock.Instant
    ) -> [Action] {
        if let peer, PeerTableStateMachine.isLastingRefusal(goodbye: nil, error: error),
            !reportedRefusals.insert(Refusal(peer: peer, code: error.code)).inserted
        {
            return [.report(.connectionFailed(address: address, error, inbound: inbound, .refusedAgain))]
        }
        guard inbound else {
            return [.report(.connectionFailed(address: address, error, inbound: false, .reported(held: 0)))]
        }
        guard let count = inboundFailures[error.code, default: ReportThrottle(burst: 10)].count(now: now) else {
            var actions: [Action] = [.report(.connectionFailed(address: address, error, inbound: true, .heldBack))]
            if !heldFailuresReportDue {
                heldFailuresReportDue = true
                actions.append(.schedule(.heldFailuresReport, after: .seconds(1)))
            }
            return actions
        }
        return [.report(.connectionFailed(address: address, error, inbound: true, .reported(held: count - 1)))]
    }

    /// Reports the inbound failures held back since their code's last report.
    private mutating func heldFailuresDue() -> [Action] {
        heldFailuresReportDue = false
        return inboundFailures.keys.sorted { $0.description < $1.description }.compactMap { code in
            let count = inboundFailures[code]!.takeHeld()
            return count > 0 ? .report(.connectionsFailed(count: count, code: code)) : nil
        }
    }

    /// Names a dial target in the refusals reported.
    private static func name(_ key: DialTarget.Key) -> String {
        switch key {
        case .peer(let peerID): "\(peerID)"
        case .endpoint(let endpoint): endpoint
        }
    }

    // MARK: Peers

    /// The active peers' HELLOs, by peer.
    package var activePeers: [UUID: Hello] { table.activePeers }

    /// The peers whose availability changed since the last call, in order of peer ID: each as
    /// it is now, or, no longer known, as it was last with the state `gone`
    /// (``PeerTableStateMachine/availability``). The shell asks after carrying out each event's
    /// actions, so it hears of a peer's joining or leaving first, then of its availability.
    package mutating func availabilityChanges() -> [AvailablePeer] {
        let now = table.availability
        var changes = now.values.filter { availability[$0.id] != $0 }
        for (id, var peer) in availability where now[id] == nil {
            peer.state = .gone
            peer.key = nil
            changes.append(peer)
        }
        availability = now
        return changes.sorted { $1.id.isGreater(than: $0.id) }
    }

    /// The link `peerID` joined on and its HELLO, while the peer is active.
    package func joinedLink(of peerID: UUID) -> (id: LinkID, hello: Hello)? { table.joinedLink(of: peerID) }

    /// When the active peer joined this time, and how often it came back before.
    package func presence(of peerID: UUID) -> (since: ContinuousClock.Instant, reconnects: Int)? {
        guard joinedLink(of: peerID) != nil, let presence = presence[peerID] else { return nil }
        return (presence.since, presence.reconnects)
    }

    /// Whether this side keeps a link for `peerID` that the peer has not admitted yet: it is
    /// about to join. A message its link brought may reach the application before the resume
    /// point reaches the session, so a message for it waits for that admission (or the link's
    /// closing, ``Action/wakeSenders(_:)``) rather than being refused.
    package func isJoining(_ peerID: UUID) -> Bool { table.isJoining(peerID) }

    /// The peer's first ACK on link `id`, its resume point, arrived: the peer admitted the link.
    /// If this side keeps it, the peer's delivery moves onto it, and the peer joins (unless it
    /// was active on an earlier link).
    package mutating func admitted(_ id: LinkID, now: ContinuousClock.Instant) -> [Action] {
        let actions = perform(table.linkAdmitted(id), now: now)
        return actions.isEmpty ? [] : actions + [.admitMessages(id)]
    }

    // MARK: REJECT

    /// A reliable message from `peerID`'s incarnation `incarnation` did not decode here: its
    /// sender is told on its link, if that incarnation is still active (a later one could not
    /// tell which message it was).
    package func reject(_ rejection: Rejection, from peerID: UUID, incarnation: UInt64) -> [Action] {
        guard let link = joinedLink(of: peerID), link.hello.incarnation == incarnation else {
            return [.report(.rejectionNotSent(peerID, rejection))]
        }
        return [.sendReject(link.id, rejection)]
    }

    /// The peer says a reliable message this side sent it did not decode there. Taken only on
    /// the peer's kept link, for a number written in the current numbering (`written`: the
    /// peer's delivery knows), as an ACK is.
    package func rejected(_ rejection: Rejection, by peerID: UUID, on id: LinkID, written: Bool) -> [Action] {
        guard let link = joinedLink(of: peerID), link.id == id, written else {
            return [.report(.rejectIgnored(peerID, rejection))]
        }
        return [.report(.rejectedByPeer(link.hello, rejection))]
    }

    // MARK: Message types

    /// This side reads `reads` now: every link's peer that takes TYPES and was told otherwise
    /// hears of it (``Action/sendTypes(_:_:)``, in the order of the links), once per change;
    /// the list outgrown (a list told before, every type but some now) is reported.
    package mutating func announce(_ reads: MessageTypesRead) -> [Action] {
        var actions: [Action] = []
        var outgrown = false
        for id in carried.keys.sorted(by: { $0.rawValue < $1.rawValue }) {
            guard let link = carried[id], link.peerTakesTypes, link.announced != reads else { continue }
            if case .only = link.announced, case .allBut = reads { outgrown = true }
            carried[id]?.announced = reads
            actions.append(.sendTypes(id, reads))
        }
        return outgrown ? actions + [.report(.typesOutgrown)] : actions
    }

    /// The peer says on link `id` which message types it reads from now on (TYPES): its
    /// delivery on the link learns of it, and, if that changed what the active peer reads
    /// (the link it joined on), the application hears of it. (Before its join, the join tells.)
    package mutating func peerReads(_ types: MessageTypesRead, on id: LinkID) -> [Action] {
        guard let link = carried[id] else { return [] }
        carried[id]?.peerReads = types
        var actions: [Action] = [.peerReads(link.peerID, id, types)]
        if types != link.peerReads, let joined = joinedLink(of: link.peerID), joined.id == id {
            actions.append(.report(.peerReadsChanged(joined.hello)))
        }
        return actions
    }

    /// What the active peer `peerID` reads, as its HELLO and TYPES on the link it joined on say.
    package func peerReads(of peerID: UUID) -> MessageTypesRead? {
        joinedLink(of: peerID).flatMap { carried[$0.id]?.peerReads }
    }

    // MARK: Composing

    /// Carries out the table's actions on the rest of the state; returns the shell's part.
    private mutating func perform(_ actions: [PeerTableStateMachine.Action], now: ContinuousClock.Instant) -> [Action] {
        actions.flatMap { action -> [Action] in
            switch action {
            case .dial(let id, let target):
                dials[id] = Dial(target: target, ring: keyRing)
                return [.connect(id, dials[id]!.attempt)]
            case .addEndpoints(let id, let endpoints):
                dials[id]?.target.endpoints += endpoints
                return []
            case .lookUpAgain(let peerID):
                return [.lookUpAgain(peerID)]
            case .close(let id, let reason):
                return [.close(id, reason)]
            case .linkAdmitted(let id, let hello):
                // The table admits only a link ``linkEstablished(_:hello:announced:address:now:)``
                // carried, and forgets it before ``linkClosed`` drops the record.
                guard let link = carried[id] else { preconditionFailure("link \(id) admitted but not carried") }
                return [.bind(id, hello, reads: link.peerReads)]
            case .peerJoined(let id, let hello):
                reportedRefusals = reportedRefusals.filter { $0.peer != "\(hello.peerID)" }
                let before = presence[hello.peerID]
                presence[hello.peerID] = Presence(since: now, reconnects: before.map { $0.reconnects + 1 } ?? 0)
                let rejoined = before?.failedAt.map { [Action.report(.rejoined(hello.peerID, after: now - $0))] }
                return (rejoined ?? []) + [.peerJoined(id, hello)]
            case .peerLeft(let hello, let reason):
                switch reason {
                case .goodbye(.shutdown), .goodbye(.suspended), .restarted, .local: break  // it chose to
                case .goodbye, .keepaliveTimeout, .linkClosed: presence[hello.peerID]?.failedAt = now
                }
                return [.unbind(hello.peerID, nil), .peerLeft(hello, reason)]
            case .scheduleRedial(let key, let delay):
                return [.schedule(.redial(key), after: delay)]
            }
        }
    }
}
