import Foundation
import MultipeerSession
import Testing

@testable import MultipeerSync

/// A station's writes and intake over its storage (docs/SYNC.md 1-3).
@Suite struct StationTests {
    static let now: UInt64 = 1_795_300_000_000
    static let fuel = RecordKey(collection: "checklist", id: "before-start/fuel")

    @Test func writesAreStampedSignedAndReadBack() throws {
        var station = try Station(identity: RecordIntakeTests.captain, storage: MemoryStorage())
        let first = try station.write(.set(["done": [0], "item": [1]]), to: Self.fuel, now: Self.now)
        #expect(first.before == nil && first.after == ["done": [0], "item": [1]])
        let second = try station.write(.set(["done": [1]]), to: Self.fuel, now: Self.now)
        #expect(second.stamp > first.stamp, "the same millisecond: the counter goes on")
        #expect(try station.record(Self.fuel) == ["done": [1], "item": [1]])
        let kept = try station.storage.versions(of: Self.fuel)
        #expect(kept.count == 2, "the first still holds item")
        for version in kept { try version.verify(with: RecordIntakeTests.captain.key) }
        _ = try station.write(.delete, to: Self.fuel, now: Self.now + 1)
        #expect(try station.record(Self.fuel) == nil)
        #expect(try station.storage.versions(of: Self.fuel).count == 1, "the delete alone")
    }

    /// Restarted with its wall clock an hour behind, a station's next write still wins: its
    /// clock goes on from what it committed.
    @Test func aStationRestartedWithItsClockBehindStillWritesLater() throws {
        let storage = MemoryStorage()
        var before = try Station(identity: RecordIntakeTests.captain, storage: storage)
        let early = try before.write(.set(["done": [0]]), to: Self.fuel, now: Self.now)
        var after = try Station(identity: RecordIntakeTests.captain, storage: storage)
        let late = try after.write(.set(["done": [1]]), to: Self.fuel, now: Self.now - 3_600_000)
        #expect(late.stamp > early.stamp)
        #expect(try after.record(Self.fuel) == ["done": [1]])
    }

    /// A store reads a peer's message, and checks its versions' signatures, off its actor
    /// (``SyncStore/read(_:skipping:)``): a version is marked checked only if its own bytes verify
    /// with the key the station would use; a forged copy beside a good one with the same id is
    /// not; one held, or without a key, is left to the station, which refuses what fails and
    /// takes the good copy though the forged one came first.
    @Test func aMessageReadOffTheActorMarksCheckedOnlyWhatVerifies() async throws {
        let relief = RecordIntakeTests.relief
        let good = RecordIntakeTests.version(.set(["done": [1]]), at: Self.now, by: relief, record: "flaps")
        var altered = good.bytes
        altered[altered.count - 1] ^= 1  // (its signature's last byte: the same id, forged)
        let keyless = RecordIntakeTests.version(.set(["done": [1]]), at: Self.now, by: PeerIdentity(), record: "doors")
        let storage = MemoryStorage()
        let session = MultipeerSession(
            configuration: .init(
                serviceType: "_read._tcp",
                peer: PeerInfo(displayName: "captain"),
                psk: StoreSimulationTests.groupKey
            ),
            identity: RecordIntakeTests.captain
        )
        let store = try SyncStore(session: session, storage: storage)
        let message = SyncMessage.versions(keys: [relief.key], [altered, good.bytes, keyless.bytes])
        let incoming = store.read(message.compactBytes())
        #expect(incoming.verified == [false, true, false])
        #expect(incoming.versions.count == 3 && incoming.kind == message.compactBytes().first)

        #expect(store.read(message.bytes).verified == [false, true, false], "plain or compressed")
        #expect(
            store.read(message.bytes, skipping: [good.id]).verified == [false, false, false],
            "left to the station"
        )

