import MultipeerCore

/// Reports a transfer's progress: bytes done, and the rate since the first report (a resumed
/// transfer's rate counts from where it resumed, not from zero). A value kept where its
/// transfer keeps its state (no lock of its own).
struct ProgressReporter: Sendable {
    private let continuation: AsyncStream<ResourceProgress>.Continuation
    private let total: UInt64
    private let clock: any SessionClock
    /// The first report: when, and the bytes done then.
    private var first: (at: ContinuousClock.Instant, bytes: UInt64)?

    private init(continuation: AsyncStream<ResourceProgress>.Continuation, total: UInt64, clock: any SessionClock) {
        self.continuation = continuation
        self.total = total
        self.clock = clock
    }

    /// A reporter for a file of `total` bytes, and the stream it reports on (the latest report
    /// waits for its reader; earlier ones are replaced).
    static func make(total: UInt64, clock: any SessionClock) -> (AsyncStream<ResourceProgress>, ProgressReporter) {
        let (stream, continuation) = AsyncStream.makeStream(
            of: ResourceProgress.self,
            bufferingPolicy: .bufferingNewest(1)
        )
        return (stream, ProgressReporter(continuation: continuation, total: total, clock: clock))
    }

    mutating func report(_ done: UInt64) {
        let now = clock.now
        if first == nil { first = (now, done) }
        let first = first!
        let seconds = (now - first.at).seconds
        let rate = seconds > 0 && done >= first.bytes ? Double(done - first.bytes) / seconds : 0
        continuation.yield(ResourceProgress(bytesDone: Int64(done), totalBytes: Int64(total), bytesPerSecond: rate))
    }

    func finish() { continuation.finish() }
}
