import Foundation
import NIOConcurrencyHelpers

/// Senders waiting for room in a peer's outbox. Each is woken when room may have come (an
/// acknowledgement), when the peer leaves (its wait gets a deadline then), when it is forgotten
/// and when the session stops; it then looks again. A wait can be given up (its task
/// cancelled, or its deadline passed) without anyone else's help.
///
/// A sender looks at the outbox on the session's actor and waits off it, so a wake can come in
/// between: each peer's wakes are counted (``wakes(for:)``), and a wait for a count already
/// passed returns at once instead of sleeping through the wake it missed.
final class SenderWaiters: Sendable {
    private struct State {
        var waiting: [UUID: [UUID: CheckedContinuation<Void, Never>]] = [:]
        /// Wakes per peer so far (``wakeAll()`` counts for every peer).
        var wakes: [UUID: UInt64] = [:]
        var allWakes: UInt64 = 0

        func count(for peerID: UUID) -> UInt64 { wakes[peerID, default: 0] &+ allWakes }
    }

    private let state = NIOLockedValueBox(State())

    /// How many wakes `peerID`'s senders have had: what a sender about to look at the outbox
    /// passes to ``wait(for:after:until:)``.
    func wakes(for peerID: UUID) -> UInt64 {
        state.withLockedValue { $0.count(for: peerID) }
    }

    /// Returns when woken (at once if a wake came since `wakes`), when `deadline` has passed (if
    /// there is one) or when the task is cancelled.
    func wait(for peerID: UUID, after wakes: UInt64, until deadline: ContinuousClock.Instant?) async {
        guard let deadline else { return await wait(for: peerID, after: wakes) }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.wait(for: peerID, after: wakes) }
            group.addTask { try? await Task.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    private func wait(for peerID: UUID, after wakes: UInt64) async {
        let id = UUID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let done = state.withLockedValue { state in
                    guard !Task.isCancelled, state.count(for: peerID) == wakes else { return true }
                    state.waiting[peerID, default: [:]][id] = continuation
                    return false
                }
                if done { continuation.resume() }
            }
        } onCancel: {
            state.withLockedValue { $0.waiting[peerID]?.removeValue(forKey: id) }?.resume()
        }
    }

    /// Wakes every sender waiting for `peerID`.
    func wake(_ peerID: UUID) {
        state.withLockedValue { state in
            state.wakes[peerID, default: 0] &+= 1
            return state.waiting.removeValue(forKey: peerID)
        }?.values.forEach { $0.resume() }
    }

    /// Wakes every sender.
    func wakeAll() {
        state.withLockedValue { state in
            state.allWakes &+= 1
            defer { state.waiting = [:] }
            return state.waiting.values.flatMap(\.values)
        }.forEach { $0.resume() }
    }
}
