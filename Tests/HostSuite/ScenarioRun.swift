import Foundation
import Glibc
import MultipeerCore
import MultipeerTestSupport

/// One scenario's hosts, their navlog-sync processes and what was typed, with the waits and
/// checks every scenario uses. Times are measured from the moment a fault or heal was applied
/// to the moment the event's line was read from the process.
final class ScenarioRun {
    let network: HostNetwork
    let binary: String
    let directory: String
    let keyFile: String
    let serviceType = "_nlh\(String(UInt16.random(in: 0...UInt16.max), radix: 16))._tcp"
    /// Every entry typed anywhere, by id.
    private(set) var typed: Set<String> = []

    /// - Parameters:
    ///   - hostNames: The hosts that run navlog-sync.
    ///   - bystanders: Hosts on the same bridge that run none (a rogue, say).
    ///   - navlogArguments: Arguments for navlog-sync beyond the usual, by host name.
    init(
        name: String,
        hostNames: [String],
        bystanders: [String] = [],
        ipv6: Bool = true,
        navlogArguments: [String: [String]] = [:],
        binary: String,
        root: String
    ) async throws {
        self.binary = binary
        self.navlogArguments = navlogArguments
        directory = "\(root)/\(name.replacingOccurrences(of: " ", with: "-"))"
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        keyFile = directory + "/group.key"
        try await run(binary, ["keygen", "--out", keyFile])
        network = try await HostNetwork(names: hostNames + bystanders, ipv6: ipv6)
        navlogHosts = Set(hostNames)
    }

    private let navlogHosts: Set<String>
    private let navlogArguments: [String: [String]]

    /// The hosts that run navlog-sync.
    var hosts: [Host] { network.hosts.filter { navlogHosts.contains($0.name) } }
    func host(_ name: String) -> Host { network.host(name) }
    func database(of host: Host) -> String { "\(directory)/\(host.name).db" }

    /// Starts navlog-sync at `host`; again, once the run before has ended, with what its
    /// database holds (a run killed just after storing a version may not have printed it).
    func start(_ host: Host) async throws {
        var stored: [String: NavlogVersion] = [:]
        if host.hasRun {
            _ = await host.navlog.process.waitForExit()
            stored = try NavlogVersion.stored(
                listed: try await run(binary, ["list", "--data", database(of: host), "--json"])
            )
        }
        try host.startNavlog(
            binary: binary,
            arguments: ["--data", database(of: host), "--psk-file", keyFile, "--service", serviceType]
                + navlogArguments[host.name, default: []],
            stored: stored
        )
    }

    /// Makes `name` resolve to `address` inside `host` (its /etc/hosts, a file of this run
    /// mounted over the host's own, rewritten in place so the mount sees each change).
    func name(_ name: String, address: String, at host: Host) async throws {
        let file = "\(directory)/\(host.name).hosts"
        let mounted = FileManager.default.fileExists(atPath: file)
        try "127.0.0.1 localhost\n\(address) \(name)\n".write(toFile: file, atomically: false, encoding: .utf8)
        if !mounted { try await host.exec("mount", "--bind", file, "/etc/hosts") }
    }

    /// How long ``startAll()`` took for every host to have every other active.
    private(set) var joinedMilliseconds = 0.0

    /// Starts every host and waits until each has every other active.
    func startAll() async throws {
        let started = ContinuousClock.now
        for host in hosts { try await start(host) }
        for host in hosts { try await waitActive(host, Set(hosts.map(\.name)).subtracting([host.name])) }
        joinedMilliseconds = (ContinuousClock.now - started).seconds * 1000
    }

    /// Waits until exactly `peers` are active at `host` (by its current run's events).
    func waitActive(_ host: Host, _ peers: Set<String>, timeout: Duration = .seconds(30)) async throws {
        try await waitFor("\(host.name) to have \(peers.sorted()) active", at: host, timeout: timeout) {
            NavlogLine.activePeers($0.map(\.line)) == peers ? true : nil
        }
    }

