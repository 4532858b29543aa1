import Foundation
public import Logging
import MultipeerCore
public import MultipeerSession
import NIOConcurrencyHelpers
import NIOCore

/// A simulated network of hosts, each running real ``MultipeerSession``s: the same actor, the
/// same link pipeline and the same GnuTLS as in production, over simulated TCP, a simulated
/// DNS-SD directory and a simulated clock. Everything runs on one thread, and simulated time
/// moves only inside ``run(until:within:)`` and ``run(for:)``, and then only when every host
/// is idle: a keepalive timeout of 1.5 s costs what its work costs, not 1.5 s.
public final class SimulatedWorld: Sendable {
    let scheduler: SimulationScheduler
    let network: SimulatedNetwork
    let directory: SimulatedDirectory
    /// The instant simulated time 0 stands for in the sessions' clocks.
    let origin: ContinuousClock.Instant
    private let hosts = NIOLockedValueBox<[SimulatedHost]>([])
    private let processes = NIOLockedValueBox(0)
    /// The world's seed: each session's randomness and each host's identity are drawn from it.
    public let seed: UInt64
    private let random: RandomSource
    let recorder = TraceRecorder()
    private let renumbered = NIOLockedValueBox(0)
    let cutNumbers = NIOLockedValueBox(0)

    /// Makes an empty world at simulated time 0, its paths `latency` long each way; `seed`
    /// draws what the network leaves to chance (which segments a lossy path loses, jitter) and,
    /// unless `order` says otherwise, the order in which work ready at one instant runs.
    public init(seed: UInt64 = 0, latency: Duration = .microseconds(250), order: SimulationOrder = .drawn) {
        self.seed = seed
        self.order = order
        random = RandomSource(seed: seed)
        scheduler = SimulationScheduler(draw: order == .drawn ? seed ^ 0x5343_4845_4455_4c45 : nil)
        worldExecutor = WorldExecutor(scheduler: scheduler)
        network = SimulatedNetwork(scheduler: scheduler, latency: latency.nanoseconds, seed: random.next())
        directory = SimulatedDirectory(network: network)
        origin = .now
    }

    deinit {
        scheduler.stop()
    }

    /// Simulated time since the world began.
    public var now: Duration { .nanoseconds(scheduler.now) }

    /// The hosts whose sessions an application read (their messages or events) from outside
    /// the world: from a plain `Task`, on Swift's global executor, which the world neither waits
    /// for nor sees, so that simulated time runs ahead of the reader. Read them with
    /// `Task(executorPreference: host.executor)`. Each is named once in the trace, and a
    /// ``SimulationTimeout`` names them.
    public var outsideReaders: [String] { outsideReaderNames.withLockedValue { $0 } }
    private let outsideReaderNames = NIOLockedValueBox<[String]>([])

    /// An application read `host`'s session from a thread not the world's.
    func noteOutsideReader(of host: String) {
        let first = outsideReaderNames.withLockedValue { names in
            guard !names.contains(host) else { return false }
            names.append(host)
            return true
        }
        guard first else { return }
        record(
            "warning: an application reads \(host)'s session outside the world (a plain Task, on Swift's global executor): the world neither waits for it nor sees it; read with Task(executorPreference: host.executor)"
        )
    }

    /// The order in which work ready at one instant runs.
    public let order: SimulationOrder

    /// Adds a host with the next address of 198.18.0.0/15 (the first is 198.18.0.1).
    public func addHost(_ name: String) -> SimulatedHost {
        hosts.withLockedValue { hosts in
            let number = hosts.count + 1
            let host = SimulatedHost(
                world: self,
                name: name,
                number: number,
                address: "198.18.\(number / 256).\(number % 256)"
            )
            hosts.append(host)
            return host
        }
    }

    /// An address of 198.19.0.0/16 for a host renumbered without one given.
    func freshAddress() -> String {
        renumbered.withLockedValue { last in
            last += 1
            return "198.19.\(last / 256).\(last % 256)"
        }
    }

    /// A process for a host: its jobs are the scheduler's host of this ID.
    func nextProcess() -> SimulationScheduler.HostID {
        processes.withLockedValue { last in
            last += 1
            return SimulationScheduler.HostID(rawValue: last)
        }
    }

