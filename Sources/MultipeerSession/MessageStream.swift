/// A stream the session hands out, read with `for await`: ``MessageStream`` (from
/// ``MultipeerSession/messages(of:)``) and ``EventStream`` (from ``MultipeerSession/events``).
/// One consumer at a time; every stream is bounded (see each kind). It ends when the session
/// stops (after what it holds has been read), or when the task reading it is cancelled; dropping
/// every copy of it ends the subscription.
public struct SessionStream<Element: Sendable>: AsyncSequence, Sendable {
    /// Takes the next element from the buffer; holds the buffer's lifetime, so the subscription
    /// ends when every copy of the stream and of its iterators is gone.
    fileprivate let nextElement: @Sendable () async -> Element?

    /// A stream of `buffer`'s elements; `check` runs at each `next()` (``SessionEnvironment/readerCheck``).
    init(_ buffer: StreamBuffer<Element>, check: (@Sendable () -> Void)? = nil) {
        let lifetime = StreamLifetime(buffer)
        if let check {
            nextElement = {
                check()
                return await lifetime.buffer.next()
            }
        } else {
            nextElement = { await lifetime.buffer.next() }
        }
    }

    /// A stream of `base`'s elements made into this stream's by `transform`, one by one.
    init<Base>(_ base: SessionStream<Base>, _ transform: @escaping @Sendable (Base) -> Element) {
        let next = base.nextElement
        nextElement = { await next().map(transform) }
    }

    /// A stream of what `next` returns, which holds the ``StreamLifetime`` of its buffer.
    /// (The caller, knowing the buffer's element type, reads it without generic dispatch.)
    init(next: @escaping @Sendable () async -> Element?) {
        nextElement = next
    }

    /// An iterator over the stream; all of a stream's iterators read the same elements, one
    /// consumer at a time.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(nextElement: nextElement)
    }

    /// Reads a ``SessionStream``.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let nextElement: @Sendable () async -> Element?

        /// The next element, waiting for one; nil once the stream has ended.
        public mutating func next() async -> Element? {
            await nextElement()
        }
    }
}

/// The messages of one type from every peer, with the peer that sent each:
/// `for await (peer, message) in session.messages(of: Note.self)`.
///
/// The stream holds at most ``MultipeerSession/Limits/receiveBuffer`` (1,024 messages, or 4 MiB
/// of the read buffers they keep alive, by default) or one larger message and the next, and what one read of a
/// link brings beyond it (256 KiB and the rest of a frame). When it is full, the links it is fed from stop reading until it is half
/// empty: TCP pushes back on the senders, their outboxes fill and their `send` waits (or throws
/// `outboxFull`). A slow reader slows the senders; it never makes this process hold more. A
/// stream that nobody reads holds up every link that carries its type, so end the loop (or drop
/// the stream) when done with it.
public typealias MessageStream<Message: Sendable> = SessionStream<(peer: Peer, message: Message)>

/// What happens in a session: `for await event in session.events`.
///
/// It starts with the session's state when it was made (``SessionEvent/listening(port:)``
/// while the session listens, then ``SessionEvent/peerJoined(_:)`` for each active peer), so a
/// late reader misses nothing of it. It never holds up the session: it keeps at most
/// ``MultipeerSession/Limits/eventBuffer`` events (1,024 by default), and a reader that falls
/// that far behind loses the oldest ``SessionEvent/stats(_:_:)`` reports first, then the oldest
/// events, and is told how many with ``SessionEvent/eventsDropped(count:)``.
public typealias EventStream = SessionStream<SessionEvent>
