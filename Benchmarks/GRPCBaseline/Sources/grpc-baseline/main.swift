// gRPC Swift 2 between two peers in one process over loopback, the way a Swift user would send
// messages between two processes over TLS without this package: grpc-swift-2 on
// grpc-swift-nio-transport's HTTP/2 (TLS 1.3 from swift-nio-ssl, a self-signed P-256
// certificate made at start), one bidirectional stream, and a serializer that copies raw bytes
// so that protobuf costs nothing. SessionBenchmark runs it in turns with its own cases and reads
// the one line of JSON it prints (Benchmarks/README.md, "gRPC Swift 2").
//
//   grpc-baseline throughput --size BYTES [--seconds 2]
//       messages of BYTES written flat out by the client, counted as the server's handler reads
//       them: one warm-up second, then --seconds; prints {"messagesPerSecond": N}
//   grpc-baseline round-trips --size BYTES [--count 2000] [--warmup 200]
//       a message written, the server's handler writing it back, the reply read, one at a time;
//       prints {"nanoseconds": [...]} (the --count measured ones)
import Crypto
import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import Synchronization
import X509

/// Copies a message's bytes in and out: no framing or encoding beyond gRPC's own.
struct RawBytes: MessageSerializer, MessageDeserializer {
    func serialize<Bytes: GRPCContiguousBytes>(_ message: [UInt8]) throws -> Bytes {
        var bytes = Bytes(repeating: 0, count: message.count)
        bytes.withUnsafeMutableBytes { target in message.withUnsafeBytes { target.copyMemory(from: $0) } }
        return bytes
    }

    func deserialize<Bytes: GRPCContiguousBytes>(_ bytes: Bytes) throws -> [UInt8] {
        bytes.withUnsafeBytes { Array($0) }
    }
}

/// The server's two methods: `Count` reads and counts, `Echo` writes each message back.
struct Bench: RegistrableRPCService {
    static let count = MethodDescriptor(fullyQualifiedService: "bench.Bench", method: "Count")
    static let echo = MethodDescriptor(fullyQualifiedService: "bench.Bench", method: "Echo")
    let received = Counter()

    func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
        let received = self.received
        router.registerHandler(forMethod: Self.count, deserializer: RawBytes(), serializer: RawBytes()) { request, _ in
            StreamingServerResponse { _ in
                for try await _ in request.messages { received.value.add(1, ordering: .relaxed) }
                return [:]
            }
        }
        router.registerHandler(forMethod: Self.echo, deserializer: RawBytes(), serializer: RawBytes()) { request, _ in
            StreamingServerResponse { writer in
                for try await message in request.messages { try await writer.write(message) }
                return [:]
            }
        }
    }
}

/// Whether the client's writer should stop.
final class Stop: Sendable {
    let value = Atomic(false)
}

/// The messages the server has read.
final class Counter: Sendable {
    let value = Atomic(0)
}

func option(_ name: String, _ fallback: Int) -> Int {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count,
        let value = Int(CommandLine.arguments[index + 1])
    else { return fallback }
    return value
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("grpc-baseline: \(message)\n".utf8))
    exit(1)
}

/// A self-signed certificate and its key, PEM (the client does not verify it: the handshake is
/// not what is measured).
func certificate() throws -> (certificate: String, key: String) {
    let key = P256.Signing.PrivateKey()
    let name = try DistinguishedName { CommonName("grpc-baseline") }
    let now = Date()
    let certificate = try Certificate(
        version: .v3,
        serialNumber: .init(),
        publicKey: .init(key.publicKey),
        notValidBefore: now - 3600,
        notValidAfter: now + 86400,
        issuer: name,
        subject: name,
        signatureAlgorithm: .ecdsaWithSHA256,
        extensions: Certificate.Extensions(),
        issuerPrivateKey: .init(key)
    )
    return (try certificate.serializeAsPEM().pemString, key.pemRepresentation)
}

/// The server's HTTP/2 window as large as the client's default (8 MiB) instead of its own default
/// of 64 KiB, which holds a 64 KiB flow at a window update per message.
let serverConfiguration = {
    var configuration = HTTP2ServerTransport.Posix.Config.defaults
    configuration.http2.targetWindowSize = 8 << 20
    return configuration
}()

