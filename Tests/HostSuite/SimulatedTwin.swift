import Foundation
import MultipeerSession
import MultipeerSessionTesting
import NIOConcurrencyHelpers

/// A scenario's fault in a simulated world (MultipeerSessionTesting): sessions named as the
/// suite's hosts, at navlog-sync's keepalive, the same fault for as long as the real one
/// lasted, measured as the real scenario is (detection: from the fault to the last observer's
/// departure; rejoin: from the heal to the last observer's arrival). The suite puts the two
/// side by side and fails a scenario whose real and simulated runs disagree
/// (docs/SIMULATION.md, "How close to the real world").
struct SimulatedTwin: Sendable {
    enum Fault: Sendable {
        /// Relief's paths go dead, its connections open (a link down, a black hole).
        case blackHole
        /// What relief sends is lost, what it is sent arrives (TCP half-open).
        case oneWayCut
        /// What crosses to and from relief is held, nothing lost, then let go at once.
        case hold
        /// Relief's process stops (SIGSTOP) and goes on (SIGCONT).
        case frozen
        /// Relief's process is killed (SIGKILL) and started again with its identity.
        case killed
        /// Captain is cut off from the other two.
        case partition
        /// Relief's paths lose 30 % of what crosses them and delay the rest 100 ms +- 50 ms for
        /// `seconds`, everyone sending every 5 s and captain a 1 MiB chart to the others at once;
        /// then they are black-holed too.
        case lossy(seconds: Int)
        /// The path between relief and captain alone loses and delays as ``lossy(seconds:)``'s,
        /// for `seconds`, everyone sending every 5 s; first-officer's paths stay clean.
        case lossyPath(seconds: Int)
        /// Relief moves to another address while it runs: its links from the old one go dead,
        /// and its advert moves. The rejoin counts from the move, as the real scenario's does.
        case renumbered
        /// Eight hosts; the last two are cut off from the other six, then the cut heals.
        case eightHosts
        /// A fourth host publishes two adverts per member, each claiming its ID with the
        /// greatest incarnation and pointing at a process that accepts TCP and never answers;
        /// then every member is killed and started again. The rejoin counts from the restart.
        case rogueAdverts

        /// Whether the faulty hosts' applications go on through the fault (a network fault).
        var faultyRuns: Bool {
            switch self {
            case .frozen, .killed: false
            case .blackHole, .oneWayCut, .hold, .partition, .lossy, .lossyPath, .renumbered, .eightHosts, .rogueAdverts:
                true
            }
        }

        /// The hosts, as the real scenario names them.
        var names: [String] {
            if case .eightHosts = self {
                ["captain", "first-officer", "relief", "purser", "navigator", "engineer", "observer", "dispatcher"]
            } else {
                ["captain", "first-officer", "relief"]
            }
        }

        /// The hosts the fault strikes, and those that must notice (by index in ``names``).
        var sides: (faulty: [Int], observers: [Int]) {
            switch self {
            case .partition: ([0], [1, 2])
            case .eightHosts: ([6, 7], [0, 1, 2, 3, 4, 5])
            default: ([2], [0, 1])
            }
        }
    }

    /// What the simulated run found, in the real report's terms.
    struct Outcome: Codable, Sendable {
        var detectionMilliseconds: Double?
        /// The observers' reasons, as navlog-sync names them (keepalive_timeout, link_closed...).
        var reasons: [String]
        var rejoinMilliseconds: Double?
        /// For the lossy link: departures while it was lossy, a minute, at every host; for the
        /// lossy path, those between its ends.
        var teardownsPerMinute: Double?
        /// For the lossy path: departures on the paths it does not cross.
        var otherPathTeardowns: Int?
        /// Messages sent while the fault lasted that never arrived.
        var undelivered: Int
        /// For the rogue adverts: the dials that failed at the sink.
        var sinkFailures: Int?
        /// For the lossy link: how long the chart took to reach relief, in seconds (nil: not
        /// while the link was lossy).
        var chartSeconds: Double?
        /// For the lossy link: the teardowns a minute of the same fault in worlds of other seeds
        /// too (``lossySeeds``), this one's first: a lossy minute's teardowns are chance.
        var teardownsOverSeeds: [Double]?
    }

    /// How many worlds the lossy link is run in, for the spread of its teardowns.
    static let lossySeeds = 12

