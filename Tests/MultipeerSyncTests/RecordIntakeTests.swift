import Foundation
import MultipeerCore
import MultipeerSession
import Testing

@testable import MultipeerSync

/// What taking versions of a record keeps and lets go (docs/SYNC.md 2).
@Suite struct RecordIntakeTests {
    /// Two stations, the same in every run (so a seed replays).
    static let captain = try! PeerIdentity(rawPrivateKey: [UInt8](repeating: 1, count: 32))
    static let relief = try! PeerIdentity(rawPrivateKey: [UInt8](repeating: 2, count: 32))

    static func version(
        _ change: RecordWrite.Change,
        at milliseconds: UInt64,
        by origin: PeerIdentity = captain,
        record: String = "before-start/fuel"
    ) -> SignedVersion {
        try! SignedVersion(
            collection: "checklist",
            recordID: record,
            timestamp: HLCTimestamp(milliseconds: milliseconds, counter: 0),
            change: change,
            signedBy: origin
        )
    }

    @Test func aLaterWholeRecordLetsTheEarlierGo() {
        let first = Self.version(.set(["": [1]]), at: 1)
        let new = RecordIntake(taking: [first], kept: [])
        #expect(new.added == [first] && new.removed.isEmpty)
        #expect(new.before == nil && new.after == ["": [1]] && new.changed)
        let second = Self.version(.set(["": [2]]), at: 2, by: Self.relief)
        let later = RecordIntake(taking: [second], kept: [first])
        #expect(later.added == [second] && later.removed == [first])
        let stale = RecordIntake(taking: [first], kept: [second])
        #expect(stale.added.isEmpty && stale.removed.isEmpty && !stale.changed, "an earlier write, late")
        let again = RecordIntake(taking: [second, second], kept: [second])
        #expect(again.added.isEmpty && again.removed.isEmpty, "a version taken before")
    }

    /// Field by field, a version is kept while one of its fields is the latest.
    @Test func aVersionIsKeptWhileOneOfItsFieldsIsTheLatest() {
        let both = Self.version(.set(["done": [0], "item": [1]]), at: 1)
        let done = Self.version(.set(["done": [1]]), at: 2, by: Self.relief)
        let step = RecordIntake(taking: [done], kept: [both])
        #expect(step.added == [done] && step.removed.isEmpty, "item is still the first version's")
        #expect(step.after == ["done": [1], "item": [1]])
        let item = Self.version(.set(["item": [2]]), at: 3)
        let last = RecordIntake(taking: [item], kept: [both, done])
        #expect(last.added == [item] && last.removed == [both])
    }

    /// A delete lets go of every version it hides; a write older than it is not kept.
    @Test func aDeleteLetsGoOfWhatItHides() {
        let first = Self.version(.set(["done": [0], "item": [1]]), at: 1)
        let second = Self.version(.set(["done": [1]]), at: 2, by: Self.relief)
        let delete = Self.version(.delete, at: 3)
        let deleted = RecordIntake(taking: [delete], kept: [first, second])
        #expect(deleted.added == [delete] && Set(deleted.removed.map(\.id)) == Set([first, second].map(\.id)))
        #expect(deleted.after == nil && deleted.changed)
        let late = RecordIntake(taking: [second], kept: [delete])
        #expect(late.added.isEmpty && late.after == nil, "written before the delete, arrived after it")
        let back = Self.version(.set(["item": [9]]), at: 4, by: Self.relief)
        let revived = RecordIntake(taking: [back], kept: [delete])
        #expect(revived.added == [back] && revived.removed.isEmpty, "the delete still hides older writes")
        #expect(revived.after == ["item": [9]])
    }

    /// Whatever order and batches versions arrive in, a station ends with the same registers
    /// as one that took them all at once, and keeps only versions that hold one.
    @Test(arguments: 1...40 as ClosedRange<UInt64>)
    func whatIsKeptDoesNotDependOnTheOrderOfArrival(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let origins = [Self.captain, Self.relief]
        let versions = (0..<8).map { _ -> SignedVersion in
            let at = UInt64.random(in: 1...20, using: &random)
            let origin = origins.randomElement(using: &random)!
            if Int.random(in: 0..<4, using: &random) == 0 { return Self.version(.delete, at: at, by: origin) }
            let names = ["done", "item", "note"].filter { _ in Bool.random(using: &random) }
            let values = Dictionary(uniqueKeysWithValues: (names.isEmpty ? ["done"] : names).map { ($0, [UInt8(at)]) })
            return Self.version(.set(values), at: at, by: origin)
        }
        let all = RecordIntake(taking: versions, kept: [])
        var kept: [SignedVersion] = []
        var remaining = versions.shuffled(using: &random)
        while !remaining.isEmpty {
            let batch = Array(remaining.prefix(Int.random(in: 1...3, using: &random)))
            remaining.removeFirst(batch.count)
            let intake = RecordIntake(taking: batch, kept: kept)
            let removed = Set(intake.removed.map(\.id))
            kept = kept.filter { !removed.contains($0.id) } + intake.added
        }
        let final = RecordIntake(taking: [], kept: kept)
        #expect(final.registers.visible == all.registers.visible, "seed \(seed)")
        #expect(Set(kept.map(\.id)) == Set(all.added.map(\.id)), "seed \(seed): the versions kept")
        #expect(kept.allSatisfy { final.registers.isHeld(by: $0.write) }, "seed \(seed): every one holds a register")
    }
}
