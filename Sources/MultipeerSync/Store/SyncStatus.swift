public import struct Foundation.UUID

/// Where a store stands (``SyncStore/status()``): with each peer it has met, and what it keeps.
public struct SyncStatus: Sendable, Hashable {
    /// Every peer this station has met, now or in an earlier run, by peer ID.
    public var peers: [UUID: PeerSyncStatus]
    /// The versions this station keeps (each a write of one record, docs/SYNC.md 3), of which
    /// ``deletes`` are deletes not yet collected.
    public var versions: Int
    /// The deletes kept, awaiting collection.
    public var deletes: Int
    /// Every delete below this timestamp was collected (docs/SYNC.md 8); 0 if none was.
    public var horizon: HLCTimestamp
    /// The files of attachments that records this station keeps hold, that it fetches at once
    /// (``SyncAttachmentPolicy/atOnce``, or asked for with ``SyncStore/file(of:)``), and that
    /// have not arrived yet.
    public var missingAttachments: Int

    /// Whether this station holds everything every peer it has met held when they last met,
    /// and no exchange runs: what an application shows as "synced with the crew". (A peer's
    /// writes since, while it is away, it cannot know of.)
    public var isSynced: Bool {
        peers.values.allSatisfy { $0.state == .synced }
    }

    /// Whether ``isSynced`` and no file this station fetches at once is missing.
    public var isSyncedWithFiles: Bool { isSynced && missingAttachments == 0 }
}

/// Where a store stands with one peer.
public struct PeerSyncStatus: Sendable, Hashable {
    /// Whether the two are comparing what they hold, or did.
    public enum State: Sendable, Hashable {
        /// An exchange runs with the peer: each is getting what it lacks.
        case exchanging
        /// Their last exchange completed: each got everything the other held when it began,
        /// and writes since travel as they are made while the peer is active.
        case synced
        /// They met, and no exchange completed since this store started (the peer left
        /// during one, say).
        case unknown
    }

    /// Where they stand.
    public var state: State
    /// When their last exchange completed: the peer holds every version this station held
    /// at this timestamp. Nil if none ever did.
    public var syncedAt: HLCTimestamp?
    /// Versions new to this station that came from the peer in the current exchange (or the
    /// last one), with those the peer pushed as their meeting began (what it stored since they
    /// last met, docs/SYNC.md 6): how far behind this station was.
    public var received: Int
    /// Versions this station sent the peer in the current exchange (or the last one): those
    /// it stored since they last met, pushed as their meeting began, and those the exchange
    /// found the peer lacked.
    public var sent: Int

    /// Whether the peer is active now (its session's link is up).
    public var isActive: Bool
}
