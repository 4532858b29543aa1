import Crypto
import Foundation
import MultipeerCore
import Synchronization
import Testing

@testable import MultipeerSync

/// Range-based reconciliation finds exactly the difference of two sets, in few round trips.
@Suite struct RangeReconciliationTests {
    typealias Item = RangeReconciliation.Item

    static func items(_ count: Int, from start: Int, using random: inout SplitMix64) -> [Item] {
        (start..<start + count).map { number in
            Item(
                timestamp: 1_000 + UInt64(number / 3),  // (three a millisecond: ties ordered by id)
                id: Array(SHA256.hash(data: withUnsafeBytes(of: number) { Array($0) }))
            )
        }
    }

    /// Runs an exchange to its end: what the two sides learnt, as the initiator sees it (`have`:
    /// what it holds and the other lacks, whichever side found it), and the round trips it took.
    static func exchange(_ initiator: [Item], _ other: [Item]) throws -> (Learnt, rounds: Int) {
        let (a, b) = (RangeReconciliation(items: initiator), RangeReconciliation(items: other))
        var learnt = Learnt()
        var message = try a.initiate()
        var rounds = 0
        while !message.isEmpty {
            rounds += 1
            let (answer, found) = try b.reconcile(message)
            learnt.have += found.need
            learnt.need += try b.ids(of: found.have)
            let (next, outcome) = try a.reconcile(answer)
            learnt.have += try a.ids(of: outcome.have)
            learnt.need += outcome.need
            message = next
        }
        return (learnt, rounds)
    }

    /// What an exchange found, as the initiator sees it: the ids it holds that the other lacks,
    /// and those the other holds that it lacks.
    struct Learnt {
        var have: [[UInt8]] = []
        var need: [[UInt8]] = []
    }

    @Test(arguments: [
        (0, 0, 0), (1, 0, 0), (0, 1, 1), (31, 1, 0), (32, 0, 1), (100, 3, 4), (5_000, 10, 10), (5_000, 0, 1_000),
        (20_000, 1, 0),
    ])
    func theExchangeFindsExactlyTheDifference(shared: Int, onlyInitiator: Int, onlyOther: Int) throws {
        var random = SplitMix64(seed: UInt64(shared * 7 + onlyInitiator * 3 + onlyOther))
        let common = Self.items(shared, from: 0, using: &random)
        let mine = Self.items(onlyInitiator, from: 1_000_000, using: &random)
        let theirs = Self.items(onlyOther, from: 2_000_000, using: &random)
        let (outcome, rounds) = try Self.exchange((common + mine).shuffled(using: &random), common + theirs)
        #expect(Set(outcome.have) == Set(mine.map(\.id)) && outcome.have.count == mine.count)
        #expect(Set(outcome.need) == Set(theirs.map(\.id)) && outcome.need.count == theirs.count)
        // Each round splits a differing range in 16: about log16 of the items, and one more.
        let total = shared + max(onlyInitiator, onlyOther)
        let bound =
            total < RangeReconciliation.idListThreshold ? 1 : Int((log(Double(total)) / log(16)).rounded(.up)) + 1
        #expect(rounds <= bound, "\(rounds) round trips for \(total) items (at most \(bound))")
    }

    /// Differences spread at random through the order, on both sides.
    @Test(arguments: 1...30 as ClosedRange<UInt64>)
    func randomSetsReconcile(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let all = Self.items(Int.random(in: 0...3_000, using: &random), from: 0, using: &random)
        let a = all.filter { _ in Int.random(in: 0..<20, using: &random) != 0 }
        let b = all.filter { _ in Int.random(in: 0..<20, using: &random) != 0 }
        let (outcome, _) = try Self.exchange(a, b)
        let (setA, setB) = (Set(a.map(\.id)), Set(b.map(\.id)))
        #expect(Set(outcome.have) == setA.subtracting(setB), "seed \(seed)")
        #expect(Set(outcome.need) == setB.subtracting(setA), "seed \(seed)")
    }

    /// A bound is the shortest that tells the items on either side of it apart.
    @Test func aBoundIsTheShortestThatSeparates() {
        let low = Item(timestamp: 5, id: [1, 2, 3] + [UInt8](repeating: 0, count: 29))
        let high = Item(timestamp: 5, id: [1, 2, 4] + [UInt8](repeating: 0, count: 29))
        let bound = RangeReconciliation.bound(between: low, and: high)
        #expect(bound == RangeReconciliation.Bound(timestamp: 5, idPrefix: [1, 2, 4]))
        #expect(bound.isAbove(low) && !bound.isAbove(high))
        let later = Item(timestamp: 6, id: [UInt8](repeating: 0, count: 32))
        #expect(RangeReconciliation.bound(between: high, and: later) == .init(timestamp: 6, idPrefix: []))
        #expect(RangeReconciliation.varint(300) == [0x82, 0x2c] && RangeReconciliation.varint(0) == [0])
    }

    /// A round is read range by range, each range once: a message whose bounds go back and
    /// forth (as no station sends, and anyone may) never makes a station read its items
    /// twice over, however many ranges it holds.
    @Test func aRoundReadsEachItemAtMostOnce() throws {
        var random = SplitMix64(seed: 61)
        let items = Self.items(2_000, from: 0, using: &random)
        let counting = Counting(items: SortedItems(items))
        let high = RangeReconciliation.Bound(items[1_900])
        let low = RangeReconciliation.Bound(items[10])
        let message = (0..<1_000).map { index in
            RangeReconciliation.Range(
                upperBound: index % 2 == 0 ? high : low,
                payload: .fingerprint([UInt8](repeating: 0, count: 16))
            )
        }
        _ = try RangeReconciliation(reading: counting).reconcile(message)
        // (The first range is read to fingerprint it, then to split it.)
        #expect(counting.read.withLock { $0 } <= 2 * items.count)
    }

    /// Items that count what is read of them.
    final class Counting: ReconciliationItems, Sendable {
        let items: SortedItems
        let read = Mutex(0)
        init(items: SortedItems) { self.items = items }
        func scan(
            from lower: RangeReconciliation.Bound,
            below upper: RangeReconciliation.Bound,
            _ body: (RangeReconciliation.Item) -> Bool
        ) {
            items.scan(from: lower, below: upper) { item in
                read.withLock { $0 += 1 }
                return body(item)
            }
        }
    }
}
