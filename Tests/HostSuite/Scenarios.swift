import Foundation
import Glibc
import MultipeerCore
import MultipeerTestSupport
import NIOConcurrencyHelpers

/// What one scenario found.
struct ScenarioResult: Codable {
    var scenario: String
    var fault: String
    /// From the fault to the last observer reporting the peer gone; nil where no teardown is expected.
    var detectionMilliseconds: Double?
    /// The reasons the observers gave.
    var reasons: [String] = []
    /// For the lossy link: the peers reported leaving while it was lossy, a minute (each host's
    /// report counts; no fault was caused, so every one is a false teardown). For the lossy
    /// path: those between its two ends.
    var teardownsPerMinute: Double?
    /// For the lossy path: the departures seen on the paths it does not cross (first-officer's),
    /// each a link torn down that nothing was wrong with.
    var otherPathTeardowns: Int?
    /// From the heal to the last observer having the peer active again.
    var rejoinMilliseconds: Double?
    /// From the fault to the heal, where the scenario heals what it caused.
    var faultMilliseconds: Double?
    /// The observers' reasons at the detection measured (navlog-sync's words).
    var detectionReasons: [String] = []
    /// The same fault in a simulated world, where the scenario has a twin.
    var simulated: SimulatedTwin.Outcome?
    var entriesTyped = 0
    /// Live entries in each host's database at the end.
    var entriesPerHost: [String: Int] = [:]
    var passed = false
    var failure: String?
}

/// A fault the suite injects into three hosts: captain, first-officer, relief.
struct Scenario: Sendable {
    let name: String
    let fault: String
    /// Hosts beside the three that run no navlog-sync (a rogue).
    var bystanders: [String] = []
    /// Off: the hosts have IPv4 alone, so no link-local IPv6 address can stand in for a lost one.
    var ipv6 = true
    /// The hosts that run navlog-sync.
    var hostNames = Scenario.hostNames
    /// Arguments for navlog-sync beyond the usual, by host name.
    var navlogArguments: [String: [String]] = [:]
    /// Runs before navlog-sync starts anywhere.
    var prepare: (@Sendable (ScenarioRun) async throws -> Void)?
    /// The same fault in a simulated world, run after this one and compared with it.
    var twin: SimulatedTwin.Fault?
    let body: @Sendable (ScenarioRun, inout ScenarioResult) async throws -> Void

    static let hostNames = ["captain", "first-officer", "relief"]

