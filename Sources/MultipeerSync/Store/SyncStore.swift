import Foundation
public import MultipeerSession
import NIOConcurrencyHelpers

/// A replicated store of typed collections of records, kept durably on this device and in sync
/// with every peer of a `MultipeerSession` that runs one.
///
/// ```swift
/// let store = try SyncStore(session: session, path: "crew.sqlite")
/// let checklist = store.collection(ChecklistItem.self)
/// try await withThrowingDiscardingTaskGroup { group in
///     group.addTask { try await session.runUntilSignalled() }
///     group.addTask { try await store.run() }
///     try await checklist.put(ChecklistItem(id: "before-start/fuel", title: "Fuel quantity", done: false))
///     for await change in checklist.changes { print(change.id, change.record as Any) }
/// }
/// ```
///
/// Every write is a *version* signed by the session's identity and stamped by a hybrid logical
/// clock; it is durable before ``SyncCollection/put(_:)-(Record)`` returns and before any peer
/// hears of it. While ``run()`` runs, the store pushes its writes to the peers, relays what it
/// takes to the others, and reconciles with each peer when they meet (once per run of either
/// store, whichever side sees their link come back: docs/SYNC.md 6) and after any push the
/// peer may have missed: each side gets the versions it lacks, whoever wrote them. Every
/// version taken is checked against its origin's signature; what fails is refused
/// (``SyncEvent/refused(_:from:)``), never stored or relayed.
public final actor SyncStore {
    /// The session the store syncs over; its identity signs this station's writes.
    public nonisolated let session: MultipeerSession
    var station: Station
    /// The station's storage, for what the store reads off its actor (``read(_:skipping:)``).
    private nonisolated let storage: any SyncStorage
    private var exchanges: ExchangeStateMachine<Holding>
    /// Where this station stands with each peer it met in this run (``status()``).
    private var peers: [UUID: PeerSyncStatus] = [:]
    /// The versions sent to each peer, and those new to this station taken from it, since
    /// their last exchange ended (or their meeting began): what either pushed at the start of
    /// an exchange (what it stored since they last met) counts towards it.
    private var sinceExchange: [UUID: (sent: Int, received: Int)] = [:]
    /// The active peers that do not read the store's messages (reported when they joined):
    /// synced with once they do (their TYPES says so).
    private var notSyncing: Set<UUID> = []
    /// When this station meets each peer, what each said it keeps in this run (docs/SYNC.md 6:
    /// nothing is relayed to a peer before it says, and nothing of a collection it does not
    /// keep), and the exchanges it owes.
    private var meetings: MeetingStateMachine
    /// The `keeps` of peers that came while this station's session believed they read none of
    /// the store's messages: taken once it knows they do.
    private var keepsWhenSyncing: [UUID: (scope: SyncScope, run: UInt64, heard: UInt64)] = [:]
    private let now: @Sendable () -> UInt64
    /// What this store sent and received, message by message (for benchmarks and status).
    package private(set) var traffic = Traffic()
    /// Who may write each collection, when its files are fetched, and its schema version, as
    /// the application said (``carry(_:writers:attachments:)``, ``collection(_:)``).
    nonisolated let rules = NIOLockedValueBox<[String: CollectionRules]>([:])
    /// The newest schema version a peer announced for each collection, and that peer
    /// (docs/SYNC.md 10).
    nonisolated let newerSchemas = NIOLockedValueBox<[String: (version: UInt32, peer: UUID)]>([:])
    /// The newer schemas reported in this run: by peer, version and collection.
    var reportedSchemas: Set<String> = []
    /// The files of attachments, on disk (nil: this store keeps none).
    let files: AttachmentFiles?
    /// The attachments' files on their way, both ways.
    var transfers = AttachmentTransfers()
    /// Every attachment whose file arrives, as it does.
    let arrivals = Subscribers<SyncAttachment>()
    /// What compresses the versions this store sends (docs/SYNC.md 5, kind 7).
    private let compressor = Zlib.Compressor()
    private let changeSubscribers = Subscribers<StoreChange>()
    private let eventSubscribers = Subscribers<SyncEvent>()

    /// How many versions, and how many bytes of the message that carries them (its versions
    /// framed, and their origins' keys), one message carries at most: the spec's bounds
    /// (docs/SYNC.md 5). A receiver commits each message's versions at once, and a commit's
    /// cost grows more slowly than its size: the fuller the messages, the fewer the commits.
    static let versionsPerMessage = SyncMessage.maximumCount
    static let bytesPerMessage = SyncMessage.maximumLength

    /// How a store behaves, with documented defaults.
    public struct Configuration: Sendable {
        /// In a group without a roster, how long a delete is kept before it is collected
        /// (docs/SYNC.md 8). A station away longer may bring back, at a station that never saw
        /// the delete, a record that was deleted; one that collected the delete never takes
        /// it back. Default 90 days. (With a roster, a delete is collected once every member
        /// holds it, however long that takes.)
        public var tombstoneLifetime: Duration
        /// How often the store collects deletes besides after each exchange. Default 1 hour.
        public var collectionInterval: Duration
        /// The collections this station keeps: takes from its peers, stores, relays and
        /// reconciles (docs/SYNC.md 6). Default ``SyncScope/everything``, read or not, so that
        /// a station in the middle of a chain carries what its ends write. A write of a
        /// collection it does not keep throws `notKept`.
        public var keeps: SyncScope
        /// The changes each ``SyncCollection/changes`` sequence holds for a reader that has not
        /// taken them (each the record's fields before and after). Default 4,096; beyond it the
        /// oldest go, and the next change the reader takes says how many
        /// (``SyncChange/missed``). A reader that stalls costs the store this many changes,
        /// never more: the store never waits for it.
        public var changeBuffer: Int
        /// The events each ``SyncStore/events`` stream holds for a reader that has not taken
        /// them. Default 1,024; beyond it the oldest go, and the reader is told how many
        /// (``SyncEvent/eventsDropped(count:)``). A peer that sends a flood of forged versions
        /// (each one refused, each refusal an event) costs a stalled reader this many events.
        public var eventBuffer: Int

        /// A configuration; every argument has its default.
        /// - Precondition: `changeBuffer` and `eventBuffer` are 1 or more.
        public init(
            tombstoneLifetime: Duration = .seconds(90 * 86_400),
            collectionInterval: Duration = .seconds(3_600),
            keeps: SyncScope = .everything,
            changeBuffer: Int = 4_096,
            eventBuffer: Int = 1_024
        ) {
            precondition(changeBuffer > 0 && eventBuffer > 0, "a stream's buffer holds at least one element")
            self.tombstoneLifetime = tombstoneLifetime
            self.collectionInterval = collectionInterval
            self.keeps = keeps
            self.changeBuffer = changeBuffer
            self.eventBuffer = eventBuffer
        }
    }

    /// The message types a store reads: an application that declares the types it reads
    /// (`MultipeerSession.Configuration.messageTypes`) declares these beside its own.
    ///
    /// ```swift
    /// var configuration = session.configuration  // (the application's)
    /// configuration.messageTypes = [Note.self] + SyncStore.messageTypes
    /// ```
    public static var messageTypes: [any (Decodable & SendableMetatype).Type] { [SyncEnvelope.self] }

    /// How this store behaves.
    public nonisolated let configuration: Configuration

    /// The store kept in the SQLite database at `path` (made if missing), syncing over
    /// `session`. Attachments' files are kept in the folder `<path>.attachments` beside it.
    /// - Throws: `storageFailed` if the database cannot be opened or is not a store's;
    ///   `invalidConfiguration` if `configuration` names a collection no station could.
    public init(session: MultipeerSession, path: String, configuration: Configuration = .init()) throws(SyncError) {
        try self.init(
            session: session,
            storage: try SQLiteStorage(path: path),
            attachments: URL(fileURLWithPath: path + ".attachments"),
            configuration: configuration
        )
    }

    /// The store kept in `storage`, its attachments' files in `attachments` (nil: it keeps
    /// none), its wall clock `now` (milliseconds since 1970).
    package init(
        session: MultipeerSession,
        storage: any SyncStorage,
        attachments: URL? = nil,
        configuration: Configuration = .init(),
        now: @escaping @Sendable () -> UInt64 = { UInt64(Date().timeIntervalSince1970 * 1_000) }
    ) throws(SyncError) {
        if let collections = configuration.keeps.collections {
            let misnamed = collections.filter { !(1...255).contains($0.utf8.count) }.map { "\"\($0)\"" }.sorted()
            guard collections.count <= SyncMessage.maximumSchemas, misnamed.isEmpty else {
                throw SyncError(
                    .invalidConfiguration,
                    "the store was configured to keep \(collections.count) collections (misnamed: \(misnamed)): at most \(SyncMessage.maximumSchemas), each named by 1 to 255 bytes of UTF-8"
                )
            }
        }
        self.session = session
        self.configuration = configuration
        self.now = now
        files = attachments.map(AttachmentFiles.init)
        self.storage = storage
        station = try Station(identity: session.identity, storage: storage)
        exchanges = ExchangeStateMachine<Holding>(own: session.peerID)
        meetings = MeetingStateMachine(own: session.peerID)
    }

    /// The collection of `Record`s (named ``SyncRecord/collectionName``). From now on the
    /// store checks who writes it (``SyncRecord/writers``) and fetches its files as it says
    /// (``SyncRecord/attachments``).
    public nonisolated func collection<Record: SyncRecord>(_ type: Record.Type = Record.self) -> SyncCollection<Record>
    {
        carry(Record.collectionName, writers: Record.writers, attachments: Record.attachments)
        let schema = UInt32(clamping: max(1, Record.schemaVersion))
        rules.withLockedValue { $0[Record.collectionName]?.schema = schema }
        return SyncCollection(store: self)
    }

    /// Tells the store who may write `collection`, which this station carries for others
    /// without reading it: from now on it refuses a version of it by anyone else, as the
    /// stations that read it do, instead of passing it on; and it fetches the files of its
    /// records as `attachments` says. (Every collection is carried; one whose rules a station
    /// does not know, it takes from any member and fetches its files at once, so that a
    /// station in the middle of a chain passes them on.)
    public nonisolated func carry(
        _ collection: String,
        writers: SyncWriters,
        attachments: SyncAttachmentPolicy = .atOnce
    ) {
        rules.withLockedValue { rules in
            let schema = rules[collection]?.schema
            rules[collection] = CollectionRules(writers: writers, attachments: attachments, schema: schema)
        }
    }

    /// When the files of `collection`'s records are fetched.
    nonisolated func attachmentPolicy(of collection: String) -> SyncAttachmentPolicy {
        rules.withLockedValue { $0[collection]?.attachments ?? .atOnce }
    }

    /// What the store reports besides changes: refusals, exchanges, failures. Each access is a
    /// new stream; it holds at most ``Configuration/eventBuffer`` events its reader has not
    /// taken: beyond it the oldest go, and the reader is told how many
    /// (``SyncEvent/eventsDropped(count:)``) before the events that follow them.
    public nonisolated var events: AsyncStream<SyncEvent> {
        let buffer = eventSubscribers.subscribe(holding: configuration.eventBuffer)
        return AsyncStream {
            switch await buffer.next() {
            case .dropped(let count): .eventsDropped(count: count)
            case .element(let event): event
            case nil: nil
            }
        }
    }

    /// Syncs with the session's peers until cancelled (then it returns): answers their
    /// messages, pushes this station's writes as they are made, reconciles with each peer when
    /// they meet (a run of either store is met once; a join of runs that met starts an exchange
    /// only if a push to the peer may have been missed), and collects deletes
    /// (``Configuration/tombstoneLifetime``). Run it beside the session's `run()`; writes and
    /// reads work without it, and are synced once it runs.
    public func run() async throws {
        let messages = session.messages(of: SyncEnvelope.self)
        let sessionEvents = session.events
        let incomingFiles = session.incomingResources(withMetadataKey: Self.attachmentKey)
        let (outgoingFiles, sending) = AsyncStream.makeStream(of: OutgoingFile.self)
        // (A previous run's exchanges and meetings are over.)
        exchanges = ExchangeStateMachine<Holding>(own: session.peerID)
        meetings = MeetingStateMachine(own: session.peerID)
        (notSyncing, keepsWhenSyncing, sinceExchange) = ([], [:], [:])
        transfers.sending = sending
        defer { sending.finish() }
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask {
                // (Each message is read, and its versions' signatures checked, while the store
                // takes the one before: the checks on every core, the commit on one.)
                // (What the message before carries is not checked again: it is held once that one
                // is taken, or checked then if that one's copy was refused.)
                await withTaskGroup(of: Void.self) { taking in
                    var inFlight: Set<[UInt8]> = []
                    for await (peer, envelope) in messages {
                        let incoming = self.read(envelope.bytes, skipping: inFlight)
                        await taking.next()  // (the one before taken: in order)
                        inFlight = Set(incoming.versions.compactMap { try? $0.get().id })
                        taking.addTask { await self.receive(incoming, from: peer.id) }
                    }
                }
            }
            group.addTask { await self.receive(incomingFiles) }
            group.addTask { await self.send(outgoingFiles) }
            group.addTask {
                for await event in sessionEvents { await self.handle(event) }
            }
            group.addTask {
                while !Task.isCancelled {
                    do throws(SyncError) { try await self.collect() } catch { self.report(.failed(error)) }
                    try? await Task.sleep(for: self.configuration.collectionInterval)  // (cancelled: run ends)
                }
            }
            for peer in session.activePeers { await handle(.peerJoined(peer)) }
        }
    }

    // MARK: Reading and writing (for SyncCollection)

    /// The records' fields as the application sees them (a record absent or deleted is left
    /// out).
    func fields(of records: Set<RecordKey>) throws(SyncError) -> [RecordKey: [String: [UInt8]]] {
        try station.records(records)
    }

    /// The record as the application sees it, with the stamp of the latest write it holds
    /// (nil: absent or deleted).
    func stampedFields(of record: RecordKey) throws(SyncError) -> (fields: [String: [UInt8]], stamp: VersionStamp)? {
        try station.stampedRecords([record])[record]
    }

    /// Every visible record of `collection`, by id, in ascending order of ids, with the stamp
    /// of the latest write it holds.
    func fields(
        in collection: String
    ) throws(SyncError) -> [(id: String, fields: [String: [UInt8]], stamp: VersionStamp)] {
        let ids = try station.storage.records(in: collection)
        let keys = ids.map { RecordKey(collection: collection, id: $0) }
        let visible = try station.stampedRecords(Set(keys))
        return keys.compactMap { key in visible[key].map { (key.id, $0.fields, $0.stamp) } }
    }

    /// The key of `origin` (a station whose versions this one keeps, or this one), if this
    /// station has it: what checks the origin's signatures. Show its fingerprint beside what
    /// the origin wrote: a display name proves nothing, the key does.
    /// - Throws: `storageFailed`.
    public func key(of origin: UUID) throws(SyncError) -> PeerKey? {
        origin == session.peerID ? session.identity.key : try station.storage.key(of: origin)
    }

    /// Writes records of `collection` (each its fields), or deletes them (nil), in one durable
    /// commit; a write that changes nothing the application sees is not made. Then tells the
    /// subscribers and pushes the versions to the active peers.
    func write(
        _ records: [(id: String, fields: [String: [UInt8]]?, attachments: [String: Set<SyncAttachment>])],
        in collection: String
    ) async throws(SyncError) {
        guard configuration.keeps.contains(collection) else {
            throw SyncError(
                .notKept,
                "a write of \(records.count) records of \(collection): this station does not keep \(collection) (its configuration's keeps); nothing was written"
            )
        }
        station.writers = rules.withLockedValue { $0.mapValues(\.writers) }
        exchanges.storing(from: nil, latest: try station.holding())
        let (changes, versions) = try station.put(
            records.map { (RecordKey(collection: collection, id: $0.id), $0.fields, $0.attachments) },
            now: now()
        )
        for attachment in versions.flatMap(\.attachments) { transfers.pending.remove(attachment.hex) }
        removeReleasedFiles()
        for change in changes where change.before != change.after {
            changeSubscribers.yield(StoreChange(change: change, peer: nil))
        }
        await push(versions, to: nil, broadcast: true)
    }

    /// Takes versions in docs/SYNC.md 3's encoding (any format a station reads: another store's,
    /// a backup's, navlog-sync 0.9's log, section 11) as it takes a peer's: each checked (its
    /// origin's signature with `keys` or a key kept, who may write its collection, its
    /// timestamp), what holds a register kept in one durable commit, told to the subscribers
    /// (as changes from no peer) and pushed to the active peers. The origins stay the
    /// versions' own: no station signs for another.
    /// - Returns: the versions refused, each with its reason (never stored).
    /// - Throws: `storageFailed`.
    @discardableResult
    public func importVersions(_ encoded: [[UInt8]], keys: [PeerKey]) async throws(SyncError) -> [SyncError] {
        var refusals: [SyncError] = []
        var versions: [SignedVersion] = []
        for bytes in encoded {
            do throws(SyncError) {
                versions.append(try kept(SignedVersion(decoding: bytes)))
            } catch {
                refusals.append(error)
            }
        }
        station.writers = rules.withLockedValue { $0.mapValues(\.writers) }
        exchanges.storing(from: nil, latest: try station.holding())
        let taken = try station.take(versions, keys: keys, now: now())
        removeReleasedFiles()
        for change in taken.changes { changeSubscribers.yield(StoreChange(change: change, peer: nil)) }
        await push(taken.kept, to: nil, broadcast: true)
        return refusals + taken.refusals
    }

    /// Every change of `collection` from now on, at most ``Configuration/changeBuffer`` of them
    /// held for the reader.
    nonisolated func changes(of collection: String) -> SubscriberBuffer<StoreChange> {
        changeSubscribers.subscribe(holding: configuration.changeBuffer) { $0.change.record.collection == collection }
    }

    nonisolated func report(_ event: SyncEvent) { eventSubscribers.yield(event) }

    /// Where this store stands: with each peer it has met, and what it keeps.
    /// - Throws: `storageFailed`.
    public func status() throws(SyncError) -> SyncStatus {
        let (versions, deletes) = try station.storage.counts()
        var peers = self.peers
        for (peer, held) in try station.storage.held() where peers[peer] == nil {
            peers[peer] = PeerSyncStatus(
                state: .unknown,
                syncedAt: held.timestamp,
                received: 0,
                sent: 0,
                isActive: false
            )
        }
        let active = Set(session.activePeers.map(\.id))
        for peer in peers.keys { peers[peer]?.isActive = active.contains(peer) }
        return SyncStatus(
            peers: peers,
            versions: versions,
            deletes: deletes,
            horizon: try station.storage.horizon(),
            missingAttachments: try missingAttachments().count
        )
    }

    /// An exchange with `peer` began, on either side: what was pushed either way since the
    /// last one ended counts towards it.
    private func exchanging(with peer: UUID) {
        let syncedAt = peers[peer]?.syncedAt ?? (try? station.storage.held()[peer])?.timestamp
        let counts = sinceExchange[peer] ?? (0, 0)
        peers[peer] = PeerSyncStatus(
            state: .exchanging,
            syncedAt: syncedAt,
            received: counts.received,
            sent: counts.sent,
            isActive: true
        )
    }

    /// Counts versions sent to `peer` and taken from it (new here) towards their exchange.
    private func count(sent: Int = 0, received: Int = 0, with peer: UUID) {
        sinceExchange[peer, default: (0, 0)].sent += sent
        sinceExchange[peer, default: (0, 0)].received += received
        peers[peer]?.sent += sent
        peers[peer]?.received += received
    }

    // MARK: Syncing

    private func handle(_ event: SessionEvent) async {
        switch event {
        case .peerJoined(let peer):
            guard await session.reads(SyncEnvelope.self, peer: peer.id) != false else {
                // (It runs a build without the store, or its store has not run yet: nothing
                // sent to it would be read. Its TYPES tells when it reads them.)
                notSyncing.insert(peer.id)
                report(
                    .notSyncing(
                        with: peer.id,
                        SyncError(
                            .peerNotSyncing,
                            "\(peer.displayName) (\(peer.id)) does not read the store's messages (\(SyncEnvelope.wireName)): it runs a build without the store, and is not synced with until it runs one that has it"
                        )
                    )
                )
                return
            }
            await greet(peer.id)
            guard let keeps = keepsWhenSyncing.removeValue(forKey: peer.id) else { return }
            do throws(SyncError) {
                try await heard(keeps.scope, run: keeps.run, heard: keeps.heard, from: peer.id)
            } catch {
                report(.failed(error))
            }
        case .peerReadsChanged(let peer):
            guard notSyncing.contains(peer.id), await session.reads(SyncEnvelope.self, peer: peer.id) == true,
                notSyncing.remove(peer.id) != nil  // (read again after the await)
            else { return }
            await handle(.peerJoined(peer))
        case .peerLeft(let peer, _):
            // (What runs with it goes on when it is back: the sessions deliver it. What runs
            // with a new run of it is dropped when their meeting begins, at a `keeps`: this
            // event may come after that `keeps`, which is read from another stream.)
            notSyncing.remove(peer.id)
            meetings.left(peer.id)
            if peers[peer.id]?.state == .exchanging { peers[peer.id]?.state = .unknown }
        case .broadcastSkipped(let peer, let typeName, _) where typeName == SyncEnvelope.wireName:
            // A push the peer may lack: find out what it lacks (once it reads the store's
            // messages), now, or at its next join if it is away (its outbox is full).
            guard !notSyncing.contains(peer.id), meetings.scope(of: peer.id) != nil else { return }
            guard session.activePeers.contains(where: { $0.id == peer.id }) else {
                meetings.missed(peer.id)
                return
            }
            guard let holding = holding() else { return }
            if let exchange = exchanges.begin(with: peer.id, latest: holding) {
                await initiate(exchange, with: peer.id)
            }
        default:
            break
        }
    }

    /// What this station holds now, or nil (reported) if its storage cannot say: no exchange
    /// starts then; the peer's next join tries again.
    private func holding() -> Holding? {
        do throws(SyncError) {
            return try station.holding()
        } catch {
            report(.failed(error))
            return nil
        }
    }

    /// `peer` joined (docs/SYNC.md 6): it is told which collections this station keeps, with
    /// this run's number and the peer's as last heard (their meeting begins if either is new to
    /// the other), and the schema versions this station reads; and an exchange begins if this
    /// station owes it one.
    private func greet(_ peer: UUID) async {
        let joined = meetings.joined(peer)
        guard joined.greet else { return }
        await tell(peer)
        await announceSchemas(to: peer)
        if joined.exchange, let holding = holding(), let exchange = exchanges.begin(with: peer, latest: holding) {
            await initiate(exchange, with: peer)
        }
    }

    /// Sends `peer` this station's `keeps` (counting what is pushed either way from here when
    /// it may open their meeting, ``MeetingStateMachine/mayOpenMeeting(with:)``).
    private func tell(_ peer: UUID) async {
        if meetings.mayOpenMeeting(with: peer) { sinceExchange[peer] = (0, 0) }
        await send(.keeps(configuration.keeps, run: meetings.run, heard: meetings.run(of: peer)), to: peer)
    }

    /// `peer` said which collections it keeps, its run, and this station's as it last heard
    /// it: their meeting may begin (``MeetingStateMachine``). The station with the larger peer
    /// ID answers the first `keeps` of each run with what it stored since they last met, then
    /// its own `keeps`; the smaller one, reading that answer, begins their exchange. (From a
    /// peer this station's session believes reads none of the store's messages, its store
    /// having started since: taken when its TYPES says so, ``handle(_:)``.)
    private func heard(_ scope: SyncScope, run: UInt64, heard: UInt64, from peer: UUID) async throws(SyncError) {
        guard !notSyncing.contains(peer) else {
            keepsWhenSyncing[peer] = (scope, run, heard)
            return
        }
        for step in meetings.heard(scope, run: run, heard: heard, from: peer) {
            switch step {
            case .meet: try await meet(peer)
            case .tell: await tell(peer)
            }
        }
    }

    /// A meeting with `peer` begins on this side: what ran with it before is dropped.
    private func meet(_ peer: UUID) async throws(SyncError) {
        if let exchange = exchanges.met(peer, latest: try station.holding()) {
            await initiate(exchange, with: peer)
            return
        }
        sinceExchange[peer] = (0, 0)
        if let since = try stored(sinceLastExchangeWith: peer) {
            count(sent: since.count, with: peer)
            await push(since, to: peer)
        }
    }

    /// The collections both this station and `peer` keep (all, for a peer that has not said).
    private func shared(with peer: UUID) -> SyncScope {
        configuration.keeps.intersection(meetings.scope(of: peer) ?? .everything)
    }

    private func initiate(_ exchange: UInt64, with peer: UUID) async {
        exchanging(with: peer)
        do throws(SyncError) {
            // Met before: first what this station stored since (docs/SYNC.md 6, the fast path).
            if let since = try stored(sinceLastExchangeWith: peer) {
                count(sent: since.count, with: peer)
                await push(since, to: peer)
            }
            let round = try RangeReconciliation(reading: station.storage.items(of: shared(with: peer))).initiate()
            await send(round, of: exchange, to: peer)
        } catch {
            report(.failed(error))
        }
    }

    /// A message as it came from a peer, read, and its versions' signatures checked, off the
    /// store's actor (``read(_:skipping:)``).
    struct Incoming: Sendable {
        /// Its kind and length, for ``traffic``.
        var kind: UInt8?
        var length: Int
        /// The message (a versions message without its versions' bytes, which are in
        /// `versions`), or why it does not read.
        var message: Result<SyncMessage, SyncError>
        /// A versions message's versions, each read or refused.
        var versions: [Result<SignedVersion, SyncError>] = []
        /// Which of `versions` had their signature checked and found good (``check(_:keys:skipping:)``).
        var verified: [Bool] = []
    }

    /// Reads a message from a peer, and checks the signatures of the versions it carries that
    /// the store would check (not held here, of a collection it keeps and an origin that may
    /// write it, with the key ``Station/take(_:keys:from:now:verified:)`` would use), on every
    /// core: off the store's actor, so while it takes the message before. Versions whose ids
    /// are in `skipping` are left to the station to check.
    nonisolated func read(_ bytes: [UInt8], skipping: Set<[UInt8]> = []) -> Incoming {
        let message = Result { () throws(SyncError) in try SyncMessage(decoding: bytes) }
        var incoming = Incoming(kind: bytes.first, length: bytes.count, message: message)
        guard case .success(.versions(let keys, let encoded)) = message else { return incoming }
        incoming.message = .success(.versions(keys: keys, []))  // (the bytes live on in `versions` alone)
        incoming.versions = encoded.map { bytes in Result { () throws(SyncError) in try SignedVersion(decoding: bytes) }
        }
        incoming.verified = check(incoming.versions, keys: keys, skipping: skipping)
        return incoming
    }

    /// Checks the signatures of `versions` that ``Station/take(_:keys:from:now:verified:)`` would
    /// check, with the key it would check them with: the one the message offered for their
    /// origin, else the one stored. Which are good, by position.
    private nonisolated func check(
        _ versions: [Result<SignedVersion, SyncError>],
        keys: [PeerKey],
        skipping: Set<[UInt8]>
    ) -> [Bool] {
        let offered = Dictionary(keys.map { ($0.peerID, $0) }, uniquingKeysWith: { first, _ in first })
        let writers = rules.withLockedValue { $0.mapValues(\.writers) }
        let held = skipping.union((try? storage.kept(versions.compactMap { try? $0.get().id })) ?? [])
        var stored: [UUID: PeerKey?] = [:]
        let work = versions.enumerated().compactMap {
            index,
            result -> (index: Int, version: SignedVersion, key: PeerKey)? in
            guard let version = try? result.get(), !held.contains(version.id),
                configuration.keeps.contains(version.collection),
                writers[version.collection]?.allows(version.stamp.origin) ?? true
            else { return nil }
            let origin = version.stamp.origin
            if offered[origin] == nil, stored[origin] == nil { stored[origin] = try? storage.key(of: origin) }
            return (offered[origin] ?? stored[origin] ?? nil).map { (index, version, $0) }
        }
        // (Only what is to be checked goes to the cores: a relayed batch of versions held here
        // wakes no thread.)
        var verified = [Bool](repeating: false, count: versions.count)
        let good = work.parallelMap { (try? $0.version.verify(with: $0.key)) != nil }
        for (work, good) in zip(work, good) { verified[work.index] = good }
        return verified
    }

    /// Takes one message from `peer`.
    private func receive(_ incoming: Incoming, from peer: UUID) async {
        traffic.count(kind: incoming.kind, length: incoming.length, sent: false)
        let message: SyncMessage
        do throws(SyncError) {
            message = try incoming.message.get()
        } catch {
            report(.refused(error, from: peer))
            return
        }
        // (A round or a want from a peer that has not said what it keeps in this run belongs to
        // a meeting before this run, the peer's messages queued while this station restarted:
        // answering it might send what the peer does not keep. Their next meeting starts afresh.)
        switch message {
        case .reconcile(_, true, _), .want: guard meetings.scope(of: peer) != nil else { return }
        default: break
        }
        do throws(SyncError) {
            switch message {
            case .reconcile(let exchange, true, let ranges):
                // (What this side found it sends before its answer, so the peer has it when it
                // reads the answer. An empty round ends the exchange: answered with an empty one.)
                if !ranges.isEmpty && !exchanges.isAnswering(exchange, by: peer) { exchanging(with: peer) }
                let held = exchanges.offered(exchange, by: peer, isEnd: ranges.isEmpty, latest: try station.holding())
                var (answer, outcome) = (RangeReconciliation.Message(), RangeReconciliation.Outcome())
                if !ranges.isEmpty {
                    (answer, outcome) = try RangeReconciliation(reading: station.storage.items(of: shared(with: peer)))
                        .reconcile(ranges)
                }
                try await resolve(outcome, with: peer)
                await send(.reconcile(exchange: exchange, fromInitiator: false, answer), to: peer)
                if let held { try await completed(with: peer, held: held) }
            case .reconcile(let exchange, false, let ranges):
                switch exchanges.answered(exchange, by: peer, latest: try station.holding()) {
                case .ignored:
                    return
                case .completed(let completion):
                    try await completed(with: peer, held: completion.held)
                    if let next = completion.next { await initiate(next, with: peer) }
                case .running:
                    let (answer, outcome) = try RangeReconciliation(
                        reading: station.storage.items(of: shared(with: peer))
                    )
                    .reconcile(ranges)
                    try await resolve(outcome, with: peer)
                    if answer.isEmpty { exchanges.ending(exchange, with: peer) }
                    await send(answer, of: exchange, to: peer)
                }
            case .versions(let keys, _):
                try await take(incoming.versions, verified: incoming.verified, keys: keys, from: peer)
            case .want(let ids):
                count(sent: ids.count, with: peer)
                // (Those it keeps, a message's bytes at a time: a want of 16,384 ids of large
                // versions never holds them all.)
                var wanted = ids[...]
                while !wanted.isEmpty {
                    let (versions, read) = try station.storage.versions(withIDs: wanted, bytes: Self.bytesPerMessage)
                    await push(versions, to: peer)
                    wanted = wanted.dropFirst(read)
                }
            case .lack(let files):
                try await offer(files, to: peer)
            case .schemas(let schemas):
                heard(schemas, from: peer)
            case .keeps(let scope, let run, let heard):
                try await self.heard(scope, run: run, heard: heard, from: peer)
            }
        } catch {
            report(.failed(error))
        }
    }

    /// The versions this station stored since its last completed exchange with `peer` (but
    /// those that came from `peer`), if they ever completed one.
    private func stored(sinceLastExchangeWith peer: UUID) throws(SyncError) -> [SignedVersion]? {
        guard let held = try station.storage.held()[peer] else { return nil }
        let shared = shared(with: peer)
        return try station.storage.versions(storedAfter: held.sequence, notFrom: peer).filter {
            shared.contains($0.collection)
        }
    }

    /// An exchange with `peer` completed: `peer` holds every version this station held when
    /// it held `held`. Kept, reported, and deletes collected if that moved the horizon.
    private func completed(with peer: UUID, held: Holding) async throws(SyncError) {
        try station.acknowledge(peer, held: held)
        sinceExchange[peer] = (0, 0)
        let syncedAt = max(peers[peer]?.syncedAt ?? held.timestamp, held.timestamp)  // (read before the write's access)
        peers[peer]?.state = .synced
        peers[peer]?.syncedAt = syncedAt
        report(.exchanged(with: peer))
        try await collect()
        await ask(for: Set(try missingAttachments(askingOf: peer)), from: peer)
    }

    /// Collects the deletes every member holds (or, without a roster, older than the tombstone
    /// lifetime): docs/SYNC.md 8.
    package func collect() async throws(SyncError) {
        let roster = await session.roster
        let horizon = TombstoneCollection.horizon(
            members: roster.map { Set($0.keys.map(\.peerID)).union($0.peerIDs) },
            own: session.peerID,
            held: try station.storage.held().mapValues(\.timestamp),
            now: now(),
            lifetime: configuration.tombstoneLifetime.milliseconds
        )
        let collected = try station.collect(below: horizon)
        if collected > 0 { report(.collected(collected)) }
        try removeUnheldFiles()
    }

    /// Sends `peer` the versions an exchange found it lacks, and asks for those this station lacks.
    private func resolve(_ outcome: RangeReconciliation.Outcome, with peer: UUID) async throws(SyncError) {
        count(sent: outcome.haveCount, with: peer)
        // (Read a page at a time, and sent as a message fills, across the spans: the peer
        // starts at once, and commits as few times as the messages' bounds allow.)
        var (filling, bytes) = ([SignedVersion](), 0)
        for span in outcome.have {
            var lower = span.lower
            while true {
                if filling.count == Self.versionsPerMessage || bytes >= Self.bytesPerMessage {
                    await push(filling, to: peer)
                    (filling, bytes) = ([], 0)
                }
                let page = try station.storage.versions(
                    from: lower,
                    below: span.upper,
                    in: shared(with: peer).collections,
                    limit: Self.versionsPerMessage - filling.count,
                    bytes: Self.bytesPerMessage - bytes
                )
                for version in page where !span.except.contains(version.item.digest) {
                    filling.append(version)
                    bytes += version.bytes.count
                }
                guard let next = page.last?.item.successor, !page.isEmpty else { break }
                lower = RangeReconciliation.Bound(next)
            }
        }
        await push(filling, to: peer)
        for ids in outcome.need.chunks(of: SyncMessage.maximumCount) { await send(.want(Array(ids)), to: peer) }
    }

    /// Takes versions `peer` sent, tells the subscribers what changed, and relays what was new
    /// here to the other active peers.
    private func take(
        _ read: [Result<SignedVersion, SyncError>],
        verified: [Bool],
        keys: [PeerKey],
        from peer: UUID
    ) async throws(SyncError) {
        var (versions, checked): ([SignedVersion], [Bool]) = ([], [])
        for (result, verified) in zip(read, verified) {
            do throws(SyncError) {
                let version = try result.get()
                // (Its origin's own write of a collection this station does not keep: origins
                // broadcast their writes to every peer, docs/SYNC.md 6. Left, as expected.)
                if version.stamp.origin == peer, !configuration.keeps.contains(version.collection) { continue }
                versions.append(try kept(version))
                checked.append(verified)
            } catch {
                report(.refused(error, from: peer))
            }
        }
        station.writers = rules.withLockedValue { $0.mapValues(\.writers) }
        exchanges.storing(from: peer, latest: try station.holding())
        let taken = try station.take(versions, keys: keys, from: peer, now: now(), verified: checked)
        removeReleasedFiles()
        for refusal in taken.refusals { report(.refused(refusal, from: peer)) }
        for change in taken.changes { changeSubscribers.yield(StoreChange(change: change, peer: peer)) }
        count(received: taken.kept.count, with: peer)
        await push(taken.kept, to: nil, except: peer)
        // (A write this station's collected delete hid: the peer never had the delete. Relayed
        // on by the peer, it is taken where the delete was not collected, and nowhere given back.)
        count(sent: taken.hiddenBy.count, with: peer)
        await push(taken.hiddenBy, to: peer)
        // (The files of what came, from where it came: the peer holds them, or is getting them.)
        let attachments = taken.kept.flatMap { version in
            attachmentPolicy(of: version.collection) == .atOnce ? version.attachments : []
        }
        await ask(for: Set(attachments), from: peer)
    }

    /// `version`, if this station keeps its collection.
    /// - Throws: `notKept`.
    private func kept(_ version: SignedVersion) throws(SyncError) -> SignedVersion {
        guard configuration.keeps.contains(version.collection) else {
            throw SyncError(
                .notKept,
                "version \(version.stamp) of \(version.collection)/\(version.recordID): this station does not keep \(version.collection) (its configuration's keeps)"
            )
        }
        return version
    }

    /// Sends `versions` with their origins' keys: to `peer`, those of the collections both
    /// keep; or, with `peer` nil, to every active peer but `except` that said which collections
    /// it keeps, those it keeps, waiting for room in each one's outbox (one that has not said
    /// gets them as their meeting begins); or, with `broadcast` (this station's own writes),
    /// all of them to every peer the session has room for now, active or away (one it skips is
    /// reconciled with, see ``handle(_:)``; one that does not keep a collection leaves its
    /// versions, docs/SYNC.md 6).
    private func push(_ versions: [SignedVersion], to peer: UUID?, except: UUID? = nil, broadcast: Bool = false) async {
        if let peer {
            await send(versions.filter { shared(with: peer).contains($0.collection) }, to: [peer], broadcast: false)
        } else if broadcast {
            await send(versions, to: [], broadcast: true)
        } else {
            // (A peer away is owed an exchange at its next join: waiting for room in its
            // outbox would hold up every other.)
            let active = Set(session.activePeers.map(\.id))
            for (recipient, scope) in meetings.scopes where recipient != except {
                let relayed = versions.filter { scope.contains($0.collection) }
                guard !relayed.isEmpty else { continue }
                guard active.contains(recipient) else {
                    meetings.missed(recipient)
                    continue
                }
                await send(relayed, to: [recipient], broadcast: false)
            }
        }
    }

    /// Sends `versions`, in messages of at most ``versionsPerMessage`` versions and
    /// ``bytesPerMessage`` bytes, to `recipients`, or with `broadcast` to every peer the session
    /// has room for now.
    private func send(_ versions: [SignedVersion], to recipients: [UUID], broadcast: Bool) async {
        guard !versions.isEmpty else { return }
        let batches = Self.batches(of: versions.map { ($0.stamp.origin, $0.bytes.count) }).map { versions[$0] }
        for batch in batches {
            var keys: [PeerKey] = []
            for origin in Set(batch.map(\.stamp.origin)) {
                if origin == session.peerID {
                    keys.append(session.identity.key)
                } else if let key = try? station.storage.key(of: origin) {
                    keys.append(key)
                }
            }
            let message = SyncMessage.versions(keys: keys, batch.map(\.bytes))
            let signedBytes = batch.reduce(0) { $0 + $1.bytes.count }
            if broadcast {
                let envelope = SyncEnvelope(message, compressor: compressor)
                do {
                    let reached = try await session.broadcast(envelope)  // (not inside the access to traffic)
                    traffic.count(envelope.bytes, sent: true, times: reached)
                    traffic.versionBytes += reached * signedBytes
                } catch {
                    report(.failed(SyncError(.notSent, "could not push \(batch.count) versions: \(error)")))
                }
                continue
            }
            let envelope = SyncEnvelope(message, compressor: compressor)  // (compressed once for them all)
            for recipient in recipients {
                traffic.versionBytes += signedBytes
                await send(envelope, to: recipient)
            }
        }
    }

    /// The messages versions of these origins and lengths go in, in order: each at most
    /// ``versionsPerMessage`` versions and ``bytesPerMessage`` bytes with every version framed
    /// and every origin's key (docs/SYNC.md 5).
    static func batches(of versions: [(origin: UUID, length: Int)]) -> [Range<Int>] {
        let header = 1 + 2 + 2  // (kind, key count, version count)
        var batches: [Range<Int>] = []
        var (start, bytes, origins) = (0, header, Set<UUID>())
        for (index, version) in versions.enumerated() {
            let adding = 4 + version.length + (origins.contains(version.origin) ? 0 : PeerKey.length)
            if index > start, index - start == versionsPerMessage || bytes + adding > bytesPerMessage {
                batches.append(start..<index)
                (start, bytes, origins) = (index, header + 4 + version.length + PeerKey.length, [version.origin])
            } else {
                bytes += adding
                origins.insert(version.origin)
            }
        }
        if start < versions.count { batches.append(start..<versions.count) }
        return batches
    }

    /// Sends a round of `exchange`, which this station initiated, to `peer`; an exchange whose
    /// round the session refuses is over (an exchange follows at the peer's next join).
    private func send(_ round: RangeReconciliation.Message, of exchange: UInt64, to peer: UUID) async {
        if await !send(.reconcile(exchange: exchange, fromInitiator: true, round), to: peer) {
            exchanges.abandon(exchange, with: peer)
        }
    }

    /// Sends `message` to `peer`: whether the session took it (it is delivered, or queued for
    /// the peer away). What it refuses is reported, and the peer owed an exchange.
    @discardableResult
    func send(_ message: SyncMessage, to peer: UUID) async -> Bool {
        await send(SyncEnvelope(message, compressor: compressor), to: peer)
    }

    /// Sends `envelope` (a message encoded once for every peer it goes to) to `peer`, as
    /// ``send(_:to:)-(SyncMessage,_)`` does.
    @discardableResult
    private func send(_ envelope: SyncEnvelope, to peer: UUID) async -> Bool {
        traffic.count(envelope.bytes, sent: true)
        do {
            try await session.send(envelope, to: peer)
            return true
        } catch {
            // The peer is gone for good, or never ran, or away too long: an exchange at its next join.
            meetings.missed(peer)
            report(.failed(SyncError(.notSent, "could not send to \(peer): \(error)")))
            return false
        }
    }
}

