import Crypto

/// Range-based set reconciliation after Negentropy's protocol v1 (hoytech/negentropy,
/// docs/negentropy-protocol-v1.md): two stations find which versions each holds that the other
/// lacks, in about log16(n) round trips, exchanging fingerprints of ranges of their versions
/// ordered by (timestamp, id), splitting every range whose fingerprints differ. Recent writes
/// cluster at the end of the order, so what two stations that met a little while ago differ by
/// sits in few ranges. Sans-IO: messages in, messages out; the items are read range by range
/// from a ``ReconciliationItems`` (a station's storage reads them from its index), so none need
/// be in memory, and a round reads only the ranges it names.
///
/// The initiator sends ``initiate()``; each side answers what it receives with ``reconcile(_:)``
/// until the initiator's answer is empty. Unlike Negentropy, whichever side receives an id list
/// resolves it (docs/SYNC.md 4): it learns what it holds in the range that the list lacks
/// (``Outcome/have``: to send) and what the list holds that it lacks (``Outcome/need``: to ask
/// for), and skips the range. So the ids travel once, and a side never lists its ids back.
package struct RangeReconciliation: Sendable {
    /// A version's id (the SHA-256 of its signed bytes) as four 64-bit words, so that
    /// comparing, hashing and summing a million of them allocates nothing.
    package struct Digest: Hashable, Sendable {
        /// The id's bytes 0-7, 8-15, 16-23 and 24-31, each read big-endian (so the words order
        /// as the bytes do).
        var words: (UInt64, UInt64, UInt64, UInt64)

        /// The digest of a 32-byte id.
        package init(_ id: some Collection<UInt8>) {
            precondition(id.count == RangeReconciliation.idLength)
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            withUnsafeMutableBytes(of: &words) { raw in
                raw.copyBytes(from: id)
            }
            // (Copied as they come: each word's bytes in memory order, read big-endian.)
            words = (
                UInt64(bigEndian: words.0), UInt64(bigEndian: words.1), UInt64(bigEndian: words.2),
                UInt64(bigEndian: words.3)
            )
            self.words = words
        }

        init(words: (UInt64, UInt64, UInt64, UInt64)) {
            self.words = words
        }

        /// The id's 32 bytes.
        package var bytes: [UInt8] {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(RangeReconciliation.idLength)
            for word in [words.0, words.1, words.2, words.3] {
                withUnsafeBytes(of: word.bigEndian) { bytes += $0 }
            }
            return bytes
        }

        package static func == (lhs: Self, rhs: Self) -> Bool { lhs.words == rhs.words }

        package func hash(into hasher: inout Hasher) {
            hasher.combine(words.0)
            hasher.combine(words.1)
            hasher.combine(words.2)
            hasher.combine(words.3)
        }
    }

    /// A version as reconciliation sees it: its timestamp, then its id, ordered by both.
    package struct Item: Hashable, Comparable, Sendable {
        package var timestamp: UInt64
        package var digest: Digest

        package init(timestamp: UInt64, id: some Collection<UInt8>) {
            self.init(timestamp: timestamp, digest: Digest(id))
        }

        package init(timestamp: UInt64, digest: Digest) {
            self.timestamp = timestamp
            self.digest = digest
        }

        /// The id's 32 bytes.
        package var id: [UInt8] { digest.bytes }

        /// The id as a 256-bit little-endian integer, in 64-bit limbs from the least significant.
        var littleEndianLimbs: (UInt64, UInt64, UInt64, UInt64) {
            let words = digest.words
            return (words.0.byteSwapped, words.1.byteSwapped, words.2.byteSwapped, words.3.byteSwapped)
        }

        /// The least item above this one, nil if this is the greatest.
        package var successor: Item? {
            var words = digest.words
            var carry: Bool
            (words.3, carry) = words.3.addingReportingOverflow(1)
            if carry { (words.2, carry) = words.2.addingReportingOverflow(1) }
            if carry { (words.1, carry) = words.1.addingReportingOverflow(1) }
            if carry { (words.0, carry) = words.0.addingReportingOverflow(1) }
            guard carry else { return Item(timestamp: timestamp, digest: Digest(words: words)) }
            return timestamp == .max ? nil : Item(timestamp: timestamp + 1, digest: Digest(words: (0, 0, 0, 0)))
        }

        package static func < (lhs: Self, rhs: Self) -> Bool {
            if lhs.timestamp != rhs.timestamp { return lhs.timestamp < rhs.timestamp }
            let (l, r) = (lhs.digest.words, rhs.digest.words)
            if l.0 != r.0 { return l.0 < r.0 }
            if l.1 != r.1 { return l.1 < r.1 }
            if l.2 != r.2 { return l.2 < r.2 }
            return l.3 < r.3
        }
    }

    /// Where a range ends (exclusive): a timestamp and as much of an id as tells the two items
    /// on either side apart (the rest taken as zeros). ``infinity`` ends the last range.
    package struct Bound: Hashable, Sendable {
        package var timestamp: UInt64
        package var idPrefix: [UInt8]

        package static let infinity = Bound(timestamp: .max, idPrefix: [])
        /// Where the order starts: below every item.
        package static let start = Bound(timestamp: 0, idPrefix: [])

        package init(timestamp: UInt64, idPrefix: [UInt8]) {
            self.timestamp = timestamp
            self.idPrefix = idPrefix
        }

        /// The bound just below `item`.
        package init(_ item: Item) {
            self.init(timestamp: item.timestamp, idPrefix: item.id)
        }

        /// The least item at or above the bound: its timestamp, and its prefix padded with zeros.
        package var least: Item {
            Item(
                timestamp: timestamp,
                id: idPrefix + [UInt8](repeating: 0, count: RangeReconciliation.idLength - idPrefix.count)
            )
        }

        /// Whether `item` lies below this bound.
        package func isAbove(_ item: Item) -> Bool {
            self == .infinity || item < least
        }
    }

    /// One range of a message and what the sender says of its items there.
    package struct Range: Hashable, Sendable {
        package enum Payload: Hashable, Sendable {
            /// Nothing more to do here.
            case skip
            /// The fingerprint of the sender's items in the range (``fingerprint(of:)``).
            case fingerprint([UInt8])
            /// Every id the sender holds in the range.
            case ids([[UInt8]])
        }

        package var upperBound: Bound
        package var payload: Payload
    }

    /// A message: ranges in ascending order, adjacent, the first from the start of the order;
    /// what the last leaves out to infinity is skipped.
    package typealias Message = [Range]

    /// What one side learnt from one message: versions it holds that the other lacks (to
    /// send), and ids the other holds that it lacks (to ask for).
    package struct Outcome: Hashable, Sendable {
        /// The ranges of this side's order whose versions the other lacks, but those it listed.
        package var have: [Span] = []
        package var need: [[UInt8]] = []

        package init() {}

        /// How many versions ``have`` names.
        package var haveCount: Int { have.reduce(0) { $0 + $1.count } }
    }

    /// Versions this side holds that the other lacks: every one at or above `lower` and below
    /// `upper`, but those in `except`; `count` of them when the range was read. Read them
    /// with ``ReconciliationItems/scan(from:below:_:)`` (a station reads them page by page).
    package struct Span: Hashable, Sendable {
        package var lower: Bound
        package var upper: Bound
        package var except: Set<Digest>
        package var count: Int

        /// Whether the span names the version with this item.
        package func contains(_ item: Item) -> Bool {
            !lower.isAbove(item) && upper.isAbove(item) && !except.contains(item.digest)
        }
    }

    package static let idLength = 32
    /// Into how many ranges a range that differs is split.
    package static let buckets = 16
    /// A range of fewer items than this is answered with its ids rather than split.
    package static var idListThreshold: Int { 2 * buckets }

    private let items: any ReconciliationItems

    /// Reconciles `items` (in any order, each once) with a peer's, holding them in memory.
    package init(items: some Sequence<Item>) {
        self.items = SortedItems(items)
    }

    /// Reconciles the items `items` reads with a peer's.
    package init(reading items: any ReconciliationItems) {
        self.items = items
    }

    /// The initiator's first message: the whole order, as a fingerprint or split.
    package func initiate() throws(SyncError) -> Message {
        compact(try split(from: .start, below: .infinity, count: try items.count(from: .start, below: .infinity)))
    }

    /// Answers a message from the other side, and says what the id lists in it showed. An empty
    /// answer on the initiator's side ends the exchange.
    package func reconcile(_ message: Message) throws(SyncError) -> (answer: Message, outcome: Outcome) {
        var answer: Message = []
        var outcome = Outcome()
        var lower = Bound.start
        for range in message {
            // (Bounds that go back are read as empty ranges: no range is read twice.)
            let upper = range.upperBound.least < lower.least && range.upperBound != .infinity ? lower : range.upperBound
            switch range.payload {
            case .skip:
                answer.append(Range(upperBound: upper, payload: .skip))
            case .fingerprint(let theirs):
                let (ours, count) = try fingerprint(from: lower, below: upper)
                if ours == theirs {
                    answer.append(Range(upperBound: upper, payload: .skip))
                } else {
                    answer += try split(from: lower, below: upper, count: count)
                }
            case .ids(let theirs):
                let theirs = Set(theirs.map(Digest.init))
                var (found, missing) = (Set<Digest>(), 0)
                try items.scan(from: lower, below: upper) { item in
                    if theirs.contains(item.digest) { found.insert(item.digest) } else { missing += 1 }
                    return true
                }
                if missing > 0 { outcome.have.append(Span(lower: lower, upper: upper, except: found, count: missing)) }
                outcome.need += theirs.subtracting(found).map(\.bytes)
                answer.append(Range(upperBound: upper, payload: .skip))
            }
            lower = upper
        }
        return (compact(answer), outcome)
    }

    /// The ids of the versions `spans` name, in order (for tests and benchmarks: a station
    /// reads the versions themselves, page by page).
    package func ids(of spans: [Span]) throws(SyncError) -> [[UInt8]] {
        var ids: [[UInt8]] = []
        for span in spans {
            try items.scan(from: span.lower, below: span.upper) { item in
                if !span.except.contains(item.digest) { ids.append(item.id) }
                return true
            }
        }
        return ids
    }

    /// The fingerprint of the items in a range, and how many there are.
    private func fingerprint(
        from lower: Bound,
        below upper: Bound
    ) throws(SyncError) -> (fingerprint: [UInt8], count: Int) {
        var sum = Sum()
        try items.scan(from: lower, below: upper) { item in
            sum.add(item)
            return true
        }
        return (sum.fingerprint, sum.count)
    }

    /// The ranges for a message of the `count` items in a range: their ids if they are few,
    /// else ``buckets`` fingerprinted ranges, the last ending at `upper`.
    private func split(from lower: Bound, below upper: Bound, count: Int) throws(SyncError) -> Message {
        guard count >= Self.idListThreshold else {
            var ids: [[UInt8]] = []
            try items.scan(from: lower, below: upper) { item in
                ids.append(item.id)
                return true
            }
            return [Range(upperBound: upper, payload: .ids(ids))]
        }
        var ranges: Message = []
        var (bucket, sum, previous) = (0, Sum(), Item?.none)
        func size(_ bucket: Int) -> Int { count / Self.buckets + (bucket < count % Self.buckets ? 1 : 0) }
        try items.scan(from: lower, below: upper) { item in
            if sum.count == size(bucket), let last = previous {
                ranges.append(
                    Range(upperBound: Self.bound(between: last, and: item), payload: .fingerprint(sum.fingerprint))
                )
                (bucket, sum) = (bucket + 1, Sum())
            }
            sum.add(item)
            previous = item
            return true
        }
        // (What was read ends the last bucket: the range's end.)
        ranges.append(Range(upperBound: upper, payload: .fingerprint(sum.fingerprint)))
        return ranges
    }

    /// The shortest bound above `previous` and at or below `next`.
    static func bound(between previous: Item, and next: Item) -> Bound {
        guard previous.timestamp == next.timestamp else { return Bound(timestamp: next.timestamp, idPrefix: []) }
        let common = zip(previous.id, next.id).prefix { $0 == $1 }.count
        return Bound(timestamp: next.timestamp, idPrefix: Array(next.id.prefix(common + 1)))
    }

    /// Merges adjacent skips and drops a trailing one (the rest of the order is skipped anyway).
    private func compact(_ message: Message) -> Message {
        var result: Message = []
        for range in message {
            if case .skip = range.payload, let last = result.last, case .skip = last.payload {
                result[result.count - 1] = range
            } else {
                result.append(range)
            }
        }
        if let last = result.last, case .skip = last.payload { result.removeLast() }
        return result
    }

    /// A range's fingerprint: the sum modulo 2^256 of its ids read as little-endian integers,
    /// followed by its count as a varint (base-128 digits, most significant first), hashed with
    /// SHA-256, of which the first 16 bytes.
    package static func fingerprint(of items: some Sequence<Item>) -> [UInt8] {
        var sum = Sum()
        for item in items { sum.add(item) }
        return sum.fingerprint
    }

    /// A fingerprint being summed, item by item.
    private struct Sum {
        var limbs: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var count = 0

        mutating func add(_ item: Item) {
            let item = item.littleEndianLimbs
            var carry: Bool
            (limbs.0, carry) = limbs.0.addingReportingOverflow(item.0)
            (limbs.1, carry) = Self.add(limbs.1, item.1, carry)
            (limbs.2, carry) = Self.add(limbs.2, item.2, carry)
            (limbs.3, _) = Self.add(limbs.3, item.3, carry)
            count += 1
        }

        var fingerprint: [UInt8] {
            var bytes: [UInt8] = []
            for limb in [limbs.0, limbs.1, limbs.2, limbs.3] { withUnsafeBytes(of: limb.littleEndian) { bytes += $0 } }
            return Array(SHA256.hash(data: bytes + RangeReconciliation.varint(UInt64(count))).prefix(16))
        }

        private static func add(_ a: UInt64, _ b: UInt64, _ carry: Bool) -> (UInt64, Bool) {
            let (partial, first) = a.addingReportingOverflow(b)
            let (total, second) = partial.addingReportingOverflow(carry ? 1 : 0)
            return (total, first || second)
        }
    }

    static func varint(_ value: UInt64) -> [UInt8] {
        var digits: [UInt8] = [UInt8(value & 0x7f)]
        var rest = value >> 7
        while rest > 0 {
            digits.insert(UInt8(rest & 0x7f) | 0x80, at: 0)
            rest >>= 7
        }
        return digits
    }
}

