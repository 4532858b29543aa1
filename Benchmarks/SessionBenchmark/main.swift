// The public API's speed, as an application sees it: messages through `send(_:to:)` and
// `messages(of:)`, two sessions in one process over loopback, one sender task sending flat out
// and one reader, reliable and unreliable, for a String and a Data field of each size, in JSON
// and in the binary encoding. Each case runs a warm-up second, then at least `--seconds`
// (default 3) and three messages, counted at the reader; CPU is the process's (both sessions),
// per message delivered. Beside them, in the same run: the C GnuTLS baseline (LinkBenchmark's
// program, frames of the same sizes one way over loopback) for the ratio, and the latency of a
// 1 KiB message sent every 2 ms, alone and while 64 MiB messages are in flight on the same link;
// and the API's round trip (the peer's application replying) in runs alternating with the C
// program's ping-pong of the same frames, as the median of five paired ratios. gRPC Swift 2
// (Benchmarks/GRPCBaseline, when built) runs in the same turns: its messages/s and round trips.
//
//   swift build -c release --product SessionBenchmark && .build/release/SessionBenchmark [--seconds N] [--sizes 128,1024]
//       [--deliveries reliable,unreliable] [--encodings json,binary] [--fields String,Data] [--no-latency]
//       [--case-deadline SECONDS] [--no-pairs] [--pair-sizes 128,1024,65536] [--no-round-trip] [--grpc PATH | --no-grpc]
//   LD_PRELOAD=.build/release/liblockcounter.so .build/release/SessionBenchmark --locks [--seconds N]
//       (lock acquisitions per message alone, into bench-results/session-locks.json; Benchmarks/LockCounter)
//   .build/release/SessionBenchmark --resources [--resource-sizes 67108864,1073741824]
//       (files through sendResource -> incomingResources alone, into bench-results/session-resources.json)
//   .build/release/SessionBenchmark --streams [--stream-bytes 268435456]
//       (a byte stream through openStream -> incomingStreams alone, into bench-results/session-streams.json)
//   .build/release/SessionBenchmark --mixed [--file-bytes 1073741824] [--stream-bytes 268435456] [--seconds N]
//       (a 1 KiB message's latency while a file and a stream run on the same link, into bench-results/session-mixed.json)
//   .build/release/SessionBenchmark --round-trips-alone pool|executors
//       (the API's round trips alone, four runs of 5,000, each run's p50: for profiling or counting one way of running them)
import BaselineSupport
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

/// The small message whose latency is measured: when it was sent, on the process's clock.
struct Probe: MultipeerMessage {
    static var wireName: String { "probe" }
    static var wireEncoding: MessageEncoding? { .binary }
    var sentNanoseconds: Int64
    var padding: Data
}

func list(_ name: String, _ defaults: [String]) -> [String] {
    Bench.option(name).map { $0.split(separator: ",").map(String.init) } ?? defaults
}

let duration = Duration.seconds(Bench.option("--seconds").flatMap(Int.init) ?? 3)
let sizes = list("--sizes", ["128", "1024", "16384", "262144", "1048576", "67108864"]).compactMap { Int($0) }
let deliveries = list("--deliveries", ["reliable", "unreliable"])
let encodings = list("--encodings", ["json", "binary"])
let fields = list("--fields", ["String", "Data"])
/// The outbox's count, for a sweep (`--outbox N`; default: `Limits`' own).
let outboxCount = Bench.option("--outbox").flatMap(Int.init)
let psk = try PreSharedKey.generate(identity: "session-benchmark")
let quiet: Logger = {
    var logger = Logger(label: "session-benchmark")
    logger.logLevel = .critical
    return logger
}()
/// The process's pthread mutex acquisitions so far, when Benchmarks/LockCounter is preloaded.
let lockAcquisitions: (@convention(c) () -> UInt64)? = dlsym(nil, "multipeer_lock_acquisitions").map {
    unsafeBitCast($0, to: (@convention(c) () -> UInt64).self)
}
/// The bytes the process has copied so far in memcpy and memmove calls of 256 bytes or more,
/// when Benchmarks/LockCounter is preloaded.
let bytesCopied: (@convention(c) () -> UInt64)? = dlsym(nil, "multipeer_bytes_copied").map {
    unsafeBitCast($0, to: (@convention(c) () -> UInt64).self)
}
let epoch = ContinuousClock.now
func nanosecondsSinceStart() -> Int64 {
    let elapsed = (ContinuousClock.now - epoch).components
    return elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000
}

func session(_ name: String, encoding: MessageEncoding, dialling endpoint: String? = nil) -> MultipeerSession {
    var configuration = MultipeerSession.Configuration(
        serviceType: "_navlog._tcp",
        peer: PeerInfo(displayName: name),
        psk: psk,
        discovery: .staticPeers(endpoint.map { [$0] } ?? []),
        statsInterval: nil,
        logger: quiet
    )
    configuration.messageEncoding = encoding
    if let count = outboxCount { configuration.limits.outbox.maximumCount = count }
    return MultipeerSession(configuration: configuration, identity: PeerIdentity())
}

/// How long a case may take, pair set-up included, before the run ends with what the two
/// sessions show (`--case-deadline`, seconds): once, a run sat waiting with its link up and not
/// a message through, and said nothing.
let caseDeadline = Duration.seconds(Int(Bench.option("--case-deadline") ?? "180") ?? 180)