extension SyncStore {
    /// Tells `peer` the schema version of each collection this station reads (docs/SYNC.md 10).
    func announceSchemas(to peer: UUID) async {
        let schemas = rules.withLockedValue { rules in
            rules.compactMap { name, rules in rules.schema.map { SyncMessage.Schema(collection: name, version: $0) } }
        }.sorted { Array($0.collection.utf8).lexicographicallyPrecedes(Array($1.collection.utf8)) }
        guard !schemas.isEmpty else { return }
        for chunk in schemas.chunks(of: SyncMessage.maximumSchemas) { await send(.schemas(Array(chunk)), to: peer) }
    }

    /// `peer` announced the schema versions it reads: each newer than this station's is
    /// reported, once per peer, collection and version in a run, and kept to name it when a
    /// record does not read.
    func heard(_ schemas: [SyncMessage.Schema], from peer: UUID) {
        let ours = rules.withLockedValue { $0.compactMapValues(\.schema) }
        for schema in schemas {
            guard let own = ours[schema.collection], schema.version > own else { continue }
            newerSchemas.withLockedValue { newer in
                if newer[schema.collection].map({ $0.version < schema.version }) ?? true {
                    newer[schema.collection] = (schema.version, peer)
                }
            }
            guard reportedSchemas.insert("\(peer) \(schema.version) \(schema.collection)").inserted else { continue }
            report(.newerSchema(collection: schema.collection, theirs: Int(schema.version), ours: Int(own), from: peer))
        }
    }

