import Foundation
public import MultipeerSession
import NIOConcurrencyHelpers
import NIOCore

/// A simulated network of hosts, each running real ``MultipeerSession``s: the same actor, the
/// same link pipeline and the same GnuTLS as in production, over simulated TCP, a simulated
/// DNS-SD directory and a simulated clock. Everything runs on one thread, and simulated time
/// moves only inside ``run(until:within:)`` and ``run(for:)``, and then only when every host
/// is idle: a keepalive timeout of 1.5 s costs what its work costs, not 1.5 s.
///
/// ```swift
/// let world = SimulatedWorld()
/// let captain = world.addHost("captain"), purser = world.addHost("purser")
/// ```
public final class SimulatedWorld: Sendable {
    let scheduler: SimulationScheduler
    let network: SimulatedNetwork
    let directory: SimulatedDirectory
    /// The instant simulated time 0 stands for in the sessions' clocks.
    let origin: ContinuousClock.Instant
    private let hosts = NIOLockedValueBox<[SimulatedHost]>([])
    private let incarnations = NIOLockedValueBox<UInt64>(1_000_000_000)

    /// Makes an empty world at simulated time 0, its paths `latency` long each way.
    public init(latency: Duration = .microseconds(250)) {
        scheduler = SimulationScheduler()
        network = SimulatedNetwork(scheduler: scheduler)
        network.latency = latency.nanoseconds
        directory = SimulatedDirectory(network: network)
        origin = .now
    }

    deinit {
        scheduler.stop()
    }

    /// Simulated time since the world began.
    public var now: Duration { .nanoseconds(scheduler.now) }

    /// Adds a host with the next address of 198.18.0.0/15 (the first is 198.18.0.1).
    public func addHost(_ name: String) -> SimulatedHost {
        hosts.withLockedValue { hosts in
            let id = SimulationScheduler.HostID(rawValue: hosts.count + 1)
            let address = "198.18.\(id.rawValue / 256).\(id.rawValue % 256)"
            let host = SimulatedHost(world: self, id: id, name: name, address: address)
            scheduler.enqueue(nil) { [network] in network.assign(address, to: id) }
            hosts.append(host)
            return host
        }
    }

    /// Each session's incarnation: later for each session made, as a restarted process's is.
    func nextIncarnation() -> UInt64 {
        incarnations.withLockedValue { last in
            last += 1
            return last
        }
    }

    /// Lets simulated time run until `condition` holds (looked at whenever every host is idle)
    /// or `limit` of simulated time has passed, and returns the simulated time it took. Throws
    /// ``SimulationTimeout`` if the condition did not hold in time.
    @discardableResult
    public func run(until condition: @escaping @Sendable () -> Bool, within limit: Duration) async throws -> Duration {
        let start = scheduler.now
        guard await scheduler.run(until: condition, within: limit.nanoseconds) else {
            throw SimulationTimeout(limit: limit, at: now)
        }
        return .nanoseconds(scheduler.now - start)
    }

    /// Lets simulated time run for `duration`.
    public func run(for duration: Duration) async {
        _ = await scheduler.run(until: { false }, within: duration.nanoseconds)
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

/// Simulated time ran out before the condition held.
public struct SimulationTimeout: Error, CustomStringConvertible {
    /// How long the run was let go.
    public var limit: Duration
    /// Simulated time when it gave up.
    public var at: Duration

    public var description: String {
        "the condition did not hold within \(limit) of simulated time (gave up at \(at))"
    }
}

/// A host of a ``SimulatedWorld``: an address, a kernel that accepts and acknowledges, and a
/// process that runs sessions and can be frozen.
public final class SimulatedHost: Sendable {
    public let name: String
    /// Its address, in 198.18.0.0/15.
    public let address: String
    let id: SimulationScheduler.HostID
    let loop: SimulatedEventLoop
    private unowned let world: SimulatedWorld
    private let tasks = NIOLockedValueBox<(all: [Task<Void, any Error>], running: Int)>(([], 0))
    private let taskExecutor: EventLoopExecutor

    init(world: SimulatedWorld, id: SimulationScheduler.HostID, name: String, address: String) {
        self.world = world
        self.id = id
        self.name = name
        self.address = address
        self.loop = SimulatedEventLoop(scheduler: world.scheduler, host: id, name: name)
        self.taskExecutor = EventLoopExecutor(loop)
    }

    /// Runs Swift tasks on this host's process: what prefers it stops while the host is frozen.
    public var executor: any TaskExecutor { taskExecutor }

    private var environment: SessionEnvironment {
        SessionEnvironment(
            eventLoop: loop,
            clock: SimulatedClock(scheduler: world.scheduler, host: id, origin: world.origin),
            transport: SimulatedTransport(network: world.network, loop: loop),
            directory: { [world, id] _, _ in world.directory.view(from: id) },
            incarnation: { [world] in world.nextIncarnation() })
    }

    /// Makes a session on this host: as `MultipeerSession(configuration:identity:)` makes one,
    /// but in this world (DNS-SD, TCP and time are the world's).
    public func makeSession(configuration: MultipeerSession.Configuration, identity: PeerIdentity) -> MultipeerSession {
        MultipeerSession(configuration: configuration, identity: identity, environment: environment)
    }

    /// Runs `session` on this host until the world shuts down (or the returned task is cancelled).
    @discardableResult
    public func start(_ session: MultipeerSession) -> Task<Void, any Error> {
        let tasks = self.tasks
        tasks.withLockedValue { $0.running += 1 }
        let task = Task(executorPreference: executor) {
            // (Its last job, on the world's thread: shutdown() sees it end.)
            defer { tasks.withLockedValue { $0.running -= 1 } }
            try await session.run()
        }
        tasks.withLockedValue { $0.all.append(task) }
        return task
    }

    /// Stops the host's process as SIGSTOP does: its sessions' code and timers wait; its kernel
    /// still accepts connections and acknowledges what arrives.
    public func freeze() {
        world.scheduler.freeze(id)
    }

    /// Lets a frozen host run again, as SIGCONT does: what it missed runs first, late.
    public func thaw() {
        world.scheduler.thaw(id)
    }

    /// How many of the sessions it started still run.
    var runningSessions: Int { tasks.withLockedValue { $0.running } }

    func stopAll() -> [Task<Void, any Error>] {
        let tasks = tasks.withLockedValue { tasks in
            defer { tasks.all.removeAll() }
            return tasks.all
        }
        for task in tasks { task.cancel() }
        return tasks
    }
}