    /// Runs `fault` as ``run(_:lasting:seed:)`` does; for the lossy link, in
    /// ``lossySeeds`` worlds from `seed` on, the first's outcome with every world's teardowns.
    static func measure(_ fault: Fault, lasting: Duration, seed: UInt64) async throws -> Outcome {
        var outcome = try await run(fault, lasting: lasting, seed: seed)
        guard case .lossy = fault else { return outcome }
        var teardowns = [outcome.teardownsPerMinute ?? 0]
        for other in seed + 1..<seed + UInt64(lossySeeds) {
            teardowns.append(try await run(fault, lasting: lasting, seed: other).teardownsPerMinute ?? 0)
        }
        outcome.teardownsOverSeeds = teardowns
        return outcome
    }
    static let groupKey = try! PreSharedKey(
        identity: "navlog-hosts twin",
        passphrase: "the suite's simulated twin, not a secret"
    )

    /// navlog-sync's default session (its keepalive timeout 1.5 s, pinged every 0.5 s), its
    /// files in `files` (nil: none).
    static func configuration(_ name: String, files: URL? = nil) -> MultipeerSession.Configuration {
        var configuration = MultipeerSession.Configuration(
            serviceType: "_navlog-twin._tcp",
            peer: PeerInfo(displayName: name),
            psk: groupKey
        )
        configuration.keepalive = KeepaliveParameters(interval: .milliseconds(500), timeout: .milliseconds(1_500))
        configuration.logger.logLevel = .critical
        configuration.resourceDirectory = files?.appendingPathComponent(name)
        return configuration
    }

    /// An entry an application sends while the fault lasts.
    struct Entry: Codable, Sendable { var number: Int }

    /// The session on each host (a restarted host's latest), read from the world's thread.
    private final class Crew: @unchecked Sendable {
        var sessions: [Int: MultipeerSession] = [:]
    }

    /// What the sessions reported, with the simulated time.
    private final class Record: Sendable {
        struct Departure {
            var at: Duration
            var observer: String
            var peer: UUID
            var reason: String
        }
        private struct State {
            var departures: [Departure] = []
            var received: Set<Int> = []
            var files: [String: Duration] = [:]
        }
        private let state = NIOLockedValueBox(State())

        func left(_ departure: Departure) { state.withLockedValue { $0.departures.append(departure) } }
        func received(_ number: Int) { _ = state.withLockedValue { $0.received.insert(number) } }
        func fileArrived(at host: String, _ at: Duration) { state.withLockedValue { $0.files[host] = at } }
        func fileArrival(at host: String) -> Duration? { state.withLockedValue { $0.files[host] } }
        var departures: [Departure] { state.withLockedValue { $0.departures } }
        var receivedNumbers: Set<Int> { state.withLockedValue { $0.received } }
    }

