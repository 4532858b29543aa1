package import Foundation
import MultipeerCore

/// The entry ids whose hexadecimal form (the UUID's 16 bytes in RFC 4122 order, 32 upper-case
/// digits without dashes) begins with ``digits``: the empty prefix is every id, a prefix of 32
/// digits is one. Anti-entropy compares the log prefix by prefix (docs/NAVLOG.md, section 2).
package struct NavlogPrefix: Hashable, Sendable, Codable, CustomStringConvertible {
    /// 0 to 32 upper-case hexadecimal digits.
    package let digits: String

    /// Nil unless `digits` is at most 32 upper-case hexadecimal digits.
    package init?(_ digits: String) {
        guard digits.utf8.count <= 32, digits.utf8.allSatisfy({ Self.value(of: $0) != nil }) else { return nil }
        self.digits = digits
    }

    /// The whole id space.
    package static let all = NavlogPrefix("")!

    /// The 16 prefixes one digit longer, `0` to `F` (none for an id's whole 32 digits).
    package var children: [NavlogPrefix] {
        digits.utf8.count < 32 ? "0123456789ABCDEF".map { NavlogPrefix(digits + String($0))! } : []
    }

    /// The keys (``key(of:)``) of the ids under this prefix: `lower` and the `width` keys after it.
    var range: (lower: UInt128, width: UInt128?) {
        var value: UInt128 = 0
        for digit in digits.utf8 { value = value << 4 | UInt128(Self.value(of: digit)!) }
        let shift = 4 * (32 - digits.utf8.count)
        return shift == 128 ? (0, nil) : (value << shift, UInt128(1) << shift)
    }

    /// An id as a number, its bytes in RFC 4122 order read big-endian: ids under a prefix are
    /// the keys of a range.
    static func key(of id: UUID) -> UInt128 {
        withUnsafeBytes(of: id.uuid) { $0.reduce(0) { $0 << 8 | UInt128($1) } }
    }

    private static func value(of digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    package var description: String { digits.isEmpty ? "(all)" : digits }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let digits = try container.decode(String.self)
        guard let prefix = NavlogPrefix(digits) else {
            throw DecodingError.dataCorruptedError(
                in: container,
                debugDescription: "\(digits) is not a prefix of at most 32 upper-case hexadecimal digits"
            )
        }
        self = prefix
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(digits)
    }
}

/// What a host holds under one prefix: how many versions, and the sum of their content hashes
/// (``NavlogEntry/contentHash`` as a 128-bit big-endian number) modulo 2^128. Two hosts with
/// equal summaries of a prefix hold the same versions there (but for a 128-bit collision).
package struct NavlogSummary: Hashable, Sendable, Codable, CustomStringConvertible {
    package var count: Int
    package var sum: UInt128

    package init(count: Int, sum: UInt128) {
        self.count = count
        self.sum = sum
    }

    /// Nothing held.
    package static let empty = NavlogSummary(count: 0, sum: 0)

    /// A content hash as a number; nil unless 32 lower-case hexadecimal digits.
    static func number(_ hash: some StringProtocol) -> UInt128? {
        guard hash.utf8.count == 32, let bytes = Hex.decode(hash.utf8), bytes.count == 16, Hex.encode(bytes) == hash
        else { return nil }
        return bytes.reduce(0) { $0 << 8 | UInt128($1) }
    }

    /// On the wire, `COUNT SUM`, the sum in 32 lower-case hexadecimal digits; `0` when empty.
    package var description: String {
        count == 0 ? "0" : "\(count) \(Hex.encode((0..<16).map { UInt8(truncatingIfNeeded: sum >> (8 * (15 - $0))) }))"
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        if parts == ["0"] {
            self = .empty
        } else if parts.count == 2, let count = Int(parts[0]), count > 0, String(count) == parts[0],
            let sum = Self.number(parts[1])
        {
            self.init(count: count, sum: sum)
        } else {
            throw DecodingError.dataCorruptedError(
                in: container,
                debugDescription: "\(text) is not a range summary (COUNT SUM, or 0)"
            )
        }
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// A prefix and the asker's summaries of its 16 children, `0` to `F` (an `ask` lists these).
package struct NavlogRanges: Hashable, Sendable, Codable {
    /// At most 31 digits: its children are prefixes.
    package var prefix: NavlogPrefix
    /// Exactly 16.
    package var children: [NavlogSummary]

    package init(prefix: NavlogPrefix, children: [NavlogSummary]) {
        precondition(
            prefix.digits.utf8.count < 32 && children.count == 16,
            "a prefix of at most 31 digits and its 16 children"
        )
        self.prefix = prefix
        self.children = children
    }

    enum CodingKeys: String, CodingKey { case prefix, children }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let prefix = try container.decode(NavlogPrefix.self, forKey: .prefix)
        let children = try container.decode([NavlogSummary].self, forKey: .children)
        guard prefix.digits.utf8.count < 32, children.count == 16 else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription:
                        "a range has a prefix of at most 31 digits and 16 children (\(prefix.digits.utf8.count) digits, \(children.count) children)"
                )
            )
        }
        self.init(prefix: prefix, children: children)
    }
}

