import Foundation

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