    /// Runs `fault` for `lasting` (from the fault to the heal, at least until it was detected)
    /// in a world drawn from `seed`.
    static func run(_ fault: Fault, lasting: Duration, seed: UInt64) async throws -> Outcome {
        let world = SimulatedWorld(seed: seed)
        let files = FileManager.default.temporaryDirectory.appendingPathComponent("navlog-twin-\(getpid())-\(seed)")
        defer { try? FileManager.default.removeItem(at: files) }
        return try await Task(executorPreference: world.executor) {
            let record = Record()
            let hosts = fault.names.map(world.addHost)
            let crew = Crew()
            func start(_ index: Int) {
                let (host, session) = (
                    hosts[index],
                    hosts[index].makeSession(configuration: configuration(hosts[index].name, files: files))
                )
                crew.sessions[index] = session
                Task(executorPreference: world.executor) {
                    for await event in session.events {
                        if case .peerLeft(let peer, let reason) = event {
                            record.left(.init(at: world.now, observer: host.name, peer: peer.id, reason: code(reason)))
                        }
                    }
                }
                Task(executorPreference: host.executor) {
                    for await (_, entry) in session.messages(of: Entry.self) { record.received(entry.number) }
                }
                Task(executorPreference: host.executor) {
                    for await resource in session.incomingResources where (try? await resource.file()) != nil {
                        record.fileArrived(at: host.name, world.now)
                    }
                }
                host.start(session)
            }
            for index in hosts.indices { start(index) }
            @Sendable func together(_ a: Int, _ b: Int) -> Bool {
                let sessions = crew.sessions
                return sessions[a]!.activePeers.contains { $0.id == sessions[b]!.peerID }
                    && sessions[b]!.activePeers.contains { $0.id == sessions[a]!.peerID }
            }
            let everyone = hosts.indices
            @Sendable func mesh() -> Bool {
                everyone.allSatisfy { a in everyone.allSatisfy { b in a == b || together(a, b) } }
            }
            try await world.run(until: mesh, within: .seconds(20))
            if case .rogueAdverts = fault { return try await rogueAdverts(world, hosts, restart: start, mesh: mesh) }

            let (faulty, observers) = fault.sides
            var sent: [Int] = []
            func send(from sender: Int, to receiver: Int) async {
                let number = sent.count
                sent.append(number)
                _ = try? await crew.sessions[sender]!.send(Entry(number: number), to: crew.sessions[receiver]!.peerID)
            }
            var teardownsPerMinute: Double?
            var chartSeconds: Double?
            if case .lossy(let seconds) = fault {
                let impairedAt = world.now
                for index in faulty {
                    // net-impair's 100 ms +- 50 ms: from 50 ms up to 150.
                    await hosts[index].impair(latency: .milliseconds(50), jitter: .milliseconds(100), loss: 0.3)
                }
                // The weather chart, as the real scenario attaches it: 1 MiB from captain to the others.
                try FileManager.default.createDirectory(at: files, withIntermediateDirectories: true)
                let chart = files.appendingPathComponent("weather chart.pdf")
                try Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 10) }).write(to: chart)
                for receiver in everyone.dropFirst() {
                    let (session, peer) = (crew.sessions[0]!, crew.sessions[receiver]!.peerID)
                    Task(executorPreference: hosts[0].executor) {
                        try await session.sendResource(at: chart, to: peer).completion()
                    }
                }
                while world.now - impairedAt < .seconds(seconds) {
                    for sender in everyone { await send(from: sender, to: (sender + 1) % hosts.count) }
                    await world.run(for: .seconds(5))
                }
                let left = record.departures.filter { $0.at >= impairedAt }.count
                teardownsPerMinute = Double(left) / ((world.now - impairedAt) / .seconds(60))
                chartSeconds = faulty.compactMap { record.fileArrival(at: hosts[$0].name) }.max().map {
                    ($0 - impairedAt) / .seconds(1)
                }
                try await world.run(until: mesh, within: .seconds(30))
            }

            if case .lossyPath(let seconds) = fault {
                let impairedAt = world.now
                let (captain, officer, relief) = (hosts[0], hosts[1], hosts[2])
                await world.impair(
                    from: relief,
                    to: captain,
                    latency: .milliseconds(50),
                    jitter: .milliseconds(100),
                    loss: 0.3
                )
                while world.now - impairedAt < .seconds(seconds) {
                    for sender in everyone { await send(from: sender, to: (sender + 1) % hosts.count) }
                    await world.run(for: .seconds(5))
                }
                let left = record.departures.filter { $0.at >= impairedAt }
                let officerID = crew.sessions[1]!.peerID
                let others = left.filter { $0.observer == officer.name || $0.peer == officerID }.count
                let minutes = (world.now - impairedAt) / .seconds(60)
                let healedAt = world.now
                await world.repair(from: relief, to: captain)
                try await world.run(until: mesh, within: .seconds(30))
                let rejoin = world.now - healedAt
                let owed = Set(sent)
                _ = try? await world.run(until: { record.receivedNumbers.isSuperset(of: owed) }, within: .seconds(30))
                let undelivered = owed.subtracting(record.receivedNumbers).count
                await world.shutdown()
                return Outcome(
                    detectionMilliseconds: nil,
                    reasons: [],
                    rejoinMilliseconds: rejoin / .milliseconds(1),
                    teardownsPerMinute: Double(left.count - others) / minutes,
                    otherPathTeardowns: others,
                    undelivered: undelivered
                )
            }

            let cutAt = world.now
            var holes: [SimulatedPartition] = []
            for index in faulty {
                switch fault {
                case .blackHole, .lossy: holes.append(await hosts[index].blackHole())
                case .oneWayCut: holes.append(await world.cut(from: [hosts[index]]))
                case .hold: holes.append(await world.hold([hosts[index]]))
                case .frozen: hosts[index].freeze()
                case .killed: await hosts[index].kill()
                case .renumbered: await hosts[index].renumber()
                case .partition, .eightHosts, .rogueAdverts, .lossyPath: break
                }
            }
            switch fault {
            case .partition, .eightHosts:
                holes = [await world.partition(faulty.map { hosts[$0] }, from: observers.map { hosts[$0] })]
            default: break
            }
            let faultyIDs = Set(faulty.map { crew.sessions[$0]!.peerID })
            let observerNames = Set(observers.map { hosts[$0].name })
            @Sendable func departures() -> [Record.Departure] {
                record.departures.filter {
                    $0.at >= cutAt && faultyIDs.contains($0.peer) && observerNames.contains($0.observer)
                }
            }
            @Sendable func pair(_ departure: Record.Departure) -> String { "\(departure.observer) \(departure.peer)" }
            try await world.run(
                until: { Set(departures().map(pair)).count == observers.count * faulty.count },
                within: .seconds(30)
            )
            let firstDepartures = Set(departures().map(pair)).compactMap { key in departures().first { pair($0) == key }
            }
            let detection = firstDepartures.map(\.at).max()! - cutAt
            // The applications go on: each observer sends to each faulty host, and each of
            // those to them when it runs.
            for observer in observers {
                for index in faulty { await send(from: observer, to: index) }
            }
            if fault.faultyRuns {
                for index in faulty {
                    for observer in observers { await send(from: index, to: observer) }
                }
            }
            if world.now < cutAt + lasting { await world.run(for: cutAt + lasting - world.now) }

            // (A move is over as it happens: its rejoin counts from it.)
            let healedAt = if case .renumbered = fault { cutAt } else { world.now }
            for hole in holes { await hole.heal() }
            for index in faulty {
                switch fault {
                case .lossy: await hosts[index].repair()
                case .frozen: hosts[index].thaw()
                case .killed:
                    hosts[index].restart()
                    start(index)
                case .blackHole, .oneWayCut, .hold, .partition, .renumbered, .eightHosts, .rogueAdverts, .lossyPath:
                    break
                }
            }
            try await world.run(
                until: { observers.allSatisfy { observer in faulty.allSatisfy { together(observer, $0) } } },
                within: .seconds(60)
            )
            let rejoin = world.now - healedAt
            let owed = Set(sent)
            _ = try? await world.run(until: { record.receivedNumbers.isSuperset(of: owed) }, within: .seconds(30))
            let undelivered = Set(sent).subtracting(record.receivedNumbers).count
            await world.shutdown()
            return Outcome(
                detectionMilliseconds: detection / .milliseconds(1),
                reasons: Set(firstDepartures.map(\.reason)).sorted(),
                rejoinMilliseconds: rejoin / .milliseconds(1),
                teardownsPerMinute: teardownsPerMinute,
                undelivered: undelivered,
                chartSeconds: chartSeconds
            )
        }.value
    }

    /// The rogue adverts: a sink (a host whose kernel accepts TCP and whose process never runs)
    /// and two adverts per member claiming its ID with the greatest incarnation; then every
    /// member killed and started again, and the time until all are together again.
    private static func rogueAdverts(
        _ world: SimulatedWorld,
        _ hosts: [SimulatedHost],
        restart: (Int) -> Void,
        mesh: @escaping @Sendable () -> Bool
    ) async throws -> Outcome {
        let rogue = world.addHost("rogue")
        let sink = rogue.makeSession(configuration: configuration("sink"))
        rogue.start(sink)
        let port = try await world.run(within: .seconds(5)) { () async -> Int in
            while true {
                if let port = await sink.listeningPort { return port }
                await Task.yield()
            }
        }
        rogue.freeze()
        for host in hosts {
            for _ in 1...2 {
                let claims = [
                    "v=2", "id=\(host.identity.peerID.uuidString.lowercased())", "inc=\(UInt64.max)",
                    "name=\(host.name)",
                ]
                // (Up for the rest of the world: never withdrawn.)
                _ = await world.advertise("_navlog-twin._tcp", txt: claims, at: rogue.address, port: port)
            }
        }
        await world.run(for: .seconds(1))
        for host in hosts { await host.kill() }
        let restartedAt = world.now
        for (index, host) in hosts.enumerated() {
            host.restart()
            restart(index)
        }
        try await world.run(until: mesh, within: .seconds(60))
        let rejoin = world.now - restartedAt
        let atSink = world.trace.lines.filter {
            $0.at >= restartedAt && $0.text.contains("\(rogue.address):\(port)") && $0.text.contains("failed")
        }
        await world.shutdown()
        return Outcome(
            reasons: [],
            rejoinMilliseconds: rejoin / .milliseconds(1),
            undelivered: 0,
            sinkFailures: atSink.count
        )
    }

    /// navlog-sync's word for a reason (its --json events).
    static func code(_ reason: PeerLeftReason) -> String {
        switch reason {
        case .goodbye: "goodbye"
        case .keepaliveTimeout: "keepalive_timeout"
        case .linkClosed: "link_closed"
        case .restarted: "restarted"
        case .local: "local"
        }
    }
}