/// Runs a receiver and a sender joined to it over loopback, and `body` with them; ends the
/// process, saying where both stand, if it takes longer than ``caseDeadline``.
func withPair<Result: Sendable>(
    encoding: MessageEncoding,
    _ body: @escaping @Sendable (_ receiver: MultipeerSession, _ sender: MultipeerSession) async -> Result
) async -> Result {
    let pair = PairProgress()
    let watchdog = Task {
        guard (try? await Task.sleep(for: caseDeadline)) != nil else { return }
        var report = "SessionBenchmark: a case did not end within \(caseDeadline) (--case-deadline)"
        if let (receiver, sender) = pair.sessions {
            for (name, session, peer) in [("receiver", receiver, sender.peerID), ("sender", sender, receiver.peerID)] {
                let stats =
                    await session.linkStats(for: peer).map {
                        "\($0), \($0.quality.bytesIn) bytes in, \($0.quality.bytesOut) out"
                    } ?? "not active"
                report +=
                    "\n  \(name): \(await session.linkCount) links; peer \(stats); delivery: \(await session.deliverySummary(for: peer))"
            }
        } else {
            report += "\n  the two sessions never met"
        }
        FileHandle.standardError.write(Data((report + "\n").utf8))
        exit(1)
    }
    defer { watchdog.cancel() }
    let receiver = session("receiver", encoding: encoding)
    let receiverEvents = receiver.events
    return await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await receiver.run() }
        var port = 0
        for await event in receiverEvents {
            if case .listening(let listening) = event {
                port = listening
                break
            }
        }
        let sender = session("sender", encoding: encoding, dialling: "127.0.0.1:\(port)")
        let senderEvents = sender.events
        group.addTask { try await sender.run() }
        for await event in senderEvents { if case .peerJoined = event { break } }
        pair.sessions = (receiver, sender)
        let result = await body(receiver, sender)
        group.cancelAll()
        return result
    }
}

/// The sessions of the case under way, once they have met (for the deadline's report).
final class PairProgress: @unchecked Sendable {  // (its one property under its lock)
    private let lock = NSLock()
    private var pair: (MultipeerSession, MultipeerSession)?
    var sessions: (receiver: MultipeerSession, sender: MultipeerSession)? {
        get { lock.withLock { pair } }
        set { lock.withLock { pair = newValue } }
    }
}

/// Sends `make(n)` flat out; returns what the reader counted after the warm-up.
func measure<Message: Codable & Sendable>(
    _ type: Message.Type,
    delivery: String,
    encoding: MessageEncoding,
    payloadBytes: Int,
    field: String,
    for length: Duration = duration,
    _ make: @escaping @Sendable (Int) -> Message
) async -> SessionCase {
    await withPair(encoding: encoding) { receiver, sender in
        let inbox = receiver.messages(of: type)
        let target = receiver.peerID
        let senderEvents = sender.events
        let sending = Task {
            var number = 0
            do {
                while !Task.isCancelled {
                    try await sender.send(
                        make(number),
                        to: target,
                        delivery: delivery == "reliable" ? .reliable : .unreliable
                    )
                    number += 1
                }
            } catch let error where !Task.isCancelled {
                // The reader would wait for ever: say why (and why the link went, if it did), and end the run.
                let left = await withTaskGroup(of: String.self) { group in
                    group.addTask {
                        for await event in senderEvents {
                            if case .peerLeft(_, let reason) = event { return " (the peer left: \(reason))" }
                        }
                        return ""
                    }
                    group.addTask {
                        try? await Task.sleep(for: .milliseconds(500))
                        return " (the peer had not left)"
                    }
                    defer { group.cancelAll() }
                    return await group.next()!
                }
                FileHandle.standardError.write(
                    Data(
                        "SessionBenchmark: a \(delivery) \(type) send failed after \(number) messages: \(error)\(left)\n"
                            .utf8
                    )
                )
                exit(1)
            }
        }
        let clock = ContinuousClock()
        let warmUpEnds = clock.now + .seconds(1)
        var counted = 0
        var started: ContinuousClock.Instant?
        var cpuAtStart = 0.0
        var (locksAtStart, copiedAtStart): (UInt64?, UInt64?)
        for await _ in inbox {
            guard let start = started else {
                if clock.now >= warmUpEnds {
                    started = clock.now
                    cpuAtStart = Bench.cpuSeconds()
                    (locksAtStart, copiedAtStart) = (lockAcquisitions?(), bytesCopied?())
                }
                continue
            }
            counted += 1
            if clock.now - start >= length && counted >= 3 { break }
        }
        let elapsed = (clock.now - started!).seconds
        let cpu = Bench.cpuSeconds() - cpuAtStart
        let locks = locksAtStart.map { Double(lockAcquisitions!() - $0) / Double(counted) }
        let copies = copiedAtStart.map { Double(bytesCopied!() - $0) / Double(counted) / Double(payloadBytes) }
        sending.cancel()
        _ = await sending.result
        let rate = Double(counted) / elapsed
        var result = SessionCase(
            delivery: delivery,
            encoding: "\(encoding)",
            field: field,
            payloadBytes: payloadBytes,
            messagesPerSecond: rate,
            cpuMicrosecondsPerMessage: cpu / Double(counted) * 1e6
        )
        result.lockAcquisitionsPerMessage = locks
        result.payloadCopiesPerMessage = copies
        return result
    }
}

