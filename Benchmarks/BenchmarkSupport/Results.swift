// What each benchmark writes to bench-results/, and BenchReport reads back: one definition for
// both sides.

/// `bench-results/link.json` (LinkBenchmark).
public struct LinkResults: Codable, Sendable {
    public var machine: [String: String]
    public var roundTrips: [RoundTrip]
    public var throughput: [Throughput]
    /// Link set-up times (absent in reports from before they were measured).
    public var handshakes: Handshakes?

    /// The results of one LinkBenchmark run.
    public init(
        machine: [String: String],
        roundTrips: [RoundTrip],
        throughput: [Throughput],
        handshakes: Handshakes? = nil
    ) {
        self.machine = machine
        self.roundTrips = roundTrips
        self.throughput = throughput
        self.handshakes = handshakes
    }
}

/// Ping-pong round trips of one link kind.
public struct RoundTrip: Codable, Sendable {
    /// `two cores` (C: one thread pinned per core; ours: NIO's two event-loop threads) or
    /// `one core` (the whole process pinned to core 0).
    public var placement: String
    /// `ours`, `ours/pool`, `C GnuTLS` or `TCP`.
    public var link: String
    public var p50Microseconds: Double
    public var p99Microseconds: Double
    /// The round trip at each of ``RoundTrip/quantiles``, µs: the distribution, for a chart.
    public var distributionMicroseconds: [Double]

    /// 0, 5, ..., 95 %, then 99 and 99.9 %.
    public static let quantiles: [Double] = stride(from: 0.0, through: 0.95, by: 0.05).map { $0 } + [0.99, 0.999]

    public init(placement: String, link: String, samplesNanoseconds samples: [Double]) {
        self.placement = placement
        self.link = link
        let sorted = samples.sorted()
        func at(_ q: Double) -> Double { sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))] / 1000 }
        p50Microseconds = at(0.5)
        p99Microseconds = at(0.99)
        distributionMicroseconds = Self.quantiles.map(at)
    }
}

/// One-way throughput of one link kind at one payload size.
public struct Throughput: Codable, Sendable {
    public var payloadBytes: Int
    public var link: String
    public var messagesPerSecond: Double
    public var megabytesPerSecond: Double

    public init(payloadBytes: Int, link: String, messagesPerSecond: Double) {
        self.payloadBytes = payloadBytes
        self.link = link
        self.messagesPerSecond = messagesPerSecond
        self.megabytesPerSecond = messagesPerSecond * Double(payloadBytes) / 1e6
    }
}

/// `bench-results/detection.json` and `detection-network.json` (DetectionBenchmark): one fault
/// as one mechanism saw it.
public struct DetectionFigures: Codable, Sendable {
    public var fault: String
    /// `ours`, or the kernel mechanism of a baseline.
    public var mechanism: String
    public var trials: Int
    /// Nil when the fault was not detected within ``limitSeconds`` in some trial.
    public var detectionP50Milliseconds: Double?
    public var detectionP99Milliseconds: Double?
    /// Ours only: the fault healed, until the peer was active again.
    public var rejoinP50Milliseconds: Double?
    public var rejoinP99Milliseconds: Double?
    /// How long a baseline trial waited for the mechanism to notice (ours waits as long as it takes).
    public var limitSeconds: Double?

    public init(
        fault: String,
        mechanism: String = "ours",
        trials: Int,
        detectionP50Milliseconds: Double?,
        detectionP99Milliseconds: Double?,
        rejoinP50Milliseconds: Double? = nil,
        rejoinP99Milliseconds: Double? = nil,
        limitSeconds: Double? = nil
    ) {
        self.fault = fault
        self.mechanism = mechanism
        self.trials = trials
        self.detectionP50Milliseconds = detectionP50Milliseconds
        self.detectionP99Milliseconds = detectionP99Milliseconds
        self.rejoinP50Milliseconds = rejoinP50Milliseconds
        self.rejoinP99Milliseconds = rejoinP99Milliseconds
        self.limitSeconds = limitSeconds
    }
}

/// `bench-results/delivery.json` (DeliveryBenchmark): reliable delivery in one scenario.
/// What a stream nobody reads held once full (DeliveryBenchmark).
public struct StoppedReader: Codable, Sendable {
    /// Each small message came after a 64 KiB message of another type, read at once.
    public var interleaved: Bool
    /// The small messages the stream took before the link waited.
    public var messagesTaken: Int
    /// Resident memory growth while it filled.
    public var rssGrowthKiB: Double

