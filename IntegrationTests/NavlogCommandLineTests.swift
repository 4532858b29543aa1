import Foundation
import MultipeerSession
import MultipeerTestSupport
import Testing

/// navlog-sync's failures at start: each a sentence on standard error that says what to do,
/// and its own exit status (listed in `navlog-sync --help`).
@Suite(.scaledTimeLimit(minutes: 1)) struct NavlogCommandLineTests {
    static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> ProcessResult {
        try await runProcess(NavlogHost.binary, arguments, environment: environment)
    }

    /// The multi-host suite takes navlog-sync's path as a user types it, relative to where they
    /// are: it makes it absolute before anything (the hosts run it from their namespaces), and
    /// refuses at once, naming the path it looked at, when nothing runnable is there. (Before, a
    /// relative path failed every scenario in nsenter, each reported as a host that never joined.)
    @Test func theHostSuiteTakesARelativeBinaryPathFromWhereItIsRun() async throws {
        let suite = URL(fileURLWithPath: NavlogHost.binary).deletingLastPathComponent()
            .appendingPathComponent("navlog-hosts").path
        let relative = "no-such-build/debug/navlog-sync"
        let result = try await runProcess(suite, ["--binary", relative, "--only", "freeze"])
        let absolute = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
            .appendingPathComponent(relative).standardizedFileURL.path
        #expect(result.status == 2, "\(result.output)")
        #expect(result.output.contains("navlog-sync is not at \(absolute):"), "\(result.output)")
    }

    @Test func keygenWritesAPrivateKeyAndNeverOverwritesOne() async throws {
        let workspace = try await NavlogWorkspace()
        var info = stat()
        #expect(stat(workspace.keyFile, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let key = try String(contentsOfFile: workspace.keyFile, encoding: .utf8)
        #expect(key.hasPrefix("navlog:") && key.count == "navlog:".count + 64 + 1)
        let again = try await Self.run(["keygen", "--out", workspace.keyFile])
        #expect(again.status == 66 && again.output.contains("exists already; it is never overwritten"))
        #expect(try String(contentsOfFile: workspace.keyFile, encoding: .utf8) == key)
    }

    /// A key rotation with the command line alone: a key added as the newest, the old retired.
    @Test func keygenAddsAndRetiresKeysOfAKeyFile() async throws {
        let workspace = try await NavlogWorkspace()
        let added = try await Self.run(["keygen", "--add-to", workspace.keyFile, "--identity", "navlog-2"])
        #expect(added.status == 0, "\(added.output)")
        #expect(added.output.contains("now holds navlog, navlog-2"))
        let lines = try String(contentsOfFile: workspace.keyFile, encoding: .utf8).split(separator: "\n")
        #expect(lines.map { $0.split(separator: ":")[0] } == ["navlog", "navlog-2"])
        let twice = try await Self.run(["keygen", "--add-to", workspace.keyFile, "--identity", "navlog-2"])
        #expect(twice.status == 66 && twice.output.contains("each key needs its own"))
        let retired = try await Self.run(["keygen", "--retire", "navlog", "--in", workspace.keyFile])
        #expect(retired.status == 0, "\(retired.output)")
        #expect(try String(contentsOfFile: workspace.keyFile, encoding: .utf8) == String(lines[1]) + "\n")
        var info = stat()
        #expect(stat(workspace.keyFile, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let last = try await Self.run(["keygen", "--retire", "navlog-2", "--in", workspace.keyFile])
        #expect(last.status == 66 && last.output.contains("only key"))
    }

    /// What a host's roster entry is, from the host's own identity.
    @Test func whoamiPrintsTheHostsPeerIDAndKey() async throws {
        let workspace = try await NavlogWorkspace()
        let data = workspace.directory + "/a.db"
        let first = try await Self.run(["whoami", "--data", data])
        #expect(first.status == 0, "\(first.output)")
        let again = try await Self.run(["whoami", "--data", data])
        #expect(again.output == first.output, "the same identity each time")
        let key = try #require(
            first.output.split(separator: "\n").first { $0.hasPrefix("key") }?.split(separator: " ").last
        )
        #expect(key.count == 64)
        let roster = workspace.directory + "/roster"
        try "\(key)  # host a\n".write(toFile: roster, atomically: true, encoding: .utf8)
        #expect(throws: Never.self) { try Roster(contentsOfFile: roster) }
    }

    /// Every command `run` reads is in its help, as NavlogCommand parses them.
    @Test func runsHelpListsEveryCommand() async throws {
        let help = try await Self.run(["help", "run"])
        #expect(help.status == 0, "\(help.output)")
        let flat = help.output.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for command in [
            "add KEY=VALUE", "edit ID KEY=VALUE", "delete ID", "attach ID FILE", "save ID NAME PATH", "list", "peers",
            "quit",
        ] {
            #expect(flat.contains(command), "\(command) in: \(flat)")
        }
    }

    @Test func aMissingKeyFileSaysHowToMakeOne() async throws {
        let workspace = try await NavlogWorkspace()
        let result = try await Self.run([
            "run", "--name", "a", "--data", workspace.directory + "/a.db", "--psk-file", "/nonexistent/group.key",
        ])
        #expect(result.status == 66)
        #expect(
            result.output.contains("there is no key file at /nonexistent/group.key; make one with `navlog-sync keygen")
        )
    }

    @Test func aKeyFileOthersCanReadIsRefusedWithTheFixButNeverPrinted() async throws {
        let workspace = try await NavlogWorkspace()
        chmod(workspace.keyFile, 0o644)
        let key = try String(contentsOfFile: workspace.keyFile, encoding: .utf8)
        let hex = String(key.split(separator: ":")[1].prefix(64))
        let result = try await Self.run([
            "run", "--name", "a", "--data", workspace.directory + "/a.db", "--psk-file", workspace.keyFile, "--peer",
            "127.0.0.1:9",
        ])
        #expect(result.status == 66)
        #expect(
            result.output.contains(
                "the key file \(workspace.keyFile) can be read or written by others (mode 644): make it private with chmod 600 \(workspace.keyFile)"
            )
        )
        #expect(!result.output.lowercased().contains(hex))
    }

    @Test func aCorruptDatabaseAndOneInUseAreTold() async throws {
        let workspace = try await NavlogWorkspace()
        let corrupt = workspace.directory + "/corrupt.db"
        try Data(repeating: 0x5A, count: 4096).write(to: URL(fileURLWithPath: corrupt))
        let result = try await Self.run(["run", "--name", "a", "--data", corrupt, "--psk-file", workspace.keyFile])
        #expect(result.status == 65)
        #expect(result.output.contains("\(corrupt) is not a navlog database or is damaged"))
        let listed = try await Self.run(["list", "--data", corrupt])
        #expect(listed.status == 65)

        let host = try workspace.host("a", ["--peer", "127.0.0.1:9"])
        _ = try await host.listeningPort()
        let second = try await Self.run(["run", "--name", "b", "--data", host.data, "--psk-file", workspace.keyFile])
        #expect(second.status == 75)
        #expect(second.output.contains("the database \(host.data) is in use by another navlog-sync run"))
        // Reading beside the running host works.
        #expect(try await Self.run(["list", "--data", host.data]).status == 0)
    }

    @Test func aPortInUseIsTold() async throws {
        let workspace = try await NavlogWorkspace()
        let host = try workspace.host("a", ["--peer", "127.0.0.1:9"])
        let port = try await host.listeningPort()
        // Standard input stays open, so it fails on the port rather than quitting at end of input.
        let second = try BackgroundProcess(
            NavlogHost.binary,
            [
                "run", "--name", "b", "--data", workspace.directory + "/b.db", "--psk-file", workspace.keyFile,
                "--port", "\(port)", "--peer", "127.0.0.1:9",
            ],
            pipes: true
        )
        #expect(await second.waitForExit() == 71)
        var output = ""
        for await line in second.lines! { output += line + "\n" }
        #expect(output.contains("cannot listen on port \(port)") && output.contains("Choose another --port"))
    }

    /// The name authors this station's edits, which other hosts refuse if it is not a display name.
    @Test func aNameWithAControlCharacterIsAUsageError() async throws {
        let workspace = try await NavlogWorkspace()
        let result = try await Self.run(
            [
                "run", "--name", "cap\u{1B}[2Jtain", "--data", workspace.directory + "/a.db", "--psk-file",
                workspace.keyFile, "--offline",
            ])
        #expect(result.status == 64)
        #expect(result.output.contains("--name must be 1 to 250 bytes of UTF-8 without control characters"))
    }

    @Test func aKeepaliveTimeoutOutOfRangeIsAUsageError() async throws {
        let workspace = try await NavlogWorkspace()
        let result = try await Self.run(
            [
                "run", "--name", "a", "--data", workspace.directory + "/a.db", "--psk-file", workspace.keyFile,
                "--keepalive-timeout", "0",
            ])
        #expect(result.status == 64)
        #expect(result.output.contains("--keepalive-timeout must be between 0.1 and 3600 seconds, not 0.0"))
    }

    @Test func noAvahiDaemonSuggestsStartingItOrNamingPeers() async throws {
        let workspace = try await NavlogWorkspace()
        let result = try await Self.run(
            ["run", "--name", "a", "--data", workspace.directory + "/a.db", "--psk-file", workspace.keyFile],
            environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent/system_bus_socket"]
        )
        #expect(result.status == 69)
        #expect(result.output.contains("avahi-daemon is not running") && result.output.contains("--peer HOST:PORT"))
    }
}