extension SimulatedTwin.Outcome {
    /// The redial bound both rejoins must keep: the backoff's longest delay with its jitter
    /// (12 s), a connect and a handshake (2 s). Rejoin times are draws of the backoff's
    /// jitter, so the two runs are held to the bound, not to each other.
    static let rejoinBound = 14_000.0
    /// The stall limit, and a round trip: on a lossy path the keepalive waits what the path's
    /// own stalls teach it, up to this, so a lossy path's detections are held to it alone.
    static let stallLimit = 15_500.0

    /// How improbable a real run's teardowns must be, given the twin's, to disagree: 1 %.
    static let teardownSignificance = 0.01

    /// Whether the real lossy minute's teardowns are beyond what chance explains, given the
    /// twin's over its seeds (the same length of fault: both a minute). A link's teardown shows
    /// at both its ends, so teardowns count in pairs; links torn down in a minute are taken as
    /// Poisson, at the twin's mean rate. They disagree when the real run tore down more links than
    /// that rate reaches once in 100 minutes (the twin never tearing one down where the real run
    /// did, for one), or none where a rate so high tears one down 99 minutes in 100.
    static func teardownsDisagree(simulated: [Double], real: Double) -> String? {
        let rate = simulated.reduce(0, +) / Double(simulated.count) / 2
        let links = Int((real / 2).rounded(.up))
        // P(X >= links) for X ~ Poisson(rate).
        var below = 0.0
        var term = exp(-rate)
        for count in 0..<links {
            below += term
            term *= rate / Double(count + 1)
        }
        let atLeast = max(0, 1 - below)
        let spread = simulated.map { String(format: "%.0f", $0) }.joined(separator: ", ")
        if links > 0, atLeast < teardownSignificance {
            return String(
                format:
                    "%.1f teardowns a minute real, where the twin's (%@ over %d seeds) make as many a chance of %.4f",
                real,
                spread,
                simulated.count,
                atLeast
            )
        }
        if links == 0, exp(-rate) < teardownSignificance {
            return "no teardown real, where the twin's (\(spread) over \(simulated.count) seeds) make none improbable"
        }
        return nil
    }