    public init(interleaved: Bool, messagesTaken: Int, rssGrowthKiB: Double) {
        self.interleaved = interleaved
        self.messagesTaken = messagesTaken
        self.rssGrowthKiB = rssGrowthKiB
    }
}

public struct Goodput: Codable, Sendable {
    public var scenario: String
    public var seconds: Double
    public var messagesDelivered: Int
    public var messagesPerSecond: Double
    public var lost: Int
    public var outOfOrder: Int
    public var wireBytesPerPayloadByte: Double
    /// Resident memory growth from the first second of sending to the end.
    public var rssGrowthKiB: Double
    /// The most messages the sender was ahead of the reader (sent, not yet read).
    public var maximumBacklog: Int?

    public init(
        scenario: String,
        seconds: Double,
        messagesDelivered: Int,
        messagesPerSecond: Double,
        lost: Int,
        outOfOrder: Int,
        wireBytesPerPayloadByte: Double,
        rssGrowthKiB: Double,
        maximumBacklog: Int? = nil
    ) {
        self.maximumBacklog = maximumBacklog
        self.scenario = scenario
        self.seconds = seconds
        self.messagesDelivered = messagesDelivered
        self.messagesPerSecond = messagesPerSecond
        self.lost = lost
        self.outOfOrder = outOfOrder
        self.wireBytesPerPayloadByte = wireBytesPerPayloadByte
        self.rssGrowthKiB = rssGrowthKiB
    }
}

/// `bench-results/discovery.json` (DiscoveryBenchmark): one placement, milliseconds.
public struct DiscoverySummary: Codable, Sendable {
    public var placement: String
    public var trials: Int
    /// `advertise` -> `found` at a browser already running.
    public var foundP50: Double
    public var foundP95: Double
    /// A browser started (a new connection to the daemon) -> `found`, for a peer already advertising.
    public var runningFoundP50: Double
    public var runningFoundP95: Double
    /// `avahi-browse --resolve` started -> its resolved line for the same peer.
    public var avahiBrowseP50: Double
    public var avahiBrowseP95: Double
    /// `stop` -> `lost`.
    public var lostP50: Double
    public var lostP95: Double

    public init(
        placement: String,
        trials: Int,
        foundP50: Double,
        foundP95: Double,
        runningFoundP50: Double,
        runningFoundP95: Double,
        avahiBrowseP50: Double,
        avahiBrowseP95: Double,
        lostP50: Double,
        lostP95: Double
    ) {
        self.placement = placement
        self.trials = trials
        self.foundP50 = foundP50
        self.foundP95 = foundP95
        self.runningFoundP50 = runningFoundP50
        self.runningFoundP95 = runningFoundP95
        self.avahiBrowseP50 = avahiBrowseP50
        self.avahiBrowseP95 = avahiBrowseP95
        self.lostP50 = lostP50
        self.lostP95 = lostP95
    }
}

/// `bench-results/mesh.json` (MeshBenchmark): one topology held idle.
public struct MeshResult: Codable, Sendable {
    /// `full mesh` or `hub`.
    public var topology: String
    public var sessions: Int
    public var links: Int
    public var secondsToFullMesh: Double
    public var rssGrowthKiB: Double
    public var kibPerLinkEndpoint: Double
    /// CPU used over the idle hold, in percent of one core.
    public var idleCPUPercent: Double
    public var holdSeconds: Double
    /// Ping round trips at the end of the hold: the median and the largest of the links' p99s.
    public var medianLinkP99RTTMilliseconds: Double
    public var worstLinkP99RTTMilliseconds: Double
    /// Peers that left during the hold, with nothing failing: each is a false teardown.
    public var falseTeardowns: Int
    /// PINGs sent over the hold, per link (both ends) per second.
    public var pingsPerLinkPerSecond: Double

    public init(
        topology: String,
        sessions: Int,
        links: Int,
        secondsToFullMesh: Double,
        rssGrowthKiB: Double,
        kibPerLinkEndpoint: Double,
        idleCPUPercent: Double,
        holdSeconds: Double,
        medianLinkP99RTTMilliseconds: Double,
        worstLinkP99RTTMilliseconds: Double,
        falseTeardowns: Int,
        pingsPerLinkPerSecond: Double
    ) {
        self.topology = topology
        self.sessions = sessions
        self.links = links
        self.secondsToFullMesh = secondsToFullMesh
        self.rssGrowthKiB = rssGrowthKiB
        self.kibPerLinkEndpoint = kibPerLinkEndpoint
        self.idleCPUPercent = idleCPUPercent
        self.holdSeconds = holdSeconds
        self.medianLinkP99RTTMilliseconds = medianLinkP99RTTMilliseconds
        self.worstLinkP99RTTMilliseconds = worstLinkP99RTTMilliseconds
        self.falseTeardowns = falseTeardowns
        self.pingsPerLinkPerSecond = pingsPerLinkPerSecond
    }
}

