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
        let parts = line["entry.version"]!.split(separator: ".")
        milliseconds = UInt64(parts[0])!
        counter = UInt16(parts[1])!
        author = line["entry.author"]!
        origin = line["entry.origin_id"]!
        deleted = line["deleted"] == "1"
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.milliseconds, lhs.counter, lhs.author, lhs.origin) < (rhs.milliseconds, rhs.counter, rhs.author, rhs.origin)
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