    /// Every scenario, in the order they run; the lossy link lasts `lossSeconds`.
    static func all(lossSeconds: Int, impairTool: String) -> [Scenario] {
        let pathSeconds = max(10, lossSeconds / 2)
        return [
            isolate(
                "link down",
                "relief's link to the bridge goes down, then up",
                reliefRuns: true,
                twin: .blackHole,
                cut: { run, relief in try await run.network.setLink(of: relief, up: false) },
                heal: { run, relief in try await run.network.setLink(of: relief, up: true) }
            ),
            isolate(
                "black hole",
                "iptables drops everything in and out of relief's eth0, then the rules go",
                reliefRuns: true,
                twin: .blackHole,
                cut: { _, relief in try await blackHole(relief, "-I") },
                heal: { _, relief in try await blackHole(relief, "-D") }
            ),
            isolate(
                "one-way cut",
                "iptables drops what relief sends out of eth0, not what it receives (TCP half-open), then the rule goes",
                reliefRuns: true,
                twin: .oneWayCut,
                cut: { _, relief in try await dropOutgoing(relief, "-I") },
                heal: { _, relief in try await dropOutgoing(relief, "-D") }
            ),
            held(impairTool: impairTool),
            lossyPath(seconds: pathSeconds, impairTool: impairTool),
            Scenario(
                name: "loss and delay",
                fault:
                    "relief's link loses 30 % of frames and delays the rest 100 ms +- 50 ms, each way, for \(lossSeconds) s; then it is black-holed too",
                twin: .lossy(seconds: lossSeconds)
            ) { run, result in
                let (captain, officer, relief) = (run.host("captain"), run.host("first-officer"), run.host("relief"))
                let tesat = try await run.add(captain, "leg=1 waypoint=TESAT")
                let relay = try await run.network.impair(relief, tool: impairTool, loss: 30, delay: 100, jitter: 50)
                let impairedAt = ContinuousClock.now
                // A weather chart attached at once: it must reach relief through the lossy link, whole.
                let chart = "\(run.directory)/weather chart.pdf"
                try Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 10) }).write(
                    to: URL(fileURLWithPath: chart)
                )
                try await run.attach(captain, tesat, chart)
                // Everyone goes on typing through it, every 5 s.
                try await run.typeEveryFiveSeconds(from: 2, until: impairedAt + .seconds(lossSeconds))
                // Teardowns are reported, not failed (a measurement, in Benchmarks/README.md): at
                // 30 % loss a link may still go silent for longer than it is kept; what the suite
                // checks is that it heals and loses nothing.
                let left = run.departures(since: impairedAt).map(\.line)
                let departures = left.map { $0.line["reason"] ?? "?" }
                for (detail, count) in Dictionary(grouping: left.map { $0.line["detail"] ?? "?" }, by: { $0 })
                    .mapValues(\.count).sorted(by: { $0.key < $1.key })
                {
                    print("   teardown x\(count): \(detail)")
                }
                // What the keepalive saw at each timeout, where navlog-sync logs it
                // (NAVLOG_LOG_LEVEL=debug in navlog-hosts' environment).
                for host in run.hosts {
                    for line in host.navlog.timedLines
                    where line.at >= impairedAt && line.line.raw.contains("sent nothing for") {
                        // (The line without its timestamp: the error is in its metadata.)
                        print(
                            "   \(host.name), \(String(format: "%.0f", (line.at - impairedAt).seconds)) s: \(line.line.raw.drop { $0 != " " }.dropFirst())"
                        )
                    }
                }
                let minutes = (ContinuousClock.now - impairedAt).seconds / 60
                result.teardownsPerMinute = Double(departures.count) / minutes
                // When, too: a path's first stalls teach its links how long to wait.
                let when = left.map { String(format: "%.0f", ($0.at - impairedAt).seconds) }.joined(separator: ", ")
                result.reasons =
                    departures.isEmpty
                    ? ["no teardown in \(lossSeconds) s"]
                    : [
                        "\(departures.count) teardowns in \(lossSeconds) s, \(String(format: "%.1f", Double(departures.count) / minutes)) a minute (\(Set(departures).sorted().joined(separator: ", ")); at \(when) s)"
                    ]
                // Then the lossy link goes dead (once every link is up): detected once the peer's
                // host has been unheard for the keepalive's ceiling.
                for host in run.hosts {
                    try await run.waitActive(host, Set(Scenario.hostNames).subtracting([host.name]))
                }
                let cutAt = ContinuousClock.now
                try await blackHole(relief, "-I")
                let (detection, reasons) = try await run.waitLeft(relief, seenBy: [captain, officer], since: cutAt)
                result.detectionMilliseconds = detection
                result.detectionReasons = reasons.sorted()
                result.reasons += reasons.sorted().map { "then black-holed: \($0)" }
                let healedAt = ContinuousClock.now
                result.faultMilliseconds = (healedAt - cutAt).seconds * 1000
                try await blackHole(relief, "-D")
                try await run.network.clearImpairment(of: relief, relay: relay)
                for host in run.hosts {
                    try await run.waitActive(host, Set(Scenario.hostNames).subtracting([host.name]))
                }
                result.rejoinMilliseconds = (ContinuousClock.now - healedAt).seconds * 1000
                // The chart, by now or once healed: checked against the hash captain signed.
                let arrived = try await waitFor(
                    "relief to receive the attached chart",
                    at: relief,
                    timeout: .seconds(60)
                ) { lines in
                    lines.first {
                        $0.line.event == "attachment_done" && $0.line["direction"] == "in" && $0.line["error"] == nil
                    }
                }
                result.reasons.append(
                    String(
                        format: "a 1 MiB attachment reached relief from %@ %.0f s after it was attached",
                        arrived.line["peer"] ?? "?",
                        (arrived.at - impairedAt).seconds
                    )
                )
            },
            isolate(
                "frozen",
                "relief's navlog-sync gets SIGSTOP, then SIGCONT",
                reliefRuns: false,
                twin: .frozen,
                cut: { _, relief in kill(relief.navlog.process.pid, SIGSTOP) },
                heal: { _, relief in kill(relief.navlog.process.pid, SIGCONT) }
            ),
            isolate(
                "killed",
                "relief's navlog-sync gets SIGKILL, then starts again from its database",
                reliefRuns: false,
                twin: .killed,
                cut: { _, relief in kill(relief.navlog.process.pid, SIGKILL) },
                heal: { run, relief in try await run.start(relief) }
            ),
            Scenario(name: "avahi restart", fault: "relief's avahi-daemon is stopped and started again") {
                run,
                result in
                let (captain, officer, relief) = (run.host("captain"), run.host("first-officer"), run.host("relief"))
                try await run.add(relief, "leg=1 waypoint=TESAT")
                let restartedAt = ContinuousClock.now
                // Stopped, and waited for: pidwait on a copy of the pid file the daemon removes
                // (it finds nothing, status 1, if the daemon is already gone).
                try await relief.exec(
                    "sh",
                    "-c",
                    """
                    cp /run/avahi-daemon/pid /run/avahi-stopped.pid && avahi-daemon -k &&
                    { pidwait -F /run/avahi-stopped.pid || ! kill -0 "$(cat /run/avahi-stopped.pid)"; }
                    """
                )
                try await relief.exec("avahi-daemon", "-D", "--no-chroot")
                // The links do not depend on the daemon: nobody leaves. The advert comes back,
                // as a browser started now at captain reports.
                let browse = try BackgroundProcess(
                    "/usr/bin/nsenter",
                    captain.inside(["avahi-browse", "--parsable", "--resolve", run.serviceType]),
                    pipes: true
                )
                defer { browse.stop() }
                let seen = try? await withDeadline(.seconds(20)) {
                    for await line in browse.lines! where line.hasPrefix("=;") && line.contains("name=relief") {
                        return true
                    }
                    return false
                }
                guard seen == true else {
                    throw HostSuiteError("relief's advert was not seen again from captain within 20 s")
                }
                result.rejoinMilliseconds = (ContinuousClock.now - restartedAt).seconds * 1000
                try await run.add(relief, "leg=2 waypoint=NIPAS")
                try await run.add(officer, "leg=3 waypoint=ARNEM")
                let falseTeardowns = run.hosts.map { run.departures(at: $0, since: restartedAt) }.reduce(0, +)
                guard falseTeardowns == 0 else {
                    throw HostSuiteError("\(falseTeardowns) links were torn down by an avahi-daemon restart")
                }
                result.reasons = ["no teardown"]
            },
            Scenario(
                name: "rogue adverts",
                fault:
                    "a fourth host publishes two adverts per peer, each copying its ID with the greatest incarnation and pointing at a TCP sink; then every navlog-sync is killed and started again",
                bystanders: ["rogue"],
                twin: .rogueAdverts
            ) { run, result in
                let (captain, rogue) = (run.host("captain"), run.network.host("rogue"))
                try await run.add(captain, "leg=1 waypoint=TESAT")
                // The sink accepts TCP and never answers; the adverts go up before the restart,
                // so every host sees them before the real ones.
                let sinkPort = 7999
                var rogues = [
                    try BackgroundProcess(
                        "/usr/bin/nsenter",
                        rogue.inside([
                            "python3", "-c",
                            "import socket,time\ns=socket.socket()\ns.bind(('0.0.0.0',\(sinkPort)))\ns.listen(1024)\ntime.sleep(3600)",
                        ])
                    )
                ]
                defer { rogues.forEach { $0.stop() } }
                let ids = run.peerIDs()
                for (name, id) in ids.sorted(by: { $0.key < $1.key }) {
                    for copy in 1...2 {
                        rogues.append(
                            try BackgroundProcess(
                                "/usr/bin/nsenter",
                                rogue.inside([
                                    "avahi-publish", "-s", "\(name) \(copy)", run.serviceType, "\(sinkPort)", "v=2",
                                    "id=\(id)", "inc=\(UInt64.max)", "name=\(name)",
                                ])
                            )
                        )
                    }
                }
                try await waitForAdverts(of: run.serviceType, atPort: sinkPort, count: 2 * ids.count, seenFrom: captain)
                let restartedAt = ContinuousClock.now
                for host in run.hosts { kill(host.navlog.process.pid, SIGKILL) }
                for host in run.hosts {
                    _ = try? await host.navlog.first("the end of the killed run") { _ in nil as Bool? }
                }
                for host in run.hosts { try await run.start(host) }
                for host in run.hosts {
                    try await run.waitActive(host, Set(Scenario.hostNames).subtracting([host.name]))
                }
                result.rejoinMilliseconds = (ContinuousClock.now - restartedAt).seconds * 1000
                let sinkFailures = run.hosts.flatMap { $0.navlog.lines }.filter {
                    $0.event == "error" && ($0["message"] ?? "").contains(":\(sinkPort) failed")
                }
                result.reasons = ["\(sinkFailures.count) dials failed at the sink"]
                try await run.add(run.host("relief"), "leg=2 waypoint=NIPAS")
            },
            Scenario(
                name: "renumbered",
                fault:
                    "relief's IPv4 address changes from 198.18.0.3 to 198.18.0.13 while it runs (IPv6 off on every host)",
                ipv6: false,
                twin: .renumbered
            ) { run, result in
                let (captain, officer, relief) = (run.host("captain"), run.host("first-officer"), run.host("relief"))
                try await run.add(relief, "leg=1 waypoint=TESAT")
                let changedAt = ContinuousClock.now
                try await renumber(relief, to: "198.18.0.13")
                try await movedHostIsFound(run, &result, relief, seenBy: [captain, officer], since: changedAt)
                try await run.add(captain, "leg=3 waypoint=ARNEM")
            },
            Scenario(
                name: "interface renumbered",
                fault: "relief's eth0 goes down, loses its addresses and comes back up as 198.18.0.23",
                twin: .renumbered
            ) { run, result in
                let (captain, officer, relief) = (run.host("captain"), run.host("first-officer"), run.host("relief"))
                try await run.add(relief, "leg=1 waypoint=TESAT")
                let changedAt = ContinuousClock.now
                try await relief.exec("ip", "link", "set", "eth0", "down")
                try await relief.exec("ip", "addr", "flush", "dev", "eth0")
                try await relief.exec("ip", "addr", "add", "198.18.0.23/24", "dev", "eth0")
                try await relief.exec("ip", "link", "set", "eth0", "up")
                try await movedHostIsFound(run, &result, relief, seenBy: [captain, officer], since: changedAt)
                try await run.add(officer, "leg=3 waypoint=ARNEM")
            },
            Scenario(
                name: "static peer moved",
                fault:
                    "captain dials relief by name alone (--peer relief.crew:7400, from its /etc/hosts; no DNS-SD); relief's address changes from 198.18.0.2 to 198.18.0.12, and the name with it",
                ipv6: false,
                hostNames: ["captain", "relief"],
                navlogArguments: ["captain": ["--peer", "relief.crew:7400"], "relief": ["--port", "7400"]],
                prepare: { run in
                    try await run.name("relief.crew", address: run.host("relief").address, at: run.host("captain"))
                }
            ) { run, result in
                let (captain, relief) = (run.host("captain"), run.host("relief"))
                try await run.add(relief, "leg=1 waypoint=TESAT")
                let changedAt = ContinuousClock.now
                try await renumber(relief, to: "198.18.0.12")
                // As a DNS server would be told: captain's next look-up finds the new address.
                try await run.name("relief.crew", address: "198.18.0.12", at: captain)
                try await movedHostIsFound(run, &result, relief, seenBy: [captain], since: changedAt)
                try await run.add(captain, "leg=3 waypoint=ARNEM")
            },
            Scenario(
                name: "second network",
                fault:
                    "every host gets a second link, to a second bridge (198.19.0.N); once captain and first-officer see relief's advert there, relief's first link goes down for good"
            ) { run, result in
                let (captain, officer, relief) = (run.host("captain"), run.host("first-officer"), run.host("relief"))
                try await run.network.addSecondNetwork()
                for observer in [captain, officer] {
                    try await waitForAdvert(of: run.serviceType, at: "198.19.0.3", seenFrom: observer)
                }
                try await run.add(relief, "leg=1 waypoint=TESAT")
                let cutAt = ContinuousClock.now
                try await run.network.setLink(of: relief, up: false)
                try await movedHostIsFound(run, &result, relief, seenBy: [captain, officer], since: cutAt)
                try await run.add(officer, "leg=3 waypoint=ARNEM")
            },
            Scenario(
                name: "keyless flood",
                fault:
                    "a fourth host without the key holds 64 silent connections open at each host's port, opening another as each is closed; meanwhile relief's navlog-sync is killed and started again, and everyone edits",
                bystanders: ["flooder"]
            ) { run, result in
                let (captain, officer, relief, flooder) = (
                    run.host("captain"), run.host("first-officer"), run.host("relief"), run.network.host("flooder")
                )
                let targets = try run.hosts.map { host -> String in
                    guard let port = host.navlog.lines.first(where: { $0.event == "listening" })?["port"] else {
                        throw HostSuiteError("\(host.name) never said which port it listens on")
                    }
                    return "\(host.address):\(port)"
                }
                let flood = try BackgroundProcess(
                    "/usr/bin/nsenter",
                    flooder.inside(["python3", "-c", floodScript] + targets),
                    pipes: true
                )
                defer { flood.stop() }
                // Under way: a few hundred connections in.
                let opened = try await withDeadline(.seconds(20)) { () async -> Int? in
                    for await line in flood.lines! { if let count = Int(line), count >= 500 { return count } }
                    return nil
                }
                guard opened != nil else { throw HostSuiteError("the flood did not get going") }
                try await run.add(captain, "leg=1 waypoint=TESAT")
                kill(relief.navlog.process.pid, SIGKILL)
                _ = try? await relief.navlog.first("the end of the killed run") { _ in nil as Bool? }
                let restartedAt = ContinuousClock.now
                try await run.start(relief)
                result.rejoinMilliseconds = try await run.waitJoined(
                    relief,
                    seenBy: [captain, officer],
                    since: restartedAt
                )
                try await run.waitActive(relief, ["captain", "first-officer"])
                try await run.add(officer, "leg=2 waypoint=NIPAS")
                try await run.add(relief, "leg=3 waypoint=ARNEM")
                let flooded = run.hosts.map { $0.navlog.lines.filter { $0.event == "error" }.count }.reduce(0, +)
                result.reasons = ["\(flooded) failure lines printed in all"]
            },
            Scenario(
                name: "eight hosts",
                fault:
                    "eight hosts join; then two of them are cut off from the other six (iptables), everyone edits, and the rules go",
                hostNames: Scenario.hostNames + ["purser", "navigator", "engineer", "observer", "dispatcher"],
                twin: .eightHosts
            ) { run, result in
                let cut = [run.host("observer"), run.host("dispatcher")]
                let rest = run.hosts.filter { host in !cut.contains { $0 === host } }
                let shared = try await run.add(rest[0], "leg=1 waypoint=TESAT fuel=12400")
                let partition = try await Partition(cutting: cut, from: rest)
                let cutAt = ContinuousClock.now
                try await partition.apply("-I")
                var detection = 0.0
                var reasons: Set<String> = []
                for host in cut {
                    let (seen, why) = try await run.waitLeft(host, seenBy: rest, since: cutAt)
                    detection = max(detection, seen)
                    reasons.formUnion(why)
                }
                result.detectionMilliseconds = detection
                result.detectionReasons = reasons.sorted()
                result.reasons = ["8 hosts joined in \(Int(run.joinedMilliseconds)) ms"] + reasons.sorted()
                for host in cut { _ = try await run.waitLeft(rest[0], seenBy: [host], since: cutAt) }
                // Both sides go on: the six among themselves, the two together.
                try await run.edit(cut[0], shared, "actual=10:07")
                try await run.add(cut[1], "leg=2 waypoint=NIPAS")
                try await run.edit(rest[3], shared, "remarks=\"moderate chop\"")
                try await run.add(rest[5], "leg=3 waypoint=ARNEM")
                let healedAt = ContinuousClock.now
                result.faultMilliseconds = (healedAt - cutAt).seconds * 1000
                try await partition.apply("-D")
                var rejoin = 0.0
                for host in cut { rejoin = max(rejoin, try await run.waitJoined(host, seenBy: rest, since: healedAt)) }
                result.rejoinMilliseconds = rejoin
            },
            Scenario(
                name: "partition",
                fault:
                    "captain cut off from first-officer and relief, who stay together (iptables on captain), then the rules go",
                twin: .partition
            ) { run, result in
                let (captain, officer, relief) = (run.host("captain"), run.host("first-officer"), run.host("relief"))
                let shared = try await run.add(officer, "leg=1 waypoint=TESAT fuel=12400")
                let partition = try await Partition(cutting: [captain], from: [officer, relief])
                let cutAt = ContinuousClock.now
                try await partition.apply("-I")
                (result.detectionMilliseconds, result.reasonSet) = try await run.waitLeft(
                    captain,
                    seenBy: [officer, relief],
                    since: cutAt
                )
                result.detectionReasons = result.reasons
                _ = try await run.waitLeft(officer, seenBy: [captain], since: cutAt)
                // Both sides go on: the two stay connected and edit; captain edits alone.
                try await run.edit(captain, shared, "actual=10:07")
                try await run.add(captain, "leg=2 waypoint=NIPAS")
                try await run.edit(relief, shared, "remarks=\"moderate chop\"")
                try await run.add(officer, "leg=3 waypoint=ARNEM")
                guard run.departures(at: officer, since: cutAt) == 1, run.departures(at: relief, since: cutAt) == 1
                else {
                    throw HostSuiteError(
                        "first-officer and relief lost each other in a partition that kept them together"
                    )
                }
                let healedAt = ContinuousClock.now
                result.faultMilliseconds = (healedAt - cutAt).seconds * 1000
                try await partition.apply("-D")
                result.rejoinMilliseconds = try await run.waitJoined(
                    captain,
                    seenBy: [officer, relief],
                    since: healedAt
                )
            },
        ]
    }

    /// Relief cut off from the other two and back. Captain and first-officer edit meanwhile, and
    /// so does relief when it `reliefRuns` through the fault (a network fault, not a frozen or
    /// killed process); relief's last entry is stored just before the fault.
    /// Relief's link through net-impair from the start, forwarding everything; the fault holds
    /// every frame to and from relief (SIGUSR1), nothing lost, and the heal lets them all go at
    /// once (SIGUSR2): what relief's peers sent it, and it them, arrives in a burst at sockets
    /// the keepalive has closed by then.
    static func held(impairTool: String) -> Scenario {
        let relay = NIOLockedValueBox<Relay?>(nil)
        @Sendable func signal(_ number: Int32, awaiting prefix: String) async throws -> String {
            try await relay.withLockedValue { $0! }.signal(number, awaiting: prefix)
        }
        var scenario = isolate(
            "hold",
            "every frame to and from relief is held (net-impair, nothing lost), then all let go at once",
            reliefRuns: true,
            twin: .hold,
            cut: { _, _ in _ = try await signal(SIGUSR1, awaiting: "net-impair: holding") },
            heal: { _, _ in print("   " + (try await signal(SIGUSR2, awaiting: "net-impair: released"))) }
        )
        scenario.prepare = { run in
            let process = try await run.network.impair(
                run.host("relief"),
                tool: impairTool,
                loss: 0,
                delay: 0,
                jitter: 0,
                pipes: true
            )
            relay.withLockedValue { $0 = Relay(process) }
        }
        return scenario
    }

    /// Only the path between relief and captain loses and delays, as the lossy link does, for
    /// `seconds`, everyone typing every 5 s; first-officer's paths to both stay clean, and no
    /// link of theirs may be torn down. The lossy path's own teardowns are reported.
    static func lossyPath(seconds: Int, impairTool: String) -> Scenario {
        Scenario(
            name: "lossy path",
            fault:
                "the path between relief and captain alone loses 30 % of frames and delays the rest 100 ms +- 50 ms, each way, for \(seconds) s",
            twin: .lossyPath(seconds: seconds)
        ) { run, result in
            let (captain, officer, relief) = (run.host("captain"), run.host("first-officer"), run.host("relief"))
            let relay = try await run.network.impair(
                relief,
                tool: impairTool,
                loss: 30,
                delay: 100,
                jitter: 50,
                peer: captain,
                pipes: true
            )
            let impairedAt = ContinuousClock.now
            try await run.typeEveryFiveSeconds(from: 1, until: impairedAt + .seconds(seconds))
            let left = run.departures(since: impairedAt).map {
                (observer: $0.host.name, peer: $0.line.line["peer"] ?? "?", reason: $0.line.line["reason"] ?? "?")
            }
            let others = left.filter { $0.observer == officer.name || $0.peer == officer.name }
            let minutes = (ContinuousClock.now - impairedAt).seconds / 60
            result.faultMilliseconds = (ContinuousClock.now - impairedAt).seconds * 1000
            result.teardownsPerMinute = Double(left.count - others.count) / minutes
            result.otherPathTeardowns = others.count
            result.reasons = [
                "\(left.count - others.count) teardowns between relief and captain in \(seconds) s, \(others.count) on first-officer's paths"
            ]
            guard others.isEmpty else {
                throw HostSuiteError(
                    "links on paths the loss does not cross were torn down: \(others.map { "\($0.observer) saw \($0.peer) leave (\($0.reason))" })"
                )
            }
            let healedAt = ContinuousClock.now
            try await run.network.clearImpairment(of: relief, relay: relay)
            for host in run.hosts {
                try await run.waitActive(host, Set(Scenario.hostNames).subtracting([host.name]))
            }
            result.rejoinMilliseconds = (ContinuousClock.now - healedAt).seconds * 1000
            // What the relay did, as it said when it stopped: the path lost frames, the others none.
            var said = ""
            for await line in relay.lines! where line.hasPrefix("net-impair: forwarded") { said = line }
            let words = said.split(separator: " ")
            let dropped = words.firstIndex(of: "dropped").flatMap { Int(words[$0 + 1].filter(\.isNumber)) } ?? 0
            guard dropped > 0 else {
                throw HostSuiteError("the relay lost nothing on the path (it said: \"\(said)\")")
            }
            result.reasons.append(String(said.dropFirst("net-impair: ".count)))
        }
    }

    /// A net-impair relay told what to do by signals, and what it says back, read in order.
    actor Relay {
        let process: BackgroundProcess
        private var said: AsyncStream<String>.Iterator

        init(_ process: BackgroundProcess) {
            self.process = process
            said = process.lines!.makeAsyncIterator()
        }

        /// Sends the relay `number` and returns the first line it prints that starts with `prefix`.
        func signal(_ number: Int32, awaiting prefix: String) async throws -> String {
            kill(process.pid, number)
            var iterator = said
            defer { said = iterator }
            while let line = await iterator.next(isolation: self) {
                if line.hasPrefix(prefix) { return line }
            }
            throw HostSuiteError("net-impair ended before it said \"\(prefix)\"")
        }
    }

    static func isolate(
        _ name: String,
        _ fault: String,
        reliefRuns: Bool,
        twin: SimulatedTwin.Fault,
        cut: @escaping @Sendable (ScenarioRun, Host) async throws -> Void,
        heal: @escaping @Sendable (ScenarioRun, Host) async throws -> Void
    ) -> Scenario {
        Scenario(name: name, fault: fault, twin: twin) { run, result in
            let (captain, officer, relief) = (run.host("captain"), run.host("first-officer"), run.host("relief"))
            let shared = try await run.add(captain, "leg=1 waypoint=TESAT fuel=12400")
            let lastWords = try await run.add(relief, "leg=2 waypoint=NIPAS")
            let cutAt = ContinuousClock.now
            try await cut(run, relief)
            (result.detectionMilliseconds, result.reasonSet) = try await run.waitLeft(
                relief,
                seenBy: [captain, officer],
                since: cutAt
            )
            result.detectionReasons = result.reasons
            if reliefRuns {
                _ = try await run.waitLeft(captain, seenBy: [relief], since: cutAt)
                try await run.edit(relief, shared, "remarks=\"light chop\"")
                try await run.add(relief, "leg=3 waypoint=ARNEM")
            }
            try await run.edit(captain, shared, "actual=10:07")
            try await run.edit(officer, lastWords, "fuel=11150")
            try await run.add(officer, "leg=4 waypoint=VEPOK")
            let healedAt = ContinuousClock.now
            result.faultMilliseconds = (healedAt - cutAt).seconds * 1000
            try await heal(run, relief)
            result.rejoinMilliseconds = try await run.waitJoined(relief, seenBy: [captain, officer], since: healedAt)
            try await run.add(relief, "leg=5 waypoint=ELNAR")
        }
    }
}

