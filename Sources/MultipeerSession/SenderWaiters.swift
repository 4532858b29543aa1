import Foundation
import NIOConcurrencyHelpers

/// Senders waiting for room in a peer's outbox. Each is woken when room may have come (an
/// acknowledgement), when the peer leaves (its wait gets a deadline then), when it is forgotten
/// and when the session stops; it then looks again. A wait can be given up (its task
/// cancelled, or its deadline passed) without anyone else's help.
final class SenderWaiters: Sendable {
    private let waiting = NIOLockedValueBox<[UUID: [UUID: CheckedContinuation<Void, Never>]]>([:])

    /// Returns when woken, when `deadline` has passed (if there is one) or when the task is cancelled.
    func wait(for peerID: UUID, until deadline: ContinuousClock.Instant?) async {
        guard let deadline else { return await wait(for: peerID) }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.wait(for: peerID) }
            group.addTask { try? await Task.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    private func wait(for peerID: UUID) async {
        let id = UUID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let cancelled = waiting.withLockedValue { waiting in
                    guard !Task.isCancelled else { return true }
                    waiting[peerID, default: [:]][id] = continuation
                    return false
                }
                if cancelled { continuation.resume() }
            }
        } onCancel: {
            waiting.withLockedValue { $0[peerID]?.removeValue(forKey: id) }?.resume()
        }
    }

    /// Wakes every sender waiting for `peerID`.
    func wake(_ peerID: UUID) {
        waiting.withLockedValue { $0.removeValue(forKey: peerID) }?.values.forEach { $0.resume() }
    }

    /// Wakes every sender.
    func wakeAll() {
        waiting.withLockedValue { waiting in
            defer { waiting = [:] }
            return waiting.values.flatMap(\.values)
        }.forEach { $0.resume() }
    }
}