/// The versions a host holds, sorted by id so that it sums any prefix at once: what
/// anti-entropy reads (docs/NAVLOG.md, section 2). Kept up to date with every version merged.
package struct NavlogIndex: Sendable {
    /// Each entry's version held, by id.
    package private(set) var held: [UUID: NavlogDigest.Held] = [:]
    /// `held` sorted by key, and the running sums of their content hashes; rebuilt when stale.
    private var keys: [UInt128] = []
    private var ids: [UUID] = []
    private var sums: [UInt128] = [0]
    private var stale = false

    /// Versions under a prefix the asker holds some of, at most this many of the holder's
    /// are named as `versions` in a reply; more, and the prefix is split (`expand`).
    package static let leafSize = 16
    /// Prefixes per `ask` message (16 summaries each: about 40 KB).
    package static let rangesPerAsk = 64

    package init(_ log: NavlogLog) {
        for entry in log.entries.values { update(entry) }
    }

    /// Records the version now held of an entry.
    package mutating func update(_ entry: NavlogEntry) {
        held[entry.id] = NavlogDigest.Held(version: entry.version, contentHash: entry.contentHash)
        stale = true
    }

    /// The count and the sum of the versions under `prefix`.
    package mutating func summary(of prefix: NavlogPrefix) -> NavlogSummary {
        let bounds = indices(under: prefix)
        return NavlogSummary(count: bounds.count, sum: sums[bounds.upperBound] &- sums[bounds.lowerBound])
    }

    /// The ids under `prefix`, in key order.
    package mutating func ids(under prefix: NavlogPrefix) -> ArraySlice<UUID> {
        ids[indices(under: prefix)]
    }

    /// The ids of the versions in `versions` (a peer's) that replace what is held here
    /// (``NavlogDigest/Held/replaces(_:)``).
    package func needed(from versions: NavlogDigest) -> [UUID] {
        versions.versions.compactMap { id, theirs in theirs.replaces(held[id]) ? id : nil }
            .sorted { NavlogPrefix.key(of: $0) < NavlogPrefix.key(of: $1) }
    }

    /// The ids of the versions held here that replace what `digest` (a peer's) names.
    package func newer(than digest: NavlogDigest) -> [UUID] {
        held.compactMap { id, mine in mine.replaces(digest.versions[id]) ? id : nil }
            .sorted { NavlogPrefix.key(of: $0) < NavlogPrefix.key(of: $1) }
    }

    /// The `ask` that begins exchange `exchange`: summaries of the 16 children of the whole id space.
    package mutating func firstAsk(exchange: UInt64) -> NavlogMessage {
        asks(expanding: [.all], exchange: exchange)[0]
    }

    /// `ask` messages of exchange `exchange` with the summaries of the children of each of
    /// `prefixes`, at most ``rangesPerAsk`` prefixes each.
    package mutating func asks(expanding prefixes: [NavlogPrefix], exchange: UInt64) -> [NavlogMessage] {
        let ranges = prefixes.map { NavlogRanges(prefix: $0, children: $0.children.map { summary(of: $0) }) }
        return stride(from: 0, to: ranges.count, by: Self.rangesPerAsk).map {
            .ask(exchange: exchange, ranges: Array(ranges[$0..<min($0 + Self.rangesPerAsk, ranges.count)]))
        }
    }

    /// What a holder answers to an asker's `ask` (docs/NAVLOG.md, section 3): for each child
    /// whose summary differs from the asker's, every version held under it if the asker holds
    /// none there (`entries`, sent before the reply), the versions held there by name if at
    /// most ``leafSize`` (`versions`), else the child to split further (`expand`).
    package mutating func answer(
        _ ranges: [NavlogRanges]
    ) -> (entries: [UUID], expand: [NavlogPrefix], versions: NavlogDigest) {
        var entries: [UUID] = []
        var expand: [NavlogPrefix] = []
        var versions: [UUID: NavlogDigest.Held] = [:]
        for range in ranges {
            for (child, theirs) in zip(range.prefix.children, range.children) {
                let mine = summary(of: child)
                if mine == theirs || mine.count == 0 { continue }
                if theirs.count == 0 {
                    entries += ids(under: child)
                } else if mine.count <= Self.leafSize {
                    for id in ids(under: child) { versions[id] = held[id] }
                } else {
                    expand.append(child)
                }
            }
        }
        return (entries, expand, NavlogDigest(versions: versions))
    }

    private mutating func indices(under prefix: NavlogPrefix) -> Range<Int> {
        sortIfStale()
        let (lower, width) = prefix.range
        guard let width else { return 0..<keys.count }
        let start = firstIndex(notBelow: lower)
        let end = lower &+ width == 0 ? keys.count : firstIndex(notBelow: lower &+ width)
        return start..<end
    }

    private func firstIndex(notBelow key: UInt128) -> Int {
        var low = 0
        var high = keys.count
        while low < high {
            let middle = (low + high) / 2
            if keys[middle] < key { low = middle + 1 } else { high = middle }
        }
        return low
    }

    private mutating func sortIfStale() {
        guard stale else { return }
        let sorted = held.map {
            (key: NavlogPrefix.key(of: $0.key), id: $0.key, hash: NavlogSummary.number($0.value.contentHash) ?? 0)
        }.sorted { $0.key < $1.key }
        keys = sorted.map(\.key)
        ids = sorted.map(\.id)
        sums = [0]
        sums.reserveCapacity(sorted.count + 1)
        for item in sorted { sums.append(sums.last! &+ item.hash) }
        stale = false
    }
}

