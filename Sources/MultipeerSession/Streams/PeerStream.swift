import NIOCore

public import struct Foundation.UUID

/// An ordered byte stream between this session and a peer, both ways
/// (``MultipeerSession/openStream(named:to:)``, ``MultipeerSession/incomingStreams``): write
/// this side's bytes with ``write(_:)`` and end them with ``finish()``; read the peer's with
/// `for try await bytes in stream`.
///
/// A stream outlives the links it runs on: when a link breaks, each direction goes on, on the
/// next link to the peer, from the last byte the reader holds, with nothing lost or repeated. It
/// ends when both directions have ended, when either side cancels it (``cancel()``), or when
/// either side's session stops or restarts; reading and writing then throw a `MultipeerError`
/// saying which (`streamCancelled`, `streamLost`, `streamRefused`, `sessionState`), after the
/// bytes that arrived before.
///
/// Each direction holds at most 256 KiB at each end: ``write(_:)`` waits for room while the
/// peer's application does not read, so a slow reader slows the writer and nothing grows.
///
/// Dropping every reference to a stream (and its iterators) before it ended cancels it.
public final class PeerStream: AsyncSequence, Sendable {
    /// Names the stream (the same at both ends).
    public let id: UUID
    /// The name its opener gave it.
    public let name: String
    /// The peer at the other end.
    public let peerID: UUID
    /// Whether this side opened it.
    public let openedHere: Bool

    private let core: StreamCore

    init(_ core: StreamCore) {
        self.core = core
        id = core.key.stream
        name = core.name
        peerID = core.key.peer
        openedHere = core.opener
    }

    /// Sends `bytes`, in order after what was written before. Returns once this side holds them
    /// to send (not once the peer has them: ``finish()`` waits for that), waiting first for room
    /// while 256 KiB wait for the peer's application to read them.
    ///
    /// - Throws: the `MultipeerError` that ended the stream; `invalidArgument` after
    ///   ``finish()``; `CancellationError` if the task is cancelled while it waits (what was
    ///   taken before is sent, the rest is not).
    public func write(_ bytes: some Sequence<UInt8>) async throws {
        var buffer = ByteBuffer()
        buffer.writeBytes(bytes)
        try await core.write(&buffer)
    }

    /// Ends this side's direction, and returns once the peer's session holds every byte of it
    /// and its end (its application reads them when it will). The peer's direction goes on.
    ///
    /// - Throws: the `MultipeerError` that ended the stream; `CancellationError` if the task
    ///   is cancelled while it waits (the end is sent all the same).
    public func finish() async throws {
        try await core.finishWriting()
    }

    /// Ends the stream both ways: the peer is told (its reads and writes throw
    /// `streamCancelled` once it has read what arrived before), and so are this side's tasks
    /// waiting on it. Does nothing once the stream has ended.
    public func cancel() {
        core.end(.cancelled, "")
    }

    deinit {
        core.end(.cancelled, "its application let go of it")
    }

    /// An iterator over the peer's bytes, in the chunks they arrived in; one reader at a time.
    public func makeAsyncIterator() -> Iterator {
        Iterator(stream: self)
    }

    /// Reads a ``PeerStream``.
    public struct Iterator: AsyncIteratorProtocol, Sendable {
        /// (The stream, not its core: an iterator keeps the stream from being let go of.)
        let stream: PeerStream

        /// The peer's next bytes, waiting for them; nil once the peer ended its direction and
        /// every byte was read.
        ///
        /// - Throws: the `MultipeerError` that ended the stream, once the bytes that arrived
        ///   before it were read; `CancellationError` if the task is cancelled while it waits.
        public mutating func next() async throws -> [UInt8]? {
            try await stream.core.read()
        }
    }
}
