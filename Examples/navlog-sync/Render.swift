import Foundation
import MultipeerCore
import NavlogSync

/// A JSON value whose objects keep their keys in order, so every event line starts with "event".
indirect enum JSON {
    case string(String)
    case int(Int)
    case double(Double)
    case bool(Bool)
    case null
    case array([JSON])
    case object([(String, JSON)])

    static func optional(_ value: String?) -> JSON { value.map(JSON.string) ?? .null }
    static func optional(_ value: Int?) -> JSON { value.map(JSON.int) ?? .null }
    static func optional(_ value: Double?) -> JSON { value.map(JSON.double) ?? .null }
}

/// How navlog-sync shows things: JSON lines and text tables.
enum Render {
    static func json(_ value: JSON) -> String {
        var out = ""
        write(value, to: &out)
        return out
    }

    private static func write(_ value: JSON, to out: inout String) {
        switch value {
        case .string(let text): quote(text, to: &out)
        case .int(let number): out += String(number)
        case .double(let number): out += number.isFinite ? String(format: "%.3f", number) : "null"
        case .bool(let flag): out += flag ? "true" : "false"
        case .null: out += "null"
        case .array(let items):
            out += "["
            for (index, item) in items.enumerated() {
                if index > 0 { out += "," }
                write(item, to: &out)
            }
            out += "]"
        case .object(let pairs):
            out += "{"
            for (index, (key, item)) in pairs.enumerated() {
                if index > 0 { out += "," }
                quote(key, to: &out)
                out += ":"
                write(item, to: &out)
            }
            out += "}"
        }
    }