    /// A seed for a session's randomness, the next drawn from the world's.
    func nextSeed() -> UInt64 {
        random.next()
    }

    /// Runs Swift tasks on the world's thread, between its hosts' jobs, never frozen: a task
    /// that drives a simulation from here (starts sessions, sends, injects faults, waits) does
    /// so at the same moments every time, so a seed replays the run exactly.
    public var executor: any TaskExecutor { worldExecutor }
    private let worldExecutor: WorldExecutor

    private final class WorldExecutor: TaskExecutor {
        let scheduler: SimulationScheduler

        init(scheduler: SimulationScheduler) {
            self.scheduler = scheduler
        }

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            let executor = self
            scheduler.enqueueWorldTask { job.runSynchronously(on: executor.asUnownedTaskExecutor()) }
        }
    }

    /// What every host's wall clock reads at simulated time 0 (until a host's is stepped):
    /// 2026-01-01T00:00:00Z, in nanoseconds since 1970.
    static let wallClockOrigin: Int64 = 1_767_225_600 * 1_000_000_000

    /// Runs `body` in the world (on its thread, between its jobs) and returns its result.
    func inWorld<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            scheduler.enqueue(nil) { continuation.resume(returning: body()) }
        }
    }

    // MARK: The trace

    /// What happened so far (``SimulationTrace``).
    public var trace: SimulationTrace { recorder.trace }

    /// Adds a line to the trace, at the simulated time now.
    public func record(_ text: String, on host: SimulatedHost? = nil) {
        recorder.record(.init(at: now, host: host?.name ?? "world", text: text))
    }

    // MARK: Time

    /// Lets simulated time run until `condition` holds (looked at whenever every host is idle)
    /// or `limit` of simulated time has passed, and returns the simulated time it took. Throws
    /// ``SimulationTimeout`` if the condition did not hold in time.
    @discardableResult
    public func run(until condition: @escaping @Sendable () -> Bool, within limit: Duration) async throws -> Duration {
        let start = scheduler.now
        guard await scheduler.run(until: condition, within: limit.nanoseconds) else {
            throw SimulationTimeout(limit: limit, at: now, outsideReaders: outsideReaders)
        }
        return .nanoseconds(scheduler.now - start)
    }

    /// Lets simulated time run for `duration`.
    public func run(for duration: Duration) async {
        _ = await scheduler.run(until: { false }, within: duration.nanoseconds)
    }

    /// Runs `body` in the world and lets simulated time run until it returns, at most `limit`
    /// of it; returns what `body` returned, or throws what it threw. For what takes simulated
    /// time to come back: awaited directly, outside ``run(until:within:)``, a send awaiting its
    /// acknowledgement or a stream's `finish()` would wait for a time that never comes.
    ///
    /// ```swift
    /// func deliver(_ note: Note, from a: MultipeerSession, to b: MultipeerSession, in world: SimulatedWorld) async throws {
    ///     try await world.run(within: .seconds(5)) {
    ///         try await a.send(note, to: b.peerID, awaitAcknowledgement: true)
    ///     }
    /// }
    /// ```
    ///
    /// - Throws: ``SimulationTimeout`` if `body` had not returned within `limit` (it is then
    ///   cancelled), or what `body` threw.
    public func run<Value: Sendable>(
        within limit: Duration,
        _ body: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let outcome = NIOLockedValueBox<Result<Value, any Error>?>(nil)
        let task = Task(executorPreference: worldExecutor) {
            let result: Result<Value, any Error>
            do { result = .success(try await body()) } catch { result = .failure(error) }
            outcome.withLockedValue { $0 = result }
        }
        do {
            try await run(until: { outcome.withLockedValue { $0 != nil } }, within: limit)
        } catch {
            task.cancel()
            throw error
        }
        return try outcome.withLockedValue { $0! }.get()
    }

    /// Stops every session the world's hosts started (each says GOODBYE on its links), and
    /// waits until each has returned.
    public func shutdown() async {
        let hosts = hosts.withLockedValue { $0 }
        for host in hosts { host.thaw() }
        let running = hosts.flatMap { $0.stopAll() }
        _ = try? await run(until: { hosts.allSatisfy { $0.runningSessions == 0 } }, within: .seconds(60))
        for task in running { _ = await task.result }
    }
}

