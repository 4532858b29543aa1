import MultipeerCore
import Synchronization

import struct Foundation.UUID

/// Where a session's randomness comes from: the IDs of the streams and resources it offers and
/// the seed of its redials' jitter. The system's generator, or a simulated world's seed (so a
/// seed replays a run exactly).
package final class RandomSource: Sendable {
    /// Whether it draws from a seed (otherwise from the system's generator).
    private let isSeeded: Bool
    /// The seeded generator's state (``SplitMix64``: each draw adds a constant to it, so one
    /// atomic addition draws, from any thread, without a lock).
    private let state: Atomic<UInt64>

    /// The system's generator.
    package static let system = RandomSource(seed: nil)

    package init(seed: UInt64?) {
        isSeeded = seed != nil
        state = Atomic(seed ?? 0)
    }

    package func next() -> UInt64 {
        guard isSeeded else { return UInt64.random(in: 0...UInt64.max) }
        return SplitMix64.output(state.wrappingAdd(SplitMix64.increment, ordering: .relaxed).newValue)
    }

    /// A random (version 4) UUID.
    package func uuid() -> UUID {
        guard isSeeded else { return UUID() }
        var b = withUnsafeBytes(of: (next(), next())) { Array($0) }
        b[6] = b[6] & 0x0F | 0x40
        b[8] = b[8] & 0x3F | 0x80
        return UUID(
            uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15])
        )
    }
}
