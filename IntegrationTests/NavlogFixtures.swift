import Foundation
import Glibc
import MultipeerTestSupport
import Testing

/// A `navlog-sync run --json` process on this host, fed commands on its standard input.
///
/// `@unchecked Sendable`: a test reads its lines from one task at a time.
final class NavlogHost: @unchecked Sendable {
    /// The executable, built beside this test bundle.
    static let binary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        .deletingLastPathComponent().appendingPathComponent("navlog-sync").path

    let name: String
    let data: String
    let process: BackgroundProcess
    private(set) var history: [NavlogLine] = []

    init(name: String, data: String, keyFile: String, arguments: [String]) throws {
        self.name = name
        self.data = data
        process = try BackgroundProcess(
            Self.binary,
            ["run", "--json", "--name", name, "--data", data, "--psk-file", keyFile] + arguments,
            pipes: true
        )
    }

    func send(_ line: String) { process.send(line) }

    /// Reads lines until `done` holds for everything read so far; returns it all. On a
    /// timeout, or if the process ends first, records everything it printed.
    @discardableResult
    func wait(
        timeout: Duration = .seconds(60),
        until done: @escaping @Sendable ([NavlogLine]) -> Bool
    ) async throws -> [NavlogLine] {
        guard !done(history) else { return history }
        do {
            try await withDeadline(timeout) {
                // The test task waits meanwhile, so only this task touches `history`.
                for await raw in self.process.lines! {
                    let line = NavlogLine(raw)
                    // Every line has its event's fields as docs/NAVLOG.md section 4 lists them.
                    if let problem = NavlogEventTable.spec.problem(with: line) {
                        Issue.record("\(self.name) printed \(problem)")
                    }
                    self.history.append(line)
                    if done(self.history) { return }
                }
                throw StreamEnded(read: self.history.count)
            }
        } catch {
            Issue.record("\(name) printed:\n\(history.map(\.raw).joined(separator: "\n"))")
            throw error
        }
        return history
    }

    /// Reads lines until one satisfies `matches`, counting only lines after what was read so far.
    @discardableResult
    func next(
        timeout: Duration = .seconds(60),
        _ matches: @escaping @Sendable (NavlogLine) -> Bool
    ) async throws -> NavlogLine {
        let start = history.count
        let lines = try await wait(timeout: timeout) { $0.dropFirst(start).contains(where: matches) }
        return lines.dropFirst(start).first(where: matches)!
    }

    /// Adds an entry and waits until it is stored (acknowledged); returns its id.
    func add(_ fields: String) async throws -> String {
        send("add \(fields)")
        return try await next { $0.event == "entry_applied" && $0["origin"] == "local" }["id"]!
    }

    func listeningPort() async throws -> Int {
        Int(try await wait { $0.contains { $0.event == "listening" } }.first { $0.event == "listening" }!["port"]!)!
    }

    func waitUntilActive(_ peers: Set<String>) async throws {
        try await wait { NavlogLine.activePeers($0) == peers }
    }

    /// Waits until this host holds `expected` (each entry's winning version), counting what
    /// it held before it started.
    func waitUntilHolding(_ expected: [String: NavlogVersion], alreadyHeld: [String: NavlogVersion] = [:]) async throws
    {
        try await wait { alreadyHeld.merging(NavlogVersion.held(by: $0)) { $1 } == expected }
    }

    /// The stored log, read by `navlog-sync list --json` beside the running process.
    func storedLog() async throws -> String {
        let result = try await runProcess(Self.binary, ["list", "--data", data, "--json"])
        #expect(result.status == 0, "list failed: \(result.output)")
        return result.output
    }
}

/// A folder with a group key, for the hosts of one test; removed afterwards.
final class NavlogWorkspace: Sendable {
    let directory: String
    let keyFile: String
    let serviceType = "_nl\(String(UInt32.random(in: 0...UInt32.max), radix: 16))._tcp"

    init() async throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("navlog-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        keyFile = directory + "/group.key"
        let result = try await runProcess(NavlogHost.binary, ["keygen", "--out", keyFile])
        #expect(result.status == 0, "keygen failed: \(result.output)")
    }

    /// A host using DNS-SD on this workspace's service type.
    func host(_ name: String, _ extra: [String] = []) throws -> NavlogHost {
        try NavlogHost(
            name: name,
            data: "\(directory)/\(name).db",
            keyFile: keyFile,
            arguments: ["--service", serviceType, "--keepalive-timeout", "\(1.5 * Double(TestTime.scale))"] + extra
        )
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }
}

/// Runs `run` (a host's or a store's `run()`) beside `body`, then stops it, cancelled and
/// awaited, however `body` ends: nothing it holds (a database, a session) outlives the test.
func running<T: Sendable>(
    _ run: @escaping @Sendable () async throws -> Void,
    while body: () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await run() }
        defer { group.cancelAll() }  // (the group awaits it before returning)
        return try await body()
    }
}
