import Foundation
import Logging
import MultipeerSession
import MultipeerSessionTesting
import MultipeerSync

/// The simulated applications' messages: two types, so order is checked per type.
struct Cargo: Codable, Sendable {
    var incarnation: UInt64
    var number: UInt64
    var reliable: Bool
    var padding: Data
}

struct Notice: Codable, Sendable {
    var incarnation: UInt64
    var number: UInt64
    var reliable: Bool
    var padding: Data
}

/// A small, fast generator for the run's own choices (SplitMix64).
struct Random: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func chance(_ probability: Double) -> Bool { Double.random(in: 0..<1, using: &self) < probability }

    mutating func seconds(_ range: ClosedRange<Double>) -> Duration {
        .milliseconds(Int64(Double.random(in: range, using: &self) * 1_000))
    }

    /// A wait with the given mean, exponentially distributed.
    mutating func exponential(mean: Duration) -> Duration {
        let u = Double.random(in: Double.ulpOfOne..<1, using: &self)
        return .milliseconds(
            Int64(
                -log(u) * Double(mean.components.seconds * 1_000 + mean.components.attoseconds / 1_000_000_000_000_000)
            )
        )
    }
}

/// What a run is asked to do.
struct RunPlan: Sendable {
    var seed: UInt64
    var duration: Duration
    var hosts: ClosedRange<Int>
    /// Mean time between faults.
    var faultEvery: Duration = .seconds(10)
    /// Messages a second, in the whole world.
    var messageRate: Double = 10
    /// How much the sessions log (to standard error).
    var logLevel: Logger.Level = .critical
    /// How long the world runs healthy at the end, where no link may be torn down.
    var quiet: Duration = .seconds(30)
    /// Goes on after a broken promise (to see what follows), rather than stopping there.
    var keepGoing = false
    /// The kinds of fault drawn (``FaultKind``).
    var faults = FaultKind.allCases
    /// Breaks a promise of the simulator's own on purpose (``Promise/planted``).
    var plant = false
}

/// How a run went.
struct RunResult: Sendable {
    var plan: RunPlan
    var hosts: Int
    var violations: [Violation]
    var trace: SimulationTrace
    /// The trace until the first promise broke (or all of it).
    var traceToFailure: [SimulationTrace.Line]
    /// When a promise first broke, if it broke while the traffic ran (not while the world
    /// settled after): a run of the same seed that stops its traffic then breaks it the same way.
    var brokeAt: Duration?
    var messages: Int
    var deliveries: Int
    /// Files and streams sent.
    var files: Int
    var streams: Int
    var faults: Int
    /// Writes to the replicated stores that returned (each checked at the end).
    var storeWrites: Int
    /// Simulated time the sessions ran, summed over sessions.
    var sessionTime: Duration
    var simulated: Duration
    var fullest: Fullest
}

/// The most any application's stream, and any hold for a first subscriber, held at a step:
/// how near the limits the run came.
struct Fullest: Sendable {
    var streamCount = 0, streamBytes = 0, holdCount = 0, holdBytes = 0
    /// The most of a file sent again after one break.
    var resentAfterABreak: UInt64 = 0

    mutating func include(_ other: Fullest) {
        resentAfterABreak = max(resentAfterABreak, other.resentAfterABreak)
        streamCount = max(streamCount, other.streamCount)
        streamBytes = max(streamBytes, other.streamBytes)
        holdCount = max(holdCount, other.holdCount)
        holdBytes = max(holdBytes, other.holdBytes)
    }
}

/// One simulated world drawn from a seed: its sessions, its applications' traffic, its faults,
/// then everything healed and the world settled; the documentation's promises checked at every
/// step and at the end.
final class SimulationRun: @unchecked Sendable {
    /// The default keepalive: 1.5 s, and up to ten times that on a path that stalls.
    static let timeout = Duration.milliseconds(1_500)
    static let stallLimit = Duration.seconds(15)
    /// How long after everything is healed every pair must be active again: the redial backoff's
    /// cap with its jitter (12 s), a connect timeout and a handshake, twice over.
    static let rejoinBound = Duration.seconds(30)
    /// The sessions' limits: the defaults, but for what is held for the application, smaller,
    /// so that a reader that stops for seconds fills its stream and a type subscribed to late
    /// fills its hold (and the links stop, and the senders wait).
    static let limits = MultipeerSession.Limits(
        receiveBuffer: BufferLimits(maximumCount: 64, maximumBytes: 1 << 20),
        unsubscribedMessages: BufferLimits(maximumCount: 32, maximumBytes: 512 << 10)
    )
    /// What one read of a link may bring beyond a full stream or hold: four socket reads of
    /// 64 KiB and the rest of one frame (Limits.receiveBuffer).
    static let readBeyondFull = 256 << 10 + limits.maximumFrameLength
    /// The smallest DATA frame the simulator's messages make (a few bytes of header, the type
    /// name, two numbers and a flag): what bounds the messages one such read brings.
    static let smallestFrame = 24
    /// Mean time between files sent, and between streams opened, in the whole world.
    static let transferEvery = Duration.seconds(8)
    /// Mean time between key rotations begun, and between roster changes.
    static let groupChangeEvery = Duration.seconds(40)
    /// Mean time between an application's reader stopping, in the whole world.
    static let readerStopEvery = Duration.seconds(15)
    /// Mean time between writes to the hosts' replicated stores, in the whole world.
    static let storeWriteEvery = Duration.seconds(1)
    /// How long after the quiet spell every store must hold the same records.
    static let storeConvergenceBound = Duration.seconds(60)

    /// One host and what runs on it.
    final class Node: @unchecked Sendable {
        let index: Int
        let host: SimulatedHost
        var session: MultipeerSession
        var alive = true
        var suspended = false
        /// Stopped, as SIGSTOP stops it (or asleep: stopped and cut off).
        var frozen = false
        var asleep = false
        /// Its black hole, until it ends.
        var blackHole: SimulatedPartition?
        var blackHoled: Bool { blackHole != nil }
        /// Its one-way cut (what it sends, or what is sent to it, lost), and its hold, until they end.
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
        var number: UInt64 = 0
        /// What its application sends, one at a time in this order (so the order sent is the
        /// order numbered): the sender loop of its current session reads it.
        var outgoing: AsyncStream<Outgoing>.Continuation?
        /// The peers it is active with, as its events say.
        var active: Set<UUID> = []
        /// The peers it knows of and how far each one's link is, as its events say.
        var available: [UUID: AvailablePeer.State] = [:]
        /// The peers its current session has met (it may send them files and streams).
        var met: Set<UUID> = []
        /// The key generations its key ring should hold, and those it holds.
        var keys: [Int] = [0]
        var keysHeld: [Int] = [0] {
            didSet { for dropped in Set(oldValue).subtracting(keysHeld) { keyDropped[dropped] = droppedNow } }
        }
        /// When its session last let go of each generation it held (``keysHeld`` sets it, at
        /// ``droppedNow``).
        var keyDropped: [Int: Duration] = [:]
        var droppedNow: Duration = .zero
        /// The hosts its roster should leave out, those it leaves out, and since when.
        var rosterHeld: Set<Int> = []
        var rosterChanged: Duration = .zero
        /// Where its session receives files.
        let directory: URL
        /// Its replicated store's disk (kept across restarts, as a file is; a commit is whole
        /// or absent), the store over its current session, and that store's run.
        let storage = MemoryStorage()
        /// The collections its store keeps (the same across restarts, as its configuration).
        let keeps: SyncScope
        var store: SyncStore?
        var storeRun: Task<Void, Never>?
        /// Its application's reader of each message type, which it stops for a while at times
        /// (and, in a session just started, may start only later).
        let readers = ["Cargo": Gate(), "Notice": Gate()]
        /// When its application last began reading a type again.
        var readingAgain: Duration = .zero
        /// Its application does not read a type now: the links that bring it may stop.
        var behind: Bool { readers.values.contains(where: \.isClosed) }
        var peerID: UUID { session.peerID }

