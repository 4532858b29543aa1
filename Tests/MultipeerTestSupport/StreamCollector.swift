import NIOConcurrencyHelpers

/// Reads `stream` until `done` holds for what was read, and returns what was read; throws
/// ``StreamDeadlineExceeded`` (saying how much was read, and the last of it) if that takes longer than `timeout`,
/// and ``StreamEnded`` if the stream ends first. Later calls go on where this one stopped (the session's streams, like an
/// AsyncStream, have one consumer at a time, whatever iterator reads them).
public func collect<Stream: AsyncSequence<Event, Never> & Sendable, Event: Sendable>(
    _ stream: Stream,
    timeout: Duration = .seconds(30),
    until done: @escaping @Sendable ([Event]) -> Bool
) async throws -> [Event] {
    let read = NIOLockedValueBox((count: 0, last: [String]()))
    do {
        return try await withDeadline(timeout) {
            var events: [Event] = []
            if done(events) { return events }
            for await event in stream {
                events.append(event)
                read.withLockedValue {
                    $0.count = events.count
                    $0.last = Array(($0.last + [String(describing: event)]).suffix(StreamDeadlineExceeded.kept))
                }
                if done(events) { return events }
            }
            throw StreamEnded(read: events.count)
        }
    } catch let error as DeadlineExceeded {
        let (count, last) = read.withLockedValue { $0 }
        throw StreamDeadlineExceeded(duration: error.duration, read: count, last: last)
    }
}

/// Thrown by ``collect(_:timeout:until:)`` when the condition did not hold in time.
public struct StreamDeadlineExceeded: Error, CustomStringConvertible {
    /// How many of the last elements read the error keeps.
    static let kept = 12
    public let duration: Duration
    public let read: Int
    /// The last elements read (at most ``kept``), described, oldest first.
    public let last: [String]
    public var description: String {
        "the awaited condition did not hold within \(duration), after \(read) elements read"
            + (last.isEmpty ? "" : "; the last \(last.count): " + last.joined(separator: " | "))
    }
}

/// Thrown by ``collect(_:timeout:until:)`` when the stream ended before the condition held.
public struct StreamEnded: Error, CustomStringConvertible {
    public let read: Int
    public init(read: Int) { self.read = read }
    public var description: String { "the stream ended after \(read) elements, before the awaited condition held" }
}