    /// Types `add FIELDS` at a host and waits until it is stored; returns the entry's id.
    @discardableResult
    func add(_ host: Host, _ fields: String) async throws -> String {
        let line = try await command(host, "add \(fields)")
        guard line.event == "entry_applied", let id = line["id"] else {
            throw HostSuiteError("\(host.name) refused add \(fields): \(line)")
        }
        typed.insert(id)
        return id
    }

    /// Every navlog-sync host adds an entry every 5 s (legs numbered from `leg`) until `end`:
    /// the crew typing through a fault.
    func typeEveryFiveSeconds(from leg: Int, until end: ContinuousClock.Instant) async throws {
        var leg = leg
        while ContinuousClock.now < end {
            for host in hosts {
                try await add(host, "leg=\(leg) waypoint=L\(leg)")
                leg += 1
            }
            try await Task.sleep(for: .seconds(5))
        }
    }

    /// The peer_left lines every navlog-sync host printed since `start`, each with its host.
    func departures(
        since start: ContinuousClock.Instant
    ) -> [(host: Host, line: (line: NavlogLine, at: ContinuousClock.Instant))] {
        hosts.flatMap { host in
            host.navlog.timedLines.filter { $0.at >= start && $0.line.event == "peer_left" }.map { (host, $0) }
        }
    }

    /// Types `attach ID FILE` at a host and waits until the new version is stored.
    func attach(_ host: Host, _ id: String, _ path: String) async throws {
        let line = try await command(host, "attach \(id.prefix(8)) \"\(path)\"")
        guard line.event == "entry_applied" else { throw HostSuiteError("\(host.name) refused attach: \(line)") }
    }

    /// Types `edit ID FIELDS` at a host; an edit of an entry deleted meanwhile is refused, which is fine.
    func edit(_ host: Host, _ id: String, _ fields: String) async throws {
        let line = try await command(host, "edit \(id.prefix(8)) \(fields)")
        guard line.event == "entry_applied" || line["code"] == "unknownEntry" else {
            throw HostSuiteError("\(host.name) refused an edit: \(line)")
        }
    }

    /// Sends a command and returns the host's answer: its next local entry_applied or error.
    private func command(_ host: Host, _ command: String) async throws -> NavlogLine {
        let before = host.navlog.lines.count
        host.navlog.send(command)
        return try await waitFor("\(host.name) to answer \(command)", at: host) { lines in
            lines.dropFirst(before).map(\.line).first {
                ($0.event == "entry_applied" && $0["origin"] == "local") || $0.event == "error"
            }
        }
    }

    /// Waits until each observer reports `peer` gone after `since`; returns the longest
    /// detection time and the reasons given.
    func waitLeft(
        _ peer: Host,
        seenBy observers: [Host],
        since: ContinuousClock.Instant,
        timeout: Duration = .seconds(15)
    ) async throws
        -> (milliseconds: Double, reasons: Set<String>)
    {
        var latest = since
        var reasons: Set<String> = []
        for observer in observers {
            let name = peer.name
            let found = try await waitFor("\(observer.name) to see \(name) leave", at: observer, timeout: timeout) {
                lines in
                lines.first { $0.at >= since && $0.line.event == "peer_left" && $0.line["peer"] == name }
            }
            latest = max(latest, found.at)
            reasons.insert(found.line["reason"] ?? "?")
        }
        return ((latest - since).seconds * 1000, reasons)
    }

    /// Waits until each observer has `peer` active again after `since`; returns the longest wait.
    func waitJoined(
        _ peer: Host,
        seenBy observers: [Host],
        since: ContinuousClock.Instant,
        timeout: Duration = .seconds(30)
    ) async throws -> Double {
        var latest = since
        for observer in observers {
            let name = peer.name
            let found = try await waitFor("\(observer.name) to see \(name) again", at: observer, timeout: timeout) {
                lines in
                lines.first { $0.at >= since && $0.line.event == "peer_joined" && $0.line["peer"] == name }?.at
            }
            latest = max(latest, found)
        }
        return (latest - since).seconds * 1000
    }