/// A 1 KiB message every 2 ms for `duration`, alone or while 64 MiB messages go flat out on the
/// same link (reliable, binary, a Data field): how long each took from `send` to the reader.
func probeLatency(besideLargeMessages: Bool) async -> ProbeLatency {
    await withPair(encoding: .binary) { receiver, sender in
        let probes = receiver.messages(of: Probe.self)
        let large = receiver.messages(of: BytesMessage.self)
        let target = receiver.peerID
        let largeBytes = Data(repeating: 0x5A, count: 64 << 20)
        let reading = Task { for await _ in large {} }
        let sendingLarge = Task {
            guard besideLargeMessages else { return }
            var number = 0
            while !Task.isCancelled {
                try await sender.send(BytesMessage(number: number, bytes: largeBytes), to: target)
                number += 1
            }
        }
        if besideLargeMessages { await warmUp() }
        let mappingsBefore = PayloadMemory.mappingsMade
        let padding = Data(repeating: 1, count: 1024)
        let sendingProbes = Task {
            let end = ContinuousClock.now + duration
            while ContinuousClock.now < end {
                try await sender.send(Probe(sentNanoseconds: nanosecondsSinceStart(), padding: padding), to: target)
                try await Task.sleep(for: .milliseconds(2))
            }
            try await sender.send(Probe(sentNanoseconds: -1, padding: padding), to: target)
        }
        var samples: [Double] = []
        for await probe in probes {
            guard probe.message.sentNanoseconds >= 0 else { break }
            samples.append(Double(nanosecondsSinceStart() - probe.message.sentNanoseconds) / 1e6)
        }
        _ = await sendingProbes.result
        sendingLarge.cancel()
        _ = await sendingLarge.result
        reading.cancel()
        return ProbeLatency(
            besideLargeMessages: besideLargeMessages,
            milliseconds: samples,
            freshMappings: PayloadMemory.mappingsMade - mappingsBefore
        )
    }
}

/// The API's round trips, in nanoseconds: a 1 KiB message (reliable, binary, a Data field)
/// sent, the peer's application sending it back as it reads it, and the reply read; one at a
/// time, `count` after 200 unmeasured. `onExecutors`: both applications' tasks prefer their
/// sessions' executors (`MultipeerSession.executor`), as the guide suggests for requests and
/// answers; else they run on Swift's global pool, as a task does by default.
func apiRoundTrips(count: Int, onExecutors: Bool = false) async -> [Double] {
    await withPair(encoding: .binary) { receiver, sender in
        let questions = receiver.messages(of: BytesMessage.self)
        let echo = Task(executorPreference: onExecutors ? receiver.executor : nil) {
            for await (peer, message) in questions { try await receiver.send(message, to: peer.id) }
        }
        let samples = await withTaskExecutorPreference(onExecutors ? sender.executor : nil) {
            await roundTrips(count: count, from: sender, to: receiver)
        }
        echo.cancel()
        return samples
    }
}

/// `count` round trips (after 200 unmeasured) of `sender`'s to `receiver`, which echoes them.
func roundTrips(count: Int, from sender: MultipeerSession, to receiver: MultipeerSession) async -> [Double] {
    var answers = sender.messages(of: BytesMessage.self).makeAsyncIterator()
    let bytes = Data(repeating: 0xA5, count: 1024)
    var samples: [Double] = []
    for number in 0..<(200 + count) {
        let start = ContinuousClock.now
        do {
            try await sender.send(BytesMessage(number: number, bytes: bytes), to: receiver.peerID)
        } catch {
            FileHandle.standardError.write(Data("SessionBenchmark: a round trip's send failed: \(error)\n".utf8))
            exit(1)
        }
        _ = await answers.next()
        if number >= 200 { samples.append(Double((ContinuousClock.now - start).nanoseconds)) }
    }
    return samples
}

/// Waits until the large messages under way have the memory they need: at least 500 ms, then
/// until 3 s pass with no payload buffer mapped afresh (at most 30 s). The buffers a flow
/// of 64 MiB messages keeps in use (the sender's message in the outbox and the next one encoded,
/// the receiver's assembly and the message its reader holds) are mapped as the flow first needs
/// them, which may be seconds in; each is memory touched for the first time, and where the host
/// backs a guest's memory only then (a Firecracker VM with free page reporting, as here) that
/// costs 150 ms and more per 64 MiB on the thread that touches it. The steady state is measured;
/// a fresh mapping during it is counted in the report.
func warmUp() async {
    let start = ContinuousClock.now
    try? await Task.sleep(for: .milliseconds(500))
    var mapped = (count: PayloadMemory.mappingsMade, at: ContinuousClock.now)
    while ContinuousClock.now - mapped.at < .seconds(3), ContinuousClock.now - start < .seconds(30) {
        try? await Task.sleep(for: .milliseconds(100))
        if PayloadMemory.mappingsMade != mapped.count { mapped = (PayloadMemory.mappingsMade, ContinuousClock.now) }
    }
}

/// How many times the C program runs per size: its rate for small frames moves from one run to
/// the next by a factor of two and more on this machine (220k to 550k frames/s at 1 KiB: the
/// fewer times its reader catches up and sleeps, the fewer wake-ups its writer pays for), so one
/// run, or the median of three, says little.
let baselineRuns = 9

/// The C GnuTLS program's one-way rate for `size`-byte frames over ``baselineRuns`` runs of
/// about half a second each.
func baselineRate(_ size: Int, runs: Int = baselineRuns) throws -> BaselineRate {
    let baseline = Baseline(useTLS: true, key: (0..<32).map { UInt8($0) }, spread: true)
    let count = max(32, min(200_000, (512 << 20) / size))
    var rates: [Double] = []
    for _ in 0..<runs { rates.append(Double(count) / (try baseline.throughput(payload: size, count: count))) }
    return BaselineRate(payloadBytes: size, runs: rates)
}

