import Foundation
import MultipeerCore
import MultipeerSession
import Testing

@testable import MultipeerSync

/// How a store cuts versions into messages: each within the spec's bounds (docs/SYNC.md 5),
/// counting every version's frame and every origin's key, and as full as the bounds allow
/// (a receiver commits each message at once: fewer messages, fewer commits).
@Suite struct VersionBatchTests {
    /// The bytes of the plain versions message carrying `versions`, with every origin's key.
    static func length(of versions: ArraySlice<(origin: UUID, length: Int)>) -> Int {
        5 + versions.reduce(0) { $0 + 4 + $1.length } + Set(versions.map(\.origin)).count * PeerKey.length
    }

    static func check(_ versions: [(origin: UUID, length: Int)]) {
        let batches = SyncStore.batches(of: versions)
        #expect(batches.first?.lowerBound == 0 && batches.last?.upperBound == versions.count)
        for (batch, next) in zip(batches, batches.dropFirst()) { #expect(batch.upperBound == next.lowerBound) }
        for batch in batches {
            #expect(
                batch.count <= SyncMessage.maximumCount && Self.length(of: versions[batch]) <= SyncMessage.maximumLength
            )
            guard batch.upperBound < versions.count else { continue }
            let grown = versions[batch.lowerBound...batch.upperBound]
            #expect(
                grown.count > SyncMessage.maximumCount || Self.length(of: grown) > SyncMessage.maximumLength,
                "the batch \(batch) could have taken the next version"
            )
        }
    }

    @Test func manySmallVersionsOfAsManyOriginsStayWithinTheCountAndTheLength() {
        Self.check((0..<40_000).map { _ in (UUID(), 220) })  // (16,384 of them with their keys: 5 bytes too many)
        Self.check((0..<40_000).map { _ in (UUID(uuidString: "00000000-0000-4000-8000-000000000001")!, 1) })
    }

    @Test func versionsOfTheLargestSizeGoThreeToAMessage() {
        let largest = (0..<10).map { _ in (origin: UUID(), length: SignedVersion.maximumLength) }
        #expect(SyncStore.batches(of: largest).map(\.count) == [3, 3, 3, 1])
        Self.check(largest)
    }

    @Test(arguments: 1...5 as ClosedRange<UInt64>)
    func versionsOfMixedSizesAndOrigins(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let origins = (0..<50).map { _ in UUID() }
        Self.check(
            (0..<5_000).map { _ in
                (
                    origins[Int.random(in: 0..<origins.count, using: &random)],
                    Int.random(in: 100...20_000, using: &random)
                )
            }
        )
    }
}
