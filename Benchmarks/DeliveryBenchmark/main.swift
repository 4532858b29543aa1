// Reliable delivery under churn: goodput (messages delivered per second) with no faults and
// with a reset every 2 s, every message checked to arrive once and in order, and the bytes on
// the wire (both ways, through the proxy) per payload byte. And a slow reader: 16 KiB messages
// sent flat out to a reader that takes 1 ms a message; the process (both sessions) must stay
// within the bounds of the sender's outbox and the reader's stream, whatever the backlog wants.
// And a stopped reader: 64-byte messages, each in a write (and so a read) of its own, alone or
// each after a 64 KiB message of another type that a reader takes at once, until the stopped
// stream is full and the link waits: what the receiver then holds, against
// Limits.receiveBuffer (4 MiB).
//
//   swift build -c release --product DeliveryBenchmark && .build/release/DeliveryBenchmark [--seconds N]
import BenchmarkSupport
import Foundation
import Glibc
import Logging
import MultipeerSession
import MultipeerTLS
import MultipeerTestSupport

struct Numbered: Codable, Sendable {
    var number: Int
    var padding: String
}

let duration = Duration.seconds(Bench.option("--seconds").flatMap(Int.init) ?? 10)
let padding = String(repeating: "x", count: 128)
let psk = try PreSharedKey.generate(identity: "delivery")
let quiet: Logger = {
    var logger = Logger(label: "delivery")
    logger.logLevel = .critical
    return logger
}()

func session(_ name: String, dialling endpoint: String? = nil) -> MultipeerSession {
    var configuration = MultipeerSession.Configuration(
        serviceType: "_navlog._tcp",
        peer: PeerInfo(displayName: name),
        psk: psk,
        discovery: .staticPeers(endpoint.map { [$0] } ?? []),
        statsInterval: nil,
        logger: quiet
    )
    // JSON, as every figure of this benchmark so far was measured (the default became the
    // binary encoding in 545e707): its goodput and wire bytes stay comparable.
    configuration.messageEncoding = .json
    return MultipeerSession(configuration: configuration, identity: PeerIdentity())
}

func firstPort(_ events: EventStream) async -> Int {
    for await event in events { if case .listening(let port) = event { return port } }
    return 0
}

func untilActive(_ events: EventStream, _ peerID: UUID) async {
    for await event in events { if case .peerJoined(let peer) = event, peer.id == peerID { return } }
}

/// Sends `padding`-padded messages flat out for `duration`; the reader waits `readerDelay` after each.
func measure(
    _ scenario: String,
    padding: String = padding,
    resetEvery interval: Duration? = nil,
    readerDelay: Duration? = nil
) async throws -> Goodput {
    let encodedSize = try JSONEncoder().encode(Numbered(number: 12_345, padding: padding)).count
    let backlog = Backlog()
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
            var next = 0
            var outOfOrder = 0
            for await (_, message) in inbox {
                if message.number == next { next += 1 } else { outOfOrder += 1 }
                backlog.read()
                if let readerDelay { try? await Task.sleep(for: readerDelay) }
            }
            return (next, outOfOrder)
        }
        var sent = 0
        var rssAfterOneSecond: Double?
        while clock.now - start < duration {
            try await sender.send(Numbered(number: sent, padding: padding), to: receiver.peerID)
            sent += 1
            backlog.sent()
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
            scenario: scenario,
            seconds: elapsed.seconds,
            messagesDelivered: delivered,
            messagesPerSecond: Double(delivered) / elapsed.seconds,
            lost: sent - delivered,
            outOfOrder: outOfOrder,
            wireBytesPerPayloadByte: Double(wire) / Double(delivered * encodedSize),
            rssGrowthKiB: rssGrowth,
            maximumBacklog: backlog.maximum
        )
    }
}

struct Small: Codable, Sendable {
    var number: Int
    var padding: String
}
struct Large: Codable, Sendable { var bytes: Data }

