import Foundation
import MultipeerCore
public import MultipeerSession
public import MultipeerSync
public import ServiceLifecycle

/// A navlog host: the log in a replicated store (``SyncStore``, docs/SYNC.md), kept in sync with
/// every peer of a ``MultipeerSession``.
///
/// Each entry is a record of the store's collection `navlog.entries` (``NavlogRecord``): a local
/// edit is committed first, then pushed to the peers; when a peer joins, the two stores find
/// what each lacks and exchange it, so hosts converge after any partition or restart, through
/// any host that holds what the other lacks. Run it with ``run()``, as a `Service` of a
/// `ServiceGroup`: a graceful shutdown says GOODBYE to every peer and reports each leaving
/// before ``events`` ends; cancelling stops at once.
public final actor NavlogNode: Service {
    /// The database on disk and this host's identity.
    public nonisolated let store: NavlogStore
    public nonisolated let session: MultipeerSession
    /// The replicated store the log is kept in.
    public nonisolated let sync: SyncStore
    /// The name this host's edits carry.
    public nonisolated let author: String

    private let log: NavlogLog
    private var known: [UUID: (peer: PeerRef, active: Bool, lastSeen: Date)] = [:]
    private let subscriptions = AsyncStream<NavlogEvent>.makeStream()
    /// The first live entry naming each attached file, and the name there, by hash: what a
    /// transfer's events say it is.
    private var attached: [String: (entry: UUID, name: String)] = [:]

    /// A host on `store`, with the session made from `configuration` under the store's
    /// identity. A database of navlog-sync 0.9 is brought into the replicated store first:
    /// every entry, signed by its origin (a version 0.9's first release stored unsigned is
    /// issued again as this host's), and the files attached to them.
    public init(store: NavlogStore, configuration: MultipeerSession.Configuration) async throws(NavlogError) {
        let identity = try Self.identity(of: store)
        try await self.init(
            store: store,
            session: MultipeerSession(configuration: Self.configuration(configuration, for: store), identity: identity)
        )
    }

    /// A host on `store` over a session made elsewhere (a simulated host's, in a simulated
    /// world): made from ``configuration(_:for:)`` under the store's identity, and not run
    /// (``run()`` runs it).
    public init(store: NavlogStore, session: MultipeerSession) async throws(NavlogError) {
        let identity = try Self.identity(of: store)
        guard session.peerID == identity.peerID else {
            throw NavlogError(
                .sessionMismatch,
                "the session is peer \(session.peerID), not the store's \(identity.peerID) (\(store.path)); make it with the store's identity"
            )
        }
        guard
            session.configuration.resourceDirectory?.standardizedFileURL.path == store.incoming.standardizedFileURL.path
        else {
            throw NavlogError(
                .sessionMismatch,
                "the session was not made from NavlogNode.configuration(_:for:) for \(store.path): its received files would not reach the store"
            )
        }
        self.store = store
        self.session = session
        self.author = session.configuration.peer.displayName
        sync = try store.syncStore(over: session)
        log = NavlogLog(store: sync)
        try await Self.bringIn(store.legacy, of: store, into: log, as: identity)
        for entry in try await log.entries() { remember(entry) }
    }

    /// `configuration` as a host on `store` runs it: received files into the store's folder, and
    /// the store's message types said to every peer (so that a peer running another build,
    /// 0.9's navlog protocol, sends it nothing it cannot read: docs/NAVLOG.md 2).
    public static func configuration(
        _ configuration: MultipeerSession.Configuration,
        for store: NavlogStore
    ) -> MultipeerSession.Configuration {
        var configuration = configuration
        configuration.resourceDirectory = store.incoming
        configuration.messageTypes = SyncStore.messageTypes
        return configuration
    }

    private static func identity(of store: NavlogStore) throws(NavlogError) -> PeerIdentity {
        guard let identity = store.identity else {
            throw NavlogError(
                .databaseFailure,
                "the store \(store.path) is open read-only; a host needs it open for writing"
            )
        }
        return identity
    }

    /// Brings navlog-sync 0.9's log into the store (docs/SYNC.md 11), then lets its tables go.
    private static func bringIn(
        _ legacy: [NavlogLegacyEntry],
        of store: NavlogStore,
        into log: NavlogLog,
        as identity: PeerIdentity
    ) async throws(NavlogError) {
        guard !legacy.isEmpty else { return }
        let signed = legacy.filter { $0.version != nil }
        do {
            let refused = try await log.store.importVersions(
                signed.compactMap(\.version),
                keys: Array(Set(signed.compactMap(\.key)))
            )
            if let first = refused.first {
                throw NavlogError(
                    .databaseCorrupt,
                    "\(refused.count) version(s) of the log in \(store.path) do not verify and were not brought into the store; the first: \(first)"
                )
            }
            // (0.9's first release signed nothing: such versions were issued again as the
            // host's own by 0.9 itself; one still here is now.)
            let unsigned = legacy.filter { $0.version == nil }.sorted { $0.timestamp < $1.timestamp }
            try await log.records.put(
                unsigned.map {
                    NavlogRecord(
                        id: $0.id,
                        fields: $0.fields,
                        author: $0.author,
                        deleted: $0.deleted,
                        attachments: $0.attachments
                    )
                }
            )
        } catch let error as NavlogError {
            throw error
        } catch {
            throw NavlogError(
                .databaseFailure,
                "the log of \(store.path) could not be brought into the store: \(error)"
            )
        }
        try NavlogLegacy.remove(at: store.path)
    }

    /// What happens on this host. One subscriber.
    public nonisolated var events: AsyncStream<NavlogEvent> { subscriptions.stream }

    /// Runs the session and the store until shut down or cancelled; throws if the session
    /// cannot start (port in use, avahi-daemon not running).
    public func run() async throws {
        defer { subscriptions.continuation.finish() }
        let sessionEvents = session.events
        let syncEvents = sync.events
        let changes = log.records.changes
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await self.sync.run() }
            group.addTask { for await event in syncEvents { await self.handle(event) } }
            group.addTask { for await change in changes { await self.apply(change) } }
            // The session's events end when it stops, its last peers' leaving told; then the
            // store stops.
            try await withThrowingDiscardingTaskGroup { session in
                session.addTask { for await event in sessionEvents { await self.handle(event) } }
                try await self.session.run()
            }
            group.cancelAll()
        }
    }

    // MARK: Local edits

    /// Adds an entry with these fields; returns it once it is committed and sent.
    @discardableResult
    public func add(_ changes: [NavlogField: String?]) async throws(NavlogError) -> NavlogEntry {
        try await commit(
            NavlogRecord(
                id: UUID(),
                fields: NavlogFields(waypoint: "").applying(changes),
                author: author,
                deleted: false,
                attachments: nil
            )
        )
    }

    /// Changes fields of the live entry whose id starts with `idPrefix`.
    @discardableResult
    public func edit(_ idPrefix: String, _ changes: [NavlogField: String?]) async throws(NavlogError) -> NavlogEntry {
        let current = try await entry(matching: idPrefix)
        return try await commit(
            NavlogRecord(
                id: current.id,
                fields: current.fields.applying(changes),
                author: author,
                deleted: false,
                attachments: current.attachments
            )
        )
    }

    /// Deletes the live entry whose id starts with `idPrefix`: a version whose `deleted` is
    /// true, kept for ever, that wins over older edits.
    @discardableResult
    public func delete(_ idPrefix: String) async throws(NavlogError) -> NavlogEntry {
        let current = try await entry(matching: idPrefix)
        return try await commit(
            NavlogRecord(
                id: current.id,
                fields: current.fields,
                author: author,
                deleted: true,
                attachments: current.attachments
            )
        )
    }

    // MARK: Attachments

    /// Attaches the file at `path` to the live entry whose id starts with `idPrefix`, under the
    /// file's name (replacing an attachment of that name): the file is copied into the store,
    /// and a new version of the entry, naming it with its hash, is committed and sent. Peers
    /// then fetch the file from this host or any that holds it.
    @discardableResult
    public func attach(_ idPrefix: String, file path: String) async throws(NavlogError) -> NavlogEntry {
        _ = try await entry(matching: idPrefix)
        let name = URL(fileURLWithPath: path).lastPathComponent
        guard NavlogAttachment.isName(name) else {
            throw NavlogError(.badCommand, "an attachment's name must be \(NavlogAttachment.nameRule)")
        }
        let file: SyncAttachment
        do {
            file = try await sync.attach(fileAt: URL(fileURLWithPath: path))
        } catch {
            throw NavlogError(.attachmentFailure, error.message)
        }
        let current = try await entry(matching: idPrefix)  // (again: the file took a while)
        guard
            (current.attachments?.filter { $0.name != name }.count ?? 0) < NavlogAttachment.maximumPerVersion
        else {
            throw NavlogError(
                .badCommand,
                "entry \(current.id) has \(NavlogAttachment.maximumPerVersion) attachments, the most an entry carries"
            )
        }
        return try await commit(
            NavlogRecord(
                id: current.id,
                fields: current.fields,
                author: author,
                deleted: false,
                attachments: (current.attachments ?? []).adding(NavlogAttachment(name: name, file: file))
            )
        )
    }

    /// Writes the attachment `name` of the live entry whose id starts with `idPrefix` to `path`.
    /// Throws `attachmentMissing` while it is not here.
    public func save(_ idPrefix: String, name: String, to path: String) async throws(NavlogError) {
        let current = try await entry(matching: idPrefix)
        guard let attachment = current.attachments?.first(where: { $0.name == name }) else {
            let names = current.attachments?.map(\.name).joined(separator: ", ") ?? ""
            throw NavlogError(
                .badCommand,
                "entry \(current.id) has no attachment named \(name)" + (names.isEmpty ? "" : "; it has \(names)")
            )
        }
        switch await sync.fileState(of: attachment.file) {
        case .held:
            break
        case .arriving(let done):
            throw NavlogError(
                .attachmentMissing,
                "\(name) is on its way: \(done) of \(attachment.length) bytes are here"
            )
        case .missing:
            throw NavlogError(.attachmentMissing, "\(name) is not here yet: no peer that holds it has sent it")
        }
        do {
            let file = try await sync.file(of: attachment.file)
            let destination = URL(fileURLWithPath: path)
            try? FileManager.default.removeItem(at: destination)
            try FileManager.default.copyItem(at: file, to: destination)
        } catch let error as SyncError {
            throw NavlogError(.attachmentFailure, error.message)
        } catch {
            throw NavlogError(.attachmentFailure, "cannot write \(path): \(error.localizedDescription)")
        }
    }

    /// Where an attached file stands here.
    public func state(of attachment: NavlogAttachment) async -> AttachmentState {
        switch await sync.fileState(of: attachment.file) {
        case .held: .held
        case .arriving(let done): .arriving(bytesDone: done)
        case .missing: .missing
        }
    }

    /// The live entries in log order.
    public func entries() async throws(NavlogError) -> [NavlogEntry] {
        try await log.entries()
    }

    /// Every peer met since start, active ones first, with their link's quality.
    public func peers() async -> [PeerStatus] {
        var rows: [PeerStatus] = []
        for (id, state) in known {
            let quality = state.active ? await session.linkStats(for: id)?.quality : nil
            rows.append(
                PeerStatus(
                    peer: state.peer,
                    active: state.active,
                    rtt: quality?.smoothedRTT,
                    jitter: quality?.jitter,
                    loss: quality?.loss,
                    lastSeen: state.active ? Date() : state.lastSeen
                )
            )
        }
        return rows.sorted { ($0.active ? 0 : 1, $0.peer.name) < ($1.active ? 0 : 1, $1.peer.name) }
    }

    private func entry(matching idPrefix: String) async throws(NavlogError) -> NavlogEntry {
        let prefix = idPrefix.uppercased()
        let matches = try await log.entries().filter { $0.id.uuidString.hasPrefix(prefix) }
        guard matches.count == 1 else {
            throw NavlogError(
                .unknownEntry,
                matches.isEmpty
                    ? "no entry has an id starting with \(idPrefix); `list` shows the ids"
                    : "\(matches.count) entries have ids starting with \(idPrefix); type more of the id"
            )
        }
        return matches[0]
    }

    /// Puts the record (durable: that is the acknowledgement; the store pushes it to the
    /// peers), and returns it as the log shows it.
    private func commit(_ record: NavlogRecord) async throws(NavlogError) -> NavlogEntry {
        do {
            try await log.records.put(record)
            guard let version = try await log.records.version(id: record.id),
                let entry = version.record.entry(stamp: version.stamp, key: session.identity.key)
            else {
                throw NavlogError(.databaseFailure, "entry \(record.id) was written and is not there")
            }
            return entry
        } catch let error as NavlogError {
            throw error
        } catch {
            throw NavlogError(.databaseFailure, "entry \(record.id) could not be written: \(error)")
        }
    }

    // MARK: Changes, and what the session and the store report

    /// A change of the log, written here or taken from a peer: told, unless a peer's record
    /// holds what a user could not have typed (reported instead, and not shown).
    private func apply(_ change: SyncChange<NavlogRecord>) async {
        if change.missed > 0 {
            // (Their entries' files are named from the log itself, then.)
            for entry in (try? await log.entries()) ?? [] { remember(entry) }
            subscriptions.continuation.yield(
                .error(
                    code: "changesDropped",
                    message:
                        "this host fell behind and did not show \(change.missed) change(s) of the log: `list` shows it whole"
                )
            )
        }
        guard let record = change.record else { return }
        let from = change.peer.map(ref)
        if from != nil {
            do throws(NavlogError) {
                try record.validate()
            } catch {
                report(
                    NavlogError(
                        .badVersion,
                        "a version of entry \(record.id) by \(change.origin) holds what a user could not have typed, and is not shown: \(error.message)"
                    ),
                    "syncing with \(from?.name ?? "a peer")"
                )
                return
            }
        }
        guard let entry = await log.entry(of: change) else { return }
        remember(entry)
        subscriptions.continuation.yield(.entryApplied(entry, origin: from))
    }

    /// Notes which entry names each of `entry`'s files, for transfers' events.
    private func remember(_ entry: NavlogEntry) {
        for attachment in entry.attachments ?? [] where !entry.deleted && attached[attachment.sha256] == nil {
            attached[attachment.sha256] = (entry.id, attachment.name)
        }
    }

    private func ref(_ peer: UUID) -> PeerRef {
        known[peer]?.peer ?? PeerRef(id: peer, name: peer.uuidString, fingerprint: "")
    }

    private func handle(_ event: SyncEvent) async {
        switch event {
        case .refused(let error, let peer):
            report(error, "refused from \(ref(peer).name)")
        case .unreadableRecord(let error):
            report(error, "an entry kept here does not read")
        case .exchanged(let peer):
            let status = try? await sync.status().peers[peer]
            subscriptions.continuation.yield(
                .synced(ref(peer), sent: status?.sent ?? 0, received: status?.received ?? 0)
            )
        case .newerSchema, .collected, .attachmentArrived:
            break
        case .fileTransfer(let file):
            let (entry, name) = attached[file.attachment.hex] ?? (nil, file.attachment.hex)
            let transfer = AttachmentTransfer(
                entry: entry,
                name: name,
                sha256: file.attachment.hex,
                peer: ref(file.peer),
                outgoing: file.direction == .outgoing,
                bytesDone: file.progress.bytesDone,
                totalBytes: file.progress.totalBytes,
                bytesPerSecond: file.progress.bytesPerSecond
            )
            switch file.state {
            case .running: subscriptions.continuation.yield(.attachmentProgress(transfer))
            case .done: subscriptions.continuation.yield(.attachmentDone(transfer, error: nil))
            case .failed(let error): subscriptions.continuation.yield(.attachmentDone(transfer, error: error.message))
            }
        case .notSyncing(let peer, let error):
            // (A host of 0.9 reads its own protocol's one message type.)
            if await session.reads(NavlogProtocolOne.self, peer: peer) == true {
                report(
                    NavlogError(
                        .peerTooOld,
                        "\(ref(peer).name) runs navlog-sync 0.9 or earlier (navlog protocol 1): this build keeps the log in the replicated store (docs/SYNC.md) and cannot sync with it; update it to this build, whose first run brings its log along"
                    ),
                    "syncing with \(ref(peer).name)"
                )
            } else {
                report(error, "syncing with \(ref(peer).name)")
            }
        case .failed(let error):
            report(error, "syncing")
        case .eventsDropped(let count):
            subscriptions.continuation.yield(
                .error(code: "eventsDropped", message: "this host fell behind and missed \(count) sync event(s)")
            )
        }
    }

    private func handle(_ event: SessionEvent) async {
        switch event {
        case .listening(let port):
            subscriptions.continuation.yield(.listening(port: port))
        case .listenFailed(let port, let error):
            subscriptions.continuation.yield(
                .error(
                    code: error.code.description,
                    message: "cannot listen on port \(port) again, listening on another: \(error)"
                )
            )
        case .peerJoined(let peer):
            let ref = PeerRef(id: peer.id, name: peer.displayName, fingerprint: peer.key.fingerprint)
            known[peer.id] = (ref, true, Date())
            subscriptions.continuation.yield(.peerJoined(ref))
        case .peerLeft(let peer, let reason):
            let ref = PeerRef(id: peer.id, name: peer.displayName, fingerprint: peer.key.fingerprint)
            known[peer.id] = (ref, false, Date())
            subscriptions.continuation.yield(.peerLeft(ref, reason))
        case .connectionFailed(let address, let error), .authenticationFailed(let address, let error):
            subscriptions.continuation.yield(
                .error(code: error.code.description, message: "connection with \(address) failed: \(error)")
            )
        case .connectionsFailed(let count, let code):
            subscriptions.continuation.yield(
                .error(
                    code: code.description,
                    message: "\(count) more inbound connection(s) failed with \(code) (reported at most once a second)"
                )
            )
        case .undecodableMessage(let peer, let type, let error):
            subscriptions.continuation.yield(
                .error(
                    code: "undecodableMessage",
                    message: "a \(type) from \(peer.displayName) did not decode: \(error)"
                )
            )
        case .messageRejected(let peer, let type, let sequence, let reason):
            subscriptions.continuation.yield(
                .error(
                    code: "messageRejected",
                    message:
                        "\(peer.displayName) could not decode the \(type) numbered \(sequence) that this host sent: \(reason)"
                )
            )
        case .advertisingFailed(let error):
            subscriptions.continuation.yield(
                .error(code: error.code.description, message: "advertising failed: \(error)")
            )
        case .messageHeld(let type, let peer), .messageNotRead(let type, let peer):
            // The store's message types are declared and subscribed to before it runs:
            // anything else is foreign, refused as it arrives (and its sender told).
            subscriptions.continuation.yield(
                .error(
                    code: "unknownMessageType",
                    message: "\(peer.displayName) sent a \(type), which navlog-sync does not know"
                )
            )
        case .broadcastSkipped(let peer, let type, let error):
            subscriptions.continuation.yield(
                .error(code: error.code.description, message: "a \(type) did not go to \(peer.displayName): \(error)")
            )
        case .heldMessagesFull(let type, let peer):
            subscriptions.continuation.yield(
                .error(
                    code: "heldMessagesFull",
                    message:
                        "\(peer.displayName) sent more \(type) messages than are held for a first subscriber: its link waits"
                )
            )
        case .messagesDropped(let type, let count, let reason):
            subscriptions.continuation.yield(
                .error(code: "messagesDropped", message: "\(count) \(type) message(s) dropped: \(reason)")
            )
        case .eventsDropped(let count):
            subscriptions.continuation.yield(
                .error(code: "eventsDropped", message: "this host fell behind and missed \(count) session event(s)")
            )
        case .stats, .availablePeerChanged, .peerReadsChanged:
            break
        }
    }

    func report(_ error: any Error, _ context: String) {
        let code =
            (error as? NavlogError)?.code.name ?? (error as? SyncError)?.code.description
            ?? (error as? MultipeerError)?.code.description ?? "failure"
        let message = (error as? SyncError)?.message ?? "\(error)"
        subscriptions.continuation.yield(.error(code: code, message: "\(context): \(message)"))
    }
}

/// navlog-sync 0.9's one message type (docs/NAVLOG.md of 0.9): never sent or read here, only
/// asked about, to tell a peer of 0.9 from another that does not sync.
struct NavlogProtocolOne: MultipeerMessage {
    static var wireName: String { "NavlogSync.NavlogMessage" }
}