if let mode = Bench.option("--round-trips-alone") {
    guard mode == "pool" || mode == "executors" else {
        FileHandle.standardError.write(
            Data("SessionBenchmark: --round-trips-alone takes pool or executors, not '\(mode)'\n".utf8)
        )
        exit(64)
    }
    for _ in 0..<4 {
        let samples = await apiRoundTrips(count: 5_000, onExecutors: mode == "executors").sorted()
        print(String(format: "API round trips (%@): p50 %.1f µs", mode, samples[samples.count / 2] / 1000))
    }
    exit(0)
}

if Bench.flag("--locks") {
    guard lockAcquisitions != nil else {
        print(
            "--locks counts the process's locks with Benchmarks/LockCounter preloaded: build it (see lockcounter.c) and run with LD_PRELOAD=.build/release/liblockcounter.so"
        )
        exit(64)
    }
    let bytes = Data(repeating: 0xA5, count: 1024)
    let flatOut = await measure(
        BytesMessage.self,
        delivery: "reliable",
        encoding: .binary,
        payloadBytes: 1024,
        field: "Data"
    ) {
        BytesMessage(number: $0, bytes: bytes)
    }
    let trips = 5_000
    let (before, copiedBefore) = (lockAcquisitions!(), bytesCopied?())
    _ = await apiRoundTrips(count: trips)
    let perTrip = Double(lockAcquisitions!() - before) / Double(200 + trips)
    var counts = LockCounts(payloadBytes: 1024, flatOut: flatOut.lockAcquisitionsPerMessage!, roundTrip: perTrip / 2)
    counts.flatOutPayloadCopies = flatOut.payloadCopiesPerMessage
    counts.roundTripPayloadCopies = copiedBefore.map { Double(bytesCopied!() - $0) / Double(2 * (200 + trips)) / 1024 }
    print("Lock acquisitions (pthread mutexes, the whole process: both ends) per reliable binary 1 KiB message:")
    print(String(format: "  sent flat out: %.2f (%.0f messages/s)", counts.flatOut, flatOut.messagesPerSecond))
    print(
        String(
            format: "  in round trips (the peer's application replying): %.2f a message, %.2f a trip",
            counts.roundTrip,
            perTrip
        )
    )
    if let flat = counts.flatOutPayloadCopies, let trip = counts.roundTripPayloadCopies {
        print(
            "Copies of the payload per message, both ends (bytes in memcpy and memmove calls of 256 bytes or more, over 1,024):"
        )
        print(String(format: "  sent flat out: %.2f; in round trips: %.2f", flat, trip))
    }
    try Bench.writeJSON(counts, defaultPath: "bench-results/session-locks.json")
    exit(0)
}

if Bench.flag("--resources") {
    let result = try await measureResources(
        sizes: list("--resource-sizes", ["67108864", "1073741824"]).compactMap { Int($0) }
    )
    try Bench.writeJSON(result, defaultPath: "bench-results/session-resources.json")
    exit(0)
}

if Bench.flag("--mixed") {
    let fileBytes = Int(Bench.option("--file-bytes") ?? "") ?? 1 << 30
    let streamBytes = Int(Bench.option("--stream-bytes") ?? "") ?? 256 << 20
    try Bench.writeJSON(
        try await measureMixed(fileBytes: fileBytes, streamBytes: streamBytes),
        defaultPath: "bench-results/session-mixed.json"
    )
    exit(0)
}

if Bench.flag("--streams") {
    let result = try await measureStream(bytes: Int(list("--stream-bytes", ["268435456"])[0]) ?? 256 << 20)
    try Bench.writeJSON(result, defaultPath: "bench-results/session-streams.json")
    exit(0)
}

print(
    "C GnuTLS baseline: frames one way over loopback, the same sizes (median of \(baselineRuns) runs; the slowest and fastest run)"
)
var baselines: [BaselineRate] = []
for size in sizes {
    let rate = try baselineRate(size)
    baselines.append(rate)
    print(
        String(
            format: "  %9d B: %9.0f messages/s, %7.1f MB/s (%.0f-%.0f messages/s)",
            size,
            rate.messagesPerSecond,
            rate.megabytesPerSecond,
            rate.slowestMessagesPerSecond ?? 0,
            rate.fastestMessagesPerSecond ?? 0
        )
    )
}

print("\nMessages through send -> messages(of:), one sender, \(duration) (and 3 messages) a case after 1 s of warm-up")
print("delivery    encoding  field    payload     messages/s   payload MB/s  CPU µs/message  of C GnuTLS")
var cases: [SessionCase] = []
for size in sizes {
    let text = String(repeating: "x", count: size)
    let bytes = Data(repeating: 0xA5, count: size)
    let c = baselines.first { $0.payloadBytes == size }
    for delivery in deliveries {
        for encoding in encodings.compactMap({ $0 == "json" ? MessageEncoding.json : $0 == "binary" ? .binary : nil }) {
            for field in fields {
                var result =
                    field == "String"
                    ? await measure(
                        TextMessage.self,
                        delivery: delivery,
                        encoding: encoding,
                        payloadBytes: size,
                        field: field
                    ) {
                        TextMessage(number: $0, text: text)
                    }
                    : await measure(
                        BytesMessage.self,
                        delivery: delivery,
                        encoding: encoding,
                        payloadBytes: size,
                        field: field
                    ) {
                        BytesMessage(number: $0, bytes: bytes)
                    }
                result.ofBaseline = c.map { result.messagesPerSecond / $0.messagesPerSecond }
                cases.append(result)
                print(
                    delivery.padding(toLength: 12, withPad: " ", startingAt: 0)
                        + "\(encoding)".padding(toLength: 10, withPad: " ", startingAt: 0)
                        + field.padding(toLength: 9, withPad: " ", startingAt: 0)
                        + String(
                            format: "%-12d%-13.0f%-14.1f%-16.1f%.0f %%",
                            size,
                            result.messagesPerSecond,
                            result.payloadMegabytesPerSecond,
                            result.cpuMicrosecondsPerMessage,
                            (result.ofBaseline ?? 0) * 100
                        )
                )
            }
        }
    }
}

