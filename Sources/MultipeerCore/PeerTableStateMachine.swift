package import struct Foundation.UUID

/// Names one link (one TCP connection) for the life of a session.
package struct LinkID: Hashable, Sendable, Comparable, CustomStringConvertible {
    package var rawValue: UInt64
    package init(_ rawValue: UInt64) { self.rawValue = rawValue }
    package static func < (lhs: LinkID, rhs: LinkID) -> Bool { lhs.rawValue < rhs.rawValue }
    package var description: String { "link \(rawValue)" }
}

/// Somewhere a peer can be dialled, as discovery reported it.
package struct DialTarget: Hashable, Sendable {
    /// One address and port to try.
    package struct Endpoint: Hashable, Sendable, CustomStringConvertible {
        package var host: String
        package var port: Int

        package init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        package var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// Who is there; nil for a static peer until its HELLO says.
    package var peerID: UUID?
    /// The incarnation its advert claims (0 for a static peer): a new one is news.
    package var incarnation: UInt64
    /// Endpoints to try, best first (in a ``PeerTableStateMachine/Action/dial(_:_:)``: those
    /// that proved the peer first, those that failed last).
    package var endpoints: [Endpoint]
    /// The name and metadata its advert gives (claims anyone can make; empty for a static peer),
    /// for ``PeerTableStateMachine/availability`` while no HELLO speaks for the peer.
    package var displayName: String
    package var metadata: [String: String]

    package init(
        peerID: UUID?,
        incarnation: UInt64 = 0,
        endpoints: [Endpoint],
        displayName: String = "",
        metadata: [String: String] = [:]
    ) {
        self.peerID = peerID
        self.incarnation = incarnation
        self.endpoints = endpoints
        self.displayName = displayName
        self.metadata = metadata
    }

    /// Whether `other` says anything new about the target: another incarnation or other endpoints.
    func isNews(comparedWith other: DialTarget) -> Bool {
        incarnation != other.incarnation || Set(endpoints) != Set(other.endpoints)
    }

    /// How the table keys the target: the peer, or for a static peer its first endpoint.
    package var key: DialTarget.Key { peerID.map(Key.peer) ?? .endpoint(endpoints.first?.description ?? "") }

    package enum Key: Hashable, Sendable {
        case peer(UUID)
        case endpoint(String)
    }
}

/// The session's peer table and dial decisions, without I/O: discovery, links and timers go in
/// as events, and what to do comes out as actions for the shell to carry out.
///
/// Rules (docs/PROTOCOL.md 1): the greater UUID dials; exactly one link per peer stays, chosen
/// the same way on both sides once each has finished TLS and HELLO: a newer incarnation wins,
/// then a link dialled by the greater UUID, then the newer link. A peer joins (is active) once both sides
/// have admitted that link: this side kept it, and the peer's resume point arrived on it
/// (``linkAdmitted(_:)``); a link the peer refuses never makes it join.
///
/// A refusal that retrying cannot change (the peer's roster does not list this device, an
/// identity or key that does not verify, another protocol version, another group key) holds the
/// target at the longest backoff until something changes: a new advert of it (another
/// incarnation or other endpoints), a link that succeeds, or this side's roster or keys
/// (``reconsiderRefusals()``).
///
/// A discovered peer that leaves saying GOODBYE `shutdown` ended its session: its advert
/// lingers for a moment after it went, and every dial of it would fail, so it is redialled only
/// at the longest backoff until discovery reports it again (a new session advertises anew),
/// which dials it at once. A suspended peer is redialled as ever: it comes back at the same
/// address under the same advert, which discovery need not report again. So is a static
/// endpoint, which has no advert to wait for.
///
/// A dial offers a target's endpoints in the order they have earned: the one whose HELLO last
/// proved the peer first, then the others by how often they failed (no answer, or someone
/// else's HELLO), fewest first, in discovery's order at equal counts. So an advert that copies a
/// peer's ID to point elsewhere costs a dial one failed attempt, then goes last. A link that
/// fails (rather than closing with GOODBYE) counts as a failure of its endpoint: a peer that
/// moved is looked for at its other endpoints first.
package struct PeerTableStateMachine: Sendable {
    package enum Direction: Hashable, Sendable { case outbound, inbound }

    package enum Action: Equatable, Sendable {
        /// Dial `target` as `link`; report the outcome with ``linkEstablished(_:hello:)`` or ``linkClosed(_:error:)``.
        case dial(LinkID, DialTarget)
        /// Discovery named more endpoints of the target `link` is dialling: try them too.
        case addEndpoints(LinkID, [DialTarget.Endpoint])
        /// Close `link`, saying GOODBYE with the reason first.
        case close(LinkID, GoodbyeReason)
        /// Both sides admitted the link, the one kept for its peer: delivery to the peer goes
        /// on it from now on. (The peer joins with it, unless it was active already.)
        case linkAdmitted(LinkID, Hello)
        /// The link's peer is now active.
        case peerJoined(LinkID, Hello)
        /// The peer left the active set.
        case peerLeft(Hello, PeerLeftReason)
        /// Ask discovery to look the peer up again: its link failed, and it may have moved.
        case lookUpAgain(UUID)
        /// Call ``redialDue(_:)`` for this target after the delay.
        case scheduleRedial(DialTarget.Key, after: Duration)
    }

    private struct Link {
        /// Where a link is in its life.
        enum Stage {
            /// Outbound, before its HELLO: the endpoints its dial was given.
            case dialling([DialTarget.Endpoint])
            /// Inbound, before its HELLO.
            case accepted
            /// Its HELLO came, and it speaks for its peer: the link kept for it (or one whose
            /// session is stopping). `admitted`: the peer's resume point arrived on it, and this
            /// side had kept it (``linkAdmitted(_:)``).
            case speaking(Hello, admitted: Bool)
            /// Its HELLO came, and it no longer speaks for its peer: another link is kept, or the
            /// roster refused the peer, or the session stopped; its closing is no leaving.
            case silenced(admitted: Bool)
        }

        var direction: Direction
        var target: DialTarget.Key?
        var stage: Stage

        /// Its HELLO, while it speaks for its peer.
        var hello: Hello? {
            if case .speaking(let hello, _) = stage { hello } else { nil }
        }

        /// The endpoints its dial was given, while it is being dialled.
        var dialling: [DialTarget.Endpoint]? {
            if case .dialling(let endpoints) = stage { endpoints } else { nil }
        }

        var admitted: Bool {
            switch stage {
            case .speaking(_, let admitted), .silenced(let admitted): admitted
            case .dialling, .accepted: false
            }
        }

        /// It no longer speaks for its peer.
        mutating func silence() {
            stage = .silenced(admitted: admitted)
        }
    }

    /// Where a peer this side keeps a link for stands.
    private enum Kept: Equatable {
        /// The link is kept; the peer joins once it admits it (its resume point arrives on it).
        case joining(LinkID)
        /// The peer joined (a link of it was admitted by both sides) and has not left since; the
        /// link kept for it now is that one or one that replaced it (of the same incarnation),
        /// which carries delivery once the peer admits it too.
        case joined(LinkID)

        var link: LinkID {
            switch self {
            case .joining(let id), .joined(let id): id
            }
        }

        var hasJoined: Bool {
            if case .joined = self { true } else { false }
        }
    }

    private struct EndpointRecord {
        var failures = 0
        var proved = false
    }

    package let localPeerID: UUID
    package let backoffParameters: ReconnectParameters

    private var targets: [DialTarget.Key: DialTarget] = [:]
    /// Static endpoints whose peer identity a HELLO (or a self-connection) revealed.
    private var identified: [String: UUID] = [:]
    private var links: [LinkID: Link] = [:]
    /// The peers this side keeps a link for, and whether each has joined.
    private var kept: [UUID: Kept] = [:]
    /// Targets whose last link was refused for a reason retrying cannot change: held at the
    /// longest backoff until something changes.
    private var refused: Set<DialTarget.Key> = []
    /// Peers whose UUID is the greater (theirs to dial) that this side dials itself until a link
    /// both sides take, since their own redials wait long: at the longest backoff a refusal of
    /// this side put them at, once its roster or keys changed (``reconsiderRefusals()``); grown
    /// while this side was suspended, once it resumes (``restart()``).
    private var dialledUntilJoined: Set<DialTarget.Key> = []
    private var redialsPending: Set<DialTarget.Key> = []
    private var backoffs: [DialTarget.Key: Backoff] = [:]
    /// What each endpoint of a target has shown, for ordering the next dial; only endpoints
    /// discovery still names are kept.
    private var endpointRecords: [DialTarget.Key: [DialTarget.Endpoint: EndpointRecord]] = [:]
    private var random: SplitMix64
    private var nextLinkID: UInt64 = 1
    /// Why the session stopped (shutdown or suspend), nil while it runs.
    private var stoppedFor: GoodbyeReason?
    private var stopped: Bool { stoppedFor != nil }

    /// - Parameter seed: Seeds the backoff jitter, so tests can repeat a run exactly.
    package init(
        localPeerID: UUID,
        backoff: ReconnectParameters = ReconnectParameters(),
        seed: UInt64 = .random(in: 0...UInt64.max)
    ) {
        self.localPeerID = localPeerID
        self.backoffParameters = backoff
        self.random = SplitMix64(seed: seed)
    }

    /// The active (joined) peers' HELLOs, by peer.
    package var activePeers: [UUID: Hello] {
        kept.filter { $0.value.hasJoined }.compactMapValues { links[$0.link]?.hello }
    }

    /// The peers this side keeps a link for, joined or still joining (waiting for the peer's
    /// resume point), with the HELLO of each.
    package var keptPeers: [UUID: Hello] {
        kept.compactMapValues { links[$0.link]?.hello }
    }

    /// Every peer known, by ID: those discovery names (a static endpoint once a HELLO has named
    /// its peer) and those a link speaks for, and how far each one's link is. Empty while the
    /// table is stopped: a suspended session knows of no one.
    package var availability: [UUID: AvailablePeer] {
        guard !stopped else { return [:] }
        var known: [UUID: AvailablePeer] = [:]
        for (key, target) in targets {
            guard let peerID = target.peerID ?? self.peerID(of: key), peerID != localPeerID else { continue }
            let state: AvailablePeer.State =
                if refused.contains(key) || refused.contains(.peer(peerID)) {
                    .refused
                } else if links.values.contains(where: { $0.target == key }) {
                    .connecting
                } else {
                    .discovered
                }
            known[peerID] = AvailablePeer(
                id: peerID,
                state: state,
                displayName: target.displayName,
                metadata: target.metadata
            )
        }
        // A link that speaks for its peer says more than an advert: who proved to be there.
        for (peerID, peer) in kept {
            guard let hello = links[peer.link]?.hello else { continue }
            known[peerID] = AvailablePeer(
                id: peerID,
                state: peer.hasJoined ? .active : .connecting,
                displayName: hello.displayName,
                metadata: hello.metadata,
                key: hello.key
            )
        }
        return known
    }

    /// The peer a target names: its advert's, or for a static endpoint, the one its HELLO named.
    private func peerID(of key: DialTarget.Key) -> UUID? {
        switch key {
        case .peer(let peerID): peerID
        case .endpoint(let endpoint): identified[endpoint]
        }
    }

    /// The link kept for `peerID`, admitted by both sides or not yet.
    package func activeLink(for peerID: UUID) -> LinkID? { kept[peerID]?.link }

    /// The link `peerID` joined on and its HELLO, while the peer is active.
    package func joinedLink(of peerID: UUID) -> (id: LinkID, hello: Hello)? {
        guard case .joined(let id)? = kept[peerID], let hello = links[id]?.hello else { return nil }
        return (id, hello)
    }

    /// A new ID for an inbound link the shell just accepted.
    package mutating func acceptedLink() -> LinkID {
        let id = makeLinkID()
        links[id] = Link(direction: .inbound, stage: .accepted)
        return id
    }

    // MARK: Discovery

    /// Discovery found `target` (or found it again with new details: a moved peer's new
    /// endpoints are dialled at once).
    package mutating func discovered(_ target: DialTarget) -> [Action] {
        guard target.peerID != localPeerID else { return [] }
        if refused.contains(target.key) {
            // The same advert again (a re-resolve) is no reason to be refused again sooner.
            guard let known = targets[target.key], target.isNews(comparedWith: known) else {
                targets[target.key] = target
                return []
            }
            refused.remove(target.key)
        }
        targets[target.key] = target
        endpointRecords[target.key] = endpointRecords[target.key]?.filter { target.endpoints.contains($0.key) }
        backoffs[target.key]?.reset()  // announced again: try at once, then from the first delay
        redialsPending.remove(target.key)  // ... even if a redial was due later (it finds the dial under way)
        // A dial under way (one made from the first adverts seen, say) tries the new endpoints too.
        if let (id, link) = links.first(where: { $0.value.target == target.key && $0.value.dialling != nil }) {
            let added = target.endpoints.filter { !link.dialling!.contains($0) }
            guard !added.isEmpty else { return [] }
            links[id]?.stage = .dialling(link.dialling! + added)
            return [.addEndpoints(id, added)]
        }
        return dialIfNeeded(target.key)
    }

    /// Discovery lost the peer. Its link, if any, stays: liveness comes from the link.
    package mutating func lost(_ peerID: UUID) -> [Action] {
        targets[.peer(peerID)] = nil
        endpointRecords[.peer(peerID)] = nil
        dialledUntilJoined.remove(.peer(peerID))
        return []
    }

    /// An endpoint of `key` did not answer, or answered with someone else's HELLO: it goes
    /// after the endpoints that failed less.
    package mutating func endpointFailed(_ key: DialTarget.Key, _ endpoint: DialTarget.Endpoint) {
        guard targets[key]?.endpoints.contains(endpoint) == true else { return }
        var record = endpointRecords[key, default: [:]][endpoint] ?? EndpointRecord()
        record.failures = min(record.failures + 1, 1_000)
        record.proved = false
        endpointRecords[key, default: [:]][endpoint] = record
    }

    /// The HELLO at an endpoint of `key` proved the peer: the next dial tries it first.
    package mutating func endpointProved(_ key: DialTarget.Key, _ endpoint: DialTarget.Endpoint) {
        guard targets[key]?.endpoints.contains(endpoint) == true else { return }
        for other in endpointRecords[key, default: [:]].keys { endpointRecords[key]![other]!.proved = false }
        endpointRecords[key, default: [:]][endpoint] = EndpointRecord(failures: 0, proved: true)
    }

    /// `target`'s endpoints in the order a dial tries them.
    private func ranked(_ target: DialTarget) -> DialTarget {
        let records = endpointRecords[target.key] ?? [:]
        var ranked = target
        ranked.endpoints = target.endpoints.enumerated().sorted { lhs, rhs in
            let (left, right) = (records[lhs.element] ?? EndpointRecord(), records[rhs.element] ?? EndpointRecord())
            return (left.proved ? 0 : 1, left.failures, lhs.offset) < (right.proved ? 0 : 1, right.failures, rhs.offset)
        }.map(\.element)
        return ranked
    }

    // MARK: Links

    /// A link finished TLS and HELLO.
    package mutating func linkEstablished(_ id: LinkID, hello: Hello) -> [Action] {
        guard var link = links[id] else { return [] }
        link.stage = .speaking(hello, admitted: false)
        links[id] = link
        if case .endpoint(let endpoint)? = link.target { identified[endpoint] = hello.peerID }
        if let key = link.target {
            // What the HELLO proved names the target from now on, not what its advert claimed.
            targets[key]?.displayName = hello.displayName
            targets[key]?.metadata = hello.metadata
        }
        // (A link that comes up while the session is stopped is told why: a suspended session
        // says it is suspended, so its peers keep what they hold for it, streams included.)
        if let stoppedFor { return [.close(id, stoppedFor)] }
        guard let peer = kept[hello.peerID], let current = links[peer.link], let currentHello = current.hello
        else {
            kept[hello.peerID] = .joining(id)  // it joins once the peer admits the link too
            return []
        }
        let currentID = peer.link
        if keeps(id, link, over: currentID, current) {
            links[currentID]?.silence()
            if hello.incarnation != currentHello.incarnation, peer.hasJoined {
                kept[hello.peerID] = .joining(id)
                return [.close(currentID, .duplicateLink), .peerLeft(currentHello, .restarted)]
            }
            kept[hello.peerID] = peer.hasJoined ? .joined(id) : .joining(id)
            return [.close(currentID, .duplicateLink)]
        }
        links[id]?.silence()
        return [.close(id, .duplicateLink)]
    }

    /// The link's peer admitted it: its resume point arrived. If this side keeps the link for the
    /// peer, delivery goes on it, and the peer joins (unless it was active on an earlier link).
    package mutating func linkAdmitted(_ id: LinkID) -> [Action] {
        guard let link = links[id], !link.admitted, let hello = link.hello, let peer = kept[hello.peerID],
            peer.link == id
        else {
            return []
        }
        links[id]!.stage = .speaking(hello, admitted: true)
        // A link both sides took: whatever held its peer back is over.
        for key in [DialTarget.Key.peer(hello.peerID), link.target].compactMap({ $0 }) {
            backoffs[key]?.reset()
            refused.remove(key)
            dialledUntilJoined.remove(key)
        }
        guard !peer.hasJoined else { return [.linkAdmitted(id, hello)] }
        kept[hello.peerID] = .joined(id)
        return [.linkAdmitted(id, hello), .peerJoined(id, hello)]
    }

    /// Whether the peer admitted link `id` (its resume point arrived).
    package func isAdmitted(_ id: LinkID) -> Bool { links[id]?.admitted ?? false }

    /// Whether this side keeps a link for `peerID` that the peer has not admitted yet.
    package func isJoining(_ peerID: UUID) -> Bool {
        kept[peerID].map { links[$0.link]?.admitted == false } ?? false
    }

    /// Whether a link that ended so was refused for a reason retrying cannot change.
    package static func isLastingRefusal(goodbye: GoodbyeReason?, error: MultipeerError?) -> Bool {
        if goodbye == .notInRoster { return true }
        guard let code = error?.code else { return false }
        return [.notInRoster, .identityMismatch, .badSignature, .protocolVersionMismatch, .authenticationFailed]
            .contains(code)
    }

    /// Why a peer whose link ended so left.
    private static func leaving(_ goodbye: GoodbyeReason?, _ error: MultipeerError?) -> PeerLeftReason {
        if let goodbye { return .goodbye(goodbye) }
        return error?.code == .keepaliveTimeout ? .keepaliveTimeout : .linkClosed(error)
    }

    /// This side's roster or keys changed: what was refused may be admitted now, so refused
    /// targets are dialled again at once, once even a peer whose UUID is the greater (its to
    /// dial: refused, it holds this side at its longest backoff, and this side brings the join
    /// about now rather than at its next redial, seconds later).
    package mutating func reconsiderRefusals() -> [Action] {
        let keys = refused.sorted { "\($0)" < "\($1)" }
        refused.removeAll()
        return keys.flatMap { key -> [Action] in
            backoffs[key]?.reset()
            redialsPending.remove(key)
            if case .peer = key, !shouldDial(key) { dialledUntilJoined.insert(key) }
            return dialIfNeeded(key)
        }
    }

    /// A link closed (or a dial failed). `goodbye` is the reason the peer gave, if it gave one;
    /// `provedPeer` the peer a HELLO on it proved, if the table never took that HELLO (the
    /// session's roster refused the link at once).
    package mutating func linkClosed(
        _ id: LinkID,
        goodbye: GoodbyeReason? = nil,
        error: MultipeerError? = nil,
        provedPeer: UUID? = nil
    ) -> [Action] {
        guard let link = links.removeValue(forKey: id) else { return [] }
        if error?.code == .selfConnection, case .endpoint(let endpoint)? = link.target {
            identified[endpoint] = localPeerID  // a static entry that points at this peer itself
        }
        var actions: [Action] = []
        if error != nil, link.hello != nil, let key = link.target,
            let (endpoint, _) = endpointRecords[key]?.first(where: { $0.value.proved })
        {
            // The endpoint that proved the peer carried a link that failed: the peer may have
            // moved, so the next dial tries the others first, and discovery looks it up afresh
            // (a moved peer's new address may reach this side only when asked for).
            endpointFailed(key, endpoint)
            if case .peer(let peerID) = key { actions.append(.lookUpAgain(peerID)) }
        }
        let key = link.target ?? (link.hello?.peerID ?? provedPeer).map(DialTarget.Key.peer)
        if let key, Self.isLastingRefusal(goodbye: goodbye, error: error) {
            refused.insert(key)
            backoffs[key, default: Backoff(parameters: backoffParameters)].exhaust()
        }
        // (Only the peer's kept link still has its HELLO; the peer joined on it or an earlier one.)
        if let hello = link.hello, let peer = kept[hello.peerID], peer.link == id {
            kept[hello.peerID] = nil
            if peer.hasJoined {
                actions.append(.peerLeft(hello, stoppedFor.map { .local($0) } ?? Self.leaving(goodbye, error)))
            }
        }
        guard !stopped else { return actions }
        if let key, case .peer = key, goodbye == .shutdown {
            // Its session ended: dialled again at once when it is announced again (a new session
            // advertises anew), and meanwhile only at the longest backoff (its advert lingers a
            // moment, and a dial would fail). A suspended one comes back at the same address
            // under the same advert, which discovery need not report again: it is redialled.
            backoffs[key, default: Backoff(parameters: backoffParameters)].exhaust()
        }
        if let key, targets[key] != nil, shouldDial(key), !redialsPending.contains(key), !hasLink(to: key) {
            redialsPending.insert(key)
            var backoff = backoffs[key] ?? Backoff(parameters: backoffParameters)
            let delay = backoff.next(random: Double.random(in: 0..<1, using: &random))
            backoffs[key] = backoff
            actions.append(.scheduleRedial(key, after: delay))
        }
        return actions
    }

    /// The session no longer admits `peerID` (its roster changed): its link closes with
    /// `reason` and it leaves the active set. A later link of it is refused when it is made.
    package mutating func refuse(_ peerID: UUID, _ reason: GoodbyeReason) -> [Action] {
        guard let peer = kept.removeValue(forKey: peerID), let link = links[peer.link], let hello = link.hello else {
            return []
        }
        let linkID = peer.link
        links[linkID]?.silence()  // its closing is no second leaving
        // Refused here for good (until the roster changes): not dialled again soon.
        for key in [DialTarget.Key.peer(peerID), link.target].compactMap({ $0 }) {
            refused.insert(key)
            backoffs[key, default: Backoff(parameters: backoffParameters)].exhaust()
        }
        guard peer.hasJoined else { return [.close(linkID, reason)] }
        return [.close(linkID, reason), .peerLeft(hello, .local(reason))]
    }

    /// A scheduled redial is due.
    package mutating func redialDue(_ key: DialTarget.Key) -> [Action] {
        redialsPending.remove(key)
        return dialIfNeeded(key)
    }

    /// The session stops (shutdown or suspend): close every link; dial nothing until ``restart()``.
    package mutating func stop(_ reason: GoodbyeReason) -> [Action] {
        stoppedFor = reason
        redialsPending.removeAll()
        var actions = links.keys.sorted().map { Action.close($0, reason) }
        for peer in kept.values.sorted(by: { $0.link < $1.link }) {
            if peer.hasJoined, let hello = links[peer.link]?.hello {
                actions.append(.peerLeft(hello, .local(reason)))
            }
            links[peer.link]?.silence()
        }
        kept.removeAll()
        return actions
    }

    /// The session runs again (resume): dial every known target, even a peer whose UUID is the
    /// greater (its to dial), until a link both take. Its redials have grown while this side was
    /// away, and this side's listener was down: waiting for its next one took up to a backoff
    /// step (0.4-0.7 s after a 1 s suspend), where this dial brings it back in a round trip and a
    /// handshake. If it dials meanwhile too, the link it dialled is the one both keep (3); if
    /// this dial fails (a handshake deadline on a loaded machine), it is dialled again with the
    /// backoff, as one whose refusal was lifted is (``reconsiderRefusals()``).
    package mutating func restart() -> [Action] {
        stoppedFor = nil
        return targets.keys.sorted { "\($0)" < "\($1)" }.flatMap { key -> [Action] in
            if case .peer = key, !shouldDial(key) { dialledUntilJoined.insert(key) }
            return dialIfNeeded(key)
        }
    }

    // MARK: Rules

    /// Whether this side dials `key`: the greater UUID dials a discovered peer (and this side one
    /// whose refusal it lifted, until they take a link: ``reconsiderRefusals()``). A static
    /// endpoint is dialled whenever its peer is not active (the other side may not list us),
    /// unless it turned out to be this very peer; duplicate links are then resolved as usual.
    private func shouldDial(_ key: DialTarget.Key) -> Bool {
        switch key {
        case .peer(let peerID): return localPeerID.isGreater(than: peerID) || dialledUntilJoined.contains(key)
        case .endpoint(let endpoint): return identified[endpoint] != localPeerID
        }
    }

    /// Whether a dial to `key` is under way or its peer is active (only active links keep a HELLO).
    private func hasLink(to key: DialTarget.Key) -> Bool {
        if links.values.contains(where: { $0.target == key }) { return true }
        switch key {
        case .peer(let peerID): return kept[peerID] != nil
        case .endpoint(let endpoint): return identified[endpoint].map { kept[$0] != nil } ?? false
        }
    }

    /// Dials `key` if nothing links to it yet and it is this side's to dial.
    private mutating func dialIfNeeded(_ key: DialTarget.Key) -> [Action] {
        guard !stopped, let target = targets[key], !target.endpoints.isEmpty, shouldDial(key),
            !hasLink(to: key), !redialsPending.contains(key)
        else {
            return []
        }
        let id = makeLinkID()
        links[id] = Link(direction: .outbound, target: key, stage: .dialling(target.endpoints))
        return [.dial(id, ranked(target))]
    }

    /// Whether `candidate` should replace `current` as the peer's link.
    private func keeps(_ candidateID: LinkID, _ candidate: Link, over currentID: LinkID, _ current: Link) -> Bool {
        let candidateHello = candidate.hello!
        let currentHello = current.hello!
        if candidateHello.incarnation != currentHello.incarnation {
            return candidateHello.incarnation > currentHello.incarnation
        }
        let dialer = localPeerID.isGreater(than: candidateHello.peerID) ? Direction.outbound : .inbound
        if (candidate.direction == dialer) != (current.direction == dialer) {
            return candidate.direction == dialer
        }
        return candidateID > currentID
    }

    private mutating func makeLinkID() -> LinkID {
        defer { nextLinkID += 1 }
        return LinkID(nextLinkID)
    }
}

extension UUID {
    /// Compares the 16 bytes in RFC 4122 order, unsigned, most significant first.
    package func isGreater(than other: UUID) -> Bool {
        withUnsafeBytes(of: uuid) { mine in
            withUnsafeBytes(of: other.uuid) { theirs in
                mine.lexicographicallyPrecedes(theirs) == false && !mine.elementsEqual(theirs)
            }
        }
    }
}

/// A small, fast, seedable generator (SplitMix64): the backoff jitter here, and tests that
/// must replay a random case from its seed.
package struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    package init(seed: UInt64) { state = seed }

    package mutating func next() -> UInt64 {
        state &+= Self.increment
        return Self.output(state)
    }

    /// What each draw adds to the state.
    package static let increment: UInt64 = 0x9E37_79B9_7F4A_7C15

    /// The number a draw gives for the state it reached.
    package static func output(_ state: UInt64) -> UInt64 {
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
