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

/// What the simulator's applications do beside the explorer's plan: how much, and how loud.
struct Workload: Sendable {
    /// Messages a second, in the whole world (scaled by the plan's traffic).
    var messageRate: Double = 10
    /// How much the sessions log (to standard error).
    var logLevel: Logger.Level = .critical
    /// Breaks a promise of the simulator's own on purpose (``Promise/planted``).
    var plant = false
}

/// How a world went: the explorer's outcome, and what the applications did.
struct RunResult: Sendable {
    var outcome: SimulationExplorer.Outcome
    var messages: Int
    var deliveries: Int
    /// Files and streams sent.
    var files: Int
    var streams: Int
    /// Writes to the replicated stores that returned (each checked at the end).
    var storeWrites: Int
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

/// The simulator's applications, in a world the explorer draws from a seed
/// (``SimulationExplorer``): on every host a session sending messages, files and streams, its
/// application falling behind at times, the group key rotating and the rosters changing, and a
/// replicated store; the documentation's promises about them checked at every step and at the
/// end (the explorer checks the rest, and injects the faults).
final class SimulationRun: ExploredApplication, @unchecked Sendable {
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

    /// One host's application: its session and what it keeps.
    final class Node: @unchecked Sendable {
        let index: Int
        let host: SimulatedHost
        var session: MultipeerSession!
        var number: UInt64 = 0
        /// What its application sends, one at a time in this order (so the order sent is the
        /// order numbered): the sender loop of its current session reads it.
        var outgoing: AsyncStream<Outgoing>.Continuation?
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