extension SimulatedWorld {
    /// Publishes an advert in the world's DNS-SD as anyone on the network can, for no session:
    /// `txt`'s entries (`key=value`, as in an Avahi TXT record) under `serviceType` (a
    /// configuration's ``MultipeerSession/Configuration/serviceType``), pointing at
    /// `address`:`port`. Every browser of that type hears of it after the network's delay, as
    /// of a session's; an advert whose record does not decode is ignored as Avahi's browser
    /// ignores it. ``SimulatedAdvert/withdraw()`` takes it back.
    ///
    /// ```swift
    /// func impersonate(_ victim: PeerIdentity, pointingAt sink: SimulatedHost, in world: SimulatedWorld) async -> SimulatedAdvert {
    ///     let claims = ["v=2", "id=\(victim.peerID.uuidString.lowercased())", "inc=\(UInt64.max)", "name=captain"]
    ///     return await world.advertise("_crew._tcp", txt: claims, at: sink.address, port: 7999)
    /// }
    /// ```
    public func advertise(_ serviceType: String, txt: [String], at address: String, port: Int) async -> SimulatedAdvert
    {
        record("fault: an advert of no session, for \(address):\(port): \(txt.joined(separator: " "))")
        let advert = SimulatedDirectory.Advert(
            machine: nil,
            process: nil,
            serviceType: serviceType,
            address: address,
            port: port,
            txt: txt.map { Array($0.utf8) }
        )
        let id = await inWorld { [directory] in directory.publish(advert) }
        return SimulatedAdvert(world: self, id: id)
    }
}

/// An advert of no session in a ``SimulatedWorld``'s DNS-SD (``SimulatedWorld/advertise(_:txt:at:port:)``).
public struct SimulatedAdvert: Sendable {
    let world: SimulatedWorld
    let id: Int

    /// Takes the advert back: browsers hear it go (a peer it alone named is lost).
    public func withdraw() async {
        world.record("fault: advert \(id) withdrawn")
        await world.inWorld { [directory = world.directory, id] in directory.withdraw(id) }
    }
}

/// Simulated time ran out before the condition held.
public struct SimulationTimeout: Error, CustomStringConvertible {
    /// How long the run was let go.
    public var limit: Duration
    /// Simulated time when it gave up.
    public var at: Duration
    /// The hosts whose sessions an application read from outside the world by then
    /// (``SimulatedWorld/outsideReaders``): the likeliest cause.
    public var outsideReaders: [String] = []

    /// Says what ran out and when, for a test's failure message, and the likeliest cause.
    public var description: String {
        let ran = "the condition did not hold within \(limit) of simulated time (gave up at \(at))"
        guard outsideReaders.isEmpty else {
            return
                "\(ran); an application read the sessions of \(outsideReaders.joined(separator: ", ")) from outside the world (a plain Task, on Swift's global executor), which the world neither waits for nor sees, so simulated time ran ahead of it: read them with Task(executorPreference: host.executor)"
        }
        return
            "\(ran); if it waits for what a task outside the world does (a plain Task, on Swift's global executor), the world neither waits for that task nor sees it: start it with Task(executorPreference: host.executor) (an application's reader) or world.executor (the code that drives the world)"
    }
}

/// The order in which a simulated world runs the work ready at one instant: each host's event
/// loop, the network, and the code that drives the world.
///
/// Each of them runs its own work in the order it came, as an event loop does. Between them,
/// real machines run side by side, and which goes first at any instant is the threads' race:
/// ``drawn`` explores those orders, ``firstInFirstOut`` takes one.
public enum SimulationOrder: Sendable, Hashable {
    /// Whose work runs next is drawn from the world's seed, among those with work ready: every
    /// run of a seed takes the same order, and other seeds take others (as madsim runs ready
    /// tasks in a random order).
    case drawn
    /// The work that became ready first runs first, whoever's it is.
    case firstInFirstOut
}

