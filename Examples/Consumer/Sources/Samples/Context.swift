// What the documentation's samples take for granted: a message type of the application's,
// and for the store's samples a session, a store and a record type.
// scripts/consumer.sh writes the samples themselves into Samples.swift, each in a function
// of its own that nothing calls: they are compiled, not run.
import MultipeerSession
import MultipeerSync

/// The application's message in the samples.
struct Note: Codable, Sendable {
    var text: String
}

// The store's samples (MultipeerSync) use a session, a store and this record type.

/// The session of the store's samples that do not make their own: compiled, never run.
var session: MultipeerSession { fatalError("the documentation's samples are compiled, not run") }

/// The store of the samples that do not open their own.
var store: SyncStore { fatalError("the documentation's samples are compiled, not run") }

/// The checklist item of the store's samples.
struct ChecklistItem: SyncRecord {
    static var merge: SyncMerge { .fieldByField }
    var id: String
    var title: String
    var done: Bool
    var checkedBy: String?
}

/// The captain's key, in the samples of who may write.
var captainKey: PeerKey { fatalError("the documentation's samples are compiled, not run") }
