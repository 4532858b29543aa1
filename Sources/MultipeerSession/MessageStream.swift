/// The messages of one type from every peer, as ``MultipeerSession/messages(of:)`` hands them
/// out: read it with `for await (peer, message) in stream`.
///
/// The stream holds at most ``MultipeerSession/Limits/receiveBuffer`` (1,024 messages, 4 MiB
/// of encoded payload by default), and what one read of a link brings beyond it (256 KiB and
/// the rest of a frame). When it is full, the
/// links it is fed from stop reading until it is half empty: TCP pushes back on the senders,
/// their outboxes fill and their `send` waits (or throws `outboxFull`). A slow reader slows
/// the senders; it never makes this process hold more. A stream that nobody reads holds up
/// every link that carries its type, so end the loop (or drop the stream) when done with it.
public struct MessageStream<Message: Sendable>: AsyncSequence, Sendable {
    public typealias Element = (peer: Peer, message: Message)

    private let lifetime: StreamLifetime<Element>

    init(_ buffer: StreamBuffer<Element>) {
        lifetime = StreamLifetime(buffer)
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(lifetime: lifetime)
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let lifetime: StreamLifetime<Element>

        /// The next message, waiting for one; nil once the session has stopped (or the task
        /// reading was cancelled).
        public mutating func next() async -> Element? {
            await lifetime.buffer.next()
        }
    }
}

/// What happens in a session, as ``MultipeerSession/events`` hands it out: read it with
/// `for await event in stream`.
///
/// It starts with the session's state when it was made (``SessionEvent/listening(port:)``
/// while the session listens, then ``SessionEvent/peerJoined(_:)`` for each active peer), so a
/// late reader misses nothing of it. It never holds up the session: it keeps at most
/// ``MultipeerSession/Limits/eventBuffer`` events (1,024 by default), and a reader that falls
/// that far behind loses the oldest ``SessionEvent/stats(_:_:)`` reports first, then the oldest
/// events, and is told how many with ``SessionEvent/eventsDropped(count:)``.
public struct EventStream: AsyncSequence, Sendable {
    public typealias Element = SessionEvent

    private let lifetime: StreamLifetime<SessionEvent>

    init(_ buffer: StreamBuffer<SessionEvent>) {
        lifetime = StreamLifetime(buffer)
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(lifetime: lifetime)
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let lifetime: StreamLifetime<SessionEvent>

        /// The next event, waiting for one; nil once the session has stopped (or the task
        /// reading was cancelled).
        public mutating func next() async -> SessionEvent? {
            await lifetime.buffer.next()
        }
    }
}
