package import Foundation
package import MultipeerSync

/// The versions a peer sent, sorted into those a host takes in and those it refuses
/// (docs/NAVLOG.md, section 3). What is refused is never merged; the peer offers it again at
/// every meeting.
package struct NavlogIntake: Sendable {
    /// The versions to merge, in the order they came; their timestamps are in the clock.
    package private(set) var accepted: [NavlogEntry] = []
    /// One error per reason for refusing, saying how many versions it refused.
    package private(set) var refusals: [NavlogError] = []

    /// Sorts `versions`. Refused: a version not signed by its origin (``NavlogEntry/verify()``);
    /// with `sender`, one whose origin is not the sender (an `update` is the sender's own
    /// version); a version whose fields a user could not have typed
    /// (``NavlogFields/validate()``: a NUL that SQLite would cut short, an escape sequence a
    /// terminal would obey, a fuel of -5 kg), whose attachments break their rules
    /// (``NavlogAttachment``), or whose author is not a display name; and one
    /// stamped more than ``HybridLogicalClock/maximumLead`` ahead of `now` (wall-clock
    /// milliseconds). The timestamps of the others are taken into `clock`.
    package init(_ versions: [NavlogEntry], from sender: UUID? = nil, clock: inout HybridLogicalClock, now: UInt64) {
        var invalid: [(NavlogEntry, NavlogError)] = []
        var unsigned: [(NavlogEntry, NavlogError)] = []
        var foreign: [NavlogEntry] = []
        var ahead: [NavlogEntry] = []
        for version in versions {
            if let sender, version.origin != sender {
                foreign.append(version)
            } else if let problem = Self.problem(with: version) {
                invalid.append((version, problem))
            } else if let problem = Self.signatureProblem(with: version) {
                unsigned.append((version, problem))
            } else if clock.observe(version.timestamp, now: now) {
                accepted.append(version)
            } else {
                ahead.append(version)
            }
        }
        if let first = foreign.first, let sender {
            refusals.append(
                NavlogError(
                    .notFromSender,
                    "\(foreign.count) update(s) from peer \(sender) were refused, as they claim another host's authorship; the first, of entry \(first.id), names origin \(first.origin)"
                )
            )
        }
        if let (_, problem) = unsigned.first {
            refusals.append(
                NavlogError(
                    .badSignature,
                    "\(unsigned.count) version(s) were refused, as their origin did not sign them; the first: \(problem.message)"
                )
            )
        }
        if let (first, problem) = invalid.first {
            refusals.append(
                NavlogError(
                    .badVersion,
                    "\(invalid.count) version(s) were refused, as a user could not have typed them; the first, of entry \(first.id), because \(problem)"
                )
            )
        }
        if let latest = ahead.map(\.timestamp).max() {
            let when = Date(timeIntervalSince1970: Double(latest.milliseconds) / 1000).formatted(.iso8601)
            refusals.append(
                NavlogError(
                    .clockAhead,
                    "\(ahead.count) version(s) stamped up to \(when), more than a day ahead of this host's clock, were refused; check the clocks of both hosts"
                )
            )
        }
    }

    private static func signatureProblem(with version: NavlogEntry) -> NavlogError? {
        do {
            try version.verify()
            return nil
        } catch {
            return error
        }
    }

    private static func problem(with version: NavlogEntry) -> NavlogError? {
        guard NavlogEntry.isAuthor(version.author) else {
            return NavlogError(.badVersion, "its author is not \(NavlogEntry.authorRule)")
        }
        do {
            try version.fields.validate()
            try NavlogAttachment.validate(version.attachments)
            return nil
        } catch {
            return error
        }
    }
}
