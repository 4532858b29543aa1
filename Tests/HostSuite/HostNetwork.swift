import Foundation
import Glibc
import MultipeerTestSupport
import NIOConcurrencyHelpers

/// Hosts made of network namespaces on one bridge: each host `NAME` is a namespace with `eth0`
/// (198.18.0.N/24) plugged into `br0` of a bridge namespace, and an agent (scripts/host-agent.sh)
/// holding its own hostname, /run, D-Bus and avahi-daemon. Torn down by ``teardown()``, and
/// by ``HostNetwork/teardownAll()`` on an interrupt; only namespaces made here are touched.
final class HostNetwork: Sendable {
    let bridge: String
    let hosts: [Host]

    /// Every namespace made and not yet removed, for the interrupt handler.
    private static let made = NIOLockedValueBox<[String]>([])
    private static let counter = NIOLockedValueBox(0)

    /// - Parameter ipv6: Whether the hosts have IPv6 (off: IPv4 alone, nothing to fall back on).
    init(names: [String], ipv6: Bool = true) async throws {
        let number = Self.counter.withLockedValue {
            $0 += 1
            return $0
        }
        let tag = "\(getpid())-\(number)"
        bridge = "nlh-bridge-\(tag)"
        try await Self.addNamespace(bridge)
        try await ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        try await ip("-n", bridge, "link", "set", "br0", "up")
        var hosts: [Host] = []
        for (index, name) in names.enumerated() {
            let namespace = "nlh-\(name)-\(tag)"
            try await Self.addNamespace(namespace)
            // Linux's default congestion control, whatever this machine's is (a VM's may be BBR,
            // whose bulk transfers over a lossy link behave otherwise): the hosts are a default
            // Linux's, as the simulated twin's TCP is (docs/SIMULATION.md).
            try await ip(
                "netns",
                "exec",
                namespace,
                "sysctl",
                "-qw",
                "net.ipv4.tcp_congestion_control=\(CongestionControl.hosts)"
            )
            if !ipv6 {
                for scope in ["all", "default"] {
                    try await run(
                        "/usr/bin/ip",
                        ["netns", "exec", namespace, "sysctl", "-qw", "net.ipv6.conf.\(scope).disable_ipv6=1"]
                    )
                }
            }
            try await ip(
                "link",
                "add",
                "eth0",
                "netns",
                namespace,
                "type",
                "veth",
                "peer",
                "name",
                "port\(index)",
                "netns",
                bridge
            )
            try await ip("-n", bridge, "link", "set", "port\(index)", "master", "br0", "up")
            try await ip("-n", namespace, "addr", "add", "198.18.0.\(index + 1)/24", "dev", "eth0")
            try await ip("-n", namespace, "link", "set", "eth0", "up")
            try await ip("-n", namespace, "link", "set", "lo", "up")
            hosts.append(
                try await Host(name: name, namespace: namespace, address: "198.18.0.\(index + 1)", port: "port\(index)")
            )
        }
        self.hosts = hosts
    }

    func host(_ name: String) -> Host { hosts.first { $0.name == name }! }

    /// Gives every host a second link (`eth1`, 198.19.0.N/24) to a second bridge (`br1`): a
    /// second network, as a second Wi-Fi or a wire plugged in.
    func addSecondNetwork() async throws {
        try await ip("-n", bridge, "link", "add", "br1", "type", "bridge")
        try await ip("-n", bridge, "link", "set", "br1", "up")
        for (index, host) in hosts.enumerated() {
            try await ip(
                "link",
                "add",
                "eth1",
                "netns",
                host.namespace,
                "type",
                "veth",
                "peer",
                "name",
                "second\(index)",
                "netns",
                bridge
            )
            try await ip("-n", bridge, "link", "set", "second\(index)", "master", "br1", "up")
            try await ip("-n", host.namespace, "addr", "add", "198.19.0.\(index + 1)/24", "dev", "eth1")
            try await ip("-n", host.namespace, "link", "set", "eth1", "up")
        }
    }

    /// Takes a host's link to the bridge down or up (the cable pulled and put back).
    func setLink(of host: Host, up: Bool) async throws {
        try await ip("-n", bridge, "link", "set", host.port, up ? "up" : "down")
    }

