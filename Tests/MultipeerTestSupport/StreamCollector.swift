import NIOConcurrencyHelpers

/// Reads `stream` until `done` holds for what was read, and returns what was read; throws
/// ``StreamDeadlineExceeded`` (saying how much was read) if that takes longer than `timeout`,
/// and ``StreamEnded`` if the stream ends first. Later calls go on where this one stopped (the session's streams, like an
/// AsyncStream, have one consumer at a time, whatever iterator reads them).
public func collect<Stream: AsyncSequence<Event, Never> & Sendable, Event: Sendable>(
    _ stream: Stream,
    timeout: Duration = .seconds(30),
    until done: @escaping @Sendable ([Event]) -> Bool
) async throws -> [Event] {
    let read = NIOLockedValueBox(0)
    do {
        return try await withDeadline(timeout) {
            var events: [Event] = []
            if done(events) { return events }
            for await event in stream {
                events.append(event)
                read.withLockedValue { $0 = events.count }
                if done(events) { return events }
            }
            throw StreamEnded(read: events.count)
        }
    } catch let error as DeadlineExceeded {
        throw StreamDeadlineExceeded(duration: error.duration, read: read.withLockedValue { $0 })
    }
}

/// Thrown by ``collect(_:timeout:until:)`` when the condition did not hold in time.
public struct StreamDeadlineExceeded: Error, CustomStringConvertible {
    public let duration: Duration
    public let read: Int
    public var description: String {
        "the awaited condition did not hold within \(duration), after \(read) elements read"
    }
}

/// Thrown by ``collect(_:timeout:until:)`` when the stream ended before the condition held.
public struct StreamEnded: Error, CustomStringConvertible {
    public let read: Int
    public init(read: Int) { self.read = read }
    public var description: String { "the stream ended after \(read) elements, before the awaited condition held" }
}
