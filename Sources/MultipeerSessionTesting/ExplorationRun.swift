import Foundation
public import MultipeerSession

/// An application a ``SimulationExplorer`` runs in worlds drawn from seeds: it starts its
/// sessions, does its work, and checks its own promises, while the explorer draws the hosts
/// and the faults and checks the package's promises.
///
/// Everything is called on the world's thread (``SimulatedWorld/executor``), one call at a
/// time; work the application starts on a host runs on that host's executor.
public protocol ExploredApplication: AnyObject {
    /// Makes the application's session on `host` and starts it (`host.start(_:)`), with
    /// whatever readers it runs there: at the world's start, and again after each restart of
    /// the host's process.
    func start(on host: SimulatedHost, in run: ExplorationRun) -> MultipeerSession

    /// Schedules the application's work (``ExplorationRun/schedule(after:_:)``), once every
    /// host's session has started.
    func begin(in run: ExplorationRun)

    /// Checks the promises that hold at every step, reporting each broken one
    /// (``ExplorationRun/broke(_:_:)``). The explorer calls it after every action, its own
    /// and the application's.
    func check(in run: ExplorationRun)

    /// Once a second of the quiet spell at the end: the light work of a healthy world.
    func quietStep(in run: ExplorationRun)

    /// Everything healed and the quiet spell over: checks what must hold in the end (what
    /// must have arrived, converged, returned), waiting in simulated time as it needs
    /// (``SimulatedWorld/run(until:within:)``).
    func settle(in run: ExplorationRun) async

    /// `host`'s process is about to be killed: what the application had in memory dies with it.
    func willKill(_ host: SimulatedHost, in run: ExplorationRun)

    /// `host`'s process runs again after being frozen or asleep.
    func resumed(_ host: SimulatedHost, in run: ExplorationRun) async

    /// The explorer heals everything at the end: the application ends its own disturbances
    /// (readers stopped, members left out) before the world settles.
    func heal(in run: ExplorationRun) async

    /// Since when the application on `host` has read everything that comes, or nil while it
    /// does not (a reader stopped): its session may stop reading its links then, and a silent
    /// peer is not timed out (PROTOCOL.md 3a).
    func readingSince(on host: SimulatedHost) -> Duration?
}

/// What an application that does not say does: nothing, and it always reads.
extension ExploredApplication {
    /// Checks nothing at every step.
    public func check(in run: ExplorationRun) {}
    /// Does nothing in the quiet spell.
    public func quietStep(in run: ExplorationRun) {}
    /// Checks nothing at the end.
    public func settle(in run: ExplorationRun) async {}
    /// Keeps nothing that dies with a process.
    public func willKill(_ host: SimulatedHost, in run: ExplorationRun) {}
    /// Does nothing when a process runs again.
    public func resumed(_ host: SimulatedHost, in run: ExplorationRun) async {}
    /// Has no disturbance of its own to end.
    public func heal(in run: ExplorationRun) async {}
    /// Reads everything, from the start.
    public func readingSince(on host: SimulatedHost) -> Duration? { .zero }
}

/// One world a ``SimulationExplorer`` drew from a seed, under way: its hosts and their faults,
/// the agenda of what happens next, and the promises broken so far. An application reads it
/// and schedules its work on it.
///
/// Used on the world's thread only (``SimulatedWorld/executor``).
public final class ExplorationRun: @unchecked Sendable {
    /// The default keepalive's timeout, and the stall limit on a disturbed path.
    static let timeout = Duration.milliseconds(1_500)
    static let stallLimit = Duration.seconds(15)
    /// How long after everything is healed every pair must be active again: the redial
    /// backoff's cap with its jitter (12 s), a connect timeout and a handshake, twice over.
    public static let rejoinBound = Duration.seconds(30)

