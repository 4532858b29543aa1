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
        /// A record from a peer holds what a user could not have typed (docs/NAVLOG.md 3): it is
        /// carried, as the store carries every version, and not shown.
        public static let badVersion = Code("badVersion")
        /// A peer runs navlog-sync 0.9 or earlier (navlog protocol 1), with which this build
        /// cannot sync: it is to be updated.
        public static let peerTooOld = Code("peerTooOld")
        /// An attachment is not here (yet): no peer that holds it has sent it.
        public static let attachmentMissing = Code("attachmentMissing")
        /// An attachment could not be kept, sent or saved (the disk, permissions, the peer).
        public static let attachmentFailure = Code("attachmentFailure")
        /// A session given to a host was not made for its store: under another identity, or not
        /// from ``NavlogNode/configuration(_:for:)`` (a program's mistake; navlog-sync makes its own).
        public static let sessionMismatch = Code("sessionMismatch")
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