/// What a stream nobody reads holds once full: 64-byte messages, each sent and acknowledged
/// before the next (a write of its own), alone or right behind a 64 KiB message of another type
/// that a reader takes at once (`interleaved`: the two in one write, and the small one read out
/// of the buffer the large one was put together in); until an acknowledgement does not come
/// within 2 s (the stream is full, the link waits). The resident memory this grew by.
func stoppedReader(interleaved: Bool) async throws -> StoppedReader {
    let receiver = session("receiver")
    let receiverEvents = receiver.events
    let stopped = receiver.messages(of: Small.self)  // never read
    let large = receiver.messages(of: Large.self)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await receiver.run() }
        let port = await firstPort(receiverEvents)
        let dialler = session("sender", dialling: "127.0.0.1:\(port)")
        let diallerEvents = dialler.events
        group.addTask { try await dialler.run() }
        await untilActive(diallerEvents, receiver.peerID)
        group.addTask { for await _ in large {} }
        let bulk = Large(bytes: Data(repeating: 0x5A, count: 64 << 10))
        let small = Small(number: 0, padding: String(repeating: "x", count: 36))  // 64 bytes of JSON
        // Warm up (a link's buffers, the allocator), then measure from here.
        for _ in 0..<8 { try await dialler.send(bulk, to: receiver.peerID, awaitAcknowledgement: true) }
        Bench.returnFreedMemory()
        let before = Bench.residentKiB()
        var taken = 0
        while taken < 1_000_000 {
            if interleaved { try await dialler.send(bulk, to: receiver.peerID) }
            let acknowledged = try await withThrowingTaskGroup(of: Bool.self) { race in
                race.addTask {
                    try await dialler.send(small, to: receiver.peerID, awaitAcknowledgement: true)
                    return true
                }
                race.addTask {
                    try await Task.sleep(for: .seconds(2))
                    return false
                }
                defer { race.cancelAll() }
                return try await race.next() ?? false
            }
            guard acknowledged else { break }
            taken += 1
        }
        let grown = Bench.residentKiB() - before
        group.cancelAll()
        _ = stopped
        return StoppedReader(interleaved: interleaved, messagesTaken: taken, rssGrowthKiB: grown)
    }
}

let results = [
    try await measure("no faults"),
    try await measure("a reset every 2 s", resetEvery: .seconds(2)),
    try await measure(
        "slow reader, 16 KiB",
        padding: String(repeating: "x", count: 16 << 10),
        readerDelay: .milliseconds(1)
    ),
]
print(
    "Reliable delivery, one sender, \(duration) each (messages of \(padding.count + 30) bytes; the slow reader's of 16 KiB)"
)
print(
    "scenario             messages/s   delivered   lost   out of order   wire/payload   RSS growth after 1 s (KiB)   most ahead"
)
for r in results {
    print(
        r.scenario.padding(toLength: 21, withPad: " ", startingAt: 0)
            + String(
                format: "%-13.0f%-12d%-7d%-15d%-15.2f%-29.0f%d",
                r.messagesPerSecond,
                r.messagesDelivered,
                r.lost,
                r.outOfOrder,
                r.wireBytesPerPayloadByte,
                r.rssGrowthKiB,
                r.maximumBacklog ?? 0
            )
    )
}
let limits = MultipeerSession.Limits()
print(
    """
    Bounds held by the slow reader's process (both sessions): the outbox, \(limits.outbox.maximumBytes >> 20) MiB of \
    encoded messages; the reader's stream, \(limits.receiveBuffer.maximumBytes >> 20) MiB and one read of the link \
    (256 KiB) more, each held encoded and decoded.
    """
)
let stoppedReaders = [try await stoppedReader(interleaved: false), try await stoppedReader(interleaved: true)]
print(
    "A stopped reader of 64-byte messages, each in a read of its own, until its stream is full (Limits.receiveBuffer: 1,024 messages, 4 MiB)"
)
print("messages                                          taken before the link waited   RSS growth (KiB)")
for r in stoppedReaders {
    print(
        (r.interleaved ? "each behind a 64 KiB message read at once" : "alone").padding(
            toLength: 50,
            withPad: " ",
            startingAt: 0
        )
            + String(format: "%-31d%.0f", r.messagesTaken, r.rssGrowthKiB)
    )
}
try Bench.writeJSON(results, defaultPath: "bench-results/delivery.json")
try Bench.writeJSON(stoppedReaders, defaultPath: "bench-results/stopped-reader.json")

/// How far the sender got ahead of the reader (sent, not yet read), at most.
///
/// `@unchecked Sendable`: every access to the counters goes through `lock`.
final class Backlog: @unchecked Sendable {
    private let lock = NSLock()
    private var sentCount = 0
    private var readCount = 0
    private var peak = 0

    var maximum: Int { lock.withLock { peak } }

    func sent() {
        lock.withLock {
            sentCount += 1
            peak = max(peak, sentCount - readCount)
        }
    }

    func read() {
        lock.withLock { readCount += 1 }
    }
}
