import NIOConcurrencyHelpers
import Synchronization

/// Tasks waiting for what a lock guards to change (room in a peer's outbox, bytes of a stream, a
/// transfer's outcome, a decoded message), held in that lock's state beside the machine whose
/// change wakes them, as `NIOAsyncWriter` holds its writers. A task waits with
/// `NIOLockedValueBox.wait(in:unless:until:)`, the one way the session waits: until woken, until
/// its deadline, or until its task is cancelled.
struct Waiters {
    private var waiting: [(id: UInt64, continuation: UnsafeContinuation<Void, Never>)] = []

    /// Names waits, so a cancelled or timed-out one finds itself (no lock needed to take a name).
    private static let names = Atomic<UInt64>(0)

    static func name() -> UInt64 { names.add(1, ordering: .relaxed).newValue }

    var isEmpty: Bool { waiting.isEmpty }

    mutating func add(_ id: UInt64, _ continuation: UnsafeContinuation<Void, Never>) {
        waiting.append((id, continuation))
    }

    mutating func take(_ id: UInt64) -> UnsafeContinuation<Void, Never>? {
        guard let index = waiting.firstIndex(where: { $0.id == id }) else { return nil }
        return waiting.remove(at: index).continuation
    }

    /// Takes every waiter, to resume once the lock is let go.
    mutating func takeAll() -> [UnsafeContinuation<Void, Never>] {
        defer { waiting = [] }
        return waiting.map(\.continuation)
    }
}

extension NIOLockedValueBox where Value: Sendable {
    /// Waits among the state's `waiters` until one who changed the state wakes them
    /// (``Waiters/takeAll()``, then resuming each off the lock), unless `ready` holds of it
    /// already; returns early once `deadline` has passed on its clock, or when the task is
    /// cancelled (the caller looks at the state again, and at `Task.isCancelled`).
    ///
    /// `ready` is read under the lock in the same turn as the waiter is added, so a wake that
    /// comes between a caller's look at the state and its wait is not slept through: the caller
    /// makes `ready` true of any state that wake leaves (a count of wakes it passes, say).
    func wait(
        in waiters: any WritableKeyPath<Value, Waiters> & Sendable,
        unless ready: (Value) -> Bool,
        until deadline: (instant: ContinuousClock.Instant, clock: any SessionClock)? = nil
    ) async {
        let id = Waiters.name()
        guard let deadline else {
            return await suspend(id, in: waiters, unless: ready)
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                guard (try? await deadline.clock.sleep(until: deadline.instant)) != nil else { return }
                self.withLockedValue { $0[keyPath: waiters].take(id) }?.resume()
            }
            // (A deadline that passed before the waiter is added: the clock reads it.)
            await suspend(id, in: waiters) { ready($0) || deadline.clock.now >= deadline.instant }
            group.cancelAll()
        }
    }

    private func suspend(
        _ id: UInt64,
        in waiters: any WritableKeyPath<Value, Waiters> & Sendable,
        unless ready: (Value) -> Bool
    ) async {
        await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                let now = withLockedValue { state -> Bool in
                    if ready(state) || Task.isCancelled { return true }
                    state[keyPath: waiters].add(id, continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            withLockedValue { $0[keyPath: waiters].take(id) }?.resume()
        }
    }
}