    /// `error` (a record of `collection` that does not read), with the newer schema version a
    /// peer announced for the collection, if one did.
    nonisolated func explained(_ error: SyncError, in collection: String) -> SyncError {
        let ours = rules.withLockedValue { $0[collection]?.schema }
        guard let newer = newerSchemas.withLockedValue({ $0[collection] }), let ours, newer.version > ours else {
            return error
        }
        return SyncError(
            error.code,
            error.message
                + " (\(newer.peer) reads \(collection) as schema version \(newer.version), this build as \(ours): the record is likely a newer build's; update this application)"
        )
    }
}

/// The messages a store sent and received, and their bytes, by kind (docs/SYNC.md 5: 1
/// reconciles, 2 carries versions, 3 wants, 7 carries versions compressed).
package struct Traffic: Sendable {
    package var sent: [UInt8: (messages: Int, bytes: Int)] = [:]
    package var received: [UInt8: (messages: Int, bytes: Int)] = [:]
    /// The rounds this store sent as initiator that were not the empty one that ends an
    /// exchange: the round trips its exchanges took.
    package var roundTrips = 0
    /// The bytes of the versions this store sent, as their origins signed them (what
    /// compression, kind 7, saves is the difference from kinds 2 and 7's bytes).
    package var versionBytes = 0

    mutating func count(_ message: [UInt8], sent isSent: Bool, times: Int = 1) {
        // (A reconcile round: kind, exchange, direction 0 from the initiator, 0x61, ranges.)
        if isSent, message.first == 1, message.count > 11, message[9] == 0 { roundTrips += times }
        count(kind: message.first, length: message.count, sent: isSent, times: times)
    }

    mutating func count(kind: UInt8?, length: Int, sent isSent: Bool, times: Int = 1) {
        guard let kind, times > 0 else { return }
        let add = { (entry: (messages: Int, bytes: Int)?) in
            (messages: (entry?.messages ?? 0) + times, bytes: (entry?.bytes ?? 0) + times * length)
        }
        if isSent { sent[kind] = add(sent[kind]) } else { received[kind] = add(received[kind]) }
    }
}

/// What the application said of one collection (``SyncStore/carry(_:writers:attachments:)``).
struct CollectionRules: Sendable {
    var writers: SyncWriters
    var attachments: SyncAttachmentPolicy
    /// The schema version this station reads the collection as; nil if it only carries it.
    var schema: UInt32?
}

/// A change of any collection, with the peer it came from (nil: this station's write).
struct StoreChange: Sendable {
    var change: RecordChange
    var peer: UUID?
}

extension Array {
    func chunks(of size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}

extension Duration {
    /// Whole milliseconds (negative: 0).
    var milliseconds: UInt64 {
        let (seconds, attoseconds) = components
        return seconds < 0 ? 0 : UInt64(seconds) * 1_000 + UInt64(attoseconds / 1_000_000_000_000_000)
    }
}
