import Foundation
import MultipeerSession
import Testing

@testable import MultipeerSync

/// When deletes are collected, and what a collected delete still does (docs/SYNC.md 8).
@Suite struct TombstoneCollectionTests {
    static let now: UInt64 = 1_795_300_000_000
    static let fuel = RecordKey(collection: "checklist", id: "before-start/fuel")

    @Test func theHorizonIsWhatEveryOtherMemberHoldsOrTheLifetime() {
        let (me, a, b) = (UUID(), UUID(), UUID())
        let held = [a: HLCTimestamp(rawValue: 500), b: HLCTimestamp(rawValue: 300)]
        #expect(
            TombstoneCollection.horizon(members: [me, a, b], own: me, held: held, now: Self.now, lifetime: 1_000)
                .rawValue == 300
        )
        #expect(
            TombstoneCollection.horizon(
                members: [me, a, b, UUID()],
                own: me,
                held: held,
                now: Self.now,
                lifetime: 1_000
            ).rawValue == 0,
            "a member never met holds it at zero"
        )
        #expect(
            TombstoneCollection.horizon(members: nil, own: me, held: held, now: Self.now, lifetime: 1_000)
                == HLCTimestamp(milliseconds: Self.now - 1_000, counter: 0)
        )
        #expect(
            TombstoneCollection.horizon(members: [me], own: me, held: [:], now: Self.now, lifetime: 1_000).milliseconds
                == Self.now - 1_000
        )
    }

    /// A collected delete is gone from what the station holds (and compares), and still no
    /// write older than it is taken: the record stays deleted, and the station gives the delete
    /// to whoever offers such a write. A later write brings the record back.
    @Test func aCollectedDeleteStillHidesOlderWrites() throws {
        for storage in [
            MemoryStorage(),
            try SQLiteStorage(
                path: FileManager.default.temporaryDirectory.appendingPathComponent("collect-\(UUID()).sqlite").path
            ),
        ] as [any SyncStorage] {
            var relief = try Station(identity: RecordIntakeTests.relief, storage: MemoryStorage())
            _ = try relief.write(.set(["done": [0]]), to: Self.fuel, now: Self.now)
            let old = try relief.storage.versions(of: Self.fuel)

            var captain = try Station(identity: RecordIntakeTests.captain, storage: storage)
            _ = try captain.take(old, keys: [RecordIntakeTests.relief.key], now: Self.now)
            let deleted = try captain.write(.delete, to: Self.fuel, now: Self.now + 10)
            let delete = try #require(try captain.storage.versions(of: Self.fuel).first)
            #expect(try captain.storage.items().count == 1, "the delete alone")
            #expect(try captain.collect(below: HLCTimestamp(milliseconds: Self.now + 5, counter: 0)) == 0, "not below")
            #expect(try captain.collect(below: HLCTimestamp(milliseconds: Self.now + 11, counter: 0)) == 1)
            #expect(try captain.storage.items().isEmpty, "nothing left to compare")
            #expect(try captain.storage.horizon() == HLCTimestamp(milliseconds: Self.now + 11, counter: 0))
            #expect(delete.stamp == deleted.stamp)
            #expect(try captain.storage.collected(of: [Self.fuel]) == [Self.fuel: CollectedDelete(delete)])

            let again = try captain.take(old, keys: [RecordIntakeTests.relief.key], now: Self.now + 20)
            #expect(again.changes.isEmpty && again.kept.isEmpty, "an older write does not bring it back")
            #expect(try captain.record(Self.fuel) == nil)
            #expect(again.hiddenBy == [delete], "the peer that offered it is given the delete")
            let given = try relief.take(again.hiddenBy, keys: [RecordIntakeTests.captain.key], now: Self.now + 20)
            #expect(given.kept == [delete] && given.changes.map(\.after) == [nil], "and takes it: no longer shows it")
            #expect(try relief.record(Self.fuel) == nil)
            let itself = try captain.take([delete], keys: [], now: Self.now + 20)
            #expect(itself.hiddenBy.isEmpty && itself.kept.isEmpty, "the delete itself, relayed back, is not given")

            let later = try relief.write(.set(["done": [1]]), to: Self.fuel, now: Self.now + 30)
            let back = try captain.take(try relief.storage.versions(of: Self.fuel), keys: [], now: Self.now + 30)
            #expect(back.changes.map(\.stamp) == [later.stamp])
            #expect(try captain.record(Self.fuel) == ["done": [1]])
        }
    }
}