        init(index: Int, host: SimulatedHost, session: MultipeerSession, directory: URL, keeps: SyncScope) {
            self.index = index
            self.host = host
            self.session = session
            self.directory = directory
            self.keeps = keeps
        }
    }

    /// A message for a node's sender loop.
    struct Outgoing: Sendable {
        var id: Ledger.MessageID
        var record: Ledger.Sent
        var to: UUID?
        var awaitAcknowledgement: Bool
        var size: Int
    }

    /// A silence one side must notice, and since when.
    private struct Detection {
        var watcher: Int
        var silent: Int
        var since: Duration
        var what: String
    }

    let plan: RunPlan
    let world: SimulatedWorld
    private var random: Random
    /// Draws which collections each host's store keeps, and which one each write goes to: a
    /// stream of its own, so that what the seed drew before stores kept some collections (the
    /// hosts, the faults, the timings) it still draws.
    private var collectionDraw: Random
    private(set) var nodes: [Node] = []
    private var hosts: [SimulatedHost] = []
    let ledger = Ledger()
    let transfers: Transfers
    let stores = StoreLedger()
    /// Numbers the stores' writes, so that every put changes its record.
    private var storeWriteNumber = 0
    /// The run's files: each host's resource directory, and the files sent.
    let files: URL
    private var fileNumber = 0
    private var streamNumber = 0
    /// The group key's generation everyone holds, and the next while a rotation is under way.
    private var generation = 0
    private var rotating: Int?
    private var derivedKeys: [Int: PreSharedKey] = [:]
    /// The hosts left out of every roster now.
    private var removed: Set<Int> = []
    private var killed: Set<UInt64> = []
    private var agenda: [(at: Duration, order: Int, action: Action)] = []
    private var order = 0
    private var partition: SimulatedPartition?
    private var lastRenumbered: Duration?
    /// How long the trace was when the first promise broke.
    private var failedAt: Int?
    /// When a promise first broke while the traffic ran (not while the world settled).
    private var brokeAt: Duration?
    private var detections: [Detection] = []
    private var faults = 0
    private var quiet = false
    private var sessionTime = Duration.zero
    private var fullest = Fullest()
    private var started: [Int: Duration] = [:]

    private enum Action {
        case message
        case fault
        case thaw(Int)
        case wake(Int)
        case heal
        case unBlackHole(Int)
        case repair(Int)
        case uncut(Int)
        case release(Int)
        case undrift(Int)
        case restart(Int)
        case resume(Int)
        case resource
        case stream
        case rotate
        case addKey(Int)
        case finishRotation
        case dropKey(Int)
        case rosterChange
        case rosterRestore
        case stopReader
        case resumeReader(Int, String)
        case storeWrite
    }

    init(plan: RunPlan) {
        self.plan = plan
        world = SimulatedWorld(seed: plan.seed)
        random = Random(seed: plan.seed ^ 0x5EED_5EED_5EED_5EED)
        collectionDraw = Random(seed: plan.seed ^ 0xC011_EC71_0115_C011)
        transfers = Transfers(ledger: ledger)
        files = FileManager.default.temporaryDirectory.appendingPathComponent(
            "multipeer-simulator-\(getpid())-\(plan.seed)"
        )
    }

    /// The group key of `generation`: 32 bytes drawn from the generation (a passphrase's
    /// PBKDF2 would cost each world a fifth of a second per key).
    private func key(_ generation: Int) -> PreSharedKey {
        if let key = derivedKeys[generation] { return key }
        var bytes = Random(seed: 0x6B65_7973 &+ UInt64(generation))
        let key = try! PreSharedKey(
            identity: "simulator-\(generation)",
            key: (0..<32).map { _ in UInt8(truncatingIfNeeded: bytes.next()) }
        )
        derivedKeys[generation] = key
        return key
    }

    /// `node`'s session as it would start now: the keys it holds, the roster everyone holds
    /// (its key file and roster file), and its resource directory.
    private func configuration(_ name: String, directory: URL, keys: [Int]) -> MultipeerSession.Configuration {
        var configuration = MultipeerSession.Configuration(
            serviceType: "_simulator._tcp",
            peer: PeerInfo(displayName: name),
            psk: key(keys[0])
        )
        configuration.keys = keyRing(keys)
        configuration.roster = roster()
        configuration.resourceDirectory = directory
        configuration.limits = Self.limits
        // Declared: an application that may subscribe to a type seconds late, with more of it
        // coming meanwhile than a hold takes, declares it, so that nothing of it is refused
        // (the hold stops the links instead, which is what these worlds check).
        configuration.messageTypes = [Cargo.self, Notice.self]
        // What happened is in the trace; the sessions' logs mostly repeat it (--log-level).
        configuration.logger.logLevel = plan.logLevel
        return configuration
    }

    private func keyRing(_ generations: [Int]) -> KeyRing { try! KeyRing(generations.map(key)) }

    /// Every host's key but those left out.
    private func roster() -> Roster {
        Roster(keys: hosts.indices.filter { !removed.contains($0) }.map { hosts[$0].identity.key })
    }

    /// Runs the world on its own thread and returns how it went.
    func run() async -> RunResult {
        await Task(executorPreference: world.executor) { await self.drive() }.value
        let trace = world.trace
        return RunResult(
            plan: plan,
            hosts: nodes.count,
            violations: ledger.violations,
            trace: trace,
            traceToFailure: Array(trace.lines.prefix(failedAt ?? trace.lines.count)),
            brokeAt: brokeAt,
            messages: ledger.sentCount,
            deliveries: ledger.deliveryCount,
            files: transfers.fileCount,
            streams: transfers.streamCount,
            faults: faults,
            storeWrites: stores.writeCount,
            sessionTime: sessionTime,
            simulated: world.now,
            fullest: fullest
        )
    }