extension ScenarioResult {
    var reasonSet: Set<String> {
        get { Set(reasons) }
        set { reasons = newValue.sorted() }
    }
}

/// Drops everything in and out of a host's eth0 (`-I`), or removes those rules (`-D`); IPv4
/// and IPv6 both, since peers also find each other at their IPv6 link-local addresses.
func blackHole(_ host: Host, _ action: String) async throws {
    for tool in ["iptables", "ip6tables"] {
        try await host.exec(tool, action, "INPUT", "-i", "eth0", "-j", "DROP")
        try await host.exec(tool, action, "OUTPUT", "-o", "eth0", "-j", "DROP")
    }
}

/// Drops what a host sends out of its eth0 (`-I`), and not what it receives, or removes that
/// rule (`-D`); IPv4 and IPv6 both.
func dropOutgoing(_ host: Host, _ action: String) async throws {
    for tool in ["iptables", "ip6tables"] {
        try await host.exec(tool, action, "OUTPUT", "-o", "eth0", "-j", "DROP")
    }
}

/// Drops everything between `host` and `others` (`-I`), or removes those rules (`-D`), at
/// their IPv4 and IPv6 link-local addresses.
/// iptables rules on each of `cut` that drop what it exchanges with `others` (IPv4 and their
/// IPv6 link-local addresses), found first, so that ``apply(_:)`` puts them in (`-I`) or takes
/// them out (`-D`) at once: one command per cut host, the hosts together. (One command a rule,
/// host after host, took the eight hosts' cut a second to finish under load, and the detection
/// measured from its start a second more.)
struct Partition {
    let cut: [Host]
    private let rules: [String]

