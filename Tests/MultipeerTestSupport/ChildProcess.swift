public import Foundation
import Glibc
import NIOConcurrencyHelpers

/// What a finished child process left behind.
public struct ProcessResult: Sendable {
    public var status: Int32
    /// Standard output and standard error together.
    public var output: String
}

/// Runs a program to completion with standard input closed and `environment` added to this
/// process's; if it outlives `timeout` it is killed (by its PID only), and its status is then
/// 128 + SIGKILL. (Spawned as a ``BackgroundProcess``: Foundation's `Process.run()` in this
/// toolchain reads past a buffer while listing /proc/self/fd, which AddressSanitizer reports
/// and which can crash; swift-corelibs-foundation#5472.)
public func runProcess(
    _ path: String,
    _ arguments: [String],
    environment: [String: String] = [:],
    timeout: Duration = .seconds(30)
) async throws -> ProcessResult {
    let child = try BackgroundProcess(path, arguments, environment: environment, pipes: true)
    child.closeInput()
    let output = Task { await child.lines!.reduce(into: "") { $0 += $1 + "\n" } }
    let status = await child.waitForExit(timeout: timeout)
    return ProcessResult(status: status, output: await output.value)
}

/// A program left running in the background, stopped (by its PID only) with ``stop()``.
///
/// Spawned with posix_spawn and a clean signal mask: a child started from a Swift concurrency
/// thread otherwise inherits that thread's blocked signals and ignores SIGTERM.
public final class BackgroundProcess: Sendable {
    public let pid: Int32
    /// With `pipes`, what is written here is the child's standard input.
    public let input: FileHandle?
    /// With `pipes`, the child's standard output and standard error, line by line.
    public let lines: AsyncStream<String>?

    /// Starts `path` with `environment` added to this process's; with `pipes`, its standard
    /// streams are connected to ``input`` and ``lines``, otherwise to /dev/null.
    public init(_ path: String, _ arguments: [String], environment: [String: String] = [:], pipes: Bool = false) throws
    {
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
        // Socket pairs made close-on-exec atomically (pipe2 is not imported), so that a child
        // spawned meanwhile by another test cannot inherit an end and hold the stream open; the
        // child gets its ends through dup2. [0] is the child's end, [1] ours.
        var inputPair: [Int32] = [-1, -1]
        var outputPair: [Int32] = [-1, -1]
        if pipes {
            let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            guard socketpair(AF_UNIX, type, 0, &inputPair) == 0, socketpair(AF_UNIX, type, 0, &outputPair) == 0 else {
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EMFILE)
            }
            posix_spawn_file_actions_adddup2(&actions, inputPair[0], STDIN_FILENO)
            posix_spawn_file_actions_adddup2(&actions, outputPair[0], STDOUT_FILENO)
            posix_spawn_file_actions_adddup2(&actions, outputPair[0], STDERR_FILENO)
        } else {
            for descriptor in [STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO] {
                posix_spawn_file_actions_addopen(
                    &actions,
                    descriptor,
                    "/dev/null",
                    descriptor == STDIN_FILENO ? O_RDONLY : O_WRONLY,
                    0
                )
            }
        }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let envp = ProcessInfo.processInfo.environment.merging(environment) { $1 }.map { strdup("\($0)=\($1)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: Int32 = 0
        let status = Self.spawnLock.withLock {
            Self.markEveryDescriptorCloseOnExec()
            return posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        }
        if pipes {
            close(inputPair[0])
            close(outputPair[0])
        }
        guard status == 0 else {
            if pipes { [inputPair[1], outputPair[1]].forEach { close($0) } }
            throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EINVAL)
        }
        self.pid = pid
        if pipes {
            input = FileHandle(fileDescriptor: inputPair[1], closeOnDealloc: true)
            lines = Self.readLines(FileHandle(fileDescriptor: outputPair[1], closeOnDealloc: true))
        } else {
            input = nil
            lines = nil
        }
    }

    private static let spawnLock = NIOLock()

    /// SwiftNIO's sockets are not close-on-exec: a child would hold every connection of the
    /// tests open (a server's close would never reach its client). Marks every descriptor of
    /// this process close-on-exec before spawning (the child's standard streams are dup2'ed
    /// afresh, so they stay open).
    private static func markEveryDescriptorCloseOnExec() {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return }
        for case let descriptor? in entries.map({ Int32($0) }) where descriptor > STDERR_FILENO {
            let flags = fcntl(descriptor, F_GETFD)
            if flags >= 0, flags & FD_CLOEXEC == 0 { _ = fcntl(descriptor, F_SETFD, flags | FD_CLOEXEC) }
        }
    }

    /// Splits what the child writes into lines, on a thread of its own (reads block).
    private static func readLines(_ handle: FileHandle) -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream<String>.makeStream()
        Thread {
            var pending = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    continuation.yield(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                    pending.removeSubrange(pending.startIndex...newline)
                }
            }
            if !pending.isEmpty { continuation.yield(String(decoding: pending, as: UTF8.self)) }
            continuation.finish()
        }.start()
        return stream
    }

    /// Writes one line to the child's standard input.
    public func send(_ line: String) {
        input?.write(Data((line + "\n").utf8))
    }

    /// Closes the child's standard input: it reads end of input.
    public func closeInput() {
        try? input?.close()
    }

    /// Waits for the child to exit by itself and returns its exit status (128 + the signal
    /// if a signal ended it); SIGKILL after `timeout`.
    public func waitForExit(timeout: Duration = .seconds(30)) async -> Int32 {
        let (exits, exited) = AsyncStream<Void>.makeStream()
        exit(then: { exited.finish() })
        if (try? await withDeadline(timeout) {
            for await _ in exits {}
            return true
        }) == nil {
            kill(pid, SIGKILL)  // still unreaped: it can only be this child
        }
        return reap()
    }

    /// Waits, blocking this thread, for the child to exit by itself; its exit status.
    public func waitUntilExit() -> Int32 {
        reap()
    }

    /// Sends SIGTERM and waits for the process to exit (SIGKILL after 5 s). Does nothing once
    /// it has been reaped (its PID may belong to another process by then).
    public func stop() {
        guard exitStatus.withLockedValue({ $0 == nil && kill(pid, SIGTERM) == 0 }) else { return }
        let exited = DispatchSemaphore(value: 0)
        exit(then: { exited.signal() })
        if exited.wait(timeout: .now() + 5) == .timedOut {
            kill(pid, SIGKILL)
            exited.wait()
        }
        _ = reap()
    }

    /// Calls `body` on a thread of its own once the child has exited, leaving it unreaped: until
    /// ``reap()``, its PID cannot be reused, so a SIGKILL meanwhile can only reach this child.
    private func exit(then body: @escaping @Sendable () -> Void) {
        let pid = self.pid
        Thread {
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
            body()
        }.start()
    }

    /// Collects the child, waiting for it to exit; its exit status (128 + the signal if a
    /// signal ended it). Reaped once; the status is kept.
    private func reap() -> Int32 {
        exitStatus.withLockedValue { known in
            if let known { return known }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            let signal = status & 0x7F
            let result = signal == 0 ? (status >> 8) & 0xFF : 128 + signal
            known = result
            return result
        }
    }

    /// Set when the child has been reaped.
    private let exitStatus = NIOLockedValueBox<Int32?>(nil)

    deinit { stop() }
}