    private func drive() async {
        let count = Int.random(in: plan.hosts, using: &random)
        let names = [
            "captain", "first-officer", "relief", "purser", "navigator", "engineer", "loadmaster", "dispatcher",
        ]
        hosts = (0..<count).map { world.addHost($0 < names.count ? names[$0] : "host-\($0)") }
        for (index, host) in hosts.enumerated() {
            let directory = files.appendingPathComponent(host.name)
            let node = Node(
                index: index,
                host: host,
                session: host.makeSession(
                    configuration: configuration(host.name, directory: directory, keys: [generation])
                ),
                directory: directory,
                // (A quarter of the hosts keep only the log: what they neither take nor pass on
                // reaches the others directly, since every pair meets once the world heals.)
                keeps: collectionDraw.chance(0.25) ? .only([LogLine.collectionName]) : .everything
            )
            nodes.append(node)
        }
        try? FileManager.default.createDirectory(
            at: files.appendingPathComponent("sent"),
            withIntermediateDirectories: true
        )
        for node in nodes { start(node) }
        do {
            try await world.run(
                until: { [nodes] in nodes.allSatisfy { $0.session.activePeers.count == nodes.count - 1 } },
                within: .seconds(10)
            )
        } catch {
            ledger.violation(
                .startsActive,
                "\(world.now) the \(count) sessions did not all become active with each other within 10 s of starting"
            )
        }
        schedule(.message, after: random.exponential(mean: .seconds(1 / plan.messageRate)))
        schedule(.fault, after: random.exponential(mean: plan.faultEvery))
        schedule(.resource, after: random.exponential(mean: Self.transferEvery))
        schedule(.stream, after: random.exponential(mean: Self.transferEvery))
        schedule(.rotate, after: random.exponential(mean: Self.groupChangeEvery))
        schedule(.rosterChange, after: random.exponential(mean: Self.groupChangeEvery))
        schedule(.stopReader, after: random.exponential(mean: Self.readerStopEvery))
        schedule(.storeWrite, after: random.exponential(mean: Self.storeWriteEvery))
        while let next = agenda.first, next.at <= plan.duration {
            agenda.removeFirst()
            if next.at > world.now { await world.run(for: next.at - world.now) }
            await perform(next.action)
            // What the action set off at this instant runs first (the events it emitted read).
            await world.run(for: .zero)
            check()
            if !ledger.violations.isEmpty, brokeAt == nil {
                (brokeAt, failedAt) = (world.now, world.trace.lines.count)
            }
            guard ledger.violations.isEmpty || plan.keepGoing else { return await stop() }
        }
        await world.run(for: max(.zero, plan.duration - world.now))
        await settle()
        await stop()
    }

    private func schedule(_ action: Action, after delay: Duration) {
        order += 1
        let entry = (at: world.now + delay, order: order, action: action)
        let index = agenda.firstIndex { ($0.at, $0.order) > (entry.at, entry.order) } ?? agenda.endIndex
        agenda.insert(entry, at: index)
    }

    // MARK: The applications

    /// Starts `node`'s session and its application: a reader of each message type, and a
    /// watcher of its events.
    private func start(_ node: Node) {
        let session = node.session
        started[node.index] = world.now
        node.host.start(session)
        startStore(node)
        let (ledger, world, name) = (ledger, world, node.host.name)
        // Now and then an application subscribes to a type only a while after its session
        // started: what comes of it meanwhile is held for it (it declared the type).
        if random.chance(0.25) {
            node.readers["Notice"]!.close()
            world.record("its application subscribes to Notice late", on: node.host)
            schedule(.resumeReader(node.index, "Notice"), after: random.seconds(0.5...10))
        }
        func read<Message: Codable & Sendable>(
            _ type: Message.Type,
            _ fields: @escaping @Sendable (Message) -> (UInt64, UInt64, Bool)
        ) {
            let gate = node.readers["\(type)"]!
            Task(executorPreference: node.host.executor) {
                await gate.pass()
                var messages = session.messages(of: type).makeAsyncIterator()
                while true {
                    await gate.pass()
                    guard let (_, message) = await messages.next() else { return }
                    let (incarnation, number, reliable) = fields(message)
                    ledger.delivered(
                        .init(sender: incarnation, number: number),
                        type: "\(type)",
                        reliable: reliable,
                        to: name,
                        incarnation: session.incarnation,
                        at: world.now
                    )
                }
            }
        }
        read(Cargo.self) { ($0.incarnation, $0.number, $0.reliable) }
        read(Notice.self) { ($0.incarnation, $0.number, $0.reliable) }
        let transfers = transfers
        Task(executorPreference: node.host.executor) {
            for await resource in session.incomingResources {
                guard let number = Int(resource.name.dropFirst().dropLast(4)) else { continue }
                transfers.waiting(number, in: session.incarnation)
                Task(executorPreference: node.host.executor) {
                    // (A file() that throws is the sender's completion() to report.)
                    if let url = try? await resource.file() {
                        transfers.arrived(number, at: name, url: url, sha256: resource.sha256, now: world.now)
                    }
                    transfers.waited(number, in: session.incarnation)
                }
            }
        }
        Task(executorPreference: node.host.executor) {
            for await stream in session.incomingStreams {
                guard let number = Int(stream.name.dropFirst()) else { continue }
                transfers.accepted(number, by: session.incarnation)
                Task(executorPreference: node.host.executor) {
                    do {
                        for try await chunk in stream {
                            guard transfers.read(number, chunk, at: name, now: world.now) else {
                                return stream.cancel()
                            }
                        }
                        try await stream.finish()
                        transfers.ended(number, .done, at: name, now: world.now)
                    } catch {
                        transfers.ended(number, Self.outcome(error), at: name, now: world.now)
                    }
                }
            }
        }
        let (outgoing, continuation) = AsyncStream<Outgoing>.makeStream()
        node.outgoing = continuation
        Task(executorPreference: node.host.executor) {
            for await message in outgoing { await Self.send(message, from: session, ledger: ledger, at: world) }
        }
        Task(executorPreference: world.executor) { [weak node] in
            for await event in session.events {
                guard let node, node.session === session else { return }
                switch event {
                case .peerJoined(let peer):
                    node.active.insert(peer.id)
                    node.met.insert(peer.id)
                case .peerLeft(let peer, let reason):
                    node.active.remove(peer.id)
                    if self.quiet {
                        ledger.violation(
                            .noFalseTeardown,
                            "\(world.now) \(name): \(peer.displayName) left (\(reason)) with every path healthy (no false teardown)"
                        )
                    }
                case .availablePeerChanged(let peer):
                    node.available[peer.id] = peer.state == .gone ? nil : peer.state
                case .authenticationFailed(let address, let error) where error.code == .authenticationFailed:
                    // Documented: a member not holding the new key yet reports the dials of one
                    // that does, which then falls back to the old key. And a handshake begun
                    // with a key this member let go of since (within a handshake's timeout, or
                    // while it was stopped) is refused for it.
                    let ahead =
                        self.rotating.map { error.message.contains("offered the identity \"simulator-\($0)\"") }
                        ?? false
                    let dropped = node.keyDropped.contains { generation, at in
                        world.now - at <= Self.limits.handshakeTimeout
                            && error.message.contains("offered the identity \"simulator-\(generation)\"")
                    }
                    if !ahead && !dropped {
                        ledger.violation(
                            .rotationRefusesNone,
                            "\(world.now) \(name): a handshake with \(address) failed on the key (\(error)): members rotating their group key refuse none of each other"
                        )
                    }
                default: break
                }
            }
        }
    }

