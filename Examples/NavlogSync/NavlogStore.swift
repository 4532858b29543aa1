public import Foundation
import GRDB
import Glibc
public import MultipeerSession
import MultipeerSync

/// A host's log on disk: the replicated store's SQLite database (docs/SYNC.md), one writer at a
/// time, and the host's identity beside it. A version is committed (WAL, synchronous=FULL)
/// before anyone is told it exists, so a restart, even after SIGKILL or a power cut, loses
/// nothing that was acknowledged.
///
/// A database of navlog-sync 0.9 (its table `entry`) opens too: ``NavlogNode`` brings its log
/// into the store when it starts, every entry with its origin's signature (docs/SYNC.md 11), and
/// its attached files with it.
public final class NavlogStore: Sendable {
    /// The path of the database file.
    public let path: String
    /// This host's key pair, kept in its identity file beside the database (nil when the store
    /// is opened read-only).
    public let identity: PeerIdentity?
    /// The descriptor holding the exclusive lock that keeps a second writer out; open as long
    /// as this store lives (closing it early would also drop SQLite's own locks on the file).
    private let lockDescriptor: Int32?
    /// navlog-sync 0.9's log in the database, if it holds one not brought into the store yet.
    let legacy: [NavlogLegacyEntry]

    /// Opens (creating if needed) the database for a running host. Only one process may hold a
    /// database this way: a second gets `databaseLocked`.
    ///
    /// - Parameter identityFile: The host's identity (key pair) file, made on first use;
    ///   by default the database's path with `.identity` appended.
    public init(path: String, identityFile: String? = nil) throws(NavlogError) {
        self.path = path
        let identityFile = identityFile ?? path + ".identity"
        do {
            identity = try PeerIdentity(loadingOrCreatingFile: identityFile)
        } catch {
            throw NavlogError(.identityFile, "\(error)")
        }
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw NavlogError(.databaseFailure, "cannot open the database \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            close(descriptor)
            throw NavlogError(
                .databaseLocked,
                "the database \(path) is in use by another navlog-sync run; stop it, or give this one its own --data file"
            )
        }
        lockDescriptor = descriptor
        do {
            legacy = try NavlogLegacy.entries(at: path, writable: true)
        } catch {
            close(descriptor)
            throw error
        }
    }

    /// Opens an existing database read-only, beside a running host or without one.
    public init(readingAt path: String) throws(NavlogError) {
        self.path = path
        lockDescriptor = nil
        identity = nil
        guard FileManager.default.fileExists(atPath: path) else {
            throw NavlogError(
                .databaseMissing,
                "there is no database at \(path); `navlog-sync run --data \(path)` makes one"
            )
        }
        legacy = try NavlogLegacy.entries(at: path, writable: false)
    }

    deinit {
        if let lockDescriptor { close(lockDescriptor) }
    }

    /// The folder of the attached files, by hash (the store's, `<database>.attachments`).
    public var attachments: URL { URL(fileURLWithPath: path + ".attachments") }

    /// Where the session receives files until they are whole (its `resourceDirectory`).
    public var incoming: URL { URL(fileURLWithPath: path + ".incoming") }

    /// The replicated store over this database, syncing over `session`.
    func syncStore(over session: MultipeerSession) throws(NavlogError) -> SyncStore {
        do {
            return try SyncStore(session: session, path: path)
        } catch {
            throw NavlogError(.databaseFailure, "the store \(path) cannot be opened: \(error.message)")
        }
    }

    /// The live entries in log order, read without a running host (beside one, what it has
    /// committed), and where each attached file stands. A 0.9 database not brought into the
    /// store yet is read as it is.
    public func entries() async throws(NavlogError) -> (entries: [NavlogEntry], files: [String: AttachmentState]) {
        if !legacy.isEmpty {
            let entries = legacy.map(\.entry).filter { !$0.deleted }.sorted(by: NavlogEntry.logOrder)
            var files: [String: AttachmentState] = [:]
            for attachment in entries.flatMap({ $0.attachments ?? [] }) {
                let held = FileManager.default.fileExists(
                    atPath: attachments.appendingPathComponent(attachment.sha256).path
                )
                files[attachment.sha256] = held ? .held : .missing
            }
            return (entries, files)
        }
        // (A session that never runs: the store only reads what is on disk.)
        let session: MultipeerSession
        do {
            session = MultipeerSession(
                configuration: MultipeerSession.Configuration(
                    serviceType: "_navlog._tcp",
                    peer: PeerInfo(displayName: "reader"),
                    psk: try PreSharedKey(key: (0..<32).map { _ in UInt8.random(in: 0...255) })
                ),
                identity: PeerIdentity()
            )
        } catch {
            throw NavlogError(.databaseFailure, "cannot read \(path): \(error)")
        }
        let store = try syncStore(over: session)
        let entries = try await NavlogLog(store: store).entries()
        var files: [String: AttachmentState] = [:]
        for attachment in entries.flatMap({ $0.attachments ?? [] }) {
            files[attachment.sha256] = await store.fileState(of: attachment.file) == .held ? .held : .missing
        }
        return (entries, files)
    }

    /// One sentence per SQLite failure a user can meet.
    static func describe(_ error: any Error, path: String) -> NavlogError {
        if let error = error as? NavlogError { return error }
        guard let error = error as? DatabaseError else {
            return NavlogError(.databaseFailure, "the database \(path) failed: \(error)")
        }
        let reason = error.message ?? "\(error.resultCode)"
        switch error.resultCode {
        case .SQLITE_NOTADB, .SQLITE_CORRUPT:
            return NavlogError(
                .databaseCorrupt,
                "\(path) is not a navlog database or is damaged (SQLite: \(reason)); move it away to start a new one"
            )
        case .SQLITE_BUSY, .SQLITE_LOCKED:
            return NavlogError(
                .databaseLocked,
                "the database \(path) stayed locked by another process for 5 s (SQLite: \(reason))"
            )
        case .SQLITE_CANTOPEN, .SQLITE_PERM, .SQLITE_READONLY:
            return NavlogError(
                .databaseFailure,
                "cannot open the database \(path) (SQLite: \(reason)); check the path and its permissions"
            )
        default:
            return NavlogError(.databaseFailure, "the database \(path) failed (SQLite: \(reason))")
        }
    }
}
