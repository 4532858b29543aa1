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
    /// write older than it is taken: the record stays deleted. A later write brings it back.
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
            #expect(try captain.storage.items().count == 1, "the delete alone")
            #expect(try captain.collect(below: HLCTimestamp(milliseconds: Self.now + 5, counter: 0)) == 0, "not below")
            #expect(try captain.collect(below: HLCTimestamp(milliseconds: Self.now + 11, counter: 0)) == 1)
            #expect(try captain.storage.items().isEmpty, "nothing left to compare")
            #expect(try captain.storage.horizon() == HLCTimestamp(milliseconds: Self.now + 11, counter: 0))
            #expect(try captain.storage.collected(of: [Self.fuel]) == [Self.fuel: deleted.stamp])

            let again = try captain.take(old, keys: [RecordIntakeTests.relief.key], now: Self.now + 20)
            #expect(again.changes.isEmpty && again.kept.isEmpty, "an older write does not bring it back")
            #expect(try captain.record(Self.fuel) == nil)

            let later = try relief.write(.set(["done": [1]]), to: Self.fuel, now: Self.now + 30)
            let back = try captain.take(try relief.storage.versions(of: Self.fuel), keys: [], now: Self.now + 30)
            #expect(back.changes.map(\.stamp) == [later.stamp])
            #expect(try captain.record(Self.fuel) == ["done": [1]])
        }
    }
}
