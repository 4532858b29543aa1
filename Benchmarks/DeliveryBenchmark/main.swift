// Reliable delivery under churn: goodput (messages delivered per second) with no faults and
// with a reset every 2 s, every message checked to arrive once and in order, and the bytes on
// the wire (both ways, through the proxy) per payload byte.
//
//   swift build -c release --product DeliveryBenchmark && .build/release/DeliveryBenchmark [--seconds N]
import BenchmarkSupport
import Foundation
import Glibc
import Logging
import MultipeerSession
import MultipeerTestSupport
import MultipeerTLS

struct Numbered: Codable, Sendable {
    var number: Int
    var padding: String
}

let duration = Duration.seconds(Bench.option("--seconds").flatMap(Int.init) ?? 10)
let padding = String(repeating: "x", count: 128)
/// The JSON size of a typical message: the payload the wire carries.
let encodedSize = try JSONEncoder().encode(Numbered(number: 12_345, padding: padding)).count
let psk = try PreSharedKey.generate(identity: "delivery")
let quiet: Logger = {
    var logger = Logger(label: "delivery")
    logger.logLevel = .critical
    return logger
}()

func session(_ name: String, dialling endpoint: String? = nil) -> MultipeerSession {
    MultipeerSession(configuration: .init(
        serviceType: "_navlog._tcp", peer: PeerInfo(displayName: name), psk: psk,
        discovery: .staticPeers(endpoint.map { [$0] } ?? []), statsInterval: nil, logger: quiet))
}

func firstPort(_ events: AsyncStream<SessionEvent>) async -> Int {
    for await event in events { if case .listening(let port) = event { return port } }
    return 0
}

func untilActive(_ events: AsyncStream<SessionEvent>, _ peerID: UUID) async {
    for await event in events { if case .peerJoined(let peer) = event, peer.id == peerID { return } }
}

func measure(_ scenario: String, resetEvery interval: Duration?) async throws -> Goodput {
    let receiver = session("receiver")
    let receiverEvents = receiver.events
    let inbox = receiver.messages(of: Numbered.self)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await receiver.run() }
        let proxy = try await FaultProxy(forwardingTo: await firstPort(receiverEvents))
        let sender = session("sender", dialling: "127.0.0.1:\(proxy.port)")
        let senderEvents = sender.events
        group.addTask { try await sender.run() }
        await untilActive(senderEvents, receiver.peerID)
        let clock = ContinuousClock()
        let start = clock.now
        if let interval {
            group.addTask {
                while clock.now - start < duration {
                    try await Task.sleep(for: interval)
                    await proxy.resetConnections()
                }
            }
        }
        let counting = Task {
            var next = 0, outOfOrder = 0
            for await (_, message) in inbox {
                if message.number == next { next += 1 } else { outOfOrder += 1 }
            }
            return (next, outOfOrder)
        }
        var sent = 0
        var rssAfterOneSecond: Double?
        while clock.now - start < duration {
            try await sender.send(Numbered(number: sent, padding: padding), to: receiver.peerID)
            sent += 1
            if rssAfterOneSecond == nil, clock.now - start >= .seconds(1) { rssAfterOneSecond = Bench.residentKiB() }
        }
        let rssGrowth = Bench.residentKiB() - (rssAfterOneSecond ?? Bench.residentKiB())
        // The last one, acknowledged: everything before it has arrived.
        try await sender.send(Numbered(number: sent, padding: padding), to: receiver.peerID, awaitAcknowledgement: true)
        sent += 1
        let elapsed = clock.now - start
        let wire = proxy.bytesForwarded
        group.cancelAll()
        await proxy.stop()
        let (delivered, outOfOrder) = await counting.value
        return Goodput(
            scenario: scenario, seconds: elapsed.seconds, messagesDelivered: delivered,
            messagesPerSecond: Double(delivered) / elapsed.seconds, lost: sent - delivered, outOfOrder: outOfOrder,
            wireBytesPerPayloadByte: Double(wire) / Double(delivered * encodedSize), rssGrowthKiB: rssGrowth)
    }
}

let results = [
    try await measure("no faults", resetEvery: nil),
    try await measure("a reset every 2 s", resetEvery: .seconds(2)),
]
print("Reliable delivery of \(encodedSize)-byte messages, one sender, \(duration) each")
print("scenario            messages/s   delivered   lost   out of order   wire/payload   RSS growth after 1 s (KiB)")
for r in results {
    print(r.scenario.padding(toLength: 20, withPad: " ", startingAt: 0)
        + String(format: "%-13.0f%-12d%-7d%-15d%-15.2f%.0f", r.messagesPerSecond, r.messagesDelivered, r.lost, r.outOfOrder,
                 r.wireBytesPerPayloadByte, r.rssGrowthKiB))
}
try Bench.writeJSON(results, defaultPath: "bench-results/delivery.json")