/// A host of a ``SimulatedWorld``: a machine (its addresses, a kernel that accepts and
/// acknowledges) and a process that runs sessions, which can be frozen, killed and restarted.
public final class SimulatedHost: Sendable {
    /// The name it was added with (``SimulatedWorld/addHost(_:)``): its lines in the trace
    /// carry it, and its ``identity`` is drawn from it.
    public let name: String
    let machine: SimulatedMachine
    private unowned let world: SimulatedWorld
    /// What its clocks read (``driftClock(by:)``): the machine's, across its processes.
    private var time: HostTime { machine.time }
    private let state: NIOLockedValueBox<State>

    /// The host's process: its event loop, and the sessions it started.
    private struct Process {
        var loop: SimulatedEventLoop
        var executor: EventLoopExecutor
        var tasks: [Task<Void, any Error>] = []
    }

    private struct State {
        var process: Process
        var addresses: [String]
        /// How far its wall clock is from the world's (``stepClock(by:)``), in nanoseconds.
        var clockOffset: Int64 = 0
        /// The last incarnation a session of the host took.
        var lastIncarnation: UInt64 = 0
        /// While it sleeps, what cuts it off.
        var asleep: SimulatedPartition?
        /// Processes killed, with the sessions they were running: released at shutdown.
        var killed: [Process] = []
        /// Sessions started here that have not returned, in any of its processes.
        var running = 0
    }

    /// The host's number in its world (1 for the first added).
    private let number: Int

    init(world: SimulatedWorld, name: String, number: Int, address: String) {
        self.world = world
        self.name = name
        self.number = number
        self.machine = SimulatedMachine(address: address)
        var random = SplitMix64(
            seed: world.seed ^ name.utf8.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
        )
        identity = try! PeerIdentity(
            rawPrivateKey: (0..<4).flatMap { _ in withUnsafeBytes(of: random.next()) { Array($0) } }
        )
        state = NIOLockedValueBox(
            State(process: Self.process(in: world, name: name, time: machine.time), addresses: [address])
        )
        let (network, machine) = (world.network, machine)
        world.scheduler.enqueue(nil) { network.assign(address, to: machine) }
    }

    private static func process(in world: SimulatedWorld, name: String, time: HostTime) -> Process {
        let loop = SimulatedEventLoop(scheduler: world.scheduler, host: world.nextProcess(), time: time, name: name)
        return Process(loop: loop, executor: EventLoopExecutor(loop))
    }

    /// Its address, in 198.18.0.0/15 (the latest, if it was renumbered).
    public var address: String { state.withLockedValue { $0.addresses.last! } }
    var addresses: [String] { state.withLockedValue { $0.addresses } }

    private var process: Process { state.withLockedValue { $0.process } }

    /// Runs Swift tasks in this host's process: what prefers it stops while the host is
    /// frozen, and for good once it is killed.
    public var executor: any TaskExecutor { process.executor }

    private var environment: SessionEnvironment {
        let loop = process.loop
        let (world, machine, process, time) = (world, machine, loop.host, time)
        return SessionEnvironment(
            eventLoop: loop,
            clock: SimulatedClock(scheduler: world.scheduler, host: process, time: time, origin: world.origin),
            transport: SimulatedTransport(machine: machine, loop: loop, network: world.network),
            directory: { _, _ in world.directory.view(from: machine, process: process) },
            incarnation: { [self] in nextIncarnation() },
            random: RandomSource(seed: world.nextSeed()),
            offload: EventLoopExecutor(loop),
            blockingWork: { work in loop.execute(work) },
            fileQueue: { _ in LoopFileQueue(loop: loop) },
            readerCheck: { [name] in
                if !world.scheduler.isSchedulerThread { world.noteOutsideReader(of: name) }
            }
        )
    }

    /// Makes a session in this host's process: as `MultipeerSession(configuration:identity:)`
    /// makes one, but in this world (its DNS-SD, TCP and time). By default with the host's
    /// ``identity``, as a device's identity file keeps it across restarts. Every line its
    /// logger writes carries the world's time and the host (``logger(_:)``).
    public func makeSession(
        configuration: MultipeerSession.Configuration,
        identity: PeerIdentity? = nil
    ) -> MultipeerSession {
        var configuration = configuration
        configuration.logger = logger(configuration.logger)
        return MultipeerSession(
            configuration: configuration,
            identity: identity ?? self.identity,
            environment: environment
        )
    }

