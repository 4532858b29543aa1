/// Counts occurrences of something reported at most once a second: the first at once, then each
/// second's worth with the count since the last report (a flood of refused connections, dropped
/// messages), so a flood makes one log line or event a second, never one each.
package struct ReportThrottle: Sendable {
    private var unreported = 0
    private var reportedAt: ContinuousClock.Instant?

    package init() {}

    /// Counts one; returns how many to report now, if it is time.
    package mutating func count(now: ContinuousClock.Instant = .now) -> Int? {
        unreported += 1
        guard reportedAt.map({ now - $0 >= .seconds(1) }) ?? true else { return nil }
        defer { unreported = 0; reportedAt = now }
        return unreported
    }
}