/// How long setting up a link takes: TCP, the TLS handshake and the HELLO exchange, measured on
/// the dialling side, one link after another.
public struct Handshakes: Codable, Sendable {
    /// Links set up.
    public var count: Int
    /// Median set-up time.
    public var p50Microseconds: Double
    /// 99th percentile of the set-up time.
    public var p99Microseconds: Double

    /// Summarises set-up times in microseconds.
    public init(samples: [Double]) {
        count = samples.count
        p50Microseconds = Bench.percentile(samples, 0.5)
        p99Microseconds = Bench.percentile(samples, 0.99)
    }
}

/// `bench-results/session.json` (SessionBenchmark): the public API's speed.
/// Lock acquisitions per message through the API (SessionBenchmark --locks, with
/// Benchmarks/LockCounter preloaded): every pthread mutex the process takes (both sessions: the
/// sender's and the receiver's ends), divided by the messages delivered. SwiftNIO's locks are
/// pthread mutexes; the Swift runtime's are not counted.
public struct LockCounts: Codable, Sendable {
    public var payloadBytes: Int
    /// Reliable binary messages sent flat out by one task and read by another.
    public var flatOut: Double
    /// Round trips (a message, and the peer's application sending it back): per message, two a trip.
    public var roundTrip: Double
    /// Copies of the payload per message, both ends: the bytes the process copied in memcpy and
    /// memmove calls of 256 bytes or more, over the payload's (nil before they were counted).
    public var flatOutPayloadCopies: Double?
    public var roundTripPayloadCopies: Double?

    public init(payloadBytes: Int, flatOut: Double, roundTrip: Double) {
        self.payloadBytes = payloadBytes
        self.flatOut = flatOut
        self.roundTrip = roundTrip
    }
}

public struct SessionResults: Codable, Sendable {
    public var cases: [SessionCase]
    /// The C GnuTLS program, the same run, by size.
    public var baselines: [BaselineRate]
    public var latency: [ProbeLatency]
    /// The API's round trip beside the C program's (nil in reports from before it was measured).
    public var roundTrip: APIRoundTrip?
    /// The API's reliable rate as a share of the C program's, in runs that alternate (nil in
    /// reports from before it was measured).
    public var pairedShares: [PairedShare]?

    public init(
        cases: [SessionCase],
        baselines: [BaselineRate],
        latency: [ProbeLatency],
        roundTrip: APIRoundTrip?,
        pairedShares: [PairedShare]?
    ) {
        self.cases = cases
        self.baselines = baselines
        self.latency = latency
        self.roundTrip = roundTrip
        self.pairedShares = pairedShares
    }
}

/// Reliable messages of one size through the API (binary, a Data field), each run followed by a
/// run of our bare link's frames of that size one way, one of the C GnuTLS program's and one of
/// gRPC Swift 2's messages: a share per pair.
public struct PairedShare: Codable, Sendable {
    public var payloadBytes: Int
    /// Ours, messages/s, run by run.
    public var api: [Double]
    /// The C program's, frames/s, the run after each of ours.
    public var c: [Double]
    /// gRPC Swift 2's messages/s on one bidirectional stream, the run after each C one (nil
    /// where it was not run).
    public var grpc: [Double]?
    /// Our bare link's (LinkBenchmark's "ours": PeerConnection's frames, one write each), the
    /// run after each of ours (nil in results from before it was measured).
    public var link: [Double]?

    /// The median of the shares (ours over C's, pair by pair), and the lowest and highest.
    public var share: (median: Double, low: Double, high: Double) { spread(zip(api, c).map { $0 / $1 }) }

    /// The median of the shares of our own link, pair by pair, and the lowest and highest.
    public var ofLink: (median: Double, low: Double, high: Double)? {
        link.map { spread(zip(api, $0).map { $0 / $1 }) }
    }

    /// The median of ours over gRPC's, run by run, and the lowest and highest.
    public var ofGRPC: (median: Double, low: Double, high: Double)? {
        grpc.map { spread(zip(api, $0).map { $0 / $1 }) }
    }