    /// `base` with two more metadata on every line it writes: `simulation.time`, the world's
    /// time when it was written (seconds to the nanosecond, as the ``SimulatedWorld/trace``
    /// prints it), and `simulation.host`, this host's name. The wall-clock timestamp a log
    /// handler prints means nothing in a simulated world; these say when and where, and line up
    /// with the trace. The sessions ``makeSession(configuration:identity:)`` makes log so; give
    /// an application's own logger in the world the same. (Through the logger's metadata
    /// provider, beside the one it has: a handler that reads providers, as swift-log's
    /// `StreamLogHandler` does, prints them.)
    ///
    /// ```swift
    /// func stampTheAppsLogger(_ configuration: inout MultipeerSession.Configuration, on host: SimulatedHost) {
    ///     // Its lines then say "... simulation.host=relief simulation.time=12.500000000 ...".
    ///     configuration.logger = host.logger(configuration.logger)
    /// }
    /// ```
    public func logger(_ base: Logger) -> Logger {
        var logger = base
        let (world, name) = (world, name)
        let stamp = Logger.MetadataProvider {
            ["simulation.time": "\(SimulationTrace.Line.seconds(world.now))", "simulation.host": "\(name)"]
        }
        logger.handler.metadataProvider = .multiplex([base.handler.metadataProvider, stamp].compactMap { $0 })
        return logger
    }

    /// The host's device identity, drawn from the world's seed and the host's name: the same
    /// for every run of a seed, and across the host's restarts.
    public let identity: PeerIdentity

    /// Runs `session` in this host's process until the world shuts down, the process is
    /// killed, or the returned task is cancelled. `run` is what runs it, where the application
    /// runs its session inside a service of its own (nil: `session.run()`); it must end when the
    /// session does.
    ///
    /// ```swift
    /// func startSessionAndStore(on host: SimulatedHost, _ session: MultipeerSession, _ store: SyncStore) {
    ///     // The application's own service: the store beside its session, ending with it.
    ///     host.start(session) {
    ///         try await withThrowingTaskGroup(of: Void.self) { group in
    ///             group.addTask { try await store.run() }
    ///             try await session.run()
    ///             group.cancelAll()
    ///         }
    ///     }
    /// }
    /// ```
    @discardableResult
    public func start(
        _ session: MultipeerSession,
        by run: (@Sendable () async throws -> Void)? = nil
    ) -> Task<Void, any Error> {
        let state = self.state
        let (executor, process) = state.withLockedValue { state in
            state.running += 1
            return (state.process.executor, state.process.loop.host)
        }
        let task = Task(executorPreference: executor) {
            // (Its last job, on the world's thread: shutdown() sees it end.)
            defer { state.withLockedValue { $0.running -= 1 } }
            if let run { try await run() } else { try await session.run() }
        }
        state.withLockedValue { if $0.process.loop.host == process { $0.process.tasks.append(task) } }
        // The session's events, into the trace: read on the world's thread, in the order emitted.
        let (world, name) = (world, name)
        let events = session.events
        Task(executorPreference: world.executor) {
            for await event in events {
                if case .stats = event { continue }
                world.recorder.record(.init(at: world.now, host: name, text: "\(event)"))
            }
        }
        return task
    }

    /// Stops the host's process as SIGSTOP does: its sessions' code and timers wait; its kernel
    /// still accepts connections and acknowledges what arrives.
    public func freeze() {
        world.record("fault: frozen", on: self)
        world.scheduler.freeze(process.loop.host)
    }

    /// Lets a frozen host run again, as SIGCONT does: what it missed runs first, late.
    public func thaw() {
        guard world.scheduler.isFrozen(process.loop.host) else { return }
        world.record("fault: thawed", on: self)
        world.scheduler.thaw(process.loop.host)
    }

