// Durations in the units the wire and the measurements use.
extension Duration {
    /// Whole nanoseconds.
    package var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    /// Whole milliseconds, rounded down.
    package var milliseconds: Int64 { nanoseconds / 1_000_000 }

    /// Seconds as a floating-point number.
    package var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