    /// One host, its session and its faults.
    final class Node: @unchecked Sendable {
        let index: Int
        let host: SimulatedHost
        var session: MultipeerSession?
        var alive = true
        var suspended = false
        /// Stopped, as SIGSTOP stops it (or asleep: stopped and cut off).
        var frozen = false
        var asleep = false
        var blackHole: SimulatedPartition?
        var oneWayCut: SimulatedPartition?
        var held: SimulatedPartition?
        var impairedUntil: Duration?
        /// The path impaired (to the host of that index, and back unless one way) when not all of its own.
        var impairedPath: (other: Int, oneWay: Bool)?
        /// How fast its clock runs against the world's (0: at its pace).
        var drift = 0.0
        /// When its paths were last disturbed (impaired, cut off, renumbered): a path that lost
        /// packets is judged from the last two minutes of its stalls, up to the stall limit.
        var lastDisturbed: Duration?
        /// The peers it is active with, and those it knows of, as its events say.
        var active: Set<UUID> = []
        var available: [UUID: AvailablePeer.State] = [:]
        /// When its current session started.
        var started: Duration?

        init(index: Int, host: SimulatedHost) {
            self.index = index
            self.host = host
        }
    }

    /// A silence one side must notice, and since when.
    private struct Detection {
        var watcher: Int
        var silent: Int
        var since: Duration
        var what: String
    }

    /// The plan the world was drawn from.
    public let plan: ExplorationPlan
    /// The world.
    public let world: SimulatedWorld
    /// The application's own draws: a stream of the seed's, apart from the explorer's.
    public var random: SimulationRandom
    /// The explorer's draws: the hosts, the faults, their timing.
    private var draws: SimulationRandom
    private(set) var nodes: [Node] = []
    private var agenda: [(at: Duration, order: Int, action: () async -> Void)] = []
    private var order = 0
    private var partition: SimulatedPartition?
    private var lastRenumbered: Duration?
    private var detections: [Detection] = []
    private(set) var broken: [BrokenPromise] = []
    /// How long the trace was, and the simulated time, when the first promise broke while the
    /// work ran (not while the world settled).
    private(set) var failedAt: Int?
    private(set) var brokeAt: Duration?
    private(set) var faults = 0
    private(set) var sessionTime = Duration.zero
    private let stopAtFirst: Bool
    private weak var application: (any ExploredApplication)?

    /// Whether the world is in its quiet spell: healed, every path healthy.
    public private(set) var isQuiet = false

    init(plan: ExplorationPlan, stopAtFirst: Bool) {
        self.plan = plan
        self.stopAtFirst = stopAtFirst
        world = SimulatedWorld(seed: plan.seed)
        random = SimulationRandom(seed: plan.seed ^ 0xA991_1CA7_1011_5EED)
        draws = SimulationRandom(seed: plan.seed ^ 0x5EED_5EED_5EED_5EED)
    }

    // MARK: What an application reads and does

    /// The world's hosts, in the order they were added.
    public var hosts: [SimulatedHost] { nodes.map(\.host) }

    /// `host`'s place in ``hosts``.
    public func index(of host: SimulatedHost) -> Int {
        nodes.firstIndex { $0.host === host }!
    }

    /// The session the application started on `host` last.
    public func session(on host: SimulatedHost) -> MultipeerSession {
        nodes[index(of: host)].session!
    }

    /// Whether `host`'s process runs now: neither killed (and not yet restarted), frozen nor asleep.
    public func isRunning(_ host: SimulatedHost) -> Bool {
        let node = nodes[index(of: host)]
        return node.alive && !node.frozen
    }

    /// Whether `host`'s process is alive (it may be frozen or asleep).
    public func isAlive(_ host: SimulatedHost) -> Bool { nodes[index(of: host)].alive }

    /// Whether `host`'s session is suspended by the explorer's fault.
    public func isSuspended(_ host: SimulatedHost) -> Bool { nodes[index(of: host)].suspended }

    /// The peers `host`'s session is active with, as its events say.
    public func activePeers(of host: SimulatedHost) -> Set<UUID> { nodes[index(of: host)].active }

    /// Runs `action` at `delay` from now, in simulated time, after what is due before it (and
    /// what was scheduled before it for the same instant).
    public func schedule(after delay: Duration, _ action: @escaping () async -> Void) {
        order += 1
        let entry = (at: world.now + delay, order: order, action: action)
        let index = agenda.firstIndex { ($0.at, $0.order) > (entry.at, entry.order) } ?? agenda.endIndex
        agenda.insert(entry, at: index)
    }