    public init(payloadBytes: Int, api: [Double], c: [Double], link: [Double]? = nil, grpc: [Double]? = nil) {
        self.payloadBytes = payloadBytes
        self.api = api
        self.c = c
        self.link = link
        self.grpc = grpc
    }
}

/// The median of `values`, and the lowest and highest (nan for none).
public func spread(_ values: [Double]) -> (median: Double, low: Double, high: Double) {
    let sorted = values.sorted()
    guard let low = sorted.first, let high = sorted.last else { return (.nan, .nan, .nan) }
    return (sorted[sorted.count / 2], low, high)
}

/// The API's round trip (a message sent, the peer's application sending it back, the reply
/// read), in runs that alternate with the C GnuTLS program's ping-pong of frames of the same size.
public struct APIRoundTrip: Codable, Sendable {
    /// One run of ours and the C program's run after it.
    public struct Pair: Codable, Sendable {
        public var apiP50Microseconds: Double
        public var apiP99Microseconds: Double
        /// The same round trips with both applications' tasks on their sessions' executors
        /// (`MultipeerSession.executor`). Nil in results from before it was measured.
        public var onExecutorP50Microseconds: Double?
        public var onExecutorP99Microseconds: Double?
        public var cP50Microseconds: Double
        /// gRPC Swift 2's round trip on one bidirectional stream, the server's handler writing
        /// each message back (nil where it was not run).
        public var grpcP50Microseconds: Double?
        public var grpcP99Microseconds: Double?

        public var ratio: Double { apiP50Microseconds / cP50Microseconds }
        public var onExecutorRatio: Double? { onExecutorP50Microseconds.map { $0 / cP50Microseconds } }
        /// Ours (the default, tasks on Swift's global pool) over gRPC's p50.
        public var grpcRatio: Double? { grpcP50Microseconds.map { apiP50Microseconds / $0 } }

        /// From each run's round trips, in nanoseconds.
        public init(api: [Double], onExecutor: [Double]?, c: [Double], grpc: [Double]? = nil) {
            let (ours, theirs) = (
                RoundTrip(placement: "", link: "API", samplesNanoseconds: api),
                RoundTrip(placement: "", link: "C GnuTLS", samplesNanoseconds: c)
            )
            apiP50Microseconds = ours.p50Microseconds
            apiP99Microseconds = ours.p99Microseconds
            if let onExecutor {
                let pinned = RoundTrip(placement: "", link: "API on the executor", samplesNanoseconds: onExecutor)
                (onExecutorP50Microseconds, onExecutorP99Microseconds) = (
                    pinned.p50Microseconds, pinned.p99Microseconds
                )
            }
            cP50Microseconds = theirs.p50Microseconds
            if let grpc {
                let trips = RoundTrip(placement: "", link: "gRPC Swift 2", samplesNanoseconds: grpc)
                (grpcP50Microseconds, grpcP99Microseconds) = (trips.p50Microseconds, trips.p99Microseconds)
            }
        }
    }

    public var payloadBytes: Int
    public var pairs: [Pair]

    /// The median of the pairs' ratios (ours over C's p50), and the lowest and highest.
    public var ratio: (median: Double, low: Double, high: Double) { spread(pairs.map(\.ratio)) }

    /// The median of ours over gRPC Swift 2's p50, where every pair has it.
    public var grpcRatio: (median: Double, low: Double, high: Double)? {
        let ratios = pairs.compactMap(\.grpcRatio)
        return ratios.count == pairs.count && !ratios.isEmpty ? spread(ratios) : nil
    }

    /// The same for the round trips on the sessions' executors, where measured.
    public var onExecutorRatio: (median: Double, low: Double, high: Double)? {
        let ratios = pairs.compactMap(\.onExecutorRatio)
        return ratios.count == pairs.count && !ratios.isEmpty ? spread(ratios) : nil
    }

    public init(payloadBytes: Int, pairs: [Pair]) {
        self.payloadBytes = payloadBytes
        self.pairs = pairs
    }
}

