/// What the store refused or could not do: a code to switch on, and a sentence that says what
/// happened and to which record, version or peer.
public struct SyncError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of failure, as a value that can grow.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String

        private init(_ name: String) { self.name = name }

        /// A version's bytes break docs/SYNC.md 3 (truncated, out of range, not UTF-8, fields
        /// out of order, ...): it is refused, never stored or relayed.
        public static let malformedVersion = Code("malformedVersion")
        /// A message from a peer breaks docs/SYNC.md 5 (truncated, out of range, a varint in
        /// a second form, ...): it is refused, and nothing of it is taken.
        public static let malformedMessage = Code("malformedMessage")
        /// A version's signature does not verify with its origin's key, or the key offered is
        /// not its origin's: someone other than the origin wrote or altered it. It is refused.
        public static let badSignature = Code("badSignature")
        /// A write the application asked for breaks a bound of docs/SYNC.md 3 (a collection
        /// name, an id, a field's name, the version's size): nothing was written.
        public static let invalidWrite = Code("invalidWrite")
        /// A version of a collection by an origin that may not write it (``SyncRecord/writers``):
        /// a local write is not made; a peer's version is refused, never stored or relayed.
        public static let notPermitted = Code("notPermitted")
        /// A version is stamped more than a day ahead of this station's clock (docs/SYNC.md 2):
        /// a clock that is wrong, or a peer that lies. It is refused; taking it in would drag
        /// every later write of the group along to it.
        public static let clockAhead = Code("clockAhead")
        /// A record kept does not read as the collection's type (a newer build wrote a field
        /// of another type, say): the station keeps it, unchanged, and passes it on; reading it
        /// by id throws this, and listing the collection leaves it out and says so
        /// (``SyncEvent/unreadableRecord(_:)``).
        public static let undecodableRecord = Code("undecodableRecord")
        /// A peer does not read the store's messages (its session says so, docs/PROTOCOL.md
        /// 3e): it runs a build of the application without the store, or with another protocol
        /// (navlog-sync 0.9's, say). It is not synced with while it does; nothing is lost.
        public static let peerNotSyncing = Code("peerNotSyncing")
        /// A version of a collection this station does not keep (``SyncStore/Configuration/keeps``):
        /// a local write is not made; a peer's version is refused, never stored or relayed (a
        /// peer sends none once it has heard which collections this station keeps).
        public static let notKept = Code("notKept")
        /// The store's configuration breaks a bound of docs/SYNC.md (a collection of
        /// ``SyncStore/Configuration/keeps`` named with no bytes or more than 255, say): the
        /// store is not opened.
        public static let invalidConfiguration = Code("invalidConfiguration")
        /// A message to a peer could not be sent (the session stopped, the peer was forgotten
        /// or stayed away with its outbox full): what the peer lacks, it gets at its next
        /// exchange.
        public static let notSent = Code("notSent")
        /// An attachment's file could not be taken in, kept, sent or received (the message
        /// says which file and why): the records that hold it are unaffected, and a file that
        /// did not arrive is asked for again at the next exchange.
        public static let attachmentFailed = Code("attachmentFailed")
        /// The store's database could not be opened, read or written (the message has
        /// SQLite's reason); a commit that failed left nothing of itself.
        public static let storageFailed = Code("storageFailed")

        /// The code's name, e.g. `malformedVersion`.
        public var description: String { name }
    }

    /// What kind of failure.
    public var code: Code
    /// What happened, and what it was about.
    public var message: String

    /// A failure of `code`, told by `message`.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The message, after the code: `malformedVersion: ...`.
    public var description: String { "\(code): \(message)" }
}
