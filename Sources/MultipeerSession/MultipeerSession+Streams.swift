import MultipeerCore

public import struct Foundation.UUID

extension MultipeerSession {
    /// Opens an ordered byte stream to the peer `peerID`, both ways (docs/PROTOCOL.md 3d): for
    /// bytes whose end is not known in advance, such as a log or audio. The peer gets it from its
    /// ``incomingStreams``.
    ///
    /// ```swift
    /// func streamLog(_ lines: [String], from session: MultipeerSession, to peer: Peer) async throws {
    ///     let stream = try session.openStream(named: "log", to: peer.id)
    ///     for line in lines { try await stream.write(Array((line + "\n").utf8)) }
    ///     try await stream.finish()
    ///     for try await reply in stream { print("peer says", String(decoding: reply, as: UTF8.self)) }
    /// }
    /// ```
    ///
    /// The stream goes on across broken links, from where each reader stands; while the peer is
    /// away, writes wait once 256 KiB are waiting. It ends when the peer's session stops or
    /// restarts, or either side cancels it.
    ///
    /// - Parameters:
    ///   - name: For the peer's application: 1 to 255 bytes of UTF-8, no control character.
    ///   - peerID: A peer this session has met (active now, or earlier in this run).
    /// - Throws: `peerNotActive` for a peer this session never met; `streamRefused` for a peer
    ///   that takes no streams; `invalidArgument` for a name out of bounds; `sessionState`
    ///   once the session stopped.
    public nonisolated func openStream(named name: String, to peerID: UUID) throws -> PeerStream {
        try inbox.streams.open(named: name, to: peerID)
    }

    /// The streams peers open to this session, as each arrives. One stream for the session's
    /// life, for one reader; it ends when the session stops. It holds at most 64 streams not yet
    /// taken, and a peer may have at most 16 streams it opened open here: beyond either, the
    /// peer's stream is refused (its side throws `streamRefused`).
    public nonisolated var incomingStreams: AsyncStream<PeerStream> { inbox.streams.incoming }
}