    private static func quote(_ text: String, to out: inout String) {
        out += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    static func id(_ uuid: UUID) -> String { uuid.uuidString.lowercased() }

    /// An entry with its id, fields, author, version and attachments (with where each stands
    /// here, by hash; "missing" when not given).
    static func entry(_ entry: NavlogEntry, states: [String: AttachmentState] = [:]) -> JSON {
        let fields = entry.fields
        return .object([
            ("id", .string(id(entry.id))), ("leg", .optional(fields.leg)), ("waypoint", .string(fields.waypoint)),
            ("planned", .optional(fields.planned)), ("actual", .optional(fields.actual)),
            ("fuel", .optional(fields.fuel)),
            ("altitude", .optional(fields.altitude)), ("remarks", .optional(fields.remarks)),
            ("author", .string(entry.author)),
            ("origin_id", .string(id(entry.origin))), ("origin_key", .optional(entry.key?.fingerprint)),
            ("version", .string(entry.timestamp.description)), ("deleted", .bool(entry.deleted)),
            ("attachments", .array((entry.attachments ?? []).map { attachment(_: $0, states[$0.sha256] ?? .missing) })),
        ])
    }

    static func attachment(_ attachment: NavlogAttachment, _ state: AttachmentState) -> JSON {
        let (word, done): (String, Int64) =
            switch state {
            case .held: ("held", attachment.length)
            case .arriving(let bytes): ("arriving", bytes)
            case .missing: ("missing", 0)
            }
        return .object([
            ("name", .string(attachment.name)), ("length", .int(Int(attachment.length))),
            ("sha256", .string(attachment.sha256)),
            ("state", .string(word)), ("bytes_done", .int(Int(done))),
        ])
    }

    /// An attached file on its way, for `--json`.
    static func transfer(_ transfer: AttachmentTransfer) -> [(String, JSON)] {
        [
            ("entry", .optional(transfer.entry.map(id))), ("name", .string(transfer.name)),
            ("sha256", .string(transfer.sha256)),
            ("direction", .string(transfer.outgoing ? "out" : "in")), ("peer", .string(transfer.peer.name)),
            ("peer_id", .string(id(transfer.peer.id))),
            ("bytes_done", .int(Int(transfer.bytesDone))), ("total_bytes", .int(Int(transfer.totalBytes))),
            ("bytes_per_second", .double(transfer.bytesPerSecond)),
        ]
    }

    /// An attached file on its way, as a line with a progress bar.
    static func progressBar(_ transfer: AttachmentTransfer, width: Int = 24) -> String {
        let share = transfer.totalBytes == 0 ? 1 : min(1, Double(transfer.bytesDone) / Double(transfer.totalBytes))
        let filled = Int((share * Double(width)).rounded(.down))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        return
            "\(transfer.name) \(transfer.outgoing ? "to" : "from") \(transfer.peer.name) [\(bar)] \(Int(share * 100)) % "
            + "of \(size(transfer.totalBytes)), \(size(Int64(transfer.bytesPerSecond)))/s"
    }

    /// A byte count for people: 812 B, 3.4 MB.
    static func size(_ bytes: Int64) -> String {
        switch bytes {
        case ..<1_000: "\(bytes) B"
        case ..<1_000_000: String(format: "%.1f kB", Double(bytes) / 1e3)
        case ..<1_000_000_000: String(format: "%.1f MB", Double(bytes) / 1e6)
        default: String(format: "%.2f GB", Double(bytes) / 1e9)
        }
    }

    static func peer(_ status: PeerStatus) -> JSON {
        .object([
            ("peer", .string(status.peer.name)), ("peer_id", .string(id(status.peer.id))),
            ("peer_key", .string(status.peer.fingerprint)),
            ("state", .string(status.active ? "active" : "away")),
            ("rtt_ms", .optional(status.rtt.map { $0.seconds * 1000 })),
            ("jitter_ms", .optional(status.jitter.map { $0.seconds * 1000 })),
            ("loss", .optional(status.loss)), ("last_seen", .string(timestamp(status.lastSeen))),
        ])
    }

    static func timestamp(_ date: Date) -> String {
        date.formatted(.iso8601)
    }

    /// The log as a text table; each attachment with its size and where it stands here.
    static func logTable(_ entries: [NavlogEntry], states: [String: AttachmentState] = [:]) -> String {
        let rows = entries.map { entry in
            let fields = entry.fields
            let files = (entry.attachments ?? []).map { attachment in
                let state =
                    switch states[attachment.sha256] ?? .missing {
                    case .held: "held"
                    case .arriving(let done):
                        "arriving \(attachment.length == 0 ? 100 : Int(done * 100 / attachment.length)) %"
                    case .missing: "missing"
                    }
                return "\(attachment.name) (\(size(attachment.length)), \(state))"
            }
            let row: [String] = [
                String(id(entry.id).prefix(8)), fields.leg.map(String.init) ?? "", fields.waypoint,
                fields.planned ?? "",
                fields.actual ?? "", fields.fuel.map(String.init) ?? "", fields.altitude.map(String.init) ?? "",
            ]
            // Who typed it, as they called themselves, and the key that signed it, which is proven.
            let by = entry.key.map { "\(entry.author) [\($0.fingerprint)]" } ?? entry.author
            return row + [fields.remarks ?? "", by, files.joined(separator: "; ")]
        }
        let header = [
            "ID", "LEG", "WAYPOINT", "PLANNED", "ACTUAL", "FUEL kg", "ALT ft", "REMARKS", "BY [KEY]", "FILES",
        ]
        return table(header, rows, empty: "(the log is empty)")
    }

    /// The peer table.
    static func peerTable(_ peers: [PeerStatus], now: Date = Date()) -> String {
        let rows = peers.map { status in
            [
                status.peer.name, status.peer.fingerprint, status.active ? "active" : "away",
                status.rtt.map { String(format: "%.2f ms", $0.seconds * 1000) } ?? "-",
                status.jitter.map { String(format: "%.2f ms", $0.seconds * 1000) } ?? "-",
                status.loss.map { String(format: "%.1f %%", $0 * 100) } ?? "-",
                status.active ? "now" : "\(Int(now.timeIntervalSince(status.lastSeen).rounded())) s ago",
            ]
        }
        return table(["PEER", "KEY", "STATE", "RTT", "JITTER", "LOSS", "LAST SEEN"], rows, empty: "(no peers yet)")
    }

    /// `text` with each control character shown as U+FFFD: what a peer calls itself must not
    /// steer the terminal.
    static func printable(_ text: String) -> String {
        String(
            String.UnicodeScalarView(
                text.unicodeScalars.map { $0.properties.generalCategory == .control ? "\u{FFFD}" : $0 }
            )
        )
    }

    private static func table(_ header: [String], _ rows: [[String]], empty: String) -> String {
        guard !rows.isEmpty else { return header.joined(separator: "  ") + "\n" + empty + "\n" }
        let rows = rows.map { $0.map(printable) }
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        func line(_ cells: [String]) -> String {
            zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
                .replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression)
        }
        return ([line(header)] + rows.map(line)).joined(separator: "\n") + "\n"
    }
}