    /// Puts the machine to sleep, as closing a laptop's lid does: its process stops (as
    /// ``freeze()`` stops it) and nothing reaches it or leaves it (as ``blackHole()``): its
    /// peers see silence, not acknowledgements. Its clock goes on, as Swift's ContinuousClock
    /// does through a sleep, so at ``wake()`` every timer that fell due meanwhile runs at once.
    /// (``SimulatedWorld/heal()`` lets its network through again; its process sleeps on until
    /// ``wake()``.)
    public func sleep() async {
        guard state.withLockedValue({ $0.asleep == nil }) else { return }
        world.record("fault: asleep", on: self)
        world.scheduler.freeze(process.loop.host)
        let cut = await world.partition([self])
        state.withLockedValue { $0.asleep = cut }
    }

    /// Wakes the machine ``sleep()`` put to sleep: its network first, then its process, late.
    public func wake() async {
        guard
            let cut = state.withLockedValue({ state in
                defer { state.asleep = nil }
                return state.asleep
            })
        else { return }
        world.record("fault: awake", on: self)
        await cut.heal()
        world.scheduler.thaw(process.loop.host)
    }

    /// Kills the host's process as SIGKILL does: its sessions stop where they are, without a
    /// GOODBYE; its kernel closes their sockets, and its adverts go. ``restart()`` starts
    /// another process.
    public func kill() async {
        world.record("fault: killed", on: self)
        let process = process.loop.host
        world.scheduler.kill(process)
        state.withLockedValue { state in
            state.killed.append(state.process)
            state.process.tasks.removeAll()
        }
        let (network, machine, directory) = (world.network, machine, world.directory)
        await world.inWorld {
            network.killed(machine)
            directory.killed(process)
        }
    }

    /// Starts a new process on the host (after ``kill()``): sessions made from now on run in it.
    public func restart() {
        world.record("fault: restarted", on: self)
        let process = Self.process(in: world, name: name, time: time)
        state.withLockedValue { $0.process = process }
    }

    /// Cuts this host off from every other: nothing it sends arrives, nothing sent to it does
    /// (what was on its way either way is lost); its connections stay open. The partition returned undoes it (``SimulatedWorld/heal()``
    /// every partition at once).
    @discardableResult
    public func blackHole() async -> SimulatedPartition {
        await world.partition([self])
    }

    /// Gives every path to and from this host a delay (`latency` each way, plus up to
    /// `jitter`), a loss rate (0 to 1) and a bandwidth (bytes a second; nil: unlimited), each
    /// path its own link whose connections share its bandwidth. A path given its own
    /// (``SimulatedWorld/impair(from:to:oneWay:latency:jitter:loss:bandwidth:)``) keeps it.
    public func impair(latency: Duration, jitter: Duration = .zero, loss: Double = 0, bandwidth: Int? = nil) async {
        world.record(
            "fault: paths impaired (\(latency) +- \(jitter), loss \(loss), bandwidth \(bandwidth.map { "\($0) B/s" } ?? "unlimited"))",
            on: self
        )
        let path = SimulatedNetwork.Path(
            latency: latency.nanoseconds,
            jitter: jitter.nanoseconds,
            loss: loss,
            bandwidth: bandwidth.map(Int64.init)
        )
        let (network, machine) = (world.network, machine)
        await world.inWorld { network.impair(machine, path) }
    }

    /// Undoes ``impair(latency:jitter:loss:bandwidth:)``.
    public func repair() async {
        world.record("fault: paths repaired", on: self)
        let (network, machine) = (world.network, machine)
        await world.inWorld { network.impair(machine, nil) }
    }

    /// Moves the host to `address` (nil: the next free one of 198.18.0.0/15) as a DHCP lease
    /// change does: connections from its old address go dead, and its adverts move.
    public func renumber(to address: String? = nil) async {
        let old = self.address
        let new = address ?? world.freshAddress()
        world.record("fault: renumbered from \(old) to \(new)", on: self)
        state.withLockedValue { $0.addresses = [new] }
        let (network, machine, directory) = (world.network, machine, world.directory)
        await world.inWorld {
            network.renumber(machine, from: old, to: new)
            directory.renumbered(machine, to: new)
        }
    }