    private func sendMessage() {
        let senders = nodes.filter(\.alive)
        guard let sender = senders.randomElement(using: &random) else { return }
        let others = nodes.filter { $0.index != sender.index }
        guard let receiver = others.randomElement(using: &random) else { return }
        let broadcast = random.chance(0.1)
        let reliable = !random.chance(0.15)
        // Only to a peer active now: the sender loop waits for the acknowledgement.
        let awaitAcknowledgement =
            reliable && !broadcast && random.chance(0.1) && sender.active.contains(receiver.peerID)
        let size: Int
        switch Double.random(in: 0..<1, using: &random) {
        case ..<0.7: size = Int.random(in: 0...200, using: &random)
        case ..<0.95: size = Int.random(in: 1_024...16_384, using: &random)
        default: size = Int.random(in: 300_000...1_200_000, using: &random)
        }
        let cargo = random.chance(0.5)
        if plan.plant, receiver.frozen, size >= 1_024 {
            ledger.violation(
                .planted,
                "\(world.now) \(sender.host.name): \(size) bytes sent to \(receiver.host.name), frozen (--plant)"
            )
        }
        sender.number += 1
        let id = Ledger.MessageID(sender: sender.session.incarnation, number: sender.number)
        sender.outgoing?.yield(
            Outgoing(
                id: id,
                record: .init(
                    from: sender.host.name,
                    to: broadcast ? "*" : receiver.host.name,
                    type: cargo ? "Cargo" : "Notice",
                    reliable: reliable,
                    at: world.now,
                    outcome: .sending
                ),
                to: broadcast ? nil : receiver.host.identity.peerID,
                awaitAcknowledgement: awaitAcknowledgement,
                size: size
            )
        )
    }

    /// Starts `node`'s replicated store over its current session, on its storage: its run,
    /// and a watcher of its events (a refusal breaks a promise: nobody here forges or lies).
    private func startStore(_ node: Node) {
        let host = node.host
        guard
            let store = try? SyncStore(
                session: node.session,
                storage: node.storage,
                configuration: .init(keeps: node.keeps),
                now: { UInt64(max(0, host.wallClock.timeIntervalSince1970 * 1_000)) }
            )
        else {
            return ledger.violation(.storesConverge, "\(world.now) \(host.name): its store did not open on its storage")
        }
        node.store = store
        let (ledger, world, events) = (ledger, world, store.events)
        _ = store.collection(LogLine.self)
        node.storeRun = Task(executorPreference: host.executor) {
            await withDiscardingTaskGroup { group in
                group.addTask { try? await store.run() }
                group.addTask {
                    for await event in events {
                        if case .refused(let error, let peer) = event {
                            ledger.violation(
                                .storesConverge,
                                "\(world.now) \(host.name): its store refused what \(peer) sent: \(error) (nobody in these worlds forges, lies or sends what does not read)"
                            )
                        }
                    }
                }
            }
        }
    }

    /// A host's application writes a line of the log or, if its store keeps memos, now and
    /// then a memo (or, now and then, deletes one), and once the write returns it is
    /// acknowledged with its stamp.
    private func writeToStore() {
        let writers = nodes.filter { $0.alive && !$0.frozen && !$0.asleep && $0.store != nil }
        guard let node = writers.randomElement(using: &random), let store = node.store else { return }
        storeWriteNumber += 1
        let id = "line-\(Int.random(in: 0..<StoreLedger.records, using: &random))"
        let text = random.chance(0.2) ? nil : "\(node.host.name) \(storeWriteNumber)"
        let memo = node.keeps.contains(LogMemo.collectionName) && collectionDraw.chance(0.25)
        let what = "\(memo ? "memo" : "line") \(id)"
        world.record("its store \(text == nil ? "deletes" : "writes") the \(what)", on: node.host)
        Task(executorPreference: node.host.executor) { [stores, world, name = node.host.name] in
            if memo {
                await Self.write(
                    text,
                    id: id,
                    to: store.collection(LogMemo.self),
                    acknowledging: stores,
                    by: name,
                    in: world
                )
            } else {
                await Self.write(
                    text,
                    id: id,
                    to: store.collection(LogLine.self),
                    acknowledging: stores,
                    by: name,
                    in: world
                )
            }
        }
    }

    /// Writes `text` as record `id` of `collection` (nil: deletes it), and acknowledges the
    /// write with its stamp once it returns.
    private static func write<Record: LogRecord>(
        _ text: String?,
        id: String,
        to collection: SyncCollection<Record>,
        acknowledging stores: StoreLedger,
        by host: String,
        in world: SimulatedWorld
    ) async {
        var changes = collection.changes.makeAsyncIterator()
        do {
            if let text {
                try await collection.put(Record(id: id, text: text))
            } else {
                // (A delete of a record that is absent writes nothing, and is not told.)
                guard try await collection.record(id: id) != nil else { return }
                try await collection.delete(id: id)
            }
        } catch {
            return
        }
        // The write's change was told before the write returned.
        while let change = await changes.next() {
            guard change.peer == nil, change.id == id else { continue }
            stores.acknowledged(
                RecordKey(collection: Record.collectionName, id: id),
                .init(stamp: change.stamp, text: change.record?.text, host: host, at: world.now)
            )
            return
        }
    }

    /// Sends `message` from `session` (its sender loop, in its host's process).
    private static func send(
        _ message: Outgoing,
        from session: MultipeerSession,
        ledger: Ledger,
        at world: SimulatedWorld
    ) async {
        var record = message.record
        record.at = world.now
        ledger.sending(message.id, record)
        let (id, reliable) = (message.id, message.record.reliable)
        let padding = Data(repeating: UInt8(truncatingIfNeeded: id.number), count: message.size)
        let delivery: Delivery = reliable ? .reliable : .unreliable
        do {
            switch (message.to, message.record.type == "Cargo") {
            case (nil, true):
                try await session.broadcast(
                    Cargo(incarnation: id.sender, number: id.number, reliable: reliable, padding: padding),
                    delivery: delivery
                )
            case (nil, false):
                try await session.broadcast(
                    Notice(incarnation: id.sender, number: id.number, reliable: reliable, padding: padding),
                    delivery: delivery
                )
            case (let to?, true):
                try await session.send(
                    Cargo(incarnation: id.sender, number: id.number, reliable: reliable, padding: padding),
                    to: to,
                    delivery: delivery,
                    awaitAcknowledgement: message.awaitAcknowledgement
                )
            case (let to?, false):
                try await session.send(
                    Notice(incarnation: id.sender, number: id.number, reliable: reliable, padding: padding),
                    to: to,
                    delivery: delivery,
                    awaitAcknowledgement: message.awaitAcknowledgement
                )
            }
            ledger.outcome(id, .queued(acknowledged: message.awaitAcknowledgement))
        } catch let error as MultipeerError {
            // Waiting for the acknowledgement timed out: the message stays queued. Waiting for
            // room in the outbox of a peer away throws the same code, and the message was never
            // queued (seed 998: it was counted as owed): only the error's words tell them apart.
            let waitedForAcknowledgement = error.message.contains("The message stays queued")
            ledger.outcome(
                id,
                .failed("\(error)", stillQueued: error.code == .peerAway && waitedForAcknowledgement)
            )
        } catch {
            ledger.outcome(id, .failed("\(error)", stillQueued: false))
        }
    }