    /// Puts `net-impair` between a host's link and the bridge: each frame, either way, is lost
    /// with `loss` percent, or delayed `delay` +- `jitter` ms (tc netem's job; this kernel has
    /// no netem); with `peer`, only the frames between the two hosts (one path; the host's others
    /// stay clean). Returns the relay, for ``clearImpairment(of:relay:)``; with `pipes`, what it
    /// prints is in its `lines`.
    func impair(
        _ host: Host,
        tool: String,
        loss: Int,
        delay: Int,
        jitter: Int,
        peer: Host? = nil,
        pipes: Bool = false
    ) async throws -> BackgroundProcess {
        var peerAddress: String?
        if let peer { peerAddress = try await macAddress(of: peer) }
        let (relay, bridgeSide) = ("imp-\(host.port)", "impb-\(host.port)")
        try await ip("-n", bridge, "link", "set", host.port, "nomaster")
        try await ip("-n", bridge, "link", "add", relay, "type", "veth", "peer", "name", bridgeSide)
        try await ip("-n", bridge, "link", "set", bridgeSide, "master", "br0", "up")
        try await ip("-n", bridge, "link", "set", relay, "up")
        return try BackgroundProcess(
            "/usr/bin/ip",
            ["netns", "exec", bridge, tool, host.port, relay, "\(loss)", "\(delay)", "\(jitter)"]
                + (peerAddress.map { [$0] } ?? []),
            pipes: pipes
        )
    }

    /// The Ethernet address of a host's link (its eth0).
    func macAddress(of host: Host) async throws -> String {
        let shown = try await run("/usr/bin/ip", ["-n", host.namespace, "-o", "link", "show", "dev", "eth0"])
        let words = shown.split(whereSeparator: \.isWhitespace)
        guard let index = words.firstIndex(of: "link/ether"), index + 1 < words.count else {
            throw HostSuiteError("no Ethernet address in: \(shown)")
        }
        return String(words[index + 1])
    }

    /// Takes the relay out again: the host's link is plugged straight into the bridge.
    func clearImpairment(of host: Host, relay: BackgroundProcess) async throws {
        relay.stop()
        try await ip("-n", bridge, "link", "del", "imp-\(host.port)")
        try await ip("-n", bridge, "link", "set", host.port, "master", "br0")
    }

    /// Stops every process in the hosts and removes the namespaces.
    func teardown() async {
        for host in hosts { host.stop() }
        for namespace in hosts.map(\.namespace) + [bridge] { await Self.removeNamespace(namespace) }
    }

    /// For an interrupt: removes whatever namespaces are left, killing what runs in them.
    static func teardownAll() {
        for namespace in made.withLockedValue({ $0 }) {
            system(
                "pids=$(ip netns pids \(namespace) 2>/dev/null); [ -n \"$pids\" ] && kill -9 $pids; ip netns del \(namespace) 2>/dev/null"
            )
        }
    }

    private static func addNamespace(_ name: String) async throws {
        try await ip("netns", "add", name)
        made.withLockedValue { $0.append(name) }
    }

    private static func removeNamespace(_ name: String) async {
        // Whatever still runs in a namespace made here was started here.
        if let pids = try? await runProcess("/usr/bin/ip", ["netns", "pids", name]) {
            for pid in pids.output.split(whereSeparator: \.isWhitespace).compactMap({ Int32($0) }) {
                kill(pid, SIGKILL)
            }
        }
        _ = try? await runProcess("/usr/bin/ip", ["netns", "del", name])
        made.withLockedValue { $0.removeAll { $0 == name } }
    }
}

/// The congestion control the hosts run: CUBIC, Linux's default. A namespace may choose only
/// among the machine's allowed ones (net.ipv4.tcp_allowed_congestion_control); where CUBIC is
/// not among them, ``allow()`` adds it while the suite runs and ``restore()`` puts the list back.
enum CongestionControl {
    static let hosts = "cubic"
    private static let allowed = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
    /// The list as it was, where the suite changed it.
    private static let before = NIOLockedValueBox<String?>(nil)

