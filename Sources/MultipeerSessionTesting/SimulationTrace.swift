import NIOConcurrencyHelpers

/// What happened in a simulated world, in order, each line with its simulated time: every event
/// of every session the world's hosts started, every fault injected, and what the code driving
/// the world records (``SimulatedWorld/record(_:)``). The same seed and build give the same
/// trace, line for line.
public struct SimulationTrace: Sendable, CustomStringConvertible {
    /// One thing that happened.
    public struct Line: Sendable, Hashable, CustomStringConvertible {
        /// Simulated time since the world began.
        public var at: Duration
        /// The host it happened on, or "world".
        public var host: String
        /// What happened: a session's event as it describes itself, a fault, or what was recorded.
        public var text: String

        /// The line as the trace prints it: seconds to the nanosecond, the host, the text
        /// (`12.500000000 relief: captain (…) left: keepalive timeout`).
        public var description: String {
            "\(Self.seconds(at)) \(host): \(text)"
        }

        /// Simulated time as the trace and the sessions' log lines print it: seconds to the
        /// nanosecond (`12.500000000`).
        static func seconds(_ at: Duration) -> String {
            let nanoseconds = at.components.seconds * 1_000_000_000 + at.components.attoseconds / 1_000_000_000
            let fraction = String(nanoseconds % 1_000_000_000)
            return "\(nanoseconds / 1_000_000_000).\(String(repeating: "0", count: 9 - fraction.count) + fraction)"
        }
    }

    /// Every line, in the order it happened.
    public var lines: [Line]

    /// The lines, one a row.
    public var description: String {
        lines.map(\.description).joined(separator: "\n")
    }
}

/// The trace as it is written, on the world's thread.
final class TraceRecorder: Sendable {
    private let lines = NIOLockedValueBox<[SimulationTrace.Line]>([])

    func record(_ line: SimulationTrace.Line) {
        lines.withLockedValue { $0.append(line) }
    }

    var trace: SimulationTrace { SimulationTrace(lines: lines.withLockedValue { $0 }) }
}
