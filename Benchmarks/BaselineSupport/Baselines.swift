import BenchmarkSupport
import CGnuTLSBaseline
import MultipeerTLS

/// The C baselines: the same frames over loopback TCP between two threads, plain or in GnuTLS
/// with our priority string and key (LinkBenchmark, and SessionBenchmark's ratios).
public struct Baseline: Sendable {
    public let useTLS: Bool
    public let key: [UInt8]
    /// Each thread on its own core (when the process may use two).
    public var spread = false

    public init(useTLS: Bool, key: [UInt8], spread: Bool = false) {
        self.useTLS = useTLS
        self.key = key
        self.spread = spread
    }

    func withConfig<T>(_ body: (UnsafePointer<baseline_config>) throws -> T) rethrows -> T {
        try TLSConfiguration.priorities.withCString { priorities in
            try "bench".withCString { identity in
                try key.withUnsafeBufferPointer { key in
                    var config = baseline_config(
                        use_tls: useTLS ? 1 : 0,
                        priorities: priorities,
                        identity: identity,
                        key: key.baseAddress,
                        key_length: key.count,
                        spread: spread ? 1 : 0
                    )
                    return try body(&config)
                }
            }
        }
    }

    /// Round trips of `payload`-byte frames, in nanoseconds, after `warmup` unmeasured ones.
    public func pingPong(payload: Int, iterations: Int, warmup: Int) throws -> [Double] {
        var samples = [Double](repeating: 0, count: warmup + iterations)
        var error = [CChar](repeating: 0, count: 256)
        let status = withConfig { baseline_pingpong($0, payload, Int32(warmup + iterations), &samples, &error) }
        guard status == 0 else { throw BenchmarkError(message(error)) }
        return Array(samples.dropFirst(warmup))
    }

    /// Seconds to send `count` frames of `payload` bytes one way.
    public func throughput(payload: Int, count: Int) throws -> Double {
        var seconds = 0.0
        var error = [CChar](repeating: 0, count: 256)
        let status = withConfig { baseline_throughput($0, payload, Int32(count), &seconds, &error) }
        guard status == 0 else { throw BenchmarkError(message(error)) }
        return seconds
    }
}

private func message(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