    /// Steps the host's wall clock by `step` (back, if negative), as NTP correcting it or a
    /// user setting the time does. A session's incarnation is its host's wall clock when it
    /// starts (docs/PROTOCOL.md 3): a session started after a step back is *older* by that
    /// measure than the one before it. Its sessions' monotonic clock (keepalive, backoff,
    /// deadlines) does not move.
    public func stepClock(by step: Duration) {
        world.record("fault: wall clock stepped by \(step)", on: self)
        state.withLockedValue { state in
            state.clockOffset += Int64(step.nanoseconds)
            if step < .zero { state.lastIncarnation = 0 }
        }
    }

    /// Makes the host's clocks run `fraction` faster than the world's from now on (negative:
    /// slower; 0: at the world's pace again), as a quartz that is off, or a virtual machine's
    /// clock, does: 0.001 gains a millisecond a second. Its sessions' monotonic clock (timers,
    /// keepalive, backoff, deadlines), its event loop's, its ``wallClock`` and the times its
    /// kernel reports of a connection (TCP_INFO's) all drift; its kernel's own timers (TCP's
    /// retransmissions and user timeout) keep the world's pace. A timer set before the
    /// drift changes keeps the instant it was set for. `fraction` is within -0.5...0.5.
    ///
    /// ```swift
    /// func aFastClock(_ host: SimulatedHost) {
    ///     host.driftClock(by: 0.02)  // 20 ms fast every second
    /// }
    /// ```
    public func driftClock(by fraction: Double) {
        precondition((-0.5...0.5).contains(fraction), "a drift of \(fraction): within -0.5...0.5")
        world.record("fault: clock drifting by \(fraction)", on: self)
        time.drift(by: fraction, at: world.scheduler.now)
    }

    /// The host's time, in nanoseconds since the world began, as its drifting clock reads it.
    private var hostNanoseconds: Int64 { time.host(atWorld: world.scheduler.now) }

    /// The host's wall clock: what `Date()` would read on it, the world's start (2026-01-01
    /// UTC) plus the simulated time gone by, with the steps of ``stepClock(by:)`` and the drift
    /// of ``driftClock(by:)``. For an application's code that stamps with wall time (a
    /// replicated store's clock, say).
    public var wallClock: Date {
        let nanoseconds = SimulatedWorld.wallClockOrigin + hostNanoseconds + state.withLockedValue { $0.clockOffset }
        return Date(timeIntervalSince1970: Double(nanoseconds) / 1e9)
    }

    /// A session's incarnation: the host's wall clock in nanoseconds since 1970, in whole
    /// microseconds with the host's number below them (so no two hosts' are equal), and later
    /// than the host's last unless its clock was stepped back since (as a process's are).
    private func nextIncarnation() -> UInt64 {
        let now = hostNanoseconds
        return state.withLockedValue { state in
            let wallClock = UInt64(max(0, SimulatedWorld.wallClockOrigin + now + state.clockOffset))
            state.lastIncarnation = max(
                wallClock / 1_000 * 1_000 + UInt64(number % 1_000),
                state.lastIncarnation + 1_000
            )
            return state.lastIncarnation
        }
    }

    /// How many of the sessions its process started still run.
    var runningSessions: Int { state.withLockedValue { $0.running } }

    func stopAll() -> [Task<Void, any Error>] {
        let (tasks, killed) = state.withLockedValue { state in
            defer {
                state.process.tasks.removeAll()
                state.killed.removeAll()
            }
            return (state.process.tasks, state.killed)
        }
        for task in tasks { task.cancel() }
        // The killed processes' sessions run down (their sockets are closed, their adverts gone:
        // nothing they do reaches the world), so that nothing they hold outlives the world.
        for process in killed {
            for task in process.tasks { task.cancel() }
            world.scheduler.release(process.loop.host)
        }
        return tasks + killed.flatMap(\.tasks)
    }
}

/// A file queue in a simulated host's process: its work runs as the process's jobs, in order
/// (the files are real; the time their work takes is not simulated).
private struct LoopFileQueue: FileQueue {
    let loop: SimulatedEventLoop

    func async(_ work: @escaping @Sendable () -> Void) {
        loop.execute(work)
    }

    func assertOnQueue() {
        loop.assertInEventLoop()
    }
}