    // MARK: Files and streams

    /// A sender and a receiver it has met, both running.
    private func transferPair() -> (Node, Node)? {
        let senders = nodes.filter { $0.alive && !$0.met.isEmpty }
        guard let sender = senders.randomElement(using: &random) else { return nil }
        let receivers = nodes.filter { sender.met.contains($0.peerID) }
        guard let receiver = receivers.randomElement(using: &random) else { return nil }
        return (sender, receiver)
    }

    /// A file from a host to one it has met: mostly tens of KiB, some of a few MiB (in chunks of
    /// 256 KiB), a few empty.
    private func sendFile() {
        guard let (sender, receiver) = transferPair() else { return }
        fileNumber += 1
        let number = fileNumber
        let length: Int
        switch Double.random(in: 0..<1, using: &random) {
        case ..<0.05: length = 0
        case ..<0.75: length = Int.random(in: 1...65_536, using: &random)
        default: length = Int.random(in: 262_144...3_145_728, using: &random)
        }
        let url = files.appendingPathComponent("sent/r\(number).bin")
        guard (try? Data(Transfers.bytes(number, 0..<length)).write(to: url)) != nil else {
            return ledger.violation(.simulator, "\(world.now) cannot write the file to send at \(url.path)")
        }
        let (session, to, transfers, world, ledger) = (sender.session, receiver.peerID, transfers, world, ledger)
        transfers.sending(
            number,
            .init(
                from: sender.host.name,
                to: receiver.host.name,
                sender: session.incarnation,
                length: length,
                at: world.now
            )
        )
        world.record("\(sender.host.name) sends file r\(number) (\(length) bytes) to \(receiver.host.name)")
        Task(executorPreference: sender.host.executor) {
            do {
                let outgoing = try await session.sendResource(at: url, to: to)
                transfers.hashed(number, outgoing.sha256)
                try await outgoing.completion()
                transfers.sent(number, .done)
                // Sent again after a break: from the last byte the receiver wrote (at most the
                // 2 MiB it granted beyond it were in the link), or after its restart from its last
                // whole MiB (a MiB more): at most 3 MiB a break (ResourcesAndStreams, "Files").
                let sending = outgoing.sending
                let breaks = UInt64(max(0, sending.offers - 1))
                if breaks > 0 {
                    self.fullest.include(
                        Fullest(resentAfterABreak: (sending.bytes - min(sending.bytes, UInt64(length))) / breaks)
                    )
                }
                if sending.bytes > UInt64(length) + breaks * (3 << 20) {
                    ledger.violation(
                        .resentAfterABreak,
                        "\(world.now) file r\(number) (\(length) bytes): \(sending.bytes) bytes sent over \(sending.offers) links (what is sent again after a break is at most 3 MiB)"
                    )
                }
            } catch {
                transfers.sent(number, Self.outcome(error))
            }
        }
    }

    /// A stream from a host to one it has met: up to 512 KiB written in pieces of up to 64 KiB,
    /// then finished; its reader reads to the end and finishes its own direction.
    private func openStream() {
        guard let (sender, receiver) = transferPair() else { return }
        streamNumber += 1
        let number = streamNumber
        let length = Int.random(in: 0...524_288, using: &random)
        var pieces: [Range<Int>] = []
        var offset = 0
        while offset < length {
            let piece = min(length - offset, Int.random(in: 1...65_536, using: &random))
            pieces.append(offset..<offset + piece)
            offset += piece
        }
        let (session, to, transfers, world) = (sender.session, receiver.peerID, transfers, world)
        transfers.opening(
            number,
            .init(
                from: sender.host.name,
                to: receiver.host.name,
                sender: session.incarnation,
                length: length,
                at: world.now,
                receiverAtOpen: receiver.session.incarnation,
                owed: !sender.frozen
                    && sender.session.activePeers.first { $0.id == receiver.peerID }?.incarnation
                        == receiver.session.incarnation
            )
        )
        world.record("\(sender.host.name) opens stream s\(number) (\(length) bytes) to \(receiver.host.name)")
        Task(executorPreference: sender.host.executor) {
            do {
                let stream = try session.openStream(named: "s\(number)", to: to)
                for piece in pieces { try await stream.write(Transfers.bytes(number, piece)) }
                try await stream.finish()
                // The other direction ends empty; reading it to its end ends the stream.
                for try await _ in stream {}
                transfers.wrote(number, .done)
            } catch {
                transfers.wrote(number, Self.outcome(error))
            }
        }
    }

    static func outcome(_ error: any Error) -> Transfers.Outcome {
        let code = (error as? MultipeerError)?.code
        return .failed(code, "\(error)")
    }

    // MARK: Keys and rosters

    /// Begins a key rotation: each host gets the next key beside its own, one at a time, over
    /// 10 s; once every one holds both, the old one goes, one host at a time again
    /// (KeysIdentitiesAndRosters, "Rotating the key").
    private func beginRotation() {
        guard rotating == nil else { return }
        rotating = generation + 1
        world.record("the group key rotates to generation \(generation + 1)")
        for node in nodes { schedule(.addKey(node.index), after: random.seconds(0...10)) }
        schedule(.finishRotation, after: .seconds(12))
    }

    /// Ends the rotation once every host holds both keys (a frozen one holds them once thawed).
    private func finishRotation() {
        guard let next = rotating else { return }
        guard nodes.allSatisfy({ $0.keysHeld == [generation, next] }) else {
            return schedule(.finishRotation, after: .seconds(2))
        }
        generation = next
        rotating = nil
        for node in nodes { schedule(.dropKey(node.index), after: random.seconds(0...10)) }
    }

    /// Gives `node`'s session the keys and roster it should hold, unless it cannot run now
    /// (killed: its restart reads them; frozen: its thaw gives them).
    private func applyGroup(_ node: Node) async {
        guard node.alive, !node.frozen else { return }
        if node.keysHeld != node.keys {
            do {
                try await node.session.updateKeys(keyRing(node.keys))
                node.droppedNow = world.now
                node.keysHeld = node.keys
                world.record(
                    "holds the group keys of generations \(node.keys.map(String.init).joined(separator: ", "))",
                    on: node.host
                )
            } catch {
                ledger.violation(
                    .rotationRefusesNone,
                    "\(world.now) \(node.host.name): updateKeys(\(node.keys)) threw \(error)"
                )
            }
        }
        if node.rosterHeld != removed {
            await node.session.updateRoster(roster())
            node.rosterHeld = removed
            node.rosterChanged = world.now
        }
    }

