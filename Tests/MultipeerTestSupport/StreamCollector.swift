/// Reads `stream` until `done` holds for what was read, and returns what was read; throws
/// ``DeadlineExceeded`` if that takes longer than `timeout`, and ``StreamEnded`` if the stream
/// ends first. Later calls go on where this one stopped (the session's streams, like an
/// AsyncStream, have one consumer at a time, whatever iterator reads them).
public func collect<Stream: AsyncSequence<Event, Never> & Sendable, Event: Sendable>(
    _ stream: Stream, timeout: Duration = .seconds(30), until done: @escaping @Sendable ([Event]) -> Bool
) async throws -> [Event] {
    try await withDeadline(timeout) {
        var events: [Event] = []
        if done(events) { return events }
        for await event in stream {
            events.append(event)
            if done(events) { return events }
        }
        throw StreamEnded(read: events.count)
    }
}

/// Thrown by ``collect(_:timeout:until:)`` when the stream ended before the condition held.
public struct StreamEnded: Error, CustomStringConvertible {
    public let read: Int
    public init(read: Int) { self.read = read }
    public var description: String { "the stream ended after \(read) elements, before the awaited condition held" }
}