var latency: [ProbeLatency] = []
if !Bench.flag("--no-latency") {
    print("\nA 1 KiB reliable message every 2 ms for \(duration), send to reader:")
    for beside in [false, true] {
        let result = await probeLatency(besideLargeMessages: beside)
        latency.append(result)
        print(
            "  \(beside ? "while 64 MiB messages are in flight" : "alone"): "
                + String(
                    format:
                        "p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d messages; %d payload buffers mapped afresh meanwhile)",
                    result.p50Milliseconds,
                    result.p99Milliseconds,
                    result.maxMilliseconds,
                    result.count,
                    result.freshMappings
                )
        )
    }
}
// Shares of C that mean something: the C program's rate moves by a factor of two from run to
// run, so each of five runs of ours (reliable, binary, a Data field, 2 s) is followed by a run
// of our bare link (what the API could carry at most), one of the C program and one of gRPC
// Swift 2 (2 s after its warm-up second), and the median of the five shares is reported with its
// spread.
var pairedShares: [PairedShare] = []
if !Bench.flag("--no-pairs") {
    let grpc = GRPCProgram.found
    print(
        "\nReliable binary messages (a Data field), five runs of 2 s, each followed by a run of our bare link, one of the C program\(grpc == nil ? "" : " and one of gRPC Swift 2"):"
    )
    for size in list("--pair-sizes", ["128", "1024", "65536"]).compactMap({ Int($0) }) {
        let bytes = Data(repeating: 0xA5, count: size)
        var (api, link, c, grpcRates) = ([Double](), [Double](), [Double](), [Double]())
        let linkCount = max(32, min(200_000, (512 << 20) / size))
        for _ in 0..<5 {
            api.append(
                await measure(
                    BytesMessage.self,
                    delivery: "reliable",
                    encoding: .binary,
                    payloadBytes: size,
                    field: "Data",
                    for: .seconds(2)
                ) {
                    BytesMessage(number: $0, bytes: bytes)
                }.messagesPerSecond
            )
            link.append(
                Double(linkCount)
                    / (try await OurLink(psk: psk, preferEventLoop: true).throughput(payload: size, count: linkCount))
            )
            c.append(try baselineRate(size, runs: 1).messagesPerSecond)
            if let grpc { grpcRates.append(try grpc.rate(size: size, seconds: 2)) }
        }
        let paired = PairedShare(payloadBytes: size, api: api, c: c, link: link, grpc: grpc == nil ? nil : grpcRates)
        pairedShares.append(paired)
        let rates = { (rates: [Double]) in rates.map { String(format: "%.0f", $0) }.joined(separator: ", ") }
        let share = paired.share
        print(
            String(
                format: "  %5d B: ours %@ msg/s, C %@: share median %.0f %% (%.0f-%.0f %%)",
                size,
                rates(api),
                rates(c),
                share.median * 100,
                share.low * 100,
                share.high * 100
            )
        )
        if let ofLink = paired.ofLink {
            print(
                String(
                    format: "           our link %@ msg/s: share median %.0f %% (%.0f-%.0f %%)",
                    rates(link),
                    ofLink.median * 100,
                    ofLink.low * 100,
                    ofLink.high * 100
                )
            )
        }
        if let ofGRPC = paired.ofGRPC {
            print(
                String(
                    format: "           gRPC Swift 2 %@ msg/s: ours median %.2fx (%.2f-%.2fx)",
                    rates(grpcRates),
                    ofGRPC.median,
                    ofGRPC.low,
                    ofGRPC.high
                )
            )
        }
    }
}

var roundTrip: APIRoundTrip?
if !Bench.flag("--no-round-trip") {
    // Ours and the C program's ping-pong (a thread per core), alternating: a ratio is only as
    // good as its pairing on two shared cores.
    let trips = 2_000
    var pairs: [APIRoundTrip.Pair] = []
    for _ in 0..<5 {
        let api = await apiRoundTrips(count: trips)
        let onExecutors = await apiRoundTrips(count: trips, onExecutors: true)
        let c = try Baseline(useTLS: true, key: (0..<32).map { UInt8($0) }, spread: true).pingPong(
            payload: 1024,
            iterations: trips,
            warmup: 200
        )
        let grpc = try GRPCProgram.found?.roundTrips(size: 1024, count: trips, warmup: 200)
        pairs.append(APIRoundTrip.Pair(api: api, onExecutor: onExecutors, c: c, grpc: grpc))
    }
    let result = APIRoundTrip(payloadBytes: 1024, pairs: pairs)
    roundTrip = result
    print(
        "\nRound trip of a 1 KiB message (send, the peer's application sends it back, the reply read), \(trips) a run, five runs alternating with the C program's ping-pong:"
    )
    print("  (API: the applications' tasks on Swift's global pool; on executors: on their sessions' executors)")
    for pair in pairs {
        print(
            String(
                format:
                    "  API p50 %.1f µs, p99 %.1f µs; on executors p50 %.1f µs, p99 %.1f µs; C GnuTLS p50 %.1f µs: %.2fx, %.2fx",
                pair.apiP50Microseconds,
                pair.apiP99Microseconds,
                pair.onExecutorP50Microseconds ?? 0,
                pair.onExecutorP99Microseconds ?? 0,
                pair.cP50Microseconds,
                pair.ratio,
                pair.onExecutorRatio ?? 0
            )
                + (pair.grpcP50Microseconds.map {
                    String(format: "; gRPC Swift 2 p50 %.1f µs, p99 %.1f µs", $0, pair.grpcP99Microseconds ?? 0)
                } ?? "")
        )
    }
    let ratio = result.ratio
    print(String(format: "  median of the ratios %.2fx (%.2f-%.2fx)", ratio.median, ratio.low, ratio.high))
    if let pinned = result.onExecutorRatio {
        print(
            String(
                format: "  on executors: median of the ratios %.2fx (%.2f-%.2fx)",
                pinned.median,
                pinned.low,
                pinned.high
            )
        )
    }
    if let ofGRPC = result.grpcRatio {
        print(
            String(
                format: "  ours (global pool) over gRPC Swift 2's p50: median %.2fx (%.2f-%.2fx)",
                ofGRPC.median,
                ofGRPC.low,
                ofGRPC.high
            )
        )
    }
}
try Bench.writeJSON(
    SessionResults(
        cases: cases,
        baselines: baselines,
        latency: latency,
        roundTrip: roundTrip,
        pairedShares: pairedShares.isEmpty ? nil : pairedShares
    ),
    defaultPath: "bench-results/session.json"
)