    /// Reports a promise broken, saying what happened (beginning with the simulated time it
    /// happened at, as the trace does: `"\(run.world.now) relief: ..."`): the world fails with it.
    public func broke(_ promise: ExplorationPromise, _ text: String) {
        broken.append(BrokenPromise(promise: promise, text: text))
    }

    // MARK: The world's course

    /// Draws the world, runs the application in it through the faults, heals everything,
    /// lets it settle, and checks the promises.
    func drive(_ application: any ExploredApplication) async {
        self.application = application
        let count = Int.random(in: plan.hosts, using: &draws)
        let names = [
            "captain", "first-officer", "relief", "purser", "navigator", "engineer", "loadmaster", "dispatcher",
        ]
        nodes = (0..<count).map { Node(index: $0, host: world.addHost($0 < names.count ? names[$0] : "host-\($0)")) }
        for node in nodes { start(node) }
        let nodes = self.nodes
        do {
            try await world.run(
                until: { nodes.allSatisfy { $0.session!.activePeers.count == nodes.count - 1 } },
                within: .seconds(10)
            )
        } catch {
            broke(
                .startsActive,
                "\(world.now) the \(count) sessions did not all become active with each other within 10 s of starting"
            )
        }
        application.begin(in: self)
        schedule(after: draws.exponential(mean: plan.faultEvery)) { [unowned self] in await faultDue() }
        while let next = agenda.first, next.at <= plan.duration {
            agenda.removeFirst()
            if next.at > world.now { await world.run(for: next.at - world.now) }
            await next.action()
            // What the action set off at this instant runs first (the events it emitted read).
            await world.run(for: .zero)
            check()
            if !broken.isEmpty, brokeAt == nil { (brokeAt, failedAt) = (world.now, world.trace.lines.count) }
            guard broken.isEmpty || !stopAtFirst else { return await stop() }
        }
        await world.run(for: max(.zero, plan.duration - world.now))
        await settle()
        await stop()
    }

    private func faultDue() async {
        await inject()
        schedule(after: draws.exponential(mean: plan.faultEvery)) { [unowned self] in await faultDue() }
    }

    /// Starts `node`'s application, and watches its session's events.
    private func start(_ node: Node) {
        let session = application!.start(on: node.host, in: self)
        node.session = session
        node.started = world.now
        let world = self.world
        Task(executorPreference: world.executor) { [weak self, weak node] in
            for await event in session.events {
                guard let self, let node, node.session === session else { return }
                switch event {
                case .peerJoined(let peer):
                    node.active.insert(peer.id)
                case .peerLeft(let peer, let reason):
                    node.active.remove(peer.id)
                    if isQuiet {
                        broke(
                            .noFalseTeardown,
                            "\(world.now) \(node.host.name): \(peer.displayName) left (\(reason)) with every path healthy (no false teardown)"
                        )
                    }
                case .availablePeerChanged(let peer):
                    node.available[peer.id] = peer.state == .gone ? nil : peer.state
                default: break
                }
            }
        }
    }

    /// The promises that hold at every step: the package's, then the application's.
    private func check() {
        detections.removeAll { detection in
            let (watcher, silent) = (nodes[detection.watcher], nodes[detection.silent])
            let bound = detectionBound(watcher, silent, since: detection.since)
            // A side whose application is behind may have stopped reading the link (PROTOCOL.md
            // 3a): it does not time the link out then, and counts afresh once it reads again.
            guard let reading = application?.readingSince(on: watcher.host) else { return false }
            guard world.now - max(detection.since, reading) > bound else { return false }
            if watcher.alive, !watcher.frozen, watcher.active.contains(silent.session!.peerID) {
                broke(
                    .silenceDetected,
                    "\(world.now) \(watcher.host.name): \(silent.host.name), \(detection.what) since \(detection.since), still active after \(bound) (a silent peer is detected within the keepalive's bound)"
                )
            }
            return true
        }
        for node in nodes where node.alive && !node.frozen {
            let session = node.session!
            let listed = Set(session.activePeers.map(\.id))
            if listed != node.active {
                broke(
                    .activePeersAsEvents,
                    "\(world.now) \(node.host.name): activePeers \(listed.count) peers, its events \(node.active.count) (activePeers changes as the events say)"
                )
            }
            let available = Dictionary(session.availablePeers.map { ($0.id, $0.state) }, uniquingKeysWith: { $1 })
            if !node.suspended, available != node.available {
                broke(
                    .availablePeersAsEvents,
                    "\(world.now) \(node.host.name): availablePeers \(available.values.sorted { "\($0)" < "\($1)" }), its events \(node.available.values.sorted { "\($0)" < "\($1)" }) (availablePeers changes as availablePeerChanged says)"
                )
            }
        }
        application?.check(in: self)
    }

