public import struct Foundation.UUID

/// What a store reports besides its records' changes (``SyncStore/events``).
public enum SyncEvent: Sendable, CustomStringConvertible {
    /// What a peer sent was refused: a version (forged, malformed, stamped too far ahead, ...)
    /// or a whole message that does not read. Nothing refused is stored or relayed; the rest of
    /// what came with it was taken.
    case refused(SyncError, from: UUID)
    /// A record kept does not read as its collection's type (`undecodableRecord`): it is kept
    /// and passed on unchanged, and left out of what the collection lists.
    case unreadableRecord(SyncError)
    /// An exchange with the peer ended (docs/SYNC.md 6): each side was sent, or asked for,
    /// every version the other lacked when it began.
    case exchanged(with: UUID)
    /// Deletes were collected (docs/SYNC.md 8): this many, their versions let go; a write
    /// older than any of them is still never taken.
    case collected(Int)
    /// The peer reads a collection this station reads as a newer schema version
    /// (``SyncRecord/schemaVersion``): its build is newer, and records it writes may hold
    /// fields this build does not read (they are kept and passed on whole) or not read here at
    /// all (``unreadableRecord(_:)``). Told once per peer, collection and version in a run.
    case newerSchema(collection: String, theirs: Int, ours: Int, from: UUID)
    /// The file of an attachment arrived from the peer, its SHA-256 checked: it is in the
    /// store (``SyncStore/file(of:)``).
    case attachmentArrived(SyncAttachment, from: UUID)
    /// An attachment's file on its way to or from a peer: its progress, and its end (a file that
    /// arrived is also told by ``attachmentArrived(_:from:)``). For progress bars.
    case fileTransfer(SyncFileTransfer)
    /// The peer joined, and does not read the store's messages (`peerNotSyncing`): it runs a
    /// build of the application without the store, or with another protocol, or its store has
    /// not run yet. It is synced with once its session says it reads them.
    case notSyncing(with: UUID, SyncError)
    /// The store could not do something it does of its own accord (take a peer's versions,
    /// answer a peer): the error says what. What was not taken is taken at a later exchange.
    case failed(SyncError)
    /// This event stream fell ``SyncStore/Configuration/eventBuffer`` behind and lost `count`
    /// of its oldest events since the last one it read; the events after them follow. (A
    /// change missed among them: read ``SyncStore/status()`` afresh.)
    case eventsDropped(count: Int)

    public var description: String {
        switch self {
        case .refused(let error, let peer): "refused from \(peer): \(error)"
        case .unreadableRecord(let error): "unreadable record: \(error)"
        case .exchanged(let peer): "exchanged with \(peer)"
        case .collected(let count): "collected \(count) deletes"
        case .attachmentArrived(let attachment, let peer): "attachment \(attachment) arrived from \(peer)"
        case .fileTransfer(let transfer):
            "\(transfer.attachment) \(transfer.direction == .incoming ? "from" : "to") \(transfer.peer): \(transfer.progress.bytesDone) of \(transfer.progress.totalBytes) bytes, \(transfer.state)"
        case .newerSchema(let collection, let theirs, let ours, let peer):
            "\(peer) reads \(collection) as schema version \(theirs), newer than this build's \(ours): update this application to read all of its records"
        case .notSyncing(let peer, let error): "not syncing with \(peer): \(error)"
        case .failed(let error): "failed: \(error)"
        case .eventsDropped(let count): "this event stream fell behind and lost \(count) event(s)"
        }
    }
}

/// A record changed, as an application sees it: written here, or taken from a peer.
public struct SyncChange<Record: SyncRecord>: Sendable {
    /// The record's id.
    public var id: String
    /// The record as it is now; nil if it was deleted.
    public var record: Record?
    /// The latest write taken for the record in the commit that changed it: when, and which
    /// station wrote it (its origin).
    public var stamp: VersionStamp
    /// The peer it came from (which may have relayed another origin's write), or nil for this
    /// station's own write (or one it imported, ``SyncStore/importVersions(_:keys:)``).
    public var peer: UUID?
    /// How many changes of the collection the sequence dropped just before this one, its reader
    /// having fallen ``SyncStore/Configuration/changeBuffer`` behind: 0 unless it did. They
    /// are not coming again, so a reader that keeps a view of the collection reads it afresh
    /// (``SyncCollection/records()``) when this is more than 0.
    public var missed: Int = 0

    /// The station that wrote it.
    public var origin: UUID { stamp.origin }
}