/// A file of `bytes` in `directory`, its blocks of 1 MiB each a little different.
func makeFile(_ bytes: Int, in directory: URL) throws -> URL {
    let file = directory.appendingPathComponent("file-\(bytes)")
    _ = FileManager.default.createFile(atPath: file.path, contents: nil)
    let handle = try FileHandle(forWritingTo: file)
    var block = [UInt8](repeating: 0, count: 1 << 20)
    for index in 0..<(bytes >> 20) {
        for offset in stride(from: 0, to: block.count, by: 4096) {
            block[offset] = UInt8(truncatingIfNeeded: index &+ offset >> 12)
        }
        handle.write(Data(block))
    }
    try handle.close()
    return file
}

/// Files through the API: each size's hash and transfer rate beside 64 MiB messages' in the
/// same run, the peak memory above the idle pair, and 1 KiB messages' latency beside a transfer.
func measureResources(sizes: [Int]) async throws -> ResourceResults {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent(
        "session-benchmark-resources-\(getpid())"
    )
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let largeBytes = Data(repeating: 0x5A, count: 64 << 20)
    let messages = await measure(
        BytesMessage.self,
        delivery: "reliable",
        encoding: .binary,
        payloadBytes: 64 << 20,
        field: "Data",
        for: .seconds(4)
    ) {
        BytesMessage(number: $0, bytes: largeBytes)
    }
    let messagesRate = messages.payloadMegabytesPerSecond
    print(String(format: "Reliable 64 MiB Data messages: %.0f MB/s", messagesRate))
    var transfers: [ResourceResults.Transfer] = []
    for size in sizes {
        let file = try makeFile(size, in: scratch)
        let disk = try diskRate(copying: file)
        let inbox = scratch.appendingPathComponent("inbox")
        var transfer = try await withResourcePair(receivingInto: inbox) { receiver, sender in
            let ((started, hashed, done, cpu), growth) = try await peakMemoryGrowth {
                let started = ContinuousClock.now
                let outgoing = try await sender.sendResource(at: file, to: receiver.peerID)
                let hashed = ContinuousClock.now
                let cpuAtOffer = Bench.cpuSeconds()
                try await outgoing.completion()
                return (started, hashed, ContinuousClock.now, Bench.cpuSeconds() - cpuAtOffer)
            }
            var transfer = ResourceResults.Transfer(
                bytes: size,
                hashMegabytesPerSecond: Double(size) / 1e6 / (hashed - started).seconds,
                transferMegabytesPerSecond: Double(size) / 1e6 / (done - hashed).seconds,
                messagesMegabytesPerSecond: messagesRate,
                peakRSSGrowthMiB: growth
            )
            transfer.cpuMillisecondsPerMiB = cpu * 1e3 / Double(size >> 20)
            return transfer
        }
        transfer.diskMegabytesPerSecond = disk
        transfer.messagesCPUMillisecondsPerMiB = messages.cpuMicrosecondsPerMessage / 1e3 / 64
        try? FileManager.default.removeItem(at: file)
        try? FileManager.default.removeItem(at: inbox)
        transfers.append(transfer)
        print(
            String(
                format: "  %5d MiB: the disk alone copies it at %.0f MB/s (read, written to a fresh file, synced)",
                size >> 20,
                disk
            )
        )
        print(
            String(
                format:
                    "  %5d MiB: hashed at %.0f MB/s, sent at %.0f MB/s (%.0f %% of the messages'), peak memory +%.1f MiB",
                size >> 20,
                transfer.hashMegabytesPerSecond,
                transfer.transferMegabytesPerSecond,
                transfer.shareOfMessages * 100,
                transfer.peakRSSGrowthMiB
            )
        )
        print(
            String(
                format: "  %5d MiB: CPU %.2f ms a MiB, both ends (the messages: %.2f ms)",
                size >> 20,
                transfer.cpuMillisecondsPerMiB ?? 0,
                transfer.messagesCPUMillisecondsPerMiB ?? 0
            )
        )
    }
    // 1 KiB messages every 2 ms while 64 MiB files go one after another to the same peer.
    let file = try makeFile(64 << 20, in: scratch)
    let inbox = scratch.appendingPathComponent("inbox")
    let latency = try await withResourcePair(receivingInto: inbox) { receiver, sender in
        try await probeLatency(from: sender, to: receiver) {
            while !Task.isCancelled {
                let outgoing = try await sender.sendResource(at: file, named: "file-\(UUID())", to: receiver.peerID)
                try await outgoing.completion()
            }
        }
    }
    print(
        String(
            format:
                "A 1 KiB reliable message every 2 ms beside 64 MiB files: p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d messages)",
            latency.p50Milliseconds,
            latency.p99Milliseconds,
            latency.maxMilliseconds,
            latency.count
        )
    )
    return ResourceResults(transfers: transfers, besideTransfer: latency)
}

