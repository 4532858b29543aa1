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
        /// Relief's process stops (SIGSTOP) and goes on (SIGCONT).
        case frozen
        /// Relief's process is killed (SIGKILL) and started again with its identity.
        case killed
        /// Captain is cut off from the other two.
        case partition
        /// Relief's paths lose 30 % of what crosses them and delay the rest 100 ms +- 50 ms for
        /// `seconds`, everyone sending every 5 s; then they are black-holed too.
        case lossy(seconds: Int)
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
            case .blackHole, .oneWayCut, .partition, .lossy, .renumbered, .eightHosts, .rogueAdverts: true
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
        /// For the lossy link: departures while it was lossy, a minute, at every host.
        var teardownsPerMinute: Double?
        /// Messages sent while the fault lasted that never arrived.
        var undelivered: Int
        /// For the rogue adverts: the dials that failed at the sink.
        var sinkFailures: Int?
    }
    static let groupKey = try! PreSharedKey(
        identity: "navlog-hosts twin",
        passphrase: "the suite's simulated twin, not a secret"
    )

    /// navlog-sync's default session (its keepalive timeout 1.5 s, pinged every 0.5 s).
    static func configuration(_ name: String) -> MultipeerSession.Configuration {
        var configuration = MultipeerSession.Configuration(
            serviceType: "_navlog-twin._tcp",
            peer: PeerInfo(displayName: name),
            psk: groupKey
        )
        configuration.keepalive = KeepaliveParameters(interval: .milliseconds(500), timeout: .milliseconds(1_500))
        configuration.logger.logLevel = .critical
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
        }
        private let state = NIOLockedValueBox(State())

        func left(_ departure: Departure) { state.withLockedValue { $0.departures.append(departure) } }
        func received(_ number: Int) { _ = state.withLockedValue { $0.received.insert(number) } }
        var departures: [Departure] { state.withLockedValue { $0.departures } }
        var receivedNumbers: Set<Int> { state.withLockedValue { $0.received } }
    }

    /// Runs `fault` for `lasting` (from the fault to the heal, at least until it was detected)
    /// in a world drawn from `seed`.
    static func run(_ fault: Fault, lasting: Duration, seed: UInt64) async throws -> Outcome {
        let world = SimulatedWorld(seed: seed)
        return try await Task(executorPreference: world.executor) {
            let record = Record()
            let hosts = fault.names.map(world.addHost)
            let crew = Crew()
            func start(_ index: Int) {
                let (host, session) = (
                    hosts[index], hosts[index].makeSession(configuration: configuration(hosts[index].name))
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
            if case .lossy(let seconds) = fault {
                let impairedAt = world.now
                for index in faulty {
                    await hosts[index].impair(latency: .milliseconds(100), jitter: .milliseconds(50), loss: 0.3)
                }
                while world.now - impairedAt < .seconds(seconds) {
                    for sender in everyone { await send(from: sender, to: (sender + 1) % hosts.count) }
                    await world.run(for: .seconds(5))
                }
                let left = record.departures.filter { $0.at >= impairedAt }.count
                teardownsPerMinute = Double(left) / ((world.now - impairedAt) / .seconds(60))
                try await world.run(until: mesh, within: .seconds(30))
            }

            let cutAt = world.now
            var holes: [SimulatedPartition] = []
            for index in faulty {
                switch fault {
                case .blackHole, .lossy: holes.append(await hosts[index].blackHole())
                case .oneWayCut: holes.append(await world.cut(from: [hosts[index]]))
                case .frozen: hosts[index].freeze()
                case .killed: await hosts[index].kill()
                case .renumbered: await hosts[index].renumber()
                case .partition, .eightHosts, .rogueAdverts: break
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
                case .blackHole, .oneWayCut, .partition, .renumbered, .eightHosts, .rogueAdverts: break
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
                undelivered: undelivered
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