    /// Leaves a host out of every roster for a while: its links close at once, and it is
    /// refused until it is listed again.
    private func leaveOutOfRosters() async {
        let candidates = nodes.filter { $0.alive }
        guard removed.isEmpty, nodes.count >= 3, let node = candidates.randomElement(using: &random) else { return }
        removed = [node.index]
        world.record("\(node.host.name) is left out of every roster")
        for other in nodes { await applyGroup(other) }
        schedule(.rosterRestore, after: random.seconds(2...20))
    }

    // MARK: Slow readers

    /// An application stops reading one type of message for 1-20 s: its stream fills, its
    /// links stop reading, and the senders' outboxes take the rest.
    private func stopReader() {
        let readers = nodes.filter(\.alive).flatMap { node in node.readers.keys.sorted().map { (node, $0) } }.filter {
            !$0.0.readers[$0.1]!.isClosed
        }
        guard let (node, type) = readers.randomElement(using: &random) else { return }
        let pause = random.seconds(1...20)
        node.readers[type]!.close()
        world.record("its application stops reading \(type) for \(pause)", on: node.host)
        schedule(.resumeReader(node.index, type), after: pause)
    }

    // MARK: Faults

    private func inject() async {
        // (One number from the run's stream a fault, whatever its kind: FaultKind says why.)
        let draw = random.next()
        guard let kind = FaultKind.drawn(draw, among: plan.faults) else { return }
        var own = Random(seed: draw)
        let candidates = nodes.filter {
            $0.alive && !$0.frozen && !$0.blackHoled && !$0.suspended && $0.impairedUntil == nil
                && $0.oneWayCut == nil && $0.held == nil
        }
        guard let node = candidates.randomElement(using: &own) else { return }
        switch kind {
        case .freeze:
            watchSilence(of: node, "frozen")
            node.frozen = true
            node.host.freeze()
            schedule(.thaw(node.index), after: own.seconds(0.2...6))
        case .blackHole:
            watchSilence(of: node, "black-holed")
            node.blackHole = await node.host.blackHole()
            schedule(.unBlackHole(node.index), after: own.seconds(1...10))
        case .partition:
            guard partition == nil else { return }
            let side = nodes.filter { _ in own.chance(0.5) }
            guard !side.isEmpty, side.count < nodes.count else { return }
            partition = await world.partition(side.map(\.host))
            schedule(.heal, after: own.seconds(1...20))
        case .impair:
            let loss = Double.random(in: 0...0.3, using: &own)
            let latency = own.seconds(0.0001...0.05)
            let jitter = own.seconds(0...0.05)
            await node.host.impair(latency: latency, jitter: jitter, loss: loss)
            let until = world.now + own.seconds(5...60)
            node.impairedUntil = until
            node.lastDisturbed = until
            schedule(.repair(node.index), after: until - world.now)
        case .kill:
            // What its application had and had not read yet dies with it.
            let unread =
                node.session.unreadMessages(of: Cargo.self).map {
                    Ledger.MessageID(sender: $0.incarnation, number: $0.number)
                }
                + node.session.unreadMessages(of: Notice.self).map {
                    Ledger.MessageID(sender: $0.incarnation, number: $0.number)
                }
            ledger.diedUnread(unread)
            if !unread.isEmpty {
                world.record("its application had \(unread.count) messages it had not read", on: node.host)
            }
            await node.host.kill()
            node.alive = false
            killed.insert(node.session.incarnation)
            sessionTime += world.now - (started[node.index] ?? world.now)
            started[node.index] = nil
            schedule(.restart(node.index), after: own.seconds(0.2...5))
        case .renumber:
            node.lastDisturbed = world.now
            lastRenumbered = world.now
            await node.host.renumber()
        case .sleep:
            watchSilence(of: node, "asleep")
            node.frozen = true
            node.asleep = true
            await node.host.sleep()
            schedule(.wake(node.index), after: own.seconds(1...30))
        case .suspend:
            node.suspended = true
            await node.session.suspend()
            schedule(.resume(node.index), after: own.seconds(0.5...10))
        case .oneWayCut:
            // What it sends lost, or what the others send it: each side finds the other silent.
            watchSilence(of: node, "cut off one way")
            let others = nodes.filter { $0.index != node.index }.map(\.host)
            node.oneWayCut =
                own.chance(0.5)
                ? await world.cut(from: [node.host], to: others) : await world.cut(from: others, to: [node.host])
            schedule(.uncut(node.index), after: own.seconds(1...10))
        case .hold:
            // Shorter than the keepalive's timeout, mostly: what it holds arrives late, not lost.
            node.lastDisturbed = world.now
            node.held = await world.hold([node.host])
            schedule(.release(node.index), after: own.seconds(0.05...2))
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
            schedule(.repair(node.index), after: until - world.now)
        case .drift:
            guard node.drift == 0 else { return }
            let fraction = Double.random(in: 0.001...0.02, using: &own) * (own.chance(0.5) ? 1 : -1)
            node.drift = fraction
            node.host.driftClock(by: fraction)
            schedule(.undrift(node.index), after: own.seconds(10...60))
        }
        faults += 1
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
            && watcher.active.contains(node.peerID)
        {
            detections.append(Detection(watcher: watcher.index, silent: node.index, since: world.now, what: what))
        }
    }

    /// How soon `watcher` must notice `silent`'s silence, begun at `since`, as the keepalive
    /// documents it (TuningKeepaliveAndBackoff, PROTOCOL.md 2): the configured timeout on a
    /// clean path; at least the ceiling (three times it) on a path that has lost packets; up to
    /// the stall limit on one whose stalls of the last two minutes it judges from. Each with the
    /// 20 ms timer grid and a round trip.
    /// A watcher that was stopped (frozen, asleep) ran no timer meanwhile: what it watches is
    /// timed from now (seed 3367: a watcher frozen just before its timeout and thawed with the
    /// silent peer was judged late at once).
    private func watchAfresh(_ index: Int) {
        for position in detections.indices where detections[position].watcher == index {
            detections[position].since = max(detections[position].since, world.now)
        }
    }