    /// Waits until every host holds each entry's winning version (of everything typed
    /// anywhere, in any run), then reads every host's database: identical, and holding every
    /// live winner. Returns the live entries per host.
    func waitConverged(timeout: Duration = .seconds(30)) async throws -> [String: Int] {
        let winners = NavlogVersion.winners(hosts.flatMap(\.history))
        for host in hosts {
            // Earlier runs' lines are all in, then what the database held when the current
            // run started (as new as any of them); the current run's lines come in as `lines`.
            let before = host.history.dropLast().reduce(into: [:]) { $0.merge(NavlogVersion.held(by: $1)) { $1 } }
                .merging(host.navlog.stored) { $1 }
            try await waitFor("\(host.name) to hold every entry's latest version", at: host, timeout: timeout) {
                lines in
                before.merging(NavlogVersion.held(by: lines.map(\.line))) { $1 } == winners ? true : nil
            }
        }
        var logs: [String: String] = [:]
        for host in hosts { logs[host.name] = try await run(binary, ["list", "--data", database(of: host), "--json"]) }
        guard Set(logs.values).count == 1 else {
            throw HostSuiteError(
                "the hosts' logs differ:\n" + logs.map { "\($0.key): \($0.value)" }.joined(separator: "\n")
            )
        }
        let log = logs.values.first!
        for (id, version) in winners where !version.deleted && !log.contains(id) {
            throw HostSuiteError("entry \(id) is missing from every log")
        }
        for id in typed where winners[id] == nil { throw HostSuiteError("entry \(id) was typed but never stored") }
        let count = (try JSONSerialization.jsonObject(with: Data(log.utf8)) as? [Any])?.count ?? -1
        return Dictionary(uniqueKeysWithValues: hosts.map { ($0.name, count) })
    }

    /// Waits until each of `hosts` has applied entry `id` (typed elsewhere); returns the longest
    /// wait from `since`.
    func waitApplied(
        _ id: String,
        at hosts: [Host],
        since: ContinuousClock.Instant,
        timeout: Duration = .seconds(30)
    ) async throws -> Double {
        var latest = since
        for host in hosts {
            let found = try await waitFor("\(host.name) to apply \(id.prefix(8))", at: host, timeout: timeout) {
                lines in
                lines.first { $0.line.event == "entry_applied" && $0.line["id"] == id }?.at
            }
            latest = max(latest, found)
        }
        return (latest - since).seconds * 1000
    }

    /// Each navlog host's peer ID, as the others reported it joining.
    func peerIDs() -> [String: String] {
        var ids: [String: String] = [:]
        for host in hosts {
            for line in host.history.joined() where line.event == "peer_joined" {
                if let name = line["peer"], let id = line["peer_id"] { ids[name] = id }
            }
        }
        return ids
    }

    /// How many times `host` reported a peer leaving since `since` (false teardowns, where none was caused).
    func departures(at host: Host, since: ContinuousClock.Instant) -> Int {
        host.navlog.timedLines.filter { $0.at >= since && $0.line.event == "peer_left" }.count
    }

    func teardown() async { await network.teardown() }
}

/// Waits until `find` returns something for the lines of `host`'s current navlog-sync run,
/// looking again as each line arrives; throws after `timeout`, or if the run's output ends first.
@discardableResult
func waitFor<T: Sendable>(
    _ what: String,
    at host: Host,
    timeout: Duration = .seconds(30),
    _ find: @escaping @Sendable ([(line: NavlogLine, at: ContinuousClock.Instant)]) -> T?
) async throws -> T {
    let run = host.navlog
    do {
        return try await withDeadline(timeout) { try await run.first(what, find) }
    } catch is DeadlineExceeded {
        throw HostSuiteError("timed out after \(timeout) waiting for \(what)")
    }
}