/// The items a side holds, as reconciliation reads them: in ascending order, range by range.
package protocol ReconciliationItems: Sendable {
    /// Calls `body` with each item at or above `lower` and below `upper`, in ascending order,
    /// until it returns false.
    func scan(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        _ body: (RangeReconciliation.Item) -> Bool
    ) throws(SyncError)
    /// How many items lie at or above `lower` and below `upper`.
    func count(from lower: RangeReconciliation.Bound, below upper: RangeReconciliation.Bound) throws(SyncError) -> Int
}

extension ReconciliationItems {
    package func count(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound
    ) throws(SyncError) -> Int {
        var count = 0
        try scan(from: lower, below: upper) { _ in
            count += 1
            return true
        }
        return count
    }
}

/// Items held in memory, sorted.
package struct SortedItems: ReconciliationItems {
    private let items: [RangeReconciliation.Item]

    package init(_ items: some Sequence<RangeReconciliation.Item>) {
        self.items = items.sorted()
    }

    package func scan(
        from lower: RangeReconciliation.Bound,
        below upper: RangeReconciliation.Bound,
        _ body: (RangeReconciliation.Item) -> Bool
    ) {
        guard lower != .infinity else { return }
        let least = lower.least
        var (low, high) = (items.startIndex, items.endIndex)
        while low < high {
            let middle = low + (high - low) / 2
            if items[middle] < least { low = middle + 1 } else { high = middle }
        }
        for item in items[low...] {
            guard upper.isAbove(item), body(item) else { return }
        }
    }
}