/// Writes `count` bytes to a new stream in 64 KiB writes and reads them at the other end (at
/// most at `readRate` bytes a second, if given); returns the seconds it took.
@Sendable func stream(
    _ count: Int,
    from sender: MultipeerSession,
    to receiver: MultipeerSession,
    readRate: Double? = nil
) async throws -> Double {
    let block = [UInt8](repeating: 0xA5, count: 64 << 10)
    let started = ContinuousClock.now
    let outgoing = try sender.openStream(named: "bench", to: receiver.peerID)
    let writing = Task {
        var written = 0
        while written < count {
            try await outgoing.write(block.prefix(count - written))
            written += min(block.count, count - written)
        }
        try await outgoing.finish()
    }
    guard let incoming = await receiver.incomingStreams.first(where: { _ in true }) else { throw CancellationError() }
    var read = 0
    let reading = ContinuousClock.now
    for try await bytes in incoming {
        read += bytes.count
        // A slow reader: ahead of its rate by more than a millisecond, it waits.
        if let readRate, case let due = reading + .seconds(Double(read) / readRate),
            due > ContinuousClock.now + .milliseconds(1)
        {
            try await Task.sleep(until: due)
        }
    }
    try await writing.value
    precondition(read == count, "the stream brought \(read) of \(count) bytes")
    return (ContinuousClock.now - started).seconds
}

/// A 1 KiB message's latency while a file of `fileBytes` and a stream of `streamBytes` go to the
/// same peer on the same link, each again as it ends: how the link shares itself between a
/// message, a resource and a stream (issue 48).
func measureMixed(fileBytes: Int, streamBytes: Int) async throws -> MixedResults {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("session-benchmark-mixed-\(getpid())")
    try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: scratch) }
    let file = try makeFile(fileBytes, in: scratch)
    let (latency, megabytesPerSecond) = try await withResourcePair(
        receivingInto: scratch.appendingPathComponent("inbox")
    ) { receiver, sender in
        let (bytesBefore, started) = (
            await sender.linkStats(for: receiver.peerID)?.quality.bytesOut ?? 0, ContinuousClock.now
        )
        let latency = try await probeLatency(from: sender, to: receiver) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    while !Task.isCancelled {
                        let outgoing = try await sender.sendResource(
                            at: file,
                            named: "file-\(UUID())",
                            to: receiver.peerID
                        )
                        try await outgoing.completion()
                    }
                }
                group.addTask {
                    while !Task.isCancelled { _ = try await stream(streamBytes, from: sender, to: receiver) }
                }
                try await group.waitForAll()
            }
        }
        let bytes = (await sender.linkStats(for: receiver.peerID)?.quality.bytesOut ?? 0) - bytesBefore
        return (latency, Double(bytes) / 1e6 / (ContinuousClock.now - started).seconds)
    }
    print(
        String(
            format:
                "A 1 KiB reliable message every 2 ms beside a %d MiB file and a %d MiB stream (the link carrying %.0f MB/s): p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d messages)",
            fileBytes >> 20,
            streamBytes >> 20,
            megabytesPerSecond,
            latency.p50Milliseconds,
            latency.p99Milliseconds,
            latency.maxMilliseconds,
            latency.count
        )
    )
    return MixedResults(
        fileBytes: fileBytes,
        streamBytes: streamBytes,
        linkMegabytesPerSecond: megabytesPerSecond,
        latency: latency
    )
}

/// A byte stream through the API: `bytes` one way in 64 KiB writes, read as fast as it comes,
/// its rate beside 64 MiB messages' in the same run and its peak memory above the idle pair; then
/// 1 KiB messages' latency while such a stream runs to the same peer.
func measureStream(bytes: Int) async throws -> StreamResults {
    let largeBytes = Data(repeating: 0x5A, count: 64 << 20)
    let messages = await measure(
        BytesMessage.self,
        delivery: "reliable",
        encoding: .binary,
        payloadBytes: 64 << 20,
        field: "Data",
        for: .seconds(4)
    ) {
        BytesMessage(number: $0, bytes: largeBytes)
    }
    let messagesRate = messages.payloadMegabytesPerSecond
    print(String(format: "Reliable 64 MiB Data messages: %.0f MB/s", messagesRate))
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("session-benchmark-streams-\(getpid())")
    defer { try? FileManager.default.removeItem(at: scratch) }
    /// The rate of a stream of `bytes` and the peak memory above the idle pair while it runs.
    func measured(readRate: Double? = nil) async throws -> (rate: Double, growth: Double) {
        try await withResourcePair(receivingInto: scratch) { receiver, sender in
            _ = try await stream(16 << 20, from: sender, to: receiver)  // (warm-up)
            let (seconds, growth) = try await peakMemoryGrowth {
                try await stream(bytes, from: sender, to: receiver, readRate: readRate)
            }
            return (Double(bytes) / 1e6 / seconds, growth)
        }
    }
    let (rate, growth) = try await measured()
    print(
        String(
            format: "A %d MiB stream one way: %.0f MB/s (%.0f %% of the messages'), peak memory +%.1f MiB",
            bytes >> 20,
            rate,
            rate / messagesRate * 100,
            growth
        )
    )
    let (slowRate, slowGrowth) = try await measured(readRate: rate * 1e6 / 2)
    print(String(format: "  its reader held to half that rate: %.0f MB/s, peak memory +%.1f MiB", slowRate, slowGrowth))
    let latency = try await withResourcePair(receivingInto: scratch) { receiver, sender in
        try await probeLatency(from: sender, to: receiver) {
            while !Task.isCancelled { _ = try await stream(64 << 20, from: sender, to: receiver) }
        }
    }
    print(
        String(
            format:
                "A 1 KiB reliable message every 2 ms beside a stream: p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d messages)",
            latency.p50Milliseconds,
            latency.p99Milliseconds,
            latency.maxMilliseconds,
            latency.count
        )
    )
    return StreamResults(
        bytes: bytes,
        megabytesPerSecond: rate,
        messagesMegabytesPerSecond: messagesRate,
        peakRSSGrowthMiB: growth,
        slowReaderMegabytesPerSecond: slowRate,
        slowReaderPeakRSSGrowthMiB: slowGrowth,
        besideStream: latency
    )
}

