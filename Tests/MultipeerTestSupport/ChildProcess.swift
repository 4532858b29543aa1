import Foundation
import Glibc

/// What a finished child process left behind.
public struct ProcessResult: Sendable {
    public var status: Int32
    /// Standard output and standard error together.
    public var output: String
}

/// Runs a program to completion with standard input closed, killing it (by its PID only)
/// if it outlives `timeout`.
public func runProcess(_ path: String, _ arguments: [String], timeout: Duration = .seconds(30)) async throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    process.standardInput = FileHandle.nullDevice
    let finished = AsyncStream<Int32>.makeStream()
    process.terminationHandler = { finished.continuation.yield($0.terminationStatus) }
    try process.run()
    let output = Task.detached { pipe.fileHandleForReading.readDataToEndOfFile() }
    let status: Int32
    do {
        status = try await withDeadline(timeout) {
            var iterator = finished.stream.makeAsyncIterator()
            return await iterator.next() ?? -1
        }
    } catch {
        process.terminate()
        throw error
    }
    return ProcessResult(status: status, output: String(decoding: await output.value, as: UTF8.self))
}

/// A program left running in the background, stopped (by its PID only) with ``stop()``.
///
/// Spawned with posix_spawn and a clean signal mask: a child started from a Swift concurrency
/// thread otherwise inherits that thread's blocked signals and ignores SIGTERM.
public final class BackgroundProcess: Sendable {
    public let pid: Int32

    public init(_ path: String, _ arguments: [String]) throws {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for descriptor in [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO] {
            posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", descriptor == STDIN_FILENO ? O_RDONLY : O_WRONLY, 0)
        }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: Int32 = 0
        let status = posix_spawn(&pid, path, &actions, &attributes, argv, environ)
        guard status == 0 else { throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EINVAL) }
        self.pid = pid
    }

    /// Sends SIGTERM and waits for the process to exit (SIGKILL after 5 s).
    public func stop() {
        guard kill(pid, SIGTERM) == 0 else { return }
        var status: Int32 = 0
        for _ in 0..<500 {
            if waitpid(pid, &status, WNOHANG) == pid { return }
            usleep(10_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
    }

    deinit { stop() }
}