    private func detectionBound(_ watcher: Node, _ silent: Node, since: Duration) -> Duration {
        // (A path impaired marks both its hosts disturbed.)
        let recent =
            [watcher, silent].contains { (node: Node) -> Bool in
                let faulted = node.impairedUntil != nil || node.blackHoled || node.asleep
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

    private func perform(_ action: Action) async {
        switch action {
        case .message:
            sendMessage()
            schedule(.message, after: random.exponential(mean: .milliseconds(Int64(1_000 / plan.messageRate))))
        case .fault:
            await inject()
            schedule(.fault, after: random.exponential(mean: plan.faultEvery))
        case .thaw(let index):
            nodes[index].frozen = false
            nodes[index].host.thaw()
            detections.removeAll { $0.silent == index }
            watchAfresh(index)
            await applyGroup(nodes[index])
        case .wake(let index):
            for node in nodes { node.lastDisturbed = world.now }
            nodes[index].asleep = false
            nodes[index].frozen = false
            await nodes[index].host.wake()
            detections.removeAll { $0.silent == index }
            watchAfresh(index)
            await applyGroup(nodes[index])
        case .heal:
            await partition?.heal()
            partition = nil
            for node in nodes { node.lastDisturbed = world.now }
        case .unBlackHole(let index):
            for node in nodes { node.lastDisturbed = world.now }
            await nodes[index].blackHole?.heal()
            nodes[index].blackHole = nil
            detections.removeAll { $0.silent == index }
        case .repair(let index):
            await repair(nodes[index])
        case .uncut(let index):
            for node in nodes { node.lastDisturbed = world.now }
            await nodes[index].oneWayCut?.heal()
            nodes[index].oneWayCut = nil
            detections.removeAll { $0.silent == index }
        case .release(let index):
            nodes[index].lastDisturbed = world.now
            await nodes[index].held?.heal()
            nodes[index].held = nil
        case .undrift(let index):
            nodes[index].drift = 0
            nodes[index].host.driftClock(by: 0)
        case .restart(let index):
            let node = nodes[index]
            node.storeRun?.cancel()
            node.host.restart()
            // A machine that comes back with its wall clock behind (a reboot that lost the time,
            // say): its new session is an older incarnation by the wall clock than the last.
            if random.chance(0.3) { node.host.stepClock(by: .zero - random.seconds(1...7_200)) }
            node.session = node.host.makeSession(
                configuration: configuration(node.host.name, directory: node.directory, keys: node.keys)
            )
            node.alive = true
            node.active = []
            node.available = [:]
            node.met = []
            node.number = 0
            node.keysHeld = node.keys
            node.rosterHeld = removed
            node.rosterChanged = world.now
            start(node)
        case .resume(let index):
            nodes[index].suspended = false
            await nodes[index].session.resume()
        case .resource:
            sendFile()
            schedule(.resource, after: random.exponential(mean: Self.transferEvery))
        case .stream:
            openStream()
            schedule(.stream, after: random.exponential(mean: Self.transferEvery))
        case .rotate:
            beginRotation()
            schedule(.rotate, after: random.exponential(mean: Self.groupChangeEvery))
        case .addKey(let index):
            guard let next = rotating else { break }
            nodes[index].keys = [generation, next]
            await applyGroup(nodes[index])
        case .finishRotation:
            finishRotation()
        case .dropKey(let index):
            // Only what is older than the generation everyone holds: a rotation begun since
            // may have given this host the next key already.
            nodes[index].keys.removeAll { $0 < generation }
            await applyGroup(nodes[index])
        case .rosterChange:
            await leaveOutOfRosters()
            schedule(.rosterChange, after: random.exponential(mean: Self.groupChangeEvery))
        case .rosterRestore:
            removed = []
            world.record("every roster lists every host again")
            for node in nodes { await applyGroup(node) }
        case .stopReader:
            stopReader()
            schedule(.stopReader, after: random.exponential(mean: Self.readerStopEvery))
        case .storeWrite:
            writeToStore()
            schedule(.storeWrite, after: random.exponential(mean: Self.storeWriteEvery))
        case .resumeReader(let index, let type):
            nodes[index].readers[type]!.open()
            nodes[index].readingAgain = world.now
            world.record("its application reads \(type) again", on: nodes[index].host)
        }
    }

    // MARK: Checking

    /// The promises that hold at every step.
    private func check() {
        detections.removeAll { detection in
            let (watcher, silent) = (nodes[detection.watcher], nodes[detection.silent])
            let bound = detectionBound(watcher, silent, since: detection.since)
            // A side whose application is behind may have stopped reading the link (PROTOCOL.md
            // 3a): it does not time the link out then, and counts afresh once it reads again.
            if watcher.behind { return false }
            guard world.now - max(detection.since, watcher.readingAgain) > bound else { return false }
            if watcher.alive, !watcher.frozen, watcher.active.contains(silent.peerID) {
                ledger.violation(
                    .silenceDetected,
                    "\(world.now) \(watcher.host.name): \(silent.host.name), \(detection.what) since \(detection.since), still active after \(bound) (a silent peer is detected within the keepalive's bound)"
                )
            }
            return true
        }
        for node in nodes where node.alive && !node.frozen {
            let listed = Set(node.session.activePeers.map(\.id))
            if listed != node.active {
                ledger.violation(
                    .activePeersAsEvents,
                    "\(world.now) \(node.host.name): activePeers \(listed.count) peers, its events \(node.active.count) (activePeers changes as the events say)"
                )
            }
            let available = Dictionary(node.session.availablePeers.map { ($0.id, $0.state) }, uniquingKeysWith: { $1 })
            if !node.suspended, available != node.available {
                ledger.violation(
                    .availablePeersAsEvents,
                    "\(world.now) \(node.host.name): availablePeers \(available.values.sorted { "\($0)" < "\($1)" }), its events \(node.available.values.sorted { "\($0)" < "\($1)" }) (availablePeers changes as availablePeerChanged says)"
                )
            }
            // What a sender holds for each peer stays within its limits (Limits.outbox, 4,096
            // messages or 8 MiB; Limits.unreliableQueue, 256 messages or 1 MiB, or one larger).
            let (outbox, unreliable) = (Self.limits.outbox, Self.limits.unreliableQueue)
            for queued in node.session.queuedForPeers {
                let peer = nodes.first { $0.peerID == queued.peerID }?.host.name ?? "\(queued.peerID)"
                if queued.outbox.count > outbox.maximumCount || queued.outbox.bytes > outbox.maximumBytes {
                    ledger.violation(
                        .sendersBounded,
                        "\(world.now) \(node.host.name): \(queued.outbox.count) messages, \(queued.outbox.bytes) bytes unacknowledged for \(peer) (the outbox holds at most \(outbox.maximumCount) messages or \(outbox.maximumBytes) bytes)"
                    )
                }
                if queued.unreliable.count > 1,
                    queued.unreliable.count > unreliable.maximumCount
                        || queued.unreliable.bytes > unreliable.maximumBytes
                {
                    ledger.violation(
                        .sendersBounded,
                        "\(world.now) \(node.host.name): \(queued.unreliable.count) unreliable messages, \(queued.unreliable.bytes) bytes waiting for \(peer) (at most \(unreliable.maximumCount) or \(unreliable.maximumBytes) bytes, or one larger message)"
                    )
                }
            }
            checkHeld(node)
            // A host left out of a roster is closed at once, and refused after.
            for left in node.rosterHeld
            where world.now - node.rosterChanged > .milliseconds(100) && node.active.contains(nodes[left].peerID) {
                ledger.violation(
                    .rosterCloses,
                    "\(world.now) \(node.host.name): \(nodes[left].host.name), left out of its roster at \(node.rosterChanged), is active (a member no longer listed is closed and refused)"
                )
            }
        }
    }

    /// What `node` holds for its application stays within its limits: each stream within
    /// Limits.receiveBuffer and each hold within Limits.unsubscribedMessages, but for what one
    /// read of each link brings after it filled (or one message larger than the bytes alone);
    /// each events stream within Limits.eventBuffer; incomplete messages within twice
    /// Limits.maximumMessageLength.
    private func checkHeld(_ node: Node) {
        let held = node.session.heldInMemory
        for stream in held.streams {
            fullest.include(Fullest(streamCount: stream.count, streamBytes: stream.bytes))
        }
        for hold in held.holds {
            fullest.include(Fullest(holdCount: hold.count, holdBytes: hold.bytes))
        }
        // Links: one per peer, and another while it replaces the first.
        let links = 2 * (nodes.count - 1)
        let (streamLimit, holdLimit) = (Self.limits.receiveBuffer, Self.limits.unsubscribedMessages)
        for (what, buffers, limit) in [("stream of", held.streams, streamLimit), ("hold for", held.holds, holdLimit)] {
            for buffer in buffers {
                let count = limit.maximumCount + links * Self.readBeyondFull / Self.smallestFrame
                let bytes = limit.maximumBytes + links * Self.readBeyondFull
                if buffer.count > count || (buffer.count > 1 && buffer.bytes > bytes) {
                    ledger.violation(
                        .receiversBounded,
                        "\(world.now) \(node.host.name): its \(what) \(buffer.typeName) holds \(buffer.count) messages, \(buffer.bytes) bytes (at most \(limit.maximumCount) or \(limit.maximumBytes) bytes, and what one read of each of \(links) links brings after: \(count), \(bytes) bytes)"
                    )
                }
            }
        }
        for count in held.events where count > Self.limits.eventBuffer {
            ledger.violation(
                .receiversBounded,
                "\(world.now) \(node.host.name): an events stream holds \(count) events (Limits.eventBuffer, \(Self.limits.eventBuffer))"
            )
        }
        if held.incompleteBytes > 2 * Self.limits.maximumMessageLength {
            ledger.violation(
                .receiversBounded,
                "\(world.now) \(node.host.name): incomplete messages hold \(held.incompleteBytes) bytes (at most twice Limits.maximumMessageLength)"
            )
        }
        let streamWindow = HeldInMemory.byteStreamWindow
        for stream in held.byteStreams where stream.reading > streamWindow || stream.writing > streamWindow {
            ledger.violation(
                .receiversBounded,
                "\(world.now) \(node.host.name): a stream holds \(stream.reading) bytes unread, \(stream.writing) written and not held by the reader (at most \(streamWindow) each: PROTOCOL.md 3d)"
            )
        }
        for unwritten in held.unwrittenResources where unwritten > HeldInMemory.resourceWindow {
            ledger.violation(
                .receiversBounded,
                "\(world.now) \(node.host.name): an incoming file holds \(unwritten) bytes not yet written (at most \(HeldInMemory.resourceWindow): PROTOCOL.md 3c)"
            )
        }
    }

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
            await node.session.resume()
        }
        for node in nodes where !node.alive { await perform(.restart(node.index)) }
        removed = []
        for node in nodes { await applyGroup(node) }
        agenda.removeAll()
        // Every application reads again (a session restarted just now among them).
        for node in nodes {
            for gate in node.readers.values { gate.open() }
        }
        detections.removeAll()
        world.record("healed everything: settling")
        let healed = world.now
        // A silence begun before the heal may still end a link: what TCP held back arrives at
        // its next retransmission (within 1 s), which can come after the keepalive's timeout.
        await world.run(for: .seconds(2))
        let nodes = self.nodes
        do {
            try await world.run(
                until: { nodes.allSatisfy { $0.session.activePeers.count == nodes.count - 1 } },
                within: Self.rejoinBound
            )
        } catch {
            for node in nodes {
                let missing = nodes.filter {
                    $0.index != node.index
                        && !node.session.activePeers.contains(where: { [id = $0.session.peerID] in $0.id == id })
                }
                if !missing.isEmpty {
                    ledger.violation(
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
            try await world.run(
                until: { nodes.allSatisfy { $0.session.activePeers.count == nodes.count - 1 } },
                within: Self.rejoinBound
            )
        } catch {
            ledger.violation(
                .rejoinsAfterHealing,
                "\(world.now) not every pair active again \(Self.rejoinBound) after the links dead since the faults were found"
            )
            return
        }
        check()
        // Quiet: healthy paths, light traffic; nobody may leave.
        quiet = true
        for _ in 0..<max(1, Int(plan.quiet.components.seconds)) {
            await world.run(for: .seconds(1))
            sendMessage()
            check()
        }
        quiet = false
        // Every message owed arrives.
        let alive = Set(nodes.map(\.host.name))
        let killed = self.killed
        _ = try? await world.run(
            until: { [ledger] in ledger.undelivered(killed: killed, alive: alive).isEmpty },
            within: .seconds(60)
        )
        let missing = ledger.undelivered(killed: killed, alive: alive)
        for (id, sent) in missing.prefix(5) {
            ledger.violation(
                .nothingAcknowledgedLost,
                "\(world.now) message \(id) (\(sent.type), sent \(sent.at) from \(sent.from) to \(sent.to), \(sent.outcome)) never arrived (an acknowledged or queued reliable message is never lost)"
            )
        }
        if missing.count > 5 {
            ledger.violation(.nothingAcknowledgedLost, "... and \(missing.count - 5) more messages never arrived")
        }
        // Every file and stream between sessions that still run ends, whole.
        let current = Set(nodes.map(\.session.incarnation))
        _ = try? await world.run(until: { [transfers] in transfers.settled(current: current) }, within: .seconds(120))
        let directories = Dictionary(nodes.map { ($0.host.name, $0.directory) }, uniquingKeysWith: { $1 })
        let failures = transfers.failures(current: current, receiverDirectories: directories, now: world.now)
        for failure in failures.prefix(5) { ledger.violation(failure.promise, failure.text) }
        if failures.count > 5 { ledger.violation(failures[5].promise, "... and \(failures.count - 5) more transfers") }
        // Every store holds the same records, each its latest acknowledged write or a later one.
        let stations = nodes.map { (name: $0.host.name, storage: $0.storage, keeps: $0.keeps) }
        _ = try? await world.run(until: { StoreLedger.converged(stations) }, within: Self.storeConvergenceBound)
        for broken in stores.broken(stations, now: world.now).prefix(5) {
            ledger.violation(.storesConverge, broken)
        }
        let stuck = ledger.sendsUnderWay(before: world.now - .seconds(40)).filter { !killed.contains($0.0.sender) }
        for (id, sent) in stuck.prefix(5) {
            ledger.violation(
                .callsReturn,
                "\(world.now) the send of \(id) from \(sent.from) at \(sent.at) never returned (a send returns or throws within the send timeout)"
            )
        }
    }

    private func stop() async {
        for node in nodes { node.storeRun?.cancel() }
        for (index, since) in started {
            sessionTime += world.now - since
            _ = index
        }
        started.removeAll()
        await world.shutdown()
        try? FileManager.default.removeItem(at: files)
    }
}