    init(cutting cut: [Host], from others: [Host]) async throws {
        self.cut = cut
        var rules: [String] = []
        for other in others {
            let linkLocal = try await other.linkLocalAddress()
            rules += [
                "iptables ACTION INPUT -s \(other.address) -j DROP",
                "iptables ACTION OUTPUT -d \(other.address) -j DROP",
                "ip6tables ACTION INPUT -s \(linkLocal) -j DROP", "ip6tables ACTION OUTPUT -d \(linkLocal) -j DROP",
            ]
        }
        self.rules = rules
    }

    func apply(_ action: String) async throws {
        let script = rules.map { $0.replacingOccurrences(of: "ACTION", with: action) }.joined(separator: " && ")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for host in cut { group.addTask { _ = try await host.exec("sh", "-c", script) } }
            try await group.waitForAll()
        }
    }
}

/// Waits until `count` adverts of `serviceType` at `port` are resolved from `host` (a browser
/// left running there, its lines read as they come), for at most 20 s.
/// Waits until `host`'s Avahi has resolved an advert of `serviceType` at `address`.
func waitForAdvert(of serviceType: String, at address: String, seenFrom host: Host) async throws {
    let seen = try await resolvedAdverts(of: serviceType, seenFrom: host) { $0.contains { $0[7] == address } }
    guard seen.contains(where: { $0[7] == address }) else {
        throw HostSuiteError("\(host.name) saw no advert of \(serviceType) at \(address) within 20 s")
    }
}

