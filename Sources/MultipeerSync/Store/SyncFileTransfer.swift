public import MultipeerSession

/// An attachment's file on its way between this station and a peer (``SyncEvent/fileTransfer(_:)``):
/// reported as it goes, as often as the session reports its resource's progress, and once more at
/// its end.
public struct SyncFileTransfer: Hashable, Sendable {
    /// Which way the file goes.
    public enum Direction: Hashable, Sendable {
        /// From the peer to this station.
        case incoming
        /// From this station to the peer.
        case outgoing
    }

    /// Where the transfer stands.
    public enum State: Hashable, Sendable {
        /// Under way: ``SyncFileTransfer/progress`` says how far.
        case running
        /// Done: the file arrived whole, its SHA-256 checked (incoming), or the peer has it
        /// (outgoing).
        case done
        /// Ended without the file: the error says why. The file is asked for again at the next
        /// exchange with a peer that holds it (a transfer broken by a link resumes where it was).
        case failed(SyncError)
    }

    /// The attachment whose file this is.
    public var attachment: SyncAttachment
    /// The peer it comes from or goes to.
    public var peer: UUID
    /// Which way it goes.
    public var direction: Direction
    /// The bytes the receiver holds (all of them once ``state`` is done), of the file's
    /// length, and the rate.
    public var progress: ResourceProgress
    /// Under way, done, or failed.
    public var state: State

    /// A transfer's report (for applications that test their own handling of it).
    public init(
        attachment: SyncAttachment,
        peer: UUID,
        direction: Direction,
        progress: ResourceProgress,
        state: State
    ) {
        self.attachment = attachment
        self.peer = peer
        self.direction = direction
        self.progress = progress
        self.state = state
    }
}

extension SyncFileTransfer {
    /// A transfer of `attachment` that begins: nothing of it with the receiver yet.
    init(starting attachment: SyncAttachment, peer: UUID, direction: Direction) {
        self.init(
            attachment: attachment,
            peer: peer,
            direction: direction,
            progress: ResourceProgress(bytesDone: 0, totalBytes: attachment.length, bytesPerSecond: 0),
            state: .running
        )
    }

    /// The transfer ended: done (every byte with the receiver), or failed with `failure`.
    mutating func end(_ failure: SyncError?) {
        if let failure {
            state = .failed(failure)
        } else {
            state = .done
            progress.bytesDone = progress.totalBytes
        }
    }
}

/// Where an attachment's file stands on this station (``SyncStore/fileState(of:)``).
public enum SyncFileState: Hashable, Sendable {
    /// The file is here (``SyncStore/file(of:)`` returns it at once).
    case held
    /// The file is on its way from a peer: this many bytes of it are here.
    case arriving(bytesDone: Int64)
    /// The file is neither here nor on its way.
    case missing
}
