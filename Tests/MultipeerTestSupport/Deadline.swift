import NIOConcurrencyHelpers
public import NIOCore

/// Thrown by ``withDeadline(_:_:)`` when the work did not finish in time.
public struct DeadlineExceeded: Error, CustomStringConvertible {
    public let duration: Duration
    public var description: String { "the operation did not finish within \(duration)" }
}

/// Runs `body`, cancelling it and throwing ``DeadlineExceeded`` if it takes longer than
/// `duration` (stretched by ``TestTime/scale``). Deadlines in tests are generous bounds on
/// waiting for an event, not timings.
public func withDeadline<T: Sendable>(
    _ duration: Duration,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let duration = TestTime.scaled(duration)
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: duration)
            return nil
        }
        defer { group.cancelAll() }
        guard case let value?? = try await group.next() else {
            throw DeadlineExceeded(duration: duration)
        }
        return value
    }
}

extension Channel {
    /// Waits until the channel is closed. Unlike `closeFuture.get()`, it gives up with
    /// `CancellationError` as soon as its task is cancelled, so a ``withDeadline(_:_:)`` around
    /// it ends at the deadline even if the channel never closes.
    public func waitUntilClosed() async throws {
        let waiter = NIOLockedValueBox(CloseWaiter.none)
        let resume: @Sendable (Result<Void, any Error>) -> Void = { result in
            let taken = waiter.withLockedValue { waiter -> CheckedContinuation<Void, any Error>? in
                guard case .waiting(let continuation) = waiter else { return nil }
                waiter = .finished
                return continuation
            }
            taken?.resume(with: result)
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let cancelled = waiter.withLockedValue { waiter in
                    if case .finished = waiter { return true }
                    waiter = .waiting(continuation)
                    return false
                }
                if cancelled { return continuation.resume(throwing: CancellationError()) }
                closeFuture.whenComplete { result in resume(result) }
            }
        } onCancel: {
            waiter.withLockedValue { waiter in if case .none = waiter { waiter = .finished } }
            resume(.failure(CancellationError()))
        }
    }
}

/// Who waits in ``NIOCore/Channel/waitUntilClosed()``: nobody yet, a task, or nobody any more.
private enum CloseWaiter {
    case none
    case waiting(CheckedContinuation<Void, any Error>)
    case finished
}