/// Messages of one kind through `send` and `messages(of:)`, flat out.
public struct SessionCase: Codable, Sendable {
    /// `reliable` or `unreliable`.
    public var delivery: String
    /// `json` or `binary`.
    public var encoding: String
    /// `String` or `Data`: the field that carries the payload.
    public var field: String
    /// Bytes in that field (the encoded message is a little larger; in JSON, Data is base64).
    public var payloadBytes: Int
    public var messagesPerSecond: Double
    /// CPU of both sessions (the whole process) per message delivered.
    public var cpuMicrosecondsPerMessage: Double
    /// Messages/s as a fraction of the C GnuTLS baseline's frames/s at the same size.
    public var ofBaseline: Double?
    /// The process's pthread mutex acquisitions per message delivered, when counted
    /// (SessionBenchmark --locks).
    public var lockAcquisitionsPerMessage: Double?
    /// Bytes copied in memcpy and memmove calls of 256 bytes or more, over the payload's, per
    /// message (the same run, with it preloaded).
    public var payloadCopiesPerMessage: Double?

    public var payloadMegabytesPerSecond: Double { messagesPerSecond * Double(payloadBytes) / 1e6 }

    public init(
        delivery: String,
        encoding: String,
        field: String,
        payloadBytes: Int,
        messagesPerSecond: Double,
        cpuMicrosecondsPerMessage: Double
    ) {
        self.delivery = delivery
        self.encoding = encoding
        self.field = field
        self.payloadBytes = payloadBytes
        self.messagesPerSecond = messagesPerSecond
        self.cpuMicrosecondsPerMessage = cpuMicrosecondsPerMessage
    }
}

/// The C GnuTLS program's one-way rate for frames of one size.
public struct BaselineRate: Codable, Sendable {
    public var payloadBytes: Int
    /// The median run's.
    public var messagesPerSecond: Double
    /// The slowest run's (absent in results written before the runs were kept).
    public var slowestMessagesPerSecond: Double?
    /// The fastest run's (absent in results written before the runs were kept).
    public var fastestMessagesPerSecond: Double?
    public var megabytesPerSecond: Double { messagesPerSecond * Double(payloadBytes) / 1e6 }

    /// The rate of the median of `runs` (messages/s), with the slowest and the fastest.
    public init(payloadBytes: Int, runs: [Double]) {
        self.payloadBytes = payloadBytes
        messagesPerSecond = Bench.percentile(runs, 0.5)
        slowestMessagesPerSecond = runs.min()
        fastestMessagesPerSecond = runs.max()
    }
}

/// How long a small message took from `send` to the reader.
public struct ProbeLatency: Codable, Sendable {
    /// Whether 64 MiB messages were in flight on the same link meanwhile.
    public var besideLargeMessages: Bool
    public var count: Int
    public var p50Milliseconds: Double
    public var p99Milliseconds: Double
    public var maxMilliseconds: Double
    /// Payload buffers mapped afresh while the probes ran (none once the large messages' memory
    /// is warm; each is memory first touched, on a host that backs it only then a stall of its own).
    public var freshMappings: Int

    public init(besideLargeMessages: Bool, milliseconds: [Double], freshMappings: Int) {
        self.besideLargeMessages = besideLargeMessages
        self.freshMappings = freshMappings
        count = milliseconds.count
        p50Milliseconds = Bench.percentile(milliseconds, 0.5)
        p99Milliseconds = Bench.percentile(milliseconds, 0.99)
        maxMilliseconds = milliseconds.max() ?? 0
    }
}

/// `bench-results/navlog.json` (NavlogBenchmark): one exchange between two navlog-sync hosts.
public struct NavlogSyncCase: Codable, Sendable {
    /// Entries in the log (a tenth deleted).
    public var entries: Int
    /// `fresh join` or `1,000 differences, met before`.
    public var scenario: String
    /// From the joiner's start until both hosts report the exchange done.
    public var seconds: Double
    /// The session's DATA payload bytes, both ways.
    public var payloadBytes: Int
    /// Versions each side received.
    public var joinerReceived: Int
    public var holderReceived: Int

    public init(
        entries: Int,
        scenario: String,
        seconds: Double,
        payloadBytes: Int,
        joinerReceived: Int,
        holderReceived: Int
    ) {
        self.entries = entries
        self.scenario = scenario
        self.seconds = seconds
        self.payloadBytes = payloadBytes
        self.joinerReceived = joinerReceived
        self.holderReceived = holderReceived
    }
}

