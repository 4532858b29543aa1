import Foundation

/// One line navlog-sync printed: a JSON event's top-level values as text (an `entry` object's
/// values under `entry.KEY`), or just the raw text of any other line.
public struct NavlogLine: Sendable, CustomStringConvertible {
    public let raw: String
    public let values: [String: String]

    public init(_ raw: String) {
        self.raw = raw
        var values: [String: String] = [:]
        if let object = try? JSONSerialization.jsonObject(with: Data(raw.utf8)) as? [String: Any] {
            for (key, value) in object {
                if let nested = value as? [String: Any] {
                    for (inner, item) in nested { values["\(key).\(inner)"] = Self.text(item) }
                } else {
                    values[key] = Self.text(value)
                }
            }
        }
        self.values = values
    }

    private static func text(_ value: Any) -> String? {
        switch value {
        case let string as String: string
        case let number as NSNumber: number.stringValue
        default: nil
        }
    }

    public subscript(key: String) -> String? { values[key] }

    /// The peers active after these lines, by their peer_joined and peer_left events.
    public static func activePeers(_ lines: [NavlogLine]) -> Set<String> {
        var active: Set<String> = []
        for line in lines {
            if line.event == "peer_joined", let peer = line["peer"] { active.insert(peer) }
            if line.event == "peer_left", let peer = line["peer"] { active.remove(peer) }
        }
        return active
    }
    public var event: String? { values["event"] }
    public var description: String { raw }
}

/// Which version of an entry an `entry_applied` line names, in the log's merge order
/// (timestamp, author, origin).
public struct NavlogVersion: Hashable, Comparable, Sendable {
    public let milliseconds: UInt64
    public let counter: UInt16
    public let author: String
    public let origin: String
    public let deleted: Bool

    public init(_ line: NavlogLine) {
        self.init(
            version: line["entry.version"]!,
            author: line["entry.author"]!,
            origin: line["entry.origin_id"]!,
            deleted: line["deleted"] == "1"
        )
    }

    private init(version: String, author: String, origin: String, deleted: Bool) {
        let parts = version.split(separator: ".")
        milliseconds = UInt64(parts[0])!
        counter = UInt16(parts[1])!
        self.author = author
        self.origin = origin
        self.deleted = deleted
    }

    /// The version of each entry in `navlog-sync list --json`'s output: what a host's database
    /// holds, live entries only (the list leaves deleted ones out). Read it where a process
    /// was killed: a version it stored just before may never have reached an entry_applied line.
    public static func stored(listed json: String) throws -> [String: NavlogVersion] {
        guard let entries = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]] else {
            throw NavlogListError(json: json)
        }
        var versions: [String: NavlogVersion] = [:]
        for entry in entries {
            guard let id = entry["id"] as? String, let version = entry["version"] as? String,
                let author = entry["author"] as? String, let origin = entry["origin_id"] as? String
            else { throw NavlogListError(json: json) }
            versions[id] = NavlogVersion(version: version, author: author, origin: origin, deleted: false)
        }
        return versions
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.milliseconds, lhs.counter, lhs.author, lhs.origin) < (
            rhs.milliseconds, rhs.counter, rhs.author, rhs.origin
        )
    }

    /// The version of each entry a host holds, by the entry_applied lines it printed (an
    /// applied version always replaces the one before).
    public static func held(by lines: [NavlogLine]) -> [String: NavlogVersion] {
        var versions: [String: NavlogVersion] = [:]
        for line in lines where line.event == "entry_applied" { versions[line["id"]!] = NavlogVersion(line) }
        return versions
    }

    /// Each entry's winning version over what the hosts that printed these lines typed.
    public static func winners(_ histories: [[NavlogLine]]) -> [String: NavlogVersion] {
        var winners: [String: NavlogVersion] = [:]
        for line in histories.joined() where line.event == "entry_applied" && line["origin"] == "local" {
            let version = NavlogVersion(line)
            if let current = winners[line["id"]!], current >= version { continue }
            winners[line["id"]!] = version
        }
        return winners
    }
}

/// `navlog-sync list --json` printed something other than an array of entries.
public struct NavlogListError: Error, CustomStringConvertible {
    public let json: String
    public var description: String { "navlog-sync list --json printed no array of entries: \(json)" }
}

/// The table of `navlog-sync run --json`'s events in docs/NAVLOG.md section 4: each event's
/// fields, which every line a host prints must have, and no others.
public struct NavlogEventTable: Sendable {
    /// By event: the fields every line of it has, and those it may leave out.
    public let events: [String: (required: Set<String>, optional: Set<String>)]

    /// The table as docs/NAVLOG.md gives it, read once.
    public static let spec: NavlogEventTable = try! NavlogEventTable(
        String(contentsOf: ProtocolVectors.repositoryRoot.appendingPathComponent("docs/NAVLOG.md"), encoding: .utf8)
    )

    /// Reads the table after the `<!-- events -->` line: `| \`event\` | \`field\` (words), ... |`;
    /// a field whose words begin "optional" may be left out; "the fields of \`other\`" takes
    /// another row's.
    init(_ markdown: String) throws {
        let rows =
            markdown.components(separatedBy: "<!-- events -->").dropFirst().first?.split(separator: "\n")
            .drop { !$0.hasPrefix("|") }.prefix { $0.hasPrefix("|") } ?? []
        var events: [String: (required: Set<String>, optional: Set<String>)] = [:]
        for row in rows.dropFirst(2) {
            let cells = row.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 2, let event = Self.names(in: cells[0]).first else { continue }
            var required: Set<String> = []
            var optional: Set<String> = []
            // Each field: a name in backticks, and its words in parentheses (which may name values in backticks).
            var rest = Substring(cells[1])
            while let open = rest.firstIndex(of: "`") {
                let before = rest[..<open]
                rest = rest[rest.index(after: open)...]
                guard let close = rest.firstIndex(of: "`") else { break }
                let name = String(rest[..<close])
                rest = rest[rest.index(after: close)...]
                var words = ""
                if rest.trimmingCharacters(in: .whitespaces).hasPrefix("("), let start = rest.firstIndex(of: "("),
                    let end = rest.firstIndex(of: ")")
                {
                    words = String(rest[rest.index(after: start)..<end])
                    rest = rest[rest.index(after: end)...]
                }
                if before.hasSuffix("the fields of ") {
                    let other = events[name] ?? ([], [])
                    required.formUnion(other.required)
                    optional.formUnion(other.optional)
                } else if words.hasPrefix("optional") {
                    optional.insert(name)
                } else {
                    required.insert(name)
                }
            }
            events[event] = (required, optional)
        }
        self.events = events
    }

    private static func names(in text: String) -> [String] {
        text.split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }.map {
            String($0.element)
        }
    }

    /// What is wrong with `line` by the table, if anything (nil for a line that is no JSON object:
    /// the process's standard error).
    public func problem(with line: NavlogLine) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.raw.utf8)) as? [String: Any] else {
            return nil
        }
        guard let event = object["event"] as? String, let fields = events[event] else {
            return "an event docs/NAVLOG.md section 4 does not list: \(line.raw)"
        }
        let keys = Set(object.keys).subtracting(["event"])
        let missing = fields.required.subtracting(keys)
        let unknown = keys.subtracting(fields.required).subtracting(fields.optional)
        guard missing.isEmpty, unknown.isEmpty else {
            return
                "\(event) lacks \(missing.sorted()) or has \(unknown.sorted()), against docs/NAVLOG.md section 4: \(line.raw)"
        }
        return nil
    }
}
