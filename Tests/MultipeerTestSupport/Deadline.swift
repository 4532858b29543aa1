/// Thrown by ``withDeadline(_:_:)`` when the work did not finish in time.
public struct DeadlineExceeded: Error, CustomStringConvertible {
    public let duration: Duration
    public var description: String { "the operation did not finish within \(duration)" }
}

/// Runs `body`, cancelling it and throwing ``DeadlineExceeded`` if it takes longer than
/// `duration` (stretched by ``TestTime/scale``). Deadlines in tests are generous bounds on
/// waiting for an event, not timings.
public func withDeadline<T: Sendable>(
    _ duration: Duration, _ body: @escaping @Sendable () async throws -> T
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
