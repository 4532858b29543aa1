import Foundation

/// How much slower than usual the code under test runs: 1 normally; `make sanitize` sets
/// `MULTIPEER_TEST_TIME_SCALE` (code under ThreadSanitizer runs several times slower, and a
/// link's peer that answers late looks, to a keepalive, like a peer that is gone).
///
/// Every duration a test gives the code as a bound (keepalive, handshake timeout) or waits
/// for as one (``withDeadline(_:_:)``, time limits) is stretched by it; the child processes
/// tests start inherit it. Durations that pace a fault (a gap between resets) are left alone.
public enum TestTime {
    public static let scale: Int = {
        guard let text = ProcessInfo.processInfo.environment["MULTIPEER_TEST_TIME_SCALE"] else { return 1 }
        guard let scale = Int(text), scale >= 1 else {
            fatalError("MULTIPEER_TEST_TIME_SCALE must be a whole number of at least 1, not \"\(text)\"")
        }
        return scale
    }()

    /// `duration` stretched by ``scale``.
    public static func scaled(_ duration: Duration) -> Duration {
        duration * scale
    }
}
