import BenchmarkSupport
import Foundation
import MultipeerSession

extension OurLink {
    /// Sets up `count` links one after another to a local listener: the TLS handshake and the
    /// HELLO exchange (with its signature and its check), from the dial to the link being ready
    /// on the dialling side. Returns each one's duration in microseconds.
    package func handshakes(count: Int, warmup: Int) async throws -> [Double] {
        try await withServer { port in
            var samples: [Double] = []
            let configuration = try configuration("echo")
            for index in 0..<(warmup + count) {
                let start = ContinuousClock.now
                let link = try await PeerConnection.dial(host: "127.0.0.1", port: port, configuration: configuration)
                let elapsed = ContinuousClock.now - start
                try await link.channel.executeThenClose { _, _ in }
                if index >= warmup {
                    samples.append(
                        Double(elapsed.components.attoseconds) / 1e12 + Double(elapsed.components.seconds) * 1e6
                    )
                }
            }
            return samples
        }
    }
}
