import BenchmarkSupport
import Foundation

/// gRPC Swift 2's program (Benchmarks/GRPCBaseline, a package of its own), run as a child
/// process in turns with the API's runs: what a Swift user would pick instead of this package.
struct GRPCProgram {
    let path: String

    /// `--grpc PATH`, else the package's release build where `make bench` puts it; nil when
    /// there is none (`--no-grpc`, or not built: the runs go on without it and say so).
    static let found: GRPCProgram? = {
        guard !Bench.flag("--no-grpc") else { return nil }
        let path = Bench.option("--grpc") ?? "Benchmarks/GRPCBaseline/.build/release/grpc-baseline"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            print(
                "gRPC Swift 2 is not compared: no program at \(path) (swift build -c release --package-path Benchmarks/GRPCBaseline)"
            )
            return nil
        }
        return GRPCProgram(path: path)
    }()

    /// Messages of `size` bytes per second, written flat out on one bidirectional stream and
    /// counted as the server's handler reads them, after a warm-up second.
    func rate(size: Int, seconds: Int) throws -> Double {
        try run(["throughput", "--size", "\(size)", "--seconds", "\(seconds)"], as: Rate.self).messagesPerSecond
    }

    /// Round trips of `size`-byte messages (written, echoed by the server's handler, read), in
    /// nanoseconds, after `warmup` unmeasured ones.
    func roundTrips(size: Int, count: Int, warmup: Int) throws -> [Double] {
        try run(["round-trips", "--size", "\(size)", "--count", "\(count)", "--warmup", "\(warmup)"], as: Trips.self)
            .nanoseconds
    }

    private struct Rate: Decodable { var messagesPerSecond: Double }
    private struct Trips: Decodable { var nanoseconds: [Double] }

    private func run<Output: Decodable>(_ arguments: [String], as: Output.Type) throws -> Output {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw BenchmarkError("\(path) \(arguments.joined(separator: " ")) exited with \(process.terminationStatus)")
        }
        return try JSONDecoder().decode(Output.self, from: data)
    }
}
