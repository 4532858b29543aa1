import MultipeerCore

public import struct Foundation.URL
public import struct Foundation.UUID

extension MultipeerSession {
    /// Sends the file at `fileURL` to the peer `peerID` as a resource (docs/PROTOCOL.md 3c): the
    /// peer gets it whole in its resource directory, with its SHA-256 checked, or the transfer
    /// fails saying why.
    ///
    /// ```swift
    /// func sendChart(_ chart: URL, from session: MultipeerSession, to peer: Peer) async throws {
    ///     let transfer = try await session.sendResource(at: chart, metadata: ["entry": "42"], to: peer.id)
    ///     for await progress in transfer.progress { print("\(Int(progress.fractionDone * 100)) %") }
    ///     try await transfer.completion()
    /// }
    /// ```
    ///
    /// The file is read once to hash it (before this returns), then in chunks as the peer takes
    /// them, one chunk at a time, between the messages to the same peer. If it changes or goes
    /// meanwhile, the transfer fails (`resourceChanged`) rather than send what it was not. A
    /// broken link or a restart of the receiver resumes from what the receiver wrote; a peer
    /// that is away gets the file when it comes back, for as long as this session runs.
    ///
    /// - Parameters:
    ///   - fileURL: A regular file.
    ///   - name: The name the receiver sees (1 to 255 bytes of UTF-8, no `/` or control
    ///     character); by default the file's own.
    ///   - metadata: Entries for the receiving application, with the limits of ``PeerInfo``'s.
    ///   - peerID: A peer this session has met (active now, or earlier in this run); one that
    ///     takes no resources fails the transfer with `resourceRefused`.
    /// - Throws: `peerNotActive` for a peer this session never met; `invalidArgument` for a file
    ///   that cannot be read or a name or metadata out of bounds.
    public nonisolated func sendResource(
        at fileURL: URL,
        named name: String? = nil,
        metadata: [String: String] = [:],
        to peerID: UUID
    ) async throws -> OutgoingResource {
        guard deliveries[peerID] != nil else {
            throw MultipeerError(
                .peerNotActive,
                "peer \(peerID) has never been active in this session: there is no one to send \(fileURL.lastPathComponent) to"
            )
        }
        return try await inbox.resources.send(
            fileURL,
            named: name ?? fileURL.lastPathComponent,
            metadata: metadata,
            to: peerID
        )
    }

    /// The files peers send this session, each as its transfer begins: what it is, its
    /// progress, and its file once it has arrived (``IncomingResource/file()``). One stream for
    /// the session's life, for one reader; it ends when the session stops. Transfers go on
    /// whether or not it is read; it holds at most 256 not yet read, and a file that begins
    /// beyond that still arrives in the directory, unannounced (the session logs a warning).
    /// Without a ``Configuration/resourceDirectory``, none arrive.
    public nonisolated var incomingResources: AsyncStream<IncomingResource> { inbox.resources.incoming }

    /// The files peers send this session whose offer's metadata has the key `key`, each as its
    /// transfer begins: from now on they come here, not to ``incomingResources``. For a layer
    /// that shares the session's resources with its application (a replicated store's
    /// attachments tag theirs); its sender puts `key` in the metadata of what it sends
    /// (``sendResource(at:named:metadata:to:)``). One stream per key, for one reader: asking
    /// again for the same key ends the stream given before. It ends when the session stops,
    /// holds at most 256 transfers not yet read, and without a
    /// ``Configuration/resourceDirectory`` gets none.
    public nonisolated func incomingResources(withMetadataKey key: String) -> AsyncStream<IncomingResource> {
        inbox.resources.routed(byMetadataKey: key)
    }
}
