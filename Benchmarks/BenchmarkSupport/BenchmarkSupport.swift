import Foundation
import Glibc

/// What every benchmark program shares: its options, percentiles, and the JSON it writes.
public enum Bench {
    /// The value after `--name` on the command line, if given.
    public static func option(_ name: String) -> String? {
        let arguments = CommandLine.arguments
        return arguments.firstIndex(of: name).flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
    }

    /// Whether `--name` is on the command line.
    public static func flag(_ name: String) -> Bool {
        CommandLine.arguments.contains(name)
    }

    /// The `p` quantile (0...1) of `values`, nearest rank.
    public static func percentile(_ values: [Double], _ p: Double) -> Double {
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    /// The machine, as /proc tells it: CPU model, cores, memory, kernel.
    public static func machine() -> [String: String] {
        func read(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        func field(_ name: String, in file: String) -> String? {
            read(file).split(separator: "\n").first { $0.hasPrefix(name) }?
                .split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) }
        }
        let memoryKiB = field("MemTotal", in: "/proc/meminfo")?.split(separator: " ").first.flatMap { Double($0) }
        return [
            "cpu": field("model name", in: "/proc/cpuinfo") ?? "unknown",
            "cores": "\(ProcessInfo.processInfo.activeProcessorCount)",
            "memory": memoryKiB.map { String(format: "%.0f GiB", $0 / 1024 / 1024) } ?? "unknown",
            "kernel": "Linux " + read("/proc/sys/kernel/osrelease").trimmingCharacters(in: .whitespacesAndNewlines),
        ]
    }

    /// Resident memory of this process, in KiB.
    public static func residentKiB() -> Double {
        let fields = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8))?.split(separator: " ") ?? []
        return Double(fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * Double(sysconf(Int32(_SC_PAGESIZE))) / 1024
    }

    /// Hands memory that malloc keeps after frees back to the system (glibc's `malloc_trim`),
    /// so that resident memory measured next is not lowered by reuse of an earlier run's memory.
    public static func returnFreedMemory() {
        typealias Trim = @convention(c) (Int) -> Int32
        guard let symbol = dlsym(nil, "malloc_trim") else { return }
        _ = unsafeBitCast(symbol, to: Trim.self)(0)
    }

    /// CPU time (user + system) this process has used so far, in seconds.
    public static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(
            usage.ru_utime.tv_usec + usage.ru_stime.tv_usec
        ) / 1e6
    }

    /// Writes `value` as pretty JSON to the `--json` path (or `defaultPath`) and says where.
    public static func writeJSON<Value: Encodable>(_ value: Value, defaultPath: String) throws {
        let path = option("--json") ?? defaultPath
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(value).write(to: url)
        print("JSON written to \(path)")
    }
}

/// A benchmark that could not run as it should, with what happened.
public struct BenchmarkError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