    // MARK: Faults

    private func inject() async {
        // (One number from the explorer's stream a fault, whatever its kind: SimulatedFault says why.)
        let draw = draws.next()
        guard let kind = SimulatedFault.drawn(draw, among: plan.faults) else { return }
        var own = SimulationRandom(seed: draw)
        let candidates = nodes.filter {
            $0.alive && !$0.frozen && $0.blackHole == nil && !$0.suspended && $0.impairedUntil == nil
                && $0.oneWayCut == nil && $0.held == nil
        }
        guard let node = candidates.randomElement(using: &own) else { return }
        switch kind {
        case .freeze:
            watchSilence(of: node, "frozen")
            node.frozen = true
            node.host.freeze()
            schedule(after: own.seconds(0.2...6)) { [unowned self] in await thaw(node) }
        case .blackHole:
            watchSilence(of: node, "black-holed")
            node.blackHole = await node.host.blackHole()
            schedule(after: own.seconds(1...10)) { [unowned self] in await endCut(node, \.blackHole) }
        case .partition:
            guard partition == nil else { return }
            let side = nodes.filter { _ in own.chance(0.5) }
            guard !side.isEmpty, side.count < nodes.count else { return }
            partition = await world.partition(side.map(\.host))
            schedule(after: own.seconds(1...20)) { [unowned self] in
                await partition?.heal()
                partition = nil
                for node in nodes { node.lastDisturbed = world.now }
            }
        case .impair:
            let loss = Double.random(in: 0...0.3, using: &own)
            let latency = own.seconds(0.0001...0.05)
            let jitter = own.seconds(0...0.05)
            await node.host.impair(latency: latency, jitter: jitter, loss: loss)
            let until = world.now + own.seconds(5...60)
            node.impairedUntil = until
            node.lastDisturbed = until
            schedule(after: until - world.now) { [unowned self] in await repair(node) }
        case .kill:
            application?.willKill(node.host, in: self)
            await node.host.kill()
            node.alive = false
            sessionTime += world.now - (node.started ?? world.now)
            node.started = nil
            schedule(after: own.seconds(0.2...5)) { [unowned self] in restart(node) }
        case .renumber:
            node.lastDisturbed = world.now
            lastRenumbered = world.now
            await node.host.renumber()
        case .sleep:
            watchSilence(of: node, "asleep")
            node.frozen = true
            node.asleep = true
            await node.host.sleep()
            schedule(after: own.seconds(1...30)) { [unowned self] in await wake(node) }
        case .suspend:
            node.suspended = true
            await node.session!.suspend()
            schedule(after: own.seconds(0.5...10)) {
                node.suspended = false
                await node.session!.resume()
            }
        case .oneWayCut:
            // What it sends lost, or what the others send it: each side finds the other silent.
            watchSilence(of: node, "cut off one way")
            let others = nodes.filter { $0.index != node.index }.map(\.host)
            node.oneWayCut =
                own.chance(0.5)
                ? await world.cut(from: [node.host], to: others) : await world.cut(from: others, to: [node.host])
            schedule(after: own.seconds(1...10)) { [unowned self] in await endCut(node, \.oneWayCut) }
        case .hold:
            // Shorter than the keepalive's timeout, mostly: what it holds arrives late, not lost.
            node.lastDisturbed = world.now
            node.held = await world.hold([node.host])
            schedule(after: own.seconds(0.05...2)) { [unowned self] in
                node.lastDisturbed = world.now
                await node.held?.heal()
                node.held = nil
            }
        case .pathImpair:
            guard let other = nodes.filter({ $0.index != node.index }).randomElement(using: &own) else { return }
            let oneWay = own.chance(0.5)
            let loss = Double.random(in: 0...0.3, using: &own)
            let latency = own.seconds(0.0001...0.1)
            let jitter = own.seconds(0...0.05)
            let bandwidth = own.chance(0.3) ? Int.random(in: 500_000...5_000_000, using: &own) : nil
            await world.impair(
                from: node.host,
                to: other.host,
                oneWay: oneWay,
                latency: latency,
                jitter: jitter,
                loss: loss,
                bandwidth: bandwidth
            )
            let until = world.now + own.seconds(5...60)
            node.impairedUntil = until
            node.impairedPath = (other.index, oneWay)
            node.lastDisturbed = until
            other.lastDisturbed = until
            schedule(after: until - world.now) { [unowned self] in await repair(node) }
        case .drift:
            guard node.drift == 0 else { return }
            let fraction = Double.random(in: 0.001...0.02, using: &own) * (own.chance(0.5) ? 1 : -1)
            node.drift = fraction
            node.host.driftClock(by: fraction)
            schedule(after: own.seconds(10...60)) {
                node.drift = 0
                node.host.driftClock(by: 0)
            }
        }
        faults += 1
    }

