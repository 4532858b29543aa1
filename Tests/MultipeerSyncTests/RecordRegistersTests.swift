import Foundation
import MultipeerCore
import Testing

@testable import MultipeerSync

/// The merge's laws over random writes: whatever the order, grouping or repetition in which
/// stations take the same writes, they hold the same record (docs/SYNC.md, 2).
@Suite struct RecordRegistersTests {
    /// Three stations, the same in every run (so a seed replays).
    static let origins = [
        "2B1E7C2A-0C4D-4F7B-9B53-3D1C2E4F5A61", "7F3A9D1E-5B2C-4E8F-A1D3-6C7B8E9F0A12",
        "C4D5E6F7-1A2B-4C3D-8E9F-0A1B2C3D4E5F",
    ].map { UUID(uuidString: $0)! }

    /// Random writes of one record by three origins: fields of a few names set to a few values,
    /// and deletes, at a few timestamps, so that ties of every kind happen (two origins at one
    /// timestamp; one stamp, two values, which no correct station makes).
    static func writes(_ count: Int, using random: inout SplitMix64) -> [RecordWrite] {
        (0..<count).map { _ in
            let stamp = VersionStamp(
                timestamp: HLCTimestamp(milliseconds: UInt64.random(in: 1...6, using: &random), counter: 0),
                origin: origins.randomElement(using: &random)!
            )
            if Int.random(in: 0..<5, using: &random) == 0 { return RecordWrite(stamp: stamp, change: .delete) }
            let names = ["fuel", "altitude", "remarks"].filter { _ in Bool.random(using: &random) }
            let values = Dictionary(uniqueKeysWithValues: names.map { ($0, [UInt8.random(in: 0...2, using: &random)]) })
            return RecordWrite(stamp: stamp, change: .set(values))
        }
    }

    static func state(_ writes: some Sequence<RecordWrite>) -> RecordRegisters {
        var state = RecordRegisters()
        for write in writes { state.apply(write) }
        return state
    }

    @Test(arguments: 1...200 as ClosedRange<UInt64>)
    func mergeIsCommutativeAssociativeAndIdempotent(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let all = Self.writes(Int.random(in: 1...12, using: &random), using: &random)
        let reference = Self.state(all)

        // Any order.
        #expect(Self.state(all.shuffled(using: &random)) == reference)
        // Split among three stations, each taking its share (with repeats), merged in any grouping.
        var shares: [[RecordWrite]] = [[], [], []]
        for write in all { shares[Int.random(in: 0..<3, using: &random)].append(write) }
        shares[0] += shares[0].prefix(2)
        let (a, b, c) = (Self.state(shares[0]), Self.state(shares[1]), Self.state(shares[2]))
        func merged(_ x: RecordRegisters, _ y: RecordRegisters) -> RecordRegisters {
            var result = x
            result.merge(y)
            return result
        }
        #expect(merged(merged(a, b), c) == reference, "seed \(seed): (a b) c")
        #expect(merged(a, merged(b, c)) == reference, "seed \(seed): a (b c)")
        #expect(merged(merged(c, a), b) == reference, "seed \(seed): (c a) b")
        #expect(merged(reference, reference) == reference, "seed \(seed): idempotent")
        #expect(merged(reference, a) == reference, "seed \(seed): what was merged already changes nothing")
    }

    /// Last writer wins as a whole record: one field, the record's bytes.
    @Test func theLatestWholeRecordWins() {
        let (early, late) = (Self.stamp(1, Self.origins[0]), Self.stamp(2, Self.origins[1]))
        var state = RecordRegisters()
        let taken = state.apply(RecordWrite(stamp: late, change: .set([RecordRegisters.wholeRecord: [2]])))
        let older = state.apply(RecordWrite(stamp: early, change: .set([RecordRegisters.wholeRecord: [1]])))
        #expect(taken && !older, "the later write taken, the earlier one not")
        #expect(state.visible == [RecordRegisters.wholeRecord: [2]])
        #expect(state.latest == late)
    }

    /// Field by field, two stations that changed different fields both keep their change.
    @Test func concurrentChangesOfDifferentFieldsBothSurvive() {
        var captain = RecordRegisters()
        var relief = RecordRegisters()
        let base = RecordWrite(stamp: Self.stamp(1, Self.origins[0]), change: .set(["fuel": [10], "altitude": [37]]))
        captain.apply(base)
        relief.apply(base)
        captain.apply(RecordWrite(stamp: Self.stamp(2, Self.origins[0]), change: .set(["fuel": [9]])))
        relief.apply(RecordWrite(stamp: Self.stamp(2, Self.origins[1]), change: .set(["altitude": [39]])))
        captain.merge(relief)
        relief.merge(captain)
        #expect(captain == relief)
        #expect(captain.visible == ["fuel": [9], "altitude": [39]])
    }

    /// A delete hides what was written before it; a write after it brings the record back with
    /// only what was written since.
    @Test func aDeleteHidesEarlierWritesAndALaterWriteBringsTheRecordBack() {
        var state = RecordRegisters()
        state.apply(RecordWrite(stamp: Self.stamp(1, Self.origins[0]), change: .set(["fuel": [10], "altitude": [37]])))
        state.apply(RecordWrite(stamp: Self.stamp(2, Self.origins[1]), change: .delete))
        #expect(state.visible == nil)
        state.apply(RecordWrite(stamp: Self.stamp(3, Self.origins[0]), change: .set(["fuel": [8]])))
        #expect(state.visible == ["fuel": [8]])
        let olderDelete = state.apply(RecordWrite(stamp: Self.stamp(1, Self.origins[2]), change: .delete))
        #expect(!olderDelete, "an older delete changes nothing")
        #expect(state.visible == ["fuel": [8]])
    }

    /// A station whose wall clock is stepped back keeps its clock's latest timestamp with what
    /// it wrote: its next write still wins over its earlier ones.
    @Test func aClockSteppedBackNeverMakesANewWriteLose() {
        let origin = Self.origins[0]
        var clock = HybridLogicalClock()
        var state = RecordRegisters()
        state.apply(
            RecordWrite(
                stamp: VersionStamp(timestamp: clock.tick(now: 7_200_000), origin: origin),
                change: .set(["fuel": [1]])
            )
        )
        // Restarted with the clock an hour behind, from what was kept.
        var restarted = HybridLogicalClock(latest: clock.latest)
        let next = VersionStamp(timestamp: restarted.tick(now: 7_200_000 - 3_600_000), origin: origin)
        let taken = state.apply(RecordWrite(stamp: next, change: .set(["fuel": [2]])))
        #expect(taken)
        #expect(state.visible == ["fuel": [2]])
    }

    /// Two stations writing at one timestamp: the greater origin wins, byte by byte, everywhere.
    @Test func oneTimestampTwoOriginsTheGreaterOriginWins() {
        let low = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1))
        let high = UUID(uuid: (1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        #expect(Self.stamp(7, low) < Self.stamp(7, high))
        #expect(Self.stamp(7, high) < Self.stamp(8, low))
    }

    static func stamp(_ milliseconds: UInt64, _ origin: UUID) -> VersionStamp {
        VersionStamp(timestamp: HLCTimestamp(milliseconds: milliseconds, counter: 0), origin: origin)
    }
}