/// Waits until `host`'s Avahi has resolved `count` adverts of `serviceType` pointing at `port`.
func waitForAdverts(of serviceType: String, atPort port: Int, count: Int, seenFrom host: Host) async throws {
    let names: @Sendable ([[String]]) -> Set<String> = { Set($0.filter { $0[8] == "\(port)" }.map { $0[3] }) }
    let seen = try await resolvedAdverts(of: serviceType, seenFrom: host) { names($0).count >= count }
    guard names(seen).count >= count else {
        throw HostSuiteError(
            "only \(names(seen).count) of \(count) adverts at port \(port) were seen from \(host.name) within 20 s"
        )
    }
}

/// Runs avahi-browse in `host` until the resolved adverts seen satisfy `done`, or for 20 s, and
/// returns them: avahi-browse's parsable fields, "=" then interface, protocol, name, type,
/// domain, host name, address, port, TXT.
private func resolvedAdverts(
    of serviceType: String,
    seenFrom host: Host,
    until done: @escaping @Sendable ([[String]]) -> Bool
) async throws -> [[String]] {
    let browse = try BackgroundProcess(
        "/usr/bin/nsenter",
        host.inside(["avahi-browse", "--parsable", "--resolve", "--no-db-lookup", serviceType]),
        pipes: true
    )
    defer { browse.stop() }
    let resolved = NIOLockedValueBox<[[String]]>([])
    _ = try? await withDeadline(.seconds(20)) { () async -> Bool in
        for await line in browse.lines! {
            let fields = line.split(separator: ";", omittingEmptySubsequences: false).map(String.init)
            guard line.hasPrefix("=;"), fields.count > 8 else { continue }
            if done(
                resolved.withLockedValue {
                    $0.append(fields)
                    return $0
                }
            ) {
                return true
            }
        }
        return false
    }
    return resolved.withLockedValue { $0 }
}

