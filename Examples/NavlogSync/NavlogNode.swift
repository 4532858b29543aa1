import Foundation
import MultipeerCore
public import MultipeerSession
import MultipeerSync
public import ServiceLifecycle

/// A navlog host: the log in its store, kept in sync with every peer of a ``MultipeerSession``.
///
/// Local edits are committed to the store first, then broadcast reliably. When a peer joins,
/// each side asks the other for what it lacks, comparing their logs prefix by prefix of entry
/// ids (``NavlogMessage``), so hosts converge after any partition or restart at a cost that
/// grows with their differences. Run it with ``run()``, as a `Service` of a `ServiceGroup`: a graceful
/// shutdown says GOODBYE to every peer and reports each leaving before ``events`` ends;
/// cancelling stops at once.
public actor NavlogNode: Service {
    public let store: NavlogStore
    public nonisolated let session: MultipeerSession
    /// The name this host's edits carry.
    public nonisolated let author: String
    /// The files attached to entries, on disk beside the database.
    public nonisolated let files: NavlogFiles

    private var clock: HybridLogicalClock
    private var known: [UUID: (peer: PeerRef, active: Bool, lastSeen: Date)] = [:]
    private var progress: [UUID: SyncProgress] = [:]
    /// Every version held, by id prefix: what anti-entropy compares.
    private var index: NavlogIndex
    /// Each active peer's exchange with this host as the asker.
    private var pulls: [UUID: NavlogPull] = [:]
    /// Each peer's requests, answered in order by its own task (``SyncWorker``), made when the
    /// peer first joins or asks (the session's events and messages are read by two tasks, so a
    /// peer's first `ask` may come before its `peerJoined`), kept through its absences (what
    /// it sends is queued for it, reliably).
    private var workers: [UUID: SyncWorker] = [:]
    /// Peers that sent more requests than a worker holds: ignored until they join again.
    private var overloaded: Set<UUID> = []
    /// The parts of a peer's digest (an earlier release's) received so far, until its final part.
    private var incomingDigests: [UUID: NavlogDigest] = [:]
    private let subscriptions = AsyncStream<NavlogEvent>.makeStream()
    /// Attached files on their way here, by hash: the bytes of each that are here, by transfer
    /// (a sender's transfer that lost its link and the one that supersedes it are two).
    private var arriving: [String: [UUID: Int64]] = [:]
    /// Attached files this host is sending, by hash, to these peers.
    private var sending: [String: Set<UUID>] = [:]

    /// A host on `store`, with the session made from `configuration` under the store's identity.
    public init(store: NavlogStore, configuration: MultipeerSession.Configuration) throws(NavlogError) {
        guard let identity = store.identity else {
            throw NavlogError(
                .databaseFailure,
                "the store \(store.path) is open read-only; a host needs it open for writing"
            )
        }
        self.store = store
        self.author = configuration.peer.displayName
        files = NavlogFiles(databasePath: store.path)
        var configuration = configuration
        configuration.resourceDirectory = files.incoming
        // The one message type it reads, said to every peer: a peer running a later build
        // sends it nothing else (NAVLOG.md, 4).
        configuration.messageTypes = [NavlogMessage.self]
        self.session = MultipeerSession(configuration: configuration, identity: identity)
        let log = try store.log()
        self.clock = HybridLogicalClock(latest: log.entries.values.map(\.timestamp).max() ?? HLCTimestamp(rawValue: 0))
        self.index = NavlogIndex(log)
        // Versions stored before versions were signed (a database of the first release) are
        // re-issued as this host's own, signed: the content stays, and peers take them.
        let legacy = log.entries.values.filter { $0.key == nil }.sorted { $0.timestamp < $1.timestamp }
        if !legacy.isEmpty {
            let now = Self.wallClock()
            var reissued: [NavlogEntry] = []
            for old in legacy {
                let version = NavlogEntry(
                    id: old.id,
                    fields: old.fields,
                    author: old.author,
                    origin: identity.peerID,
                    timestamp: clock.tick(now: now),
                    deleted: old.deleted
                )
                do {
                    reissued.append(try version.signed(by: identity))
                } catch {
                    throw NavlogError(
                        .databaseFailure,
                        "cannot sign the versions of \(store.path) with this host's identity: \(error)"
                    )
                }
            }
            for applied in try store.merge(reissued).applied { index.update(applied) }
        }
    }

    /// What happens on this host. One subscriber.
    public nonisolated var events: AsyncStream<NavlogEvent> { subscriptions.stream }

    /// Runs the session and the sync until shut down or cancelled; throws if the session
    /// cannot start (port in use, avahi-daemon not running).
    public func run() async throws {
        defer {
            subscriptions.continuation.finish()
            for worker in workers.values { worker.stop() }
        }
        let sessionEvents = session.events
        let messages = session.messages(of: NavlogMessage.self)
        let resources = session.incomingResources
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await self.session.run() }
            group.addTask { for await event in sessionEvents { await self.handle(event) } }
            group.addTask {
                await withDiscardingTaskGroup { transfers in
                    for await resource in resources { transfers.addTask { await self.receive(resource) } }
                }
            }
            // Ends when the session stops.
            for await (peer, message) in messages { await self.handle(message, from: peer) }
        }
    }

    // MARK: Local edits

    /// Adds an entry with these fields; returns it once it is committed and sent.
    @discardableResult
    public func add(_ changes: [NavlogField: String?]) async throws(NavlogError) -> NavlogEntry {
        try await commit(
            NavlogEntry(
                id: UUID(),
                fields: NavlogFields(waypoint: "").applying(changes),
                author: author,
                origin: session.peerID,
                timestamp: tick()
            )
        )
    }

    /// Changes fields of the live entry whose id starts with `idPrefix`.
    @discardableResult
    public func edit(_ idPrefix: String, _ changes: [NavlogField: String?]) async throws(NavlogError) -> NavlogEntry {
        let current = try entry(matching: idPrefix)
        return try await commit(
            NavlogEntry(
                id: current.id,
                fields: current.fields.applying(changes),
                author: author,
                origin: session.peerID,
                timestamp: tick(),
                attachments: current.attachments
            )
        )
    }

    /// Deletes the live entry whose id starts with `idPrefix` (a tombstone that wins over older edits).
    @discardableResult
    public func delete(_ idPrefix: String) async throws(NavlogError) -> NavlogEntry {
        let current = try entry(matching: idPrefix)
        return try await commit(
            NavlogEntry(
                id: current.id,
                fields: current.fields,
                author: author,
                origin: session.peerID,
                timestamp: tick(),
                deleted: true,
                attachments: current.attachments
            )
        )
    }

    // MARK: Attachments

    /// Attaches the file at `path` to the live entry whose id starts with `idPrefix`, under the
    /// file's name (replacing an attachment of that name): the file is copied in, and a new
    /// version of the entry, naming it with its hash, is committed and sent. Peers then ask for
    /// the file, and get it from this host or any that holds it.
    @discardableResult
    public func attach(_ idPrefix: String, file path: String) async throws(NavlogError) -> NavlogEntry {
        _ = try entry(matching: idPrefix)
        let attachment = try await files.take(path)
        let current = try entry(matching: idPrefix)  // (again: the file took a while)
        guard
            (current.attachments?.filter { $0.name != attachment.name }.count ?? 0) < NavlogAttachment.maximumPerVersion
        else {
            throw NavlogError(
                .badCommand,
                "entry \(current.id) has \(NavlogAttachment.maximumPerVersion) attachments, the most an entry carries"
            )
        }
        return try await commit(
            NavlogEntry(
                id: current.id,
                fields: current.fields,
                author: author,
                origin: session.peerID,
                timestamp: tick(),
                attachments: (current.attachments ?? []).adding(attachment)
            )
        )
    }

    /// Writes the attachment `name` of the live entry whose id starts with `idPrefix` to `path`.
    /// Throws `attachmentMissing` while it is not here.
    public func save(_ idPrefix: String, name: String, to path: String) throws(NavlogError) {
        let current = try entry(matching: idPrefix)
        guard let attachment = current.attachments?.first(where: { $0.name == name }) else {
            let names = current.attachments?.map(\.name).joined(separator: ", ") ?? ""
            throw NavlogError(
                .badCommand,
                "entry \(current.id) has no attachment named \(name)" + (names.isEmpty ? "" : "; it has \(names)")
            )
        }
        guard files.holds(attachment.sha256) else {
            let done = arriving[attachment.sha256]?.values.max()
            throw NavlogError(
                .attachmentMissing,
                done.map { "\(name) is on its way: \($0) of \(attachment.length) bytes are here" }
                    ?? "\(name) is not here yet: no peer that holds it has sent it"
            )
        }
        try files.save(attachment.sha256, to: path)
    }

    /// Where the attached file with this SHA-256 stands here.
    public func state(of sha256: String) -> AttachmentState {
        if files.holds(sha256) { return .held }
        if let done = arriving[sha256]?.values.max() { return .arriving(bytesDone: done) }
        return .missing
    }

    /// The hashes of the files attached to live entries (of `versions`, or of the log) that are
    /// not here, each once. A file on its way from a peer counts: a peer that restarted has lost
    /// its side of the transfer, and offers the file anew when asked (a peer still sending it
    /// goes on, and asks nothing again).
    private func lacking(among versions: [NavlogEntry]? = nil) -> [String] {
        let versions = versions ?? ((try? store.attachedVersions()) ?? [])
        var seen: Set<String> = []
        return versions.filter { !$0.deleted }.flatMap { $0.attachments ?? [] }.map(\.sha256).filter {
            seen.insert($0).inserted && !files.holds($0)
        }
    }

    /// Tells `peer` which files this host lacks, in `lack` messages.
    private func sayLacking(_ hashes: [String], to peer: PeerRef) {
        guard !hashes.isEmpty else { return }
        let batches = stride(from: 0, to: hashes.count, by: NavlogMessage.lackBatchSize).map {
            Array(hashes[$0..<min($0 + NavlogMessage.lackBatchSize, hashes.count)])
        }
        let session = session
        Task {
            do {
                for batch in batches { try await session.send(NavlogMessage.lack(attachments: batch), to: peer.id) }
            } catch {
                self.report(error, "asking \(peer.name) for attached files")
            }
        }
    }

    /// The first live entry that names the file with this hash, and the attachment there.
    private func attachment(_ sha256: String) -> (entry: UUID, attachment: NavlogAttachment)? {
        for entry in (try? store.attachedVersions()) ?? [] {
            if let attachment = entry.attachments?.first(where: { $0.sha256 == sha256 }) {
                return (entry.id, attachment)
            }
        }
        return nil
    }

    /// A peer lacks these files: those held here go to it as resources (one transfer of a file
    /// to a peer at a time).
    private func offer(_ hashes: [String], to peer: Peer, as ref: PeerRef) {
        for sha256 in hashes where files.holds(sha256) && !(sending[sha256]?.contains(peer.id) ?? false) {
            guard let (entry, attachment) = attachment(sha256) else { continue }
            sending[sha256, default: []].insert(peer.id)
            let path = files.path(of: sha256)
            Task {
                var transfer = AttachmentTransfer(
                    entry: entry,
                    name: attachment.name,
                    sha256: sha256,
                    peer: ref,
                    outgoing: true,
                    bytesDone: 0,
                    totalBytes: attachment.length,
                    bytesPerSecond: 0
                )
                var failure: String?
                do {
                    let outgoing = try await self.session.sendResource(
                        at: path,
                        named: attachment.name,
                        metadata: ["entry": entry.uuidString],
                        to: peer.id
                    )
                    for await progress in outgoing.progress {
                        (transfer.bytesDone, transfer.bytesPerSecond) = (progress.bytesDone, progress.bytesPerSecond)
                        self.subscriptions.continuation.yield(.attachmentProgress(transfer))
                    }
                    try await outgoing.completion()
                } catch {
                    failure = "\(error)"
                }
                self.sent(sha256, to: peer.id)
                self.subscriptions.continuation.yield(.attachmentDone(transfer, error: failure))
            }
        }
    }

    private func sent(_ sha256: String, to peer: UUID) {
        sending[sha256]?.remove(peer)
        if sending[sha256]?.isEmpty == true { sending[sha256] = nil }
    }

    /// A file a peer sends: taken if it is attached to a live entry here and not here yet,
    /// cancelled otherwise; kept under its hash once whole. The session takes one transfer of a
    /// file from a peer at a time (docs/PROTOCOL.md 3c): a new offer of a file whose transfer
    /// from that peer lost its link supersedes that transfer (the old one fails, the new one
    /// goes on from what it wrote), so it is taken whatever the old one's state here.
    private func receive(_ resource: IncomingResource) async {
        let sha256 = resource.sha256.map { String(format: "%02x", $0) }.joined()
        let ref = PeerRef(
            id: resource.sender.id,
            name: resource.sender.displayName,
            fingerprint: resource.sender.key.fingerprint
        )
        guard !files.holds(sha256), let (entry, attachment) = attachment(sha256) else {
            resource.cancel()
            return
        }
        arriving[sha256, default: [:]][resource.id] = 0
        defer {
            arriving[sha256]?[resource.id] = nil
            if arriving[sha256]?.isEmpty == true { arriving[sha256] = nil }
        }
        var transfer = AttachmentTransfer(
            entry: entry,
            name: attachment.name,
            sha256: sha256,
            peer: ref,
            outgoing: false,
            bytesDone: 0,
            totalBytes: resource.length,
            bytesPerSecond: 0
        )
        for await progress in resource.progress {
            (transfer.bytesDone, transfer.bytesPerSecond) = (progress.bytesDone, progress.bytesPerSecond)
            arriving[sha256]?[resource.id] = progress.bytesDone
            subscriptions.continuation.yield(.attachmentProgress(transfer))
        }
        do {
            let file = try await resource.file()
            if files.holds(sha256) {
                try? FileManager.default.removeItem(at: file)  // (the same file came from another peer first)
            } else {
                try files.keep(file, as: sha256)
            }
            subscriptions.continuation.yield(.attachmentDone(transfer, error: nil))
        } catch {
            subscriptions.continuation.yield(.attachmentDone(transfer, error: "\(error)"))
        }
    }

    /// The live entries in log order.
    public func entries() throws(NavlogError) -> [NavlogEntry] {
        try store.log().live
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

    private func entry(matching idPrefix: String) throws(NavlogError) -> NavlogEntry {
        let prefix = idPrefix.uppercased()
        let matches = try store.log().live.filter { $0.id.uuidString.hasPrefix(prefix) }
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

    private func tick() -> HLCTimestamp {
        clock.tick(now: Self.wallClock())
    }

    /// Signs, stores (that is the acknowledgement), then tells every peer.
    private func commit(_ unsigned: NavlogEntry) async throws(NavlogError) -> NavlogEntry {
        let entry = try sign(unsigned)
        for applied in try store.merge([entry]).applied {
            index.update(applied)
            subscriptions.continuation.yield(.entryApplied(applied, origin: nil))
        }
        do {
            try await session.broadcast(NavlogMessage.update(entry: entry))
        } catch {
            // Stored; peers that miss it get it through anti-entropy when they next join.
            report(error, "sending an edit failed")
        }
        return entry
    }

    // MARK: Session events and messages

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
            progress[peer.id] = SyncProgress()
            subscriptions.continuation.yield(.peerJoined(ref))
            incomingDigests[peer.id] = nil
            overloaded.remove(peer.id)
            request(.start, from: peer)
            sayLacking(lacking(), to: ref)
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
            // Its one message type is declared and subscribed to before it runs: anything else
            // is foreign, refused as it arrives (and its sender told).
            subscriptions.continuation.yield(
                .error(
                    code: "unknownMessageType",
                    message: "\(peer.displayName) sent a \(type), which navlog-sync does not know"
                )
            )
        case .peerReadsChanged(let peer):
            // (It may read the navlog type now: an exchange whose peer does not is refused at
            // once, `messageTypeNotRead`, as at its join. Nothing to remember, so nothing to race.)
            request(.start, from: peer)
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
        case .stats, .availablePeerChanged:
            break
        }
    }

    /// Takes in what a peer sends; hands what needs an answer to the peer's ``SyncWorker``,
    /// so that this loop, which reads every peer's messages, never waits to send.
    private func handle(_ message: NavlogMessage, from peer: Peer) async {
        let ref = PeerRef(id: peer.id, name: peer.displayName, fingerprint: peer.key.fingerprint)
        do {
            switch message {
            case .ask(let exchange, let ranges):
                request(.ask(exchange: exchange, ranges), from: peer)
            case .reply(let exchange, let expand, let versions):
                request(.reply(exchange: exchange, expand: expand, versions: versions), from: peer)
            case .need(let ids, let final):
                request(.need(ids, final: final), from: peer)
            case .digest(let part, let final):
                var digest = incomingDigests.removeValue(forKey: peer.id) ?? NavlogDigest(versions: [:])
                digest.add(part)
                if final { request(.digest(digest), from: peer) } else { incomingDigests[peer.id] = digest }
            case .entries(let batch, let final):
                try apply(batch, from: ref)
                if let totals = progress[peer.id, default: SyncProgress()].received(batch.count, final: final) {
                    subscriptions.continuation.yield(.synced(ref, sent: totals.sent, received: totals.received))
                }
            case .update(let entry):
                try apply([entry], from: ref, ownOnly: true)
            case .lack(let hashes):
                guard hashes.count <= NavlogMessage.lackBatchSize else {
                    throw NavlogError(
                        .syncOverload,
                        "\(peer.displayName) said it lacks \(hashes.count) files in one message, more than \(NavlogMessage.lackBatchSize); the message is ignored, and none of its files offered"
                    )
                }
                offer(hashes, to: peer, as: ref)
            }
        } catch {
            report(error, "syncing with \(peer.displayName) failed")
        }
    }

    private func request(_ work: SyncWorker.Work, from peer: Peer) {
        guard !overloaded.contains(peer.id) else { return }
        let worker = workers[peer.id] ?? SyncWorker(node: self, peer: peer)
        workers[peer.id] = worker
        guard worker.enqueue(work) else {
            workers.removeValue(forKey: peer.id)?.stop()
            overloaded.insert(peer.id)
            report(
                NavlogError(
                    .syncOverload,
                    "\(peer.displayName) sent more than \(SyncWorker.maximumWaiting) requests this host had not answered yet; its requests are ignored until it joins again"
                ),
                "syncing with \(peer.displayName)"
            )
            return
        }
    }

    // MARK: Anti-entropy, for the peer's SyncWorker

    /// This host's first `ask` of an exchange with `peer`.
    func startPull(with peer: UUID) -> [NavlogMessage] {
        pulls[peer, default: NavlogPull()].start(&index)
    }

    /// What to send after a peer's `reply`.
    func pulled(exchange: UInt64, expand: [NavlogPrefix], versions: NavlogDigest, from peer: Peer) -> [NavlogMessage] {
        guard
            let messages = pulls[peer.id, default: NavlogPull()].received(
                exchange: exchange,
                expand: expand,
                versions: versions,
                &index
            )
        else {
            report(
                NavlogError(
                    .unexpectedReply,
                    "\(peer.displayName) sent a reply to an ask this host did not send; it is ignored"
                ),
                "syncing with \(peer.displayName)"
            )
            return []
        }
        return messages
    }

    /// This host's answer to a peer's `ask`.
    func answer(_ ranges: [NavlogRanges]) -> (entries: [UUID], expand: [NavlogPrefix], versions: NavlogDigest) {
        index.answer(ranges)
    }

    /// The ids of the versions held that a peer's legacy digest lacks or names older, and this
    /// host's digest in parts: both from the index, without reading the whole log again.
    func answer(legacy digest: NavlogDigest) -> (missing: [UUID], digest: [NavlogDigest]) {
        (index.newer(than: digest), NavlogDigest(versions: index.held).batches(of: NavlogMessage.digestBatchSize))
    }

    /// Records that this host answered a peer's final `need` (or legacy digest), having sent `count` versions.
    func answered(_ peer: Peer, sending count: Int) {
        let ref = PeerRef(id: peer.id, name: peer.displayName, fingerprint: peer.key.fingerprint)
        if let totals = progress[peer.id, default: SyncProgress()].answered(sending: count) {
            subscriptions.continuation.yield(.synced(ref, sent: totals.sent, received: totals.received))
        }
    }

    /// Merges the versions from a peer that it may send (``NavlogIntake``); an error event
    /// tells of each kind it may not. With `ownOnly` (an `update`), each must be the peer's own.
    private func apply(_ entries: [NavlogEntry], from peer: PeerRef, ownOnly: Bool = false) throws(NavlogError) {
        let intake = NavlogIntake(entries, from: ownOnly ? peer.id : nil, clock: &clock, now: Self.wallClock())
        for refusal in intake.refusals { report(refusal, "syncing with \(peer.name)") }
        let merged = try store.merge(intake.accepted)
        for applied in merged.applied {
            index.update(applied)
            subscriptions.continuation.yield(.entryApplied(applied, origin: peer))
        }
        // Files attached to what came: the peer that sent the versions likely holds them.
        sayLacking(lacking(among: merged.applied), to: peer)
        if let first = merged.conflicts.first {
            report(
                NavlogError(
                    .conflictingVersion,
                    "\(merged.conflicts.count) version(s) came with the version stamp of one held here and other content, which only a faulty or rogue origin writes; the first, of entry \(first.id) by origin \(first.origin): the one that wins by content is kept, on every host"
                ),
                "syncing with \(peer.name)"
            )
        }
    }

    private func sign(_ entry: NavlogEntry) throws(NavlogError) -> NavlogEntry {
        do {
            return try entry.signed(by: session.identity)
        } catch {
            throw NavlogError(.databaseFailure, "cannot sign a version with this host's identity: \(error)")
        }
    }

    /// Wall-clock milliseconds since 1970.
    private static func wallClock() -> UInt64 {
        UInt64(Date().timeIntervalSince1970 * 1000)
    }

    func report(_ error: any Error, _ context: String) {
        let code = (error as? NavlogError)?.code.name ?? (error as? MultipeerError)?.code.description ?? "failure"
        subscriptions.continuation.yield(.error(code: code, message: "\(context): \(error)"))
    }
}