/// One host's side of an exchange as the asker: which exchange, and how many of its `ask`
/// messages the peer has yet to answer. The exchange ends, with `need` marked final, when none
/// is left.
package struct NavlogPull: Sendable {
    /// The exchange under way (or last ended), if any.
    package private(set) var exchange: UInt64?
    /// The asks sent that the peer has not replied to yet.
    package private(set) var unanswered = 0

    /// No exchange begun.
    package init() {}

    /// Begins an exchange (anew, numbered at random: replies to an earlier one are then told
    /// apart however late they come): its first `ask`.
    package mutating func start(
        _ index: inout NavlogIndex,
        exchange: UInt64 = .random(in: 0..<(1 << 53))
    ) -> [NavlogMessage] {
        self.exchange = exchange
        unanswered = 1
        return [index.firstAsk(exchange: exchange)]
    }

    /// What to send on a `reply`: the asks that split the prefixes it names, and a `need` for
    /// the versions it names that win here, final once every ask is answered. Nothing for a
    /// reply of an earlier exchange (a link broke, the exchange began anew); nil for one this
    /// host sent no ask for.
    package mutating func received(
        exchange replied: UInt64,
        expand: [NavlogPrefix],
        versions: NavlogDigest,
        _ index: inout NavlogIndex
    ) -> [NavlogMessage]? {
        guard let exchange else { return nil }
        guard replied == exchange else { return [] }
        guard unanswered > 0 else { return nil }
        let asks = index.asks(expanding: expand.filter { $0.digits.utf8.count < 32 }, exchange: exchange)
        unanswered += asks.count - 1
        let needed = index.needed(from: versions)
        return asks + (unanswered == 0 || !needed.isEmpty ? [.need(ids: needed, final: unanswered == 0)] : [])
    }
}
