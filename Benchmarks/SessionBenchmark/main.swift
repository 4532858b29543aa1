// The public API's speed, as an application sees it: reliable messages through
// `send(_:to:)` and `messages(of:)`, two sessions in one process over loopback, one sender task
// sending flat out and one reader, for a String and a Data field of each size, in JSON and in
// the binary encoding. Each case runs a warm-up second, then `--seconds` (default 3) counted at
// the reader; CPU is the process's (both sessions), per message delivered.
//
//   swift build -c release --product SessionBenchmark && .build/release/SessionBenchmark [--seconds N] [--sizes 128,1024]
import BenchmarkSupport
import Foundation
import Logging
import MultipeerCore
import MultipeerSession

struct TextMessage: Codable, Sendable {
    var number: Int
    var text: String
}

struct BytesMessage: Codable, Sendable {
    var number: Int
    var bytes: Data
}

struct Case: Codable, Sendable {
    var encoding: String
    var field: String
    var payloadBytes: Int
    var messagesPerSecond: Double
    var payloadMegabytesPerSecond: Double
    var cpuMicrosecondsPerMessage: Double
}

let duration = Duration.seconds(Bench.option("--seconds").flatMap(Int.init) ?? 3)
let sizes = Bench.option("--sizes").map { $0.split(separator: ",").compactMap { Int($0) } } ?? [128, 1 << 10, 16 << 10, 256 << 10]
let psk = try PreSharedKey.generate(identity: "session-benchmark")
let quiet: Logger = {
    var logger = Logger(label: "session-benchmark")
    logger.logLevel = .critical
    return logger
}()

func session(_ name: String, encoding: MessageEncoding, dialling endpoint: String? = nil) -> MultipeerSession {
    var configuration = MultipeerSession.Configuration(
        serviceType: "_navlog._tcp", peer: PeerInfo(displayName: name), psk: psk,
        discovery: .staticPeers(endpoint.map { [$0] } ?? []), statsInterval: nil, logger: quiet)
    configuration.messageEncoding = encoding
    return MultipeerSession(configuration: configuration)
}

/// Sends `make(n)` flat out; returns what the reader counted after the warm-up.
func measure<Message: Codable & Sendable>(
    _ type: Message.Type, encoding: MessageEncoding, payloadBytes: Int, field: String, _ make: @escaping @Sendable (Int) -> Message
) async -> Case {
    let receiver = session("receiver", encoding: encoding)
    let receiverEvents = receiver.events
    let inbox = receiver.messages(of: type)
    return await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await receiver.run() }
        var port = 0
        for await event in receiverEvents { if case .listening(let listening) = event { port = listening; break } }
        let sender = session("sender", encoding: encoding, dialling: "127.0.0.1:\(port)")
        let senderEvents = sender.events
        group.addTask { try await sender.run() }
        for await event in senderEvents { if case .peerJoined = event { break } }
        let target = receiver.peerID
        let sending = Task {
            var number = 0
            while !Task.isCancelled {
                try await sender.send(make(number), to: target)
                number += 1
            }
        }
        let clock = ContinuousClock()
        let warmUpEnds = clock.now + .seconds(1)
        var counted = 0
        var started: ContinuousClock.Instant?
        var cpuAtStart = 0.0
        for await _ in inbox {
            guard let start = started else {
                if clock.now >= warmUpEnds {
                    started = clock.now
                    cpuAtStart = Bench.cpuSeconds()
                }
                continue
            }
            counted += 1
            if clock.now - start >= duration { break }
        }
        let elapsed = (clock.now - started!).seconds
        let cpu = Bench.cpuSeconds() - cpuAtStart
        sending.cancel()
        _ = await sending.result
        group.cancelAll()
        let rate = Double(counted) / elapsed
        return Case(
            encoding: "\(encoding)", field: field, payloadBytes: payloadBytes, messagesPerSecond: rate,
            payloadMegabytesPerSecond: rate * Double(payloadBytes) / 1e6, cpuMicrosecondsPerMessage: cpu / Double(counted) * 1e6)
    }
}

print("Reliable messages through send -> messages(of:), one sender, \(duration) a case after 1 s of warm-up")
print("encoding  field    payload    messages/s    payload MB/s   CPU µs/message (both sessions)")
var results: [Case] = []
for size in sizes {
    let text = String(repeating: "x", count: size)
    let bytes = Data(repeating: 0xA5, count: size)
    for encoding in [MessageEncoding.json, .binary] {
        for field in ["String", "Data"] {
            let result = field == "String"
                ? await measure(TextMessage.self, encoding: encoding, payloadBytes: size, field: field) { TextMessage(number: $0, text: text) }
                : await measure(BytesMessage.self, encoding: encoding, payloadBytes: size, field: field) { BytesMessage(number: $0, bytes: bytes) }
            results.append(result)
            print(
                "\(result.encoding)".padding(toLength: 10, withPad: " ", startingAt: 0) + field.padding(toLength: 9, withPad: " ", startingAt: 0)
                    + String(format: "%-11d%-14.0f%-15.1f%.1f", size, result.messagesPerSecond, result.payloadMegabytesPerSecond,
                             result.cpuMicrosecondsPerMessage))
        }
    }
}
try Bench.writeJSON(results, defaultPath: "bench-results/session.json")