/// Runs `body` with a client connected to a server of ``Bench`` on loopback.
func withBench<Result: Sendable>(
    _ body: @Sendable @escaping (GRPCClient<HTTP2ClientTransport.Posix>, Bench) async throws -> Result
) async throws -> Result {
    let (pem, key) = try certificate()
    let service = Bench()
    let server = GRPCServer(
        transport: .http2NIOPosix(
            address: .ipv4(host: "127.0.0.1", port: 0),
            transportSecurity: .tls(
                certificateChain: [.bytes(Array(pem.utf8), format: .pem)],
                privateKey: .bytes(Array(key.utf8), format: .pem)
            ),
            config: serverConfiguration
        ),
        services: [service]
    )
    return try await withThrowingDiscardingTaskGroup { group in
        group.addTask { try await server.serve() }
        guard let port = try await server.listeningAddress?.ipv4?.port else { fail("the server has no port") }
        let transport = try HTTP2ClientTransport.Posix(
            target: .ipv4(address: "127.0.0.1", port: port),
            transportSecurity: .tls { $0.serverCertificateVerification = .noVerification }
        )
        let result = try await withGRPCClient(transport: transport) { client in try await body(client, service) }
        server.beginGracefulShutdown()
        return result
    }
}

let size = option("--size", 1024)
let payload = [UInt8](repeating: 0xA5, count: size)
let encoder = JSONEncoder()

switch CommandLine.arguments.dropFirst().first {
case "throughput":
    let seconds = option("--seconds", 2)
    let rate = try await withBench { client, service in
        let stop = Stop()
        return try await withThrowingTaskGroup(of: Double?.self) { group in
            group.addTask {
                let request = StreamingClientRequest<[UInt8]> { writer in
                    while !stop.value.load(ordering: .relaxed) { try await writer.write(payload) }
                }
                try await client.bidirectionalStreaming(
                    request: request,
                    descriptor: Bench.count,
                    serializer: RawBytes(),
                    deserializer: RawBytes(),
                    options: .defaults
                ) { response in
                    for try await _ in response.messages {}
                }
                return nil
            }
            try await Task.sleep(for: .seconds(1))
            let (start, counted) = (ContinuousClock.now, service.received.value.load(ordering: .relaxed))
            try await Task.sleep(for: .seconds(seconds))
            let (end, total) = (ContinuousClock.now, service.received.value.load(ordering: .relaxed))
            stop.value.store(true, ordering: .relaxed)
            try await group.waitForAll()
            let elapsed = end - start
            return Double(total - counted)
                / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }
    }
    print(String(decoding: try encoder.encode(["messagesPerSecond": rate]), as: UTF8.self))
case "round-trips":
    let (count, warmup) = (option("--count", 2000), option("--warmup", 200))
    let samples = try await withBench { client, _ in
        let (answers, answered) = AsyncStream<Void>.makeStream()
        let samples = Mutex<[Double]>([])
        let request = StreamingClientRequest<[UInt8]> { writer in
            var iterator = answers.makeAsyncIterator()
            for number in 0..<(warmup + count) {
                let start = ContinuousClock.now
                try await writer.write(payload)
                guard await iterator.next() != nil else { fail("the answers ended early") }
                let elapsed = ContinuousClock.now - start
                if number >= warmup {
                    samples.withLock {
                        $0.append(
                            Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
                        )
                    }
                }
            }
        }
        try await client.bidirectionalStreaming(
            request: request,
            descriptor: Bench.echo,
            serializer: RawBytes(),
            deserializer: RawBytes(),
            options: .defaults
        ) { response in
            for try await _ in response.messages { answered.yield() }
            answered.finish()
        }
        return samples.withLock { $0 }
    }
    print(String(decoding: try encoder.encode(["nanoseconds": samples]), as: UTF8.self))
default:
    fail(
        "usage: grpc-baseline throughput --size BYTES [--seconds 2] | round-trips --size BYTES [--count 2000] [--warmup 200]"
    )
}
