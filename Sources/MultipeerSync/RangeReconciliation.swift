import Crypto

/// Range-based set reconciliation after Negentropy's protocol v1 (hoytech/negentropy,
/// docs/negentropy-protocol-v1.md): two stations find which versions each holds that the other
/// lacks, in about log16(n) round trips, exchanging fingerprints of ranges of their versions
/// ordered by (timestamp, id), splitting every range whose fingerprints differ. Recent writes
/// cluster at the end of the order, so what two stations that met a little while ago differ by
/// sits in few ranges. Sans-IO: messages in, messages out.
///
/// The initiator sends ``initiate()``; each side answers what it receives with ``reconcile(_:)``
/// until the initiator's answer is empty. Unlike Negentropy, whichever side receives an id list
/// resolves it (docs/SYNC.md 4): it learns what it holds in the range that the list lacks
/// (``Outcome/have``: to send) and what the list holds that it lacks (``Outcome/need``: to ask
/// for), and skips the range. So the ids travel once, and a side never lists its ids back.
package struct RangeReconciliation {
    /// A version as reconciliation sees it: its timestamp, then its id (the SHA-256 of its
    /// signed bytes), ordered by both. The id is kept as four 64-bit words, so that sorting and
    /// summing a million of them allocates nothing.
    package struct Item: Hashable, Comparable, Sendable {
        package var timestamp: UInt64
        /// The id's bytes 0-7, 8-15, 16-23 and 24-31, each read big-endian (so the words order
        /// as the bytes do).
        private var words: (UInt64, UInt64, UInt64, UInt64)

        package init(timestamp: UInt64, id: [UInt8]) {
            precondition(id.count == RangeReconciliation.idLength)
            self.timestamp = timestamp
            func word(_ index: Int) -> UInt64 {
                id[index * 8..<index * 8 + 8].reduce(0) { $0 << 8 | UInt64($1) }
            }
            words = (word(0), word(1), word(2), word(3))
        }

        /// The id's 32 bytes.
        package var id: [UInt8] {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(RangeReconciliation.idLength)
            for word in [words.0, words.1, words.2, words.3] {
                withUnsafeBytes(of: word.bigEndian) { bytes += $0 }
            }
            return bytes
        }

        /// The id as a 256-bit little-endian integer, in 64-bit limbs from the least significant.
        var littleEndianLimbs: (UInt64, UInt64, UInt64, UInt64) {
            (words.0.byteSwapped, words.1.byteSwapped, words.2.byteSwapped, words.3.byteSwapped)
        }

        package static func < (lhs: Self, rhs: Self) -> Bool {
            if lhs.timestamp != rhs.timestamp { return lhs.timestamp < rhs.timestamp }
            if lhs.words.0 != rhs.words.0 { return lhs.words.0 < rhs.words.0 }
            if lhs.words.1 != rhs.words.1 { return lhs.words.1 < rhs.words.1 }
            if lhs.words.2 != rhs.words.2 { return lhs.words.2 < rhs.words.2 }
            return lhs.words.3 < rhs.words.3
        }

        package static func == (lhs: Self, rhs: Self) -> Bool {
            lhs.timestamp == rhs.timestamp && lhs.words == rhs.words
        }

        package func hash(into hasher: inout Hasher) {
            hasher.combine(timestamp)
            hasher.combine(words.0)
            hasher.combine(words.1)
            hasher.combine(words.2)
            hasher.combine(words.3)
        }
    }

    /// Where a range ends (exclusive): a timestamp and as much of an id as tells the two items
    /// on either side apart (the rest taken as zeros). ``infinity`` ends the last range.
    package struct Bound: Hashable, Sendable {
        package var timestamp: UInt64
        package var idPrefix: [UInt8]

        package static let infinity = Bound(timestamp: .max, idPrefix: [])

        /// The least item at or above the bound: its timestamp, and its prefix padded with zeros.
        var least: Item {
            Item(
                timestamp: timestamp,
                id: idPrefix + [UInt8](repeating: 0, count: RangeReconciliation.idLength - idPrefix.count)
            )
        }

        /// Whether `item` lies below this bound.
        func isAbove(_ item: Item) -> Bool {
            item < least
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

    /// What one side learnt from one message: ids it holds that the other lacks (to send), and
    /// ids the other holds that it lacks (to ask for).
    package struct Outcome: Hashable, Sendable {
        package var have: [[UInt8]] = []
        package var need: [[UInt8]] = []

        package init() {}
    }

    package static let idLength = 32
    /// Into how many ranges a range that differs is split.
    package static let buckets = 16
    /// A range of fewer items than this is answered with its ids rather than split.
    package static var idListThreshold: Int { 2 * buckets }

    private let items: [Item]

    /// Reconciles `items` (in any order, each once) with a peer's.
    package init(items: some Sequence<Item>) {
        self.items = items.sorted()
    }

    /// The initiator's first message: the whole order, as a fingerprint or split.
    package func initiate() -> Message {
        compact(split(items[...], upperBound: .infinity))
    }

    /// Answers a message from the other side, and says what the id lists in it showed. An empty
    /// answer on the initiator's side ends the exchange.
    package func reconcile(_ message: Message) -> (answer: Message, outcome: Outcome) {
        var answer: Message = []
        var outcome = Outcome()
        var lower = items.startIndex
        for range in message {
            let upper =
                range.upperBound == .infinity
                ? items.endIndex : items.firstIndex(atOrAbove: range.upperBound.least, from: lower)
            let ours = items[lower..<upper]
            switch range.payload {
            case .skip:
                answer.append(Range(upperBound: range.upperBound, payload: .skip))
            case .fingerprint(let theirs):
                if Self.fingerprint(of: ours) == theirs {
                    answer.append(Range(upperBound: range.upperBound, payload: .skip))
                } else {
                    answer += split(ours, upperBound: range.upperBound)
                }
            case .ids(let theirs):
                let theirSet = Set(theirs)
                let ourSet = Set(ours.map(\.id))
                outcome.have += ours.map(\.id).filter { !theirSet.contains($0) }
                outcome.need += theirs.filter { !ourSet.contains($0) }
                answer.append(Range(upperBound: range.upperBound, payload: .skip))
            }
            lower = upper
        }
        return (compact(answer), outcome)
    }

    /// Answers the first round of an exchange with a peer met before, after this side sent it
    /// `sentFirst` (the ids of the versions it stored since they last met, docs/SYNC.md 6): an
    /// empty answer, with nothing to resolve, if the round matches what this side holds but
    /// those (the exchange then ends in this round trip); otherwise the answer from all it holds.
    package func reconcile(_ message: Message, sentFirst: Set<[UInt8]>) -> (answer: Message, outcome: Outcome) {
        let rest = RangeReconciliation(items: items.filter { !sentFirst.contains($0.id) }).reconcile(message)
        if rest.answer.isEmpty && rest.outcome.have.isEmpty && rest.outcome.need.isEmpty { return rest }
        return reconcile(message)
    }

    /// `items`' ranges for a message: their ids if they are few, else ``buckets`` fingerprinted
    /// ranges, the last ending at `upperBound`.
    private func split(_ items: ArraySlice<Item>, upperBound: Bound) -> Message {
        guard items.count >= Self.idListThreshold else {
            return [Range(upperBound: upperBound, payload: .ids(items.map(\.id)))]
        }
        var ranges: Message = []
        var start = items.startIndex
        for bucket in 0..<Self.buckets {
            let size = items.count / Self.buckets + (bucket < items.count % Self.buckets ? 1 : 0)
            let end = start + size
            let bound =
                bucket == Self.buckets - 1 ? upperBound : Self.bound(between: self.items[end - 1], and: self.items[end])
            ranges.append(Range(upperBound: bound, payload: .fingerprint(Self.fingerprint(of: items[start..<end]))))
            start = end
        }
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
    package static func fingerprint(of items: ArraySlice<Item>) -> [UInt8] {
        var sum: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        for item in items {
            let limbs = item.littleEndianLimbs
            var carry: Bool
            (sum.0, carry) = sum.0.addingReportingOverflow(limbs.0)
            (sum.1, carry) = add(sum.1, limbs.1, carry)
            (sum.2, carry) = add(sum.2, limbs.2, carry)
            (sum.3, _) = add(sum.3, limbs.3, carry)
        }
        var bytes: [UInt8] = []
        for limb in [sum.0, sum.1, sum.2, sum.3] { withUnsafeBytes(of: limb.littleEndian) { bytes += $0 } }
        return Array(SHA256.hash(data: bytes + varint(UInt64(items.count))).prefix(16))
    }

    private static func add(_ a: UInt64, _ b: UInt64, _ carry: Bool) -> (UInt64, Bool) {
        let (partial, first) = a.addingReportingOverflow(b)
        let (total, second) = partial.addingReportingOverflow(carry ? 1 : 0)
        return (total, first || second)
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

extension Array where Element == RangeReconciliation.Item {
    /// The index of the first item at or above `item`, from `start` on (the items sorted).
    func firstIndex(atOrAbove item: Element, from start: Index) -> Index {
        var (low, high) = (start, endIndex)
        while low < high {
            let middle = low + (high - low) / 2
            if self[middle] < item { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