        var station = try Station(identity: RecordIntakeTests.captain, storage: storage)
        let taken = try station.take(
            try incoming.versions.map { try $0.get() },
            keys: [relief.key],
            from: relief.peerID,
            now: Self.now,
            verified: incoming.verified
        )
        #expect(taken.refusals.map(\.code) == [.badSignature, .badSignature], "the forged copy and the keyless one")
        #expect(taken.kept == [good], "the forged copy before it, with the same id, does not shadow the good one")
        #expect(store.read(message.bytes).verified == [false, false, false], "held now: left to the station")
    }

    /// What a peer sends is checked version by version: one without its origin's signature,
    /// one stamped more than a day ahead, or one whose origin's key never came, is refused with
    /// its reason and never stored; the rest of the batch is taken.
    @Test func aPeersBatchIsCheckedVersionByVersion() throws {
        var relief = try Station(identity: RecordIntakeTests.relief, storage: MemoryStorage())
        let good = try relief.write(.set(["done": [1]]), to: Self.fuel, now: Self.now)
        let goodVersion = try #require(try relief.storage.versions(of: Self.fuel).first)
        #expect(goodVersion.stamp == good.stamp)
        let mallory = PeerIdentity()
        let forged = RecordIntakeTests.version(.set(["done": [1]]), at: Self.now, by: mallory, record: "flaps")
        var claimed = forged.bytes
        withUnsafeBytes(of: RecordIntakeTests.relief.peerID.uuid) { claimed.replaceSubrange(10..<26, with: $0) }
        let ahead = RecordIntakeTests.version(
            .set(["done": [1]]),
            at: Self.now + 2 * 86_400_000,
            by: RecordIntakeTests.relief,
            record: "gear"
        )
        let keyless = RecordIntakeTests.version(.set(["done": [1]]), at: Self.now, by: mallory, record: "doors")

        var captain = try Station(identity: RecordIntakeTests.captain, storage: MemoryStorage())
        let taken = try captain.take(
            [try SignedVersion(decoding: claimed), ahead, keyless, goodVersion],
            keys: [RecordIntakeTests.relief.key],
            now: Self.now
        )
        #expect(taken.refusals.map(\.code) == [.badSignature, .clockAhead, .badSignature])
        #expect(taken.refusals[2].message.contains("without its origin's key"), "\(taken.refusals[2])")
        #expect(
            taken.changes == [RecordChange(record: Self.fuel, before: nil, after: ["done": [1]], stamp: good.stamp)]
        )
        #expect(try captain.storage.records(in: "checklist") == ["before-start/fuel"], "nothing refused is stored")
        #expect(try captain.storage.key(of: RecordIntakeTests.relief.peerID) == RecordIntakeTests.relief.key)
        // The key is kept: the next batch of relief's needs none.
        let next = try relief.write(.set(["done": [0]]), to: Self.fuel, now: Self.now + 5)
        let again = try captain.take(try relief.storage.versions(of: Self.fuel), keys: [], now: Self.now + 5)
        #expect(again.refusals.isEmpty && again.changes.map(\.stamp) == [next.stamp])
        // The captain's own next write orders after what it took.
        let own = try captain.write(.set(["done": [1]]), to: Self.fuel, now: Self.now)
        #expect(own.stamp > next.stamp)
    }

    /// A collection whose writers are listed: a version by anyone else is refused, naming its
    /// origin and the collection, and a local write by a station not listed is not made.
    @Test func onlyTheListedWritersWriteACollection() throws {
        var relief = try Station(identity: RecordIntakeTests.relief, storage: MemoryStorage())
        let written = try relief.write(.set(["done": [1]]), to: Self.fuel, now: Self.now)
        let versions = try relief.storage.versions(of: Self.fuel)
        var captain = try Station(identity: RecordIntakeTests.captain, storage: MemoryStorage())
        captain.writers = ["checklist": .only([RecordIntakeTests.captain.key])]
        let taken = try captain.take(versions, keys: [RecordIntakeTests.relief.key], now: Self.now)
        #expect(taken.refusals.map(\.code) == [.notPermitted])
        #expect(
            taken.refusals[0].message.contains("\(written.stamp.origin)")
                && taken.refusals[0].message.contains("checklist")
        )
        #expect(taken.kept.isEmpty)
        #expect(try captain.storage.records(in: "checklist").isEmpty)

        relief.writers = captain.writers
        #expect(throws: SyncError.self) { try relief.write(.delete, to: Self.fuel, now: Self.now + 1) }
        #expect(try relief.record(Self.fuel) == ["done": [1]], "nothing written")
        captain.writers["checklist"] = .anyMember
        #expect(try captain.take(versions, keys: [RecordIntakeTests.relief.key], now: Self.now).kept == versions)
    }
}