/// Files through the API (`sendResource` -> `incomingResources`), two sessions in one process over
/// loopback (SessionBenchmark `--resources`).
public struct ResourceResults: Codable, Sendable {
    public struct Transfer: Codable, Sendable {
        public var bytes: Int
        /// Reading the file once to hash it, before the offer.
        public var hashMegabytesPerSecond: Double
        /// From the offer to the receiver's word that it holds the file, checked.
        public var transferMegabytesPerSecond: Double
        /// The API's reliable 64 MiB `Data` messages in the same run, MB/s: the bulk rate the
        /// resource is compared with.
        public var messagesMegabytesPerSecond: Double
        /// Peak resident memory above the idle pair during the transfer, both ends (this process).
        public var peakRSSGrowthMiB: Double
        /// The same file copied on this machine's disk into a fresh file and synced, MB/s: the
        /// ceiling the receiver's writes put on the transfer (nil in results from before it was measured).
        public var diskMegabytesPerSecond: Double?
        /// CPU of this process (both ends) per MiB of the file from the offer to the end, in ms
        /// (nil in results from before it was measured).
        public var cpuMillisecondsPerMiB: Double?
        /// CPU of this process per MiB of the 64 MiB messages, in ms (nil likewise).
        public var messagesCPUMillisecondsPerMiB: Double?

        public init(
            bytes: Int,
            hashMegabytesPerSecond: Double,
            transferMegabytesPerSecond: Double,
            messagesMegabytesPerSecond: Double,
            peakRSSGrowthMiB: Double
        ) {
            self.bytes = bytes
            self.hashMegabytesPerSecond = hashMegabytesPerSecond
            self.transferMegabytesPerSecond = transferMegabytesPerSecond
            self.messagesMegabytesPerSecond = messagesMegabytesPerSecond
            self.peakRSSGrowthMiB = peakRSSGrowthMiB
        }

        public var shareOfMessages: Double { transferMegabytesPerSecond / messagesMegabytesPerSecond }
    }

    public var transfers: [Transfer]
    /// A 1 KiB reliable message every 2 ms while a file goes to the same peer.
    public var besideTransfer: ProbeLatency

    public init(transfers: [Transfer], besideTransfer: ProbeLatency) {
        self.transfers = transfers
        self.besideTransfer = besideTransfer
    }
}

/// A byte stream through the API (`SessionBenchmark --streams`): one way, written in 64 KiB
/// writes and read as fast as it comes, beside the API's 64 MiB messages in the same run.
/// A 1 KiB message's latency while a file and a byte stream run to the same peer on the same
/// link (SessionBenchmark --mixed).
public struct MixedResults: Codable, Sendable {
    public var fileBytes: Int
    public var streamBytes: Int
    /// What the sender's link carried while the probes ran, MB/s.
    public var linkMegabytesPerSecond: Double
    public var latency: ProbeLatency

    public init(fileBytes: Int, streamBytes: Int, linkMegabytesPerSecond: Double, latency: ProbeLatency) {
        self.fileBytes = fileBytes
        self.streamBytes = streamBytes
        self.linkMegabytesPerSecond = linkMegabytesPerSecond
        self.latency = latency
    }
}

public struct StreamResults: Codable, Sendable {
    public var bytes: Int
    /// From the stream's opening to the reader's end of it.
    public var megabytesPerSecond: Double
    /// The API's reliable 64 MiB `Data` messages in the same run, MB/s.
    public var messagesMegabytesPerSecond: Double
    /// Peak resident memory above the idle pair while the stream runs, both ends (this process).
    public var peakRSSGrowthMiB: Double
    /// The same stream with its reader held to half ``megabytesPerSecond``: the rate the writer
    /// was held to, and the peak memory above the idle pair (it must not grow with the stream).
    public var slowReaderMegabytesPerSecond: Double
    public var slowReaderPeakRSSGrowthMiB: Double
    /// A 1 KiB reliable message every 2 ms while the stream runs to the same peer.
    public var besideStream: ProbeLatency

    public init(
        bytes: Int,
        megabytesPerSecond: Double,
        messagesMegabytesPerSecond: Double,
        peakRSSGrowthMiB: Double,
        slowReaderMegabytesPerSecond: Double,
        slowReaderPeakRSSGrowthMiB: Double,
        besideStream: ProbeLatency
    ) {
        self.bytes = bytes
        self.megabytesPerSecond = megabytesPerSecond
        self.messagesMegabytesPerSecond = messagesMegabytesPerSecond
        self.peakRSSGrowthMiB = peakRSSGrowthMiB
        self.slowReaderMegabytesPerSecond = slowReaderMegabytesPerSecond
        self.slowReaderPeakRSSGrowthMiB = slowReaderPeakRSSGrowthMiB
        self.besideStream = besideStream
    }

    public var shareOfMessages: Double { megabytesPerSecond / messagesMegabytesPerSecond }
}