    /// Ends `node`'s black hole or one-way cut (`cut`): its peers hear it again, on paths
    /// that were disturbed.
    private func endCut(_ node: Node, _ cut: ReferenceWritableKeyPath<Node, SimulatedPartition?>) async {
        for node in nodes { node.lastDisturbed = world.now }
        await node[keyPath: cut]?.heal()
        node[keyPath: cut] = nil
        detections.removeAll { $0.silent == node.index }
    }

    private func thaw(_ node: Node) async {
        node.frozen = false
        node.host.thaw()
        detections.removeAll { $0.silent == node.index }
        watchAfresh(node.index)
        await application?.resumed(node.host, in: self)
    }

    private func wake(_ node: Node) async {
        for node in nodes { node.lastDisturbed = world.now }
        node.asleep = false
        node.frozen = false
        await node.host.wake()
        detections.removeAll { $0.silent == node.index }
        watchAfresh(node.index)
        await application?.resumed(node.host, in: self)
    }

    /// Starts `node`'s process again, and its application in it.
    private func restart(_ node: Node) {
        node.host.restart()
        // A machine that comes back with its wall clock behind (a reboot that lost the time,
        // say): its new session is an older incarnation by the wall clock than the last.
        if draws.chance(0.3) { node.host.stepClock(by: .zero - draws.seconds(1...7_200)) }
        node.alive = true
        node.active = []
        node.available = [:]
        start(node)
    }

    /// Ends `node`'s impairment: of its paths, or of the one path it was given.
    private func repair(_ node: Node) async {
        node.impairedUntil = nil
        if let (other, oneWay) = node.impairedPath {
            node.impairedPath = nil
            await world.repair(from: node.host, to: nodes[other].host, oneWay: oneWay)
        } else {
            await node.host.repair()
        }
    }

    /// `node` falls silent: each peer active with it must notice within the documented bound.
    private func watchSilence(of node: Node, _ what: String) {
        for watcher in nodes
        where watcher.index != node.index && watcher.alive && !watcher.frozen && !watcher.suspended
            && watcher.active.contains(node.session!.peerID)
        {
            detections.append(Detection(watcher: watcher.index, silent: node.index, since: world.now, what: what))
        }
    }

    /// A watcher that was stopped (frozen, asleep) ran no timer meanwhile: what it watches is
    /// timed from now (seed 3367: a watcher frozen just before its timeout and thawed with the
    /// silent peer was judged late at once).
    private func watchAfresh(_ index: Int) {
        for position in detections.indices where detections[position].watcher == index {
            detections[position].since = max(detections[position].since, world.now)
        }
    }