    static func allow() throws {
        let list = try String(contentsOfFile: allowed, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !list.split(separator: " ").contains(Substring(hosts)) else { return }
        before.withLockedValue { $0 = list }
        try "\(list) \(hosts)\n".write(toFile: allowed, atomically: false, encoding: .utf8)
    }

    static func restore() {
        guard let list = before.withLockedValue({ $0 }) else { return }
        try? "\(list)\n".write(toFile: allowed, atomically: false, encoding: .utf8)
        before.withLockedValue { $0 = nil }
    }
}

/// Runs `ip` with these arguments; throws with its output if it fails.
func ip(_ arguments: String...) async throws {
    try await run("/usr/bin/ip", arguments)
}

/// Runs a command to completion; throws with its output if it fails.
@discardableResult
func run(_ path: String, _ arguments: [String]) async throws -> String {
    let result = try await runProcess(path, arguments)
    guard result.status == 0 else {
        throw HostSuiteError("\(path) \(arguments.joined(separator: " ")) failed (\(result.status)): \(result.output)")
    }
    return result.output
}

struct HostSuiteError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One namespace host: its agent, and the navlog-sync it runs (the current run, and the runs
/// before a restart, whose events still count).
final class Host: Sendable {
    let name: String
    let namespace: String
    let address: String
    /// Its link's port on the bridge.
    let port: String
    private let agent: BackgroundProcess
    private let agentPID: Int32
    private let runs = NIOLockedValueBox<[NavlogRun]>([])

    /// The agent script, found from this executable's place in .build.
    static let agentScript =
        ProcessInfo.processInfo.environment["NAVLOG_HOSTS_AGENT"]
        ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/host-agent.sh").path

    init(name: String, namespace: String, address: String, port: String) async throws {
        self.name = name
        self.namespace = namespace
        self.address = address
        self.port = port
        agent = try BackgroundProcess(
            "/usr/bin/ip",
            [
                "netns", "exec", namespace, "unshare", "--mount", "--uts", "--propagation", "private", Self.agentScript,
                name,
            ],
            pipes: true
        )
        var pid: Int32?
        for await line in agent.lines! {
            if line.hasPrefix("ready "), let ready = Int32(line.dropFirst(6)) {
                pid = ready
                break
            }
        }
        guard let pid else { throw HostSuiteError("host \(name) did not start its daemons") }
        agentPID = pid
    }

    /// The command line that runs a program inside this host.
    func inside(_ arguments: [String]) -> [String] {
        ["-t", "\(agentPID)", "-m", "-u", "-n", "--"] + arguments
    }

    /// Runs a command inside the host to completion; throws if it fails.
    @discardableResult
    func exec(_ arguments: String...) async throws -> String {
        try await run("/usr/bin/nsenter", inside(arguments))
    }

    /// Runs a command inside the host to completion, whatever its exit status.
    func attempt(_ arguments: String...) async throws -> ProcessResult {
        try await runProcess("/usr/bin/nsenter", inside(arguments))
    }

    /// The IPv6 link-local address of eth0 (peers find each other there too).
    func linkLocalAddress() async throws -> String {
        let output = try await exec("ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link")
        guard
            let address = output.split(separator: " ").first(where: { $0.hasPrefix("fe80:") })?.split(separator: "/")
                .first
        else {
            throw HostSuiteError("\(name) has no IPv6 link-local address: \(output)")
        }
        return String(address)
    }

    /// Starts navlog-sync here (again, after a stop or a kill, when `stored` is what its
    /// database held after the run before).
    @discardableResult
    func startNavlog(binary: String, arguments: [String], stored: [String: NavlogVersion] = [:]) throws -> NavlogRun {
        let process = try BackgroundProcess(
            "/usr/bin/nsenter",
            inside([binary, "run", "--json", "--name", name] + arguments),
            pipes: true
        )
        let run = NavlogRun(process, stored: stored)
        runs.withLockedValue { $0.append(run) }
        return run
    }

    /// Whether navlog-sync ran here before.
    var hasRun: Bool { runs.withLockedValue { !$0.isEmpty } }
    var navlog: NavlogRun { runs.withLockedValue { $0.last! } }
    /// Every line of every run, in order.
    var history: [[NavlogLine]] { runs.withLockedValue { $0.map(\.lines) } }

    func stop() {
        for run in runs.withLockedValue({ $0 }) { run.process.stop() }
        agent.stop()
    }
}

/// One navlog-sync process and the lines it printed, each with when it was read.
final class NavlogRun: Sendable {
    let process: BackgroundProcess
    /// The live entries its database held when it started, by id (none for a first run).
    let stored: [String: NavlogVersion]
    private struct Output {
        var lines: [(line: NavlogLine, at: ContinuousClock.Instant)] = []
        var ended = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let output = NIOLockedValueBox(Output())

    init(_ process: BackgroundProcess, stored: [String: NavlogVersion]) {
        self.process = process
        self.stored = stored
        let lines = process.lines!
        Task { [self] in
            for await raw in lines { changed { $0.lines.append((NavlogLine(raw), .now)) } }
            changed { $0.ended = true }
        }
    }

    private func changed(_ change: (inout Output) -> Void) {
        let waiters = output.withLockedValue { output in
            change(&output)
            defer { output.waiters = [] }
            return output.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    var lines: [NavlogLine] { output.withLockedValue { $0.lines.map(\.line) } }
    var timedLines: [(line: NavlogLine, at: ContinuousClock.Instant)] { output.withLockedValue { $0.lines } }

    /// Waits until `find` returns something for the lines so far, checking again as each line
    /// arrives; throws when the output ends without it, or when the task is cancelled (a deadline).
    func first<T: Sendable>(
        _ what: String,
        _ find: @escaping @Sendable ([(line: NavlogLine, at: ContinuousClock.Instant)]) -> T?
    ) async throws -> T {
        while true {
            try Task.checkCancellation()
            let (seen, ended) = output.withLockedValue { ($0.lines, $0.ended) }
            if let found = find(seen) { return found }
            guard !ended else { throw HostSuiteError("the navlog-sync run ended before \(what)") }
            await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    let now = output.withLockedValue { output in
                        guard output.lines.count == seen.count, !output.ended, !Task.isCancelled else { return true }
                        output.waiters.append(continuation)
                        return false
                    }
                    if now { continuation.resume() }
                }
            } onCancel: {
                changed { _ in }  // wakes every waiter, which then sees the cancellation
            }
        }
    }

    func send(_ line: String) { process.send(line) }
}
