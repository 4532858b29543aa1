/// What went wrong in navlog-sync, with a sentence that says what to do.
public struct NavlogError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        init(_ name: String) { self.name = name }
        public var description: String { name }

        /// A line on standard input that is not a command.
        public static let badCommand = Code("badCommand")
        /// No entry has the given id, or the id prefix matches several.
        public static let unknownEntry = Code("unknownEntry")
        /// Another navlog-sync runs on this database.
        public static let databaseLocked = Code("databaseLocked")
        /// The file is not a navlog database, or it is damaged.
        public static let databaseCorrupt = Code("databaseCorrupt")
        /// There is no database at the path given.
        public static let databaseMissing = Code("databaseMissing")
        /// The host's identity file cannot be read or made (permissions, owner, format).
        public static let identityFile = Code("identityFile")
        /// Any other SQLite failure.
        public static let databaseFailure = Code("databaseFailure")
        /// A peer sent versions stamped more than a day ahead of this host's clock.
        public static let clockAhead = Code("clockAhead")
        /// A peer sent versions a user could not have typed.
        public static let badVersion = Code("badVersion")
        /// A version is not signed by its origin (unsigned, another key, or altered).
        public static let badSignature = Code("badSignature")
        /// A peer sent, as its own new version (`update`), a version whose origin is another host.
        public static let notFromSender = Code("notFromSender")
        /// Two versions with one version stamp and different content met; the one that wins by
        /// content was kept (both hosts keep the same one).
        public static let conflictingVersion = Code("conflictingVersion")
        /// A peer sent more anti-entropy requests than this host holds unanswered
        /// (``SyncWorker/maximumWaiting``), and its requests are ignored until it joins again; or
        /// a `lack` naming more files than one may (``NavlogMessage/lackBatchSize``), ignored.
        public static let syncOverload = Code("syncOverload")
        /// A peer sent a `reply` to an `ask` this host did not send (or answered one twice).
        public static let unexpectedReply = Code("unexpectedReply")
        /// An attachment is not here (yet): no peer that holds it has sent it.
        public static let attachmentMissing = Code("attachmentMissing")
        /// An attachment could not be kept, sent or saved (the disk, permissions, the peer).
        public static let attachmentFailure = Code("attachmentFailure")
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