/// The latency of a 1 KiB reliable message from `sender` to `receiver` every 2 ms for the run's
/// duration, while `load` runs beside it (it is cancelled after).
func probeLatency(
    from sender: MultipeerSession,
    to receiver: MultipeerSession,
    beside load: @escaping @Sendable () async throws -> Void
) async throws -> ProbeLatency {
    let probes = receiver.messages(of: Probe.self)
    let loading = Task { try await load() }
    let padding = Data(repeating: 1, count: 1024)
    let sendingProbes = Task {
        let end = ContinuousClock.now + duration
        while ContinuousClock.now < end {
            try await sender.send(
                Probe(sentNanoseconds: nanosecondsSinceStart(), padding: padding),
                to: receiver.peerID
            )
            try await Task.sleep(for: .milliseconds(2))
        }
        try await sender.send(Probe(sentNanoseconds: -1, padding: padding), to: receiver.peerID)
    }
    var samples: [Double] = []
    for await probe in probes {
        guard probe.message.sentNanoseconds >= 0 else { break }
        samples.append(Double(nanosecondsSinceStart() - probe.message.sentNanoseconds) / 1e6)
    }
    _ = try await sendingProbes.value
    loading.cancel()
    return ProbeLatency(besideLargeMessages: true, milliseconds: samples, freshMappings: 0)
}

/// The rate at which this machine copies `file` beside itself into a fresh file, synced: what a
/// receiver's disk alone allows (a resource's receiver writes every byte to a fresh file and
/// syncs it), in MB/s.
func diskRate(copying file: URL) throws -> Double {
    let copy = file.appendingPathExtension("copy")
    defer { try? FileManager.default.removeItem(at: copy) }
    let started = ContinuousClock.now
    let input = try FileHandle(forReadingFrom: file)
    defer { try? input.close() }
    _ = FileManager.default.createFile(atPath: copy.path, contents: nil)
    let output = try FileHandle(forWritingTo: copy)
    var bytes = 0
    while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty {
        output.write(chunk)
        bytes += chunk.count
    }
    try output.synchronize()
    try output.close()
    return Double(bytes) / 1e6 / (ContinuousClock.now - started).seconds
}

/// What `body` returns, and the process's peak resident memory above what it held before, in
/// MiB, sampled every 20 ms while `body` runs (after freed memory is given back).
func peakMemoryGrowth<Result: Sendable>(during body: () async throws -> Result) async rethrows -> (Result, Double) {
    Bench.returnFreedMemory()
    let idle = Bench.residentKiB()
    let peak = PeakMemory(idle)
    let sampling = Task {
        while !Task.isCancelled {
            peak.sample(Bench.residentKiB())
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
    defer { sampling.cancel() }
    let result = try await body()
    peak.sample(Bench.residentKiB())
    return (result, (peak.highest - idle) / 1024)
}

/// The highest resident memory sampled.
final class PeakMemory: @unchecked Sendable {  // (its one property under its lock)
    private let lock = NSLock()
    private var value: Double
    init(_ value: Double) { self.value = value }
    func sample(_ kib: Double) { lock.withLock { value = max(value, kib) } }
    var highest: Double { lock.withLock { value } }
}

/// A receiver into `directory` and a sender that met it, over loopback.
func withResourcePair<Result: Sendable>(
    receivingInto directory: URL,
    _ body: @escaping @Sendable (_ receiver: MultipeerSession, _ sender: MultipeerSession) async throws -> Result
) async throws -> Result {
    var receiving = MultipeerSession.Configuration(
        serviceType: "_navlog._tcp",
        peer: PeerInfo(displayName: "receiver"),
        psk: psk,
        discovery: .staticPeers([]),
        statsInterval: nil,
        logger: quiet
    )
    receiving.resourceDirectory = directory
    let receiver = MultipeerSession(configuration: receiving, identity: PeerIdentity())
    let receiverEvents = receiver.events
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await receiver.run() }
        var port = 0
        for await event in receiverEvents {
            if case .listening(let listening) = event {
                port = listening
                break
            }
        }
        let sender = session("sender", encoding: .binary, dialling: "127.0.0.1:\(port)")
        let senderEvents = sender.events
        group.addTask { try await sender.run() }
        for await event in senderEvents { if case .peerJoined = event { break } }
        let result = try await body(receiver, sender)
        group.cancelAll()
        return result
    }
}
