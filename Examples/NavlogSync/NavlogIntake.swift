import Foundation

/// The versions a peer sent, sorted into those a host takes in and those it refuses
/// (docs/NAVLOG.md, section 3). What is refused is never merged; the peer offers it again at
/// every meeting.
public struct NavlogIntake: Sendable {
    /// The versions to merge, in the order they came; their timestamps are in the clock.
    public private(set) var accepted: [NavlogEntry] = []
    /// One error per reason for refusing, saying how many versions it refused.
    public private(set) var refusals: [NavlogError] = []

    /// Sorts `versions`. Refused: a version whose fields a user could not have typed
    /// (``NavlogFields/validate()``: a NUL that SQLite would cut short, an escape sequence a
    /// terminal would obey, a fuel of -5 kg) or whose author is not a display name; and one
    /// stamped more than ``HybridLogicalClock/maximumLead`` ahead of `now` (wall-clock
    /// milliseconds). The timestamps of the others are taken into `clock`.
    public init(_ versions: [NavlogEntry], clock: inout HybridLogicalClock, now: UInt64) {
        var invalid: [(NavlogEntry, NavlogError)] = []
        var ahead: [NavlogEntry] = []
        for version in versions {
            if let problem = Self.problem(with: version) {
                invalid.append((version, problem))
            } else if clock.observe(version.timestamp, now: now) {
                accepted.append(version)
            } else {
                ahead.append(version)
            }
        }
        if let (first, problem) = invalid.first {
            refusals.append(NavlogError(.badVersion,
                "\(invalid.count) version(s) were refused, as a user could not have typed them; the first, of entry \(first.id), because \(problem)"))
        }
        if let latest = ahead.map(\.timestamp).max() {
            let when = Date(timeIntervalSince1970: Double(latest.milliseconds) / 1000).formatted(.iso8601)
            refusals.append(NavlogError(.clockAhead,
                "\(ahead.count) version(s) stamped up to \(when), more than a day ahead of this host's clock, were refused; check the clocks of both hosts"))
        }
    }

    private static func problem(with version: NavlogEntry) -> NavlogError? {
        guard NavlogEntry.isAuthor(version.author) else {
            return NavlogError(.badVersion, "its author is not \(NavlogEntry.authorRule)")
        }
        do {
            try version.fields.validate()
            return nil
        } catch {
            return error
        }
    }
}
