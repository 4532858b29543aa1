import BenchmarkSupport
import Foundation
import MultipeerCore
import MultipeerSession
package import MultipeerTLS
import NIOCore

/// Our link (LinkBenchmark, and SessionBenchmark's share of it), measured through the package API the session uses: PeerListener and
/// PeerConnection, TLS 1.3 ECDHE-PSK by GnuTLS, TLV frames over SwiftNIO, async on both ends.
///
/// With `preferEventLoop`, the tasks that read and write a link run on its channel's event
/// loop (``EventLoopExecutor``); without, on Swift's global pool, hopping threads per message.
package struct OurLink: Sendable {
    package let psk: PreSharedKey
    package let preferEventLoop: Bool

    package init(psk: PreSharedKey, preferEventLoop: Bool) {
        self.psk = psk
        self.preferEventLoop = preferEventLoop
    }

    package var name: String { preferEventLoop ? "ours" : "ours/pool" }

    func configuration(_ name: String) throws -> LinkConfiguration {
        let identity = PeerIdentity()
        return LinkConfiguration(
            tls: try TLSContext(configuration: TLSConfiguration(psk: psk)),
            identity: identity,
            localHello: try Hello(identity: identity, incarnation: 1, displayName: name),
            // 1 MiB payloads plus the DATA header exceed the default 1 MiB frame limit.
            maximumFrameLength: 2 << 20
        )
    }

    /// Runs `body` with the link's inbound and outbound halves, on the link's event loop if asked.
    func use<T: Sendable>(
        _ link: PeerConnection,
        _ body: (NIOAsyncChannelInboundStream<LinkMessage>, NIOAsyncChannelOutboundWriter<LinkMessage>) async throws ->
            T
    ) async throws -> T {
        guard preferEventLoop else { return try await link.channel.executeThenClose(body) }
        return try await withTaskExecutorPreference(link.executor) { try await link.channel.executeThenClose(body) }
    }

    /// Runs `body` against a listener that echoes DATA (display name "echo") or counts it and
    /// answers ACK after `count` messages (display name "sink COUNT").
    func withServer<T: Sendable>(_ body: (Int) async throws -> T) async throws -> T {
        let listener = try await PeerListener.bind(host: "127.0.0.1", configuration: configuration("server"))
        // On standard error, unbuffered: standard output to a pipe is lost when the run then
        // stops on the client's error, and with it why the link went.
        let task = Task {
            try await listener.run(
                onLink: { link in
                    do {
                        try await serve(link)
                    } catch {
                        FileHandle.standardError.write(Data("benchmark server link failed: \(error)\n".utf8))
                    }
                },
                onFailure: { _, error in FileHandle.standardError.write(Data("benchmark link failed: \(error)\n".utf8))
                }
            )
        }
        defer { task.cancel() }
        let result = try await body(listener.port)
        await listener.close()
        _ = await task.result
        return result
    }

    private func serve(_ link: PeerConnection) async throws {
        let words = link.remoteHello.displayName.split(separator: " ")
        try await use(link) { inbound, outbound in
            if words.first == "echo" {
                for try await message in inbound { try await outbound.write(message) }
                return
            }
            let count = Int(words[1])!
            var received = 0
            for try await message in inbound {
                guard case .data = message else { continue }
                received += 1
                if received == count { try await outbound.write(.ack(UInt64(count))) }
            }
        }
    }

    static func message(payload: Int) throws -> LinkMessage {
        .data(try DataMessage(sequence: 0, typeName: "Bench", payload: ByteBuffer(repeating: 0x5A, count: payload)))
    }

    package func pingPong(payload: Int, iterations: Int, warmup: Int) async throws -> [Double] {
        try await withServer { port in
            let link = try await PeerConnection.dial(
                host: "127.0.0.1",
                port: port,
                configuration: configuration("echo")
            )
            let message = try Self.message(payload: payload)
            return try await use(link) { inbound, outbound in
                var replies = inbound.makeAsyncIterator()
                var samples: [Double] = []
                samples.reserveCapacity(iterations)
                let clock = ContinuousClock()
                for index in 0..<(warmup + iterations) {
                    let start = clock.now
                    try await outbound.write(message)
                    guard try await replies.next() != nil else { throw BenchmarkError("the echo link closed") }
                    if index >= warmup { samples.append(Double((clock.now - start).nanoseconds)) }
                }
                return samples
            }
        }
    }

    /// Seconds to deliver `count` messages of `payload` bytes one way, one `write` each,
    /// acknowledged at the end.
    package func throughput(payload: Int, count: Int) async throws -> Double {
        try await withServer { port in
            let link = try await PeerConnection.dial(
                host: "127.0.0.1",
                port: port,
                configuration: configuration("sink \(count)")
            )
            let message = try Self.message(payload: payload)
            return try await use(link) { inbound, outbound in
                let clock = ContinuousClock()
                let start = clock.now
                for _ in 0..<count { try await outbound.write(message) }
                for try await reply in inbound {
                    if case .ack = reply { return Double((clock.now - start).nanoseconds) / 1e9 }
                }
                throw BenchmarkError("the sink closed before acknowledging")
            }
        }
    }
}
