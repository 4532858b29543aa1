import Foundation
import MultipeerCore

/// The suite's report: a Markdown table for people and JSON for tools.
struct Report: Encodable {
    var results: [ScenarioResult]
    var duration: Duration
    var machine = Report.machine()

    static func machine() -> [String: String] {
        var uts = utsname()
        uname(&uts)
        func text(_ field: Any) -> String {
            withUnsafeBytes(of: field) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        return [
            "kernel": "\(text(uts.sysname)) \(text(uts.release))",
            "cores": "\(ProcessInfo.processInfo.activeProcessorCount)",
            "date": Date().formatted(.iso8601),
        ]
    }

    static func milliseconds(_ value: Double?) -> String {
        value.map { String(format: "%.0f ms", $0) } ?? "-"
    }

    static func line(_ result: ScenarioResult) -> String {
        guard result.passed else { return "FAILED: \(result.failure ?? "")" }
        let detection =
            result.detectionMilliseconds.map {
                "detected in \(milliseconds($0)) (\(result.reasons.joined(separator: ", "))), "
            }
            ?? result.reasons.map { "\($0), " }.joined()
        let twin = result.simulated.map { "; simulated: \(simulated($0))" } ?? ""
        return
            "passed: \(detection)back in \(milliseconds(result.rejoinMilliseconds)), \(result.entriesTyped) entries typed, logs identical\(twin)"
    }

    /// The simulated twin's figures, in the real run's terms.
    static func simulated(_ outcome: SimulatedTwin.Outcome) -> String {
        let lossy =
            if let spread = outcome.teardownsOverSeeds {
                String(
                    format: "%@ teardowns a minute while lossy over %d seeds (mean %.1f), ",
                    spread.map { String(format: "%.0f", $0) }.joined(separator: ", "),
                    spread.count,
                    spread.reduce(0, +) / Double(spread.count)
                )
            } else {
                outcome.teardownsPerMinute.map { String(format: "%.1f teardowns a minute while lossy, ", $0) } ?? ""
            }
        let others = outcome.otherPathTeardowns.map { "\($0) teardowns on the clean paths, " } ?? ""
        let chart =
            outcome.teardownsPerMinute == nil || outcome.otherPathTeardowns != nil
            ? ""
            : outcome.chartSeconds.map { String(format: "the chart at relief in %.0f s, ", $0) }
                ?? "the chart not at relief while lossy, "
        let detection =
            outcome.detectionMilliseconds.map {
                "detected in \(milliseconds($0)) (\(outcome.reasons.joined(separator: ", "))), "
            } ?? ""
        let sink = outcome.sinkFailures.map { "\($0) dials failed at the sink, " } ?? ""
        return "\(lossy)\(others)\(chart)\(sink)\(detection)back in \(milliseconds(outcome.rejoinMilliseconds))"
    }

    var markdown: String {
        var text =
            "| scenario | fault | detection | reason | rejoin | entries typed | entries on each host | simulated twin | verdict |\n"
        text += "|---|---|---|---|---|---|---|---|---|\n"
        for result in results {
            let hosts = result.entriesPerHost.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(
                separator: ", "
            )
            text +=
                "| \(result.scenario) | \(result.fault) | \(Self.milliseconds(result.detectionMilliseconds)) | "
                + "\(result.reasons.joined(separator: ", ")) | \(Self.milliseconds(result.rejoinMilliseconds)) | \(result.entriesTyped) | "
                + "\(hosts.isEmpty ? "-" : hosts) | \(result.simulated.map(Self.simulated) ?? "-") | "
                + "\(result.passed ? "passed" : "FAILED: " + (result.failure ?? "").prefix(200)) |\n"
        }
        text +=
            "\n\(results.filter(\.passed).count) of \(results.count) scenarios passed in \(String(format: "%.0f", duration.seconds)) s "
            + "(\(machine["kernel"] ?? ""), \(machine["cores"] ?? "") cores, \(machine["date"] ?? "")). "
            + "Detection: from the fault to the last observer's peer_left; rejoin: from the heal to the last observer's peer_joined "
            + "(for the avahi restart, until the advert is seen again). Simulated twin: the same fault, as long, in a simulated world of "
            + "the same hosts (docs/SIMULATION.md); detections must agree within 500 ms or 25 %, the reasons exactly, both rejoins "
            + "within the redial bound, every message sent during the fault must arrive, and for the rogue adverts both runs' dials "
            + "must have tried the sink. The rest have none: what they fault is not simulated (Avahi, interfaces, a second network, "
            + "names resolved, a connection flood's load).\n"
        return text
    }

    func write(to directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Data(markdown.utf8).write(to: URL(fileURLWithPath: "\(directory)/report.md"))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: URL(fileURLWithPath: "\(directory)/report.json"))
    }

    enum CodingKeys: String, CodingKey { case results, durationSeconds, machine }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(results, forKey: .results)
        try container.encode(duration.seconds, forKey: .durationSeconds)
        try container.encode(machine, forKey: .machine)
    }
}