        init(index: Int, host: SimulatedHost, directory: URL, keeps: SyncScope) {
            self.index = index
            self.host = host
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

    let run: ExplorationRun
    let workload: Workload
    var world: SimulatedWorld { run.world }
    var plan: ExplorationPlan { run.plan }
    /// The applications' draws: a stream of the run's.
    private var random: SimulationRandom
    /// Draws which collections each host's store keeps, and which one each write goes to: a
    /// stream of its own, so that what the seed drew before stores kept some collections it
    /// still draws.
    private var collectionDraw: SimulationRandom
    private(set) var nodes: [Node] = []
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
    /// Incarnations killed: what they sent and nobody acknowledged may be lost.
    private var killed: Set<UInt64> = []
    private(set) var fullest = Fullest()

    init(run: ExplorationRun, workload: Workload) {
        self.run = run
        self.workload = workload
        random = SimulationRandom(seed: run.random.next())
        collectionDraw = SimulationRandom(seed: run.plan.seed ^ 0xC011_EC71_0115_C011)
        transfers = Transfers(ledger: ledger)
        files = FileManager.default.temporaryDirectory.appendingPathComponent(
            "multipeer-simulator-\(getpid())-\(run.plan.seed)-\(UInt(bitPattern: ObjectIdentifier(run).hashValue))"
        )
        try? FileManager.default.createDirectory(
            at: files.appendingPathComponent("sent"),
            withIntermediateDirectories: true
        )
    }

    deinit {
        try? FileManager.default.removeItem(at: files)
    }

    /// The group key of `generation`: 32 bytes drawn from the generation (a passphrase's
    /// PBKDF2 would cost each world a fifth of a second per key).
    private func key(_ generation: Int) -> PreSharedKey {
        if let key = derivedKeys[generation] { return key }
        var bytes = SimulationRandom(seed: 0x6B65_7973 &+ UInt64(generation))
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
        configuration.logger.logLevel = workload.logLevel
        return configuration
    }

    private func keyRing(_ generations: [Int]) -> KeyRing { try! KeyRing(generations.map(key)) }

    /// Every host's key but those left out.
    private func roster() -> Roster {
        Roster(keys: run.hosts.indices.filter { !removed.contains($0) }.map { run.hosts[$0].identity.key })
    }

    /// Runs the world on its own thread and returns how it went.

    // MARK: The explorer's calls

    func start(on host: SimulatedHost, in run: ExplorationRun) -> MultipeerSession {
        let index = run.index(of: host)
        if index == nodes.count {
            nodes.append(
                Node(
                    index: index,
                    host: host,
                    directory: files.appendingPathComponent(host.name),
                    // (A quarter of the hosts keep only the log: what they neither take nor pass
                    // on reaches the others directly, since every pair meets once the world heals.)
                    keeps: collectionDraw.chance(0.25) ? .only([LogLine.collectionName]) : .everything
                )
            )
        }
        let node = nodes[index]
        node.storeRun?.cancel()
        node.session = host.makeSession(
            configuration: configuration(host.name, directory: node.directory, keys: node.keys)
        )
        node.met = []
        node.number = 0
        node.keysHeld = node.keys
        node.rosterHeld = removed
        node.rosterChanged = world.now
        start(node)
        return node.session
    }

    func begin(in run: ExplorationRun) {
        let rate = workload.messageRate * plan.traffic
        every(mean: .milliseconds(Int64(1_000 / rate))) { $0.sendMessage() }
        every(mean: Self.transferEvery / plan.traffic) { $0.sendFile() }
        every(mean: Self.transferEvery / plan.traffic) { $0.openStream() }
        every(mean: Self.groupChangeEvery) { $0.beginRotation() }
        every(mean: Self.groupChangeEvery) { await $0.leaveOutOfRosters() }
        every(mean: Self.readerStopEvery) { $0.stopReader() }
        every(mean: Self.storeWriteEvery / plan.traffic) { $0.writeToStore() }
    }

    /// Does `action` again and again, the waits between exponentially distributed.
    private func every(mean: Duration, _ action: @escaping (SimulationRun) async -> Void) {
        run.schedule(after: random.exponential(mean: mean)) { [unowned self] in
            await action(self)
            every(mean: mean, action)
        }
    }

    func willKill(_ host: SimulatedHost, in run: ExplorationRun) {
        let node = nodes[run.index(of: host)]
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
        killed.insert(node.session.incarnation)
    }

    func resumed(_ host: SimulatedHost, in run: ExplorationRun) async {
        await applyGroup(nodes[run.index(of: host)])
    }

    func readingSince(on host: SimulatedHost) -> Duration? {
        let node = nodes[run.index(of: host)]
        return node.behind ? nil : node.readingAgain
    }

    func heal(in run: ExplorationRun) async {
        removed = []
        for node in nodes { await applyGroup(node) }
        // Every application reads again (a session restarted just now among them).
        for node in nodes {
            for gate in node.readers.values { gate.open() }
        }
    }

    func quietStep(in run: ExplorationRun) {
        sendMessage()
    }

    /// Reports what the ledgers found broken since the last step.
    private func report() {
        for violation in ledger.takeViolations() { run.broke(violation.promise.exploration, violation.text) }
    }

    // MARK: The applications

    /// Starts `node`'s application in its session: a reader of each message type, a sender
    /// loop, its store, and a watcher of its events.
    private func start(_ node: Node) {
        let session = node.session!
        node.host.start(session)
        startStore(node)
        let (ledger, world, name) = (ledger, world, node.host.name)
        // Now and then an application subscribes to a type only a while after its session
        // started: what comes of it meanwhile is held for it (it declared the type).
        if random.chance(0.25) {
            node.readers["Notice"]!.close()
            world.record("its application subscribes to Notice late", on: node.host)
            run.schedule(after: random.seconds(0.5...10)) { [unowned self] in resumeReader(node, "Notice") }
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
                    node.met.insert(peer.id)
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
        let senders = nodes.filter { run.isAlive($0.host) }
        guard let sender = senders.randomElement(using: &random) else { return }
        let others = nodes.filter { $0.index != sender.index }
        guard let receiver = others.randomElement(using: &random) else { return }
        let broadcast = random.chance(0.1)
        let reliable = !random.chance(0.15)
        // Only to a peer active now: the sender loop waits for the acknowledgement.
        let awaitAcknowledgement =
            reliable && !broadcast && random.chance(0.1)
            && run.activePeers(of: sender.host).contains(receiver.peerID)
        let size: Int
        switch Double.random(in: 0..<1, using: &random) {
        case ..<0.7: size = Int.random(in: 0...200, using: &random)
        case ..<0.95: size = Int.random(in: 1_024...16_384, using: &random)
        default: size = Int.random(in: 300_000...1_200_000, using: &random)
        }
        let cargo = random.chance(0.5)
        if workload.plant, run.isAlive(receiver.host), !run.isRunning(receiver.host), size >= 1_024 {
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
        let writers = nodes.filter { run.isRunning($0.host) && $0.store != nil }
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
        let senders = nodes.filter { run.isAlive($0.host) && !$0.met.isEmpty }
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
        let (session, to, transfers, world, ledger) = (sender.session!, receiver.peerID, transfers, world, ledger)
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
        let (session, to, transfers, world) = (sender.session!, receiver.peerID, transfers, world)
        transfers.opening(
            number,
            .init(
                from: sender.host.name,
                to: receiver.host.name,
                sender: session.incarnation,
                length: length,
                at: world.now,
                receiverAtOpen: receiver.session.incarnation,
                owed: run.isRunning(sender.host)
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
        for node in nodes {
            run.schedule(after: random.seconds(0...10)) { [unowned self] in
                guard let next = rotating else { return }
                node.keys = [generation, next]
                await applyGroup(node)
            }
        }
        run.schedule(after: .seconds(12)) { [unowned self] in finishRotation() }
    }

    /// Ends the rotation once every host holds both keys (a frozen one holds them once thawed).
    private func finishRotation() {
        guard let next = rotating else { return }
        guard nodes.allSatisfy({ $0.keysHeld == [generation, next] }) else {
            return run.schedule(after: .seconds(2)) { [unowned self] in finishRotation() }
        }
        generation = next
        rotating = nil
        for node in nodes {
            run.schedule(after: random.seconds(0...10)) { [unowned self] in
                // Only what is older than the generation everyone holds: a rotation begun since
                // may have given this host the next key already.
                node.keys.removeAll { $0 < generation }
                await applyGroup(node)
            }
        }
    }

    /// Gives `node`'s session the keys and roster it should hold, unless it cannot run now
    /// (killed: its restart reads them; frozen: its thaw gives them).
    private func applyGroup(_ node: Node) async {
        guard run.isRunning(node.host) else { return }
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
        let candidates = nodes.filter { run.isAlive($0.host) }
        guard removed.isEmpty, nodes.count >= 3, let node = candidates.randomElement(using: &random) else { return }
        removed = [node.index]
        world.record("\(node.host.name) is left out of every roster")
        for other in nodes { await applyGroup(other) }
        run.schedule(after: random.seconds(2...20)) { [unowned self] in
            removed = []
            world.record("every roster lists every host again")
            for node in nodes { await applyGroup(node) }
        }
    }

    // MARK: Slow readers

    /// An application stops reading one type of message for 1-20 s: its stream fills, its
    /// links stop reading, and the senders' outboxes take the rest.
    private func stopReader() {
        let readers = nodes.filter { run.isAlive($0.host) }.flatMap { node in
            node.readers.keys.sorted().map { (node, $0) }
        }.filter {
            !$0.0.readers[$0.1]!.isClosed
        }
        guard let (node, type) = readers.randomElement(using: &random) else { return }
        let pause = random.seconds(1...20)
        node.readers[type]!.close()
        world.record("its application stops reading \(type) for \(pause)", on: node.host)
        run.schedule(after: pause) { [unowned self] in resumeReader(node, type) }
    }

    /// `node`'s application reads `type` again.
    private func resumeReader(_ node: Node, _ type: String) {
        node.readers[type]!.open()
        node.readingAgain = world.now
        world.record("its application reads \(type) again", on: node.host)
    }

    // MARK: Checking

    /// The promises about the applications that hold at every step (the explorer checks the
    /// session's own).
    func check(in run: ExplorationRun) {
        for node in nodes where run.isRunning(node.host) {
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
            let active = run.activePeers(of: node.host)
            for left in node.rosterHeld
            where world.now - node.rosterChanged > .milliseconds(100) && active.contains(nodes[left].peerID) {
                ledger.violation(
                    .rosterCloses,
                    "\(world.now) \(node.host.name): \(nodes[left].host.name), left out of its roster at \(node.rosterChanged), is active (a member no longer listed is closed and refused)"
                )
            }
        }
        report()
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

    /// Everything healed and quiet: what was owed arrived, every transfer ended, the stores
    /// converged, every send returned.
    func settle(in run: ExplorationRun) async {
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
        report()
    }
}
