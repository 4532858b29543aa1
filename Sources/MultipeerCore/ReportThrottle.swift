/// Counts occurrences of something that is reported at a bounded rate: `burst` reports at once,
/// then one a second, each with the count since the last (a flood of refused connections,
/// dropped messages), so a flood makes one log line or event a second, never one each.
package struct ReportThrottle: Sendable {
    private let burst: Double
    private var tokens: Double
    private var unreported = 0
    private var refilledAt: ContinuousClock.Instant?

    /// - Parameter burst: How many reports may come at once before the rate of one a second holds.
    package init(burst: Int = 1) {
        self.burst = Double(max(1, burst))
        tokens = self.burst
    }

    /// Counts one; returns how many to report now (this one and those held back), if it is time.
    package mutating func count(now: ContinuousClock.Instant = .now) -> Int? {
        unreported += 1
        if let refilledAt {
            let elapsed = now - refilledAt
            tokens = min(
                burst,
                tokens + Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            )
        }
        refilledAt = now
        guard tokens >= 1 else { return nil }
        tokens -= 1
        defer { unreported = 0 }
        return unreported
    }

    /// Takes the count held back since the last report (to report it at the end of a flood,
    /// when no next occurrence comes to carry it).
    package mutating func takeHeld() -> Int {
        defer { unreported = 0 }
        return unreported
    }
}