    /// Where `real` and this run of the same fault disagree beyond what chance explains, or nil.
    func disagreement(with real: ScenarioResult, fault: SimulatedTwin.Fault) -> String? {
        var problems: [String] = []
        if Set(reasons) != Set(real.detectionReasons) {
            problems.append(
                "reasons \(reasons.joined(separator: ", ")) simulated, \(real.detectionReasons.joined(separator: ", ")) real"
            )
        }
        if let simulated = detectionMilliseconds, let measured = real.detectionMilliseconds {
            if case .lossy = fault {
                if max(simulated, measured) > Self.stallLimit {
                    problems.append(
                        String(
                            format: "detection %.0f ms simulated, %.0f ms real, beyond the stall limit",
                            simulated,
                            measured
                        )
                    )
                }
            } else if abs(simulated - measured) > max(500, 0.25 * max(simulated, measured)) {
                problems.append(String(format: "detection %.0f ms simulated, %.0f ms real", simulated, measured))
            }
        } else if (detectionMilliseconds == nil) != (real.detectionMilliseconds == nil) {
            problems.append("one run detected the fault, the other did not")
        }
        if let simulated = rejoinMilliseconds, let measured = real.rejoinMilliseconds,
            max(simulated, measured) > Self.rejoinBound
        {
            problems.append(
                String(format: "rejoin %.0f ms simulated, %.0f ms real, beyond the redial bound", simulated, measured)
            )
        }
        if undelivered > 0 { problems.append("\(undelivered) messages sent during the simulated fault never arrived") }
        // The lossy path: the links of the paths it does not cross unhurt (the real run fails
        // on its own).
        if let simulated = otherPathTeardowns, simulated > 0 {
            problems.append("\(simulated) links on paths the simulated loss does not cross were torn down")
        }
        // The rogue adverts: both runs' dials tried the sink, or neither did.
        if let simulated = sinkFailures,
            let measured = real.reasons.first.flatMap({ Int($0.prefix(while: \.isNumber)) }),
            (simulated > 0) != (measured > 0)
        {
            problems.append("\(simulated) dials failed at the sink simulated, \(measured) real")
        }
        return problems.isEmpty ? nil : problems.joined(separator: "; ")
    }
}