    /// How soon `watcher` must notice `silent`'s silence, begun at `since`, as the keepalive
    /// documents it (TuningKeepaliveAndBackoff, PROTOCOL.md 2): the configured timeout on a
    /// clean path; at least the ceiling (three times it) on a path that has lost packets; up to
    /// the stall limit on one whose stalls of the last two minutes it judges from. Each with the
    /// 20 ms timer grid and a round trip.
    private func detectionBound(_ watcher: Node, _ silent: Node, since: Duration) -> Duration {
        // (A path impaired marks both its hosts disturbed.)
        let recent =
            [watcher, silent].contains { (node: Node) -> Bool in
                let faulted = node.impairedUntil != nil || node.blackHole != nil || node.asleep
                let cut = node.oneWayCut != nil || node.held != nil
                return faulted || cut || node.lastDisturbed.map { since - $0 < .seconds(130) } == true
            } || partition != nil
        // A connection that lost packets long ago still shows it (TCP_INFO counts since the
        // connection began): the keepalive dates it when it first reads it.
        let ever = [watcher, silent].contains { $0.lastDisturbed != nil }
        let bound = (recent ? Self.stallLimit : ever ? Self.timeout * 3 : Self.timeout) + .milliseconds(100)
        // A watcher whose clock runs slow times its silence in its own, longer seconds.
        return watcher.drift < 0 ? bound * (1 / (1 + watcher.drift)) : bound
    }

    // MARK: The end

    /// Heals everything, lets the world settle, and checks what must hold then.
    private func settle() async {
        for node in nodes where node.asleep {
            node.asleep = false
            await node.host.wake()
        }
        for node in nodes where node.frozen {
            node.frozen = false
            node.host.thaw()
        }
        for node in nodes where node.impairedUntil != nil { await repair(node) }
        for node in nodes where node.drift != 0 {
            node.drift = 0
            node.host.driftClock(by: 0)
        }
        await world.heal()
        partition = nil
        for node in nodes { (node.blackHole, node.oneWayCut, node.held) = (nil, nil, nil) }
        for node in nodes where node.suspended {
            node.suspended = false
            await node.session!.resume()
        }
        for node in nodes where !node.alive { restart(node) }
        agenda.removeAll()
        await application?.heal(in: self)
        detections.removeAll()
        world.record("healed everything: settling")
        let healed = world.now
        // A silence begun before the heal may still end a link: what TCP held back arrives at
        // its next retransmission (within 1 s), which can come after the keepalive's timeout.
        await world.run(for: .seconds(2))
        let nodes = self.nodes
        let together = { @Sendable in nodes.allSatisfy { $0.session!.activePeers.count == nodes.count - 1 } }
        do {
            try await world.run(until: together, within: Self.rejoinBound)
        } catch {
            for node in nodes {
                let missing = nodes.filter { other in
                    other.index != node.index
                        && !node.session!.activePeers.contains { $0.id == other.session!.peerID }
                }
                if !missing.isEmpty {
                    broke(
                        .rejoinsAfterHealing,
                        "\(world.now) \(node.host.name): not active with \(missing.map(\.host.name).joined(separator: ", ")) \(Self.rejoinBound) after everything healed at \(healed)"
                    )
                }
            }
            return
        }
        // A link that went dead in a fault (an address renumbered away) but still counts as
        // active is found within the stall limit, and its peer comes back.
        if let renumbered = lastRenumbered, world.now - renumbered < Self.stallLimit + .seconds(1) {
            await world.run(for: renumbered + Self.stallLimit + .seconds(1) - world.now)
        }
        do {
            try await world.run(until: together, within: Self.rejoinBound)
        } catch {
            broke(
                .rejoinsAfterHealing,
                "\(world.now) not every pair active again \(Self.rejoinBound) after the links dead since the faults were found"
            )
            return
        }
        check()
        // Quiet: healthy paths, light work; nobody may leave.
        isQuiet = true
        for _ in 0..<max(1, Int(plan.quiet.components.seconds)) {
            await world.run(for: .seconds(1))
            application?.quietStep(in: self)
            check()
        }
        isQuiet = false
        await application?.settle(in: self)
    }

    private func stop() async {
        for node in nodes {
            if let since = node.started { sessionTime += world.now - since }
            node.started = nil
        }
        await world.shutdown()
    }
}