/// Holds 64 silent TCP connections open at each `HOST:PORT` argument, opening another as each
/// is closed; prints how many it has opened, once a second.
let floodScript = """
    import socket, sys, threading, time
    targets = [(t.rsplit(':', 1)[0], int(t.rsplit(':', 1)[1])) for t in sys.argv[1:]]
    opened = [0]
    def hold(target):
        while True:
            try:
                s = socket.create_connection(target, timeout=5)
                opened[0] += 1
                s.settimeout(None)
                while s.recv(4096):
                    pass
                s.close()
            except OSError:
                time.sleep(0.05)
    for target in targets:
        for _ in range(64):
            threading.Thread(target=hold, args=(target,), daemon=True).start()
    while True:
        time.sleep(1)
        print(opened[0], flush=True)
    """

/// After `moved` changed address at `since`: an entry it types then reaches every observer (the
/// rejoin time is until the last has it, from the change). Its links may be timed out and
/// redialled (detection and reasons are reported then) or replaced by a link the moved host
/// dialled before the old one timed out (no departure at all).
/// Changes `host`'s IPv4 address on eth0 to `address`: the old one goes first (deleting a
/// primary address takes its secondaries too), as when a DHCP lease ends and the next one
/// brings another.
func renumber(_ host: Host, to address: String) async throws {
    try await host.exec("ip", "addr", "del", "\(host.address)/24", "dev", "eth0")
    try await host.exec("ip", "addr", "add", "\(address)/24", "dev", "eth0")
}

func movedHostIsFound(
    _ run: ScenarioRun,
    _ result: inout ScenarioResult,
    _ moved: Host,
    seenBy observers: [Host],
    since: ContinuousClock.Instant
) async throws {
    let probe = try await run.add(moved, "leg=2 waypoint=MOVED")
    result.rejoinMilliseconds = try await run.waitApplied(probe, at: observers, since: since)
    let left = observers.flatMap {
        $0.navlog.timedLines.filter { $0.at >= since && $0.line.event == "peer_left" && $0.line["peer"] == moved.name }
    }
    result.detectionMilliseconds = left.map { ($0.at - since).seconds * 1000 }.max()
    result.reasons =
        left.isEmpty ? ["no departure: links replaced"] : Set(left.compactMap { $0.line["reason"] }).sorted()
    result.detectionReasons = result.reasons
}
