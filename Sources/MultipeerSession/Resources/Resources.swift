import Dispatch
import Foundation
import Glibc
import Logging
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore
import Synchronization

/// The session's resource transfers (docs/PROTOCOL.md 3c), both ways: each transfer is driven by
/// its core (``ResourceSendStateMachine``, ``ResourceReceiveStateMachine``) behind a lock of its
/// own, with its file read or written on a serial queue of its own, never on the link's event
/// loop. The links hand their RESOURCE_ frames here on their event loop (``received(_:from:on:)``).
/// A peer's link is its delivery's (``PeerLink``): read from there, and told here when it comes
/// and goes (``linkUp(_:)``, ``linkDown(_:)``).
///
/// Bounds: an incoming transfer grants at most ``window`` bytes beyond what it has written, so
/// that is what it can make this side hold in memory; a peer has at most
/// ``maximumIncomingPerPeer`` transfers under way towards this side (more are refused); an
/// outgoing transfer has at most ``chunksAhead`` chunks (each at most ``chunkLength``) read ahead
/// of its link's writer, which takes them in turns with the peer's messages and other
/// transfers and streams (``LinkWriter``), and one more in the link.
final class Resources: Sendable {
    /// What an incoming transfer grants beyond what it has written.
    static let window: UInt64 = 2 << 20
    /// The largest chunk read from the file at once (smaller to a peer whose maximum frame is
    /// smaller).
    static let chunkLength: UInt64 = 256 << 10
    /// The largest RESOURCE_CHUNK frame: a chunk read goes in frames of a stream's size
    /// (``Streams/chunkLength``), so what the link's writer sends between two of them waits
    /// behind 64 KiB of the file, not 256.
    static let frameLength = Streams.chunkLength
    /// Chunks of one outgoing transfer read ahead of its link's writer: enough that the writer
    /// has the next when it comes to the transfer's turn while another is read.
    static let chunksAhead = 2
    /// Transfers begun and not yet read from ``incoming``: beyond, a transfer goes on into the
    /// directory without being announced (and the session logs that it was not).
    static let maximumUnread = 256
    /// Incoming transfers whose end is remembered, to answer their sender's offer again (the END
    /// lost with a link) with it rather than begin them anew.
    static let rememberedEnds = 64
    /// Transfers from one peer under way at once; an offer beyond is refused. This side offers
    /// no more than this to one peer at once either, and one file (its SHA-256 and length) at a
    /// time: the rest wait their turn in the order sent, where a receiver would refuse them.
    static let maximumIncomingPerPeer = 8

    /// A transfer's view of its peer's link (``PeerLink``).
    struct Link: Sendable {
        var id: LinkID
        var writer: LinkWriter
        /// Where the offers and ends go: into the link at once, ahead of the writer's turns.
        var channel: any Channel
        /// The largest chunk the peer takes (its maximum frame, less the chunk's own fields).
        var chunkLimit: UInt64

        init(_ link: PeerLink) {
            id = link.id
            writer = link.writer
            channel = link.channel
            chunkLimit = min(Resources.chunkLength, UInt64(link.hello.maximumFrameLength - ResourceChunk.headerLength))
        }
    }

    private struct State {
        var outgoing: [UUID: OutgoingTransfer] = [:]
        /// The link each outgoing transfer was last offered on.
        var offered: [UUID: LinkID] = [:]
        /// Numbers the outgoing transfers in the order they were sent.
        var sent: UInt64 = 0
        /// The incoming transfers, and what becomes of an offer.
        var incoming = Incoming(
            maximumPerSender: Resources.maximumIncomingPerPeer,
            rememberedEnds: Resources.rememberedEnds
        )
        /// The streams of the transfers whose offer's metadata has a key (``routed(byMetadataKey:)``).
        var routes: [String: AsyncStream<IncomingResource>.Continuation] = [:]
        /// Whether the session's run has ended (every stream of transfers with it).
        var sessionEnded = false

        /// The outgoing transfers to offer on `link`, their peer's link now: of those sent to the
        /// peer, in order, the first ``Resources/maximumIncomingPerPeer`` of distinct files, those
        /// not offered on this link yet. Each is recorded as offered there.
        mutating func toOffer(on link: PeerLink) -> [OutgoingTransfer] {
            let peerID = link.peerID
            var admitted: [OutgoingTransfer] = []
            for transfer in outgoing.values.filter({ $0.peerID == peerID }).sorted(by: { $0.number < $1.number })
            where admitted.count < Resources.maximumIncomingPerPeer
                && !admitted.contains(where: { $0.isSameFile(as: transfer) })
            {
                admitted.append(transfer)
            }
            let new = admitted.filter { offered[$0.id] != link.id }
            for transfer in new { offered[transfer.id] = link.id }
            return new
        }
    }

    private let state = OrderedLock(State(), rank: .registry)
    private typealias Incoming = IncomingResources<IncomingTransfer, ResourceStore>

    /// What each incoming transfer holds in memory: arrived, not yet written.
    var unwritten: [UInt64] { state.withLockedValue { Array($0.incoming.transfers.values) }.map(\.unwritten) }

    /// Where incoming resources go; nil (no directory configured), or the failure to open it:
    /// offers are refused.
    private let store: Result<ResourceStore, ResourceStoreFailure>?
    /// The incoming transfers, as each begins.
    let incoming: AsyncStream<IncomingResource>
    private let announce: AsyncStream<IncomingResource>.Continuation

    /// The session's logger.
    private let logger: Logger
    /// Whether the application was told, once, that it does not read ``incoming``.
    private let toldUnread = Atomic<Bool>(false)
    /// Where the IDs of the resources this side offers come from.
    private let random: RandomSource
    /// Makes each transfer's file queue, and runs the hashing of a file to send.
    private let fileQueue: @Sendable (String) -> any FileQueue
    /// The session's clock: the transfers' rates.
    private let clock: any SessionClock
    /// The peers' deliveries, which hold each peer's link, and the session's end.
    private let peers: Deliveries

    init(
        peers: Deliveries,
        directory: URL?,
        partialLifetime: Duration = .seconds(7 * 86_400),
        logger: Logger,
        random: RandomSource = .system,
        fileQueue: @escaping @Sendable (String) -> any FileQueue = { DispatchFileQueue(label: $0) },
        clock: any SessionClock = SystemClock()
    ) {
        self.peers = peers
        self.random = random
        self.fileQueue = fileQueue
        self.clock = clock
        store = directory.map { directory in
            Result { () throws(ResourceStoreFailure) in
                try ResourceStore(directory: directory, partialLifetime: partialLifetime)
            }
        }
        (incoming, announce) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(Self.maximumUnread))
        self.logger = logger
    }

    // MARK: Links

    /// The peer is active on `link` (its delivery holds it now): what waits for it is offered.
    /// What an earlier incarnation of it was sending is not under way any more (its application
    /// gets told); the next offer of a file resumes what was written.
    func linkUp(_ link: PeerLink) {
        let hello = link.hello
        let peerID = hello.peerID
        let (transfers, refused, retired) = state.withLockedValue {
            state -> ([OutgoingTransfer], [OutgoingTransfer], [IncomingTransfer]) in
            let retired = state.incoming.senderActive(peerID, incarnation: hello.incarnation)
            guard hello.features.contains(.resources) else {
                return ([], state.outgoing.values.filter { $0.peerID == peerID }, retired)
            }
            return (state.toOffer(on: link), [], retired)
        }
        for transfer in retired { transfer.retire() }
        for transfer in transfers { transfer.linkUp(Link(link)) }
        for transfer in refused { transfer.refused() }
    }

    /// The peer's `link` went: its transfers wait for the next (and resume from there).
    func linkDown(_ link: PeerLink) {
        let (outgoing, incoming) = state.withLockedValue { state -> ([OutgoingTransfer], [IncomingTransfer]) in
            (
                state.outgoing.values.filter { $0.peerID == link.peerID },
                state.incoming.transfers(from: link.peerID)
            )
        }
        for transfer in outgoing { transfer.linkDown() }
        for transfer in incoming { transfer.linkDown() }
    }

    // MARK: Frames

    /// A RESOURCE_ frame from `peer` arrived on `channel` (on its event loop). Throws what
    /// breaks the protocol: the link is then closed (GOODBYE 3).
    func received(_ frame: ResourceFrame, from peer: Peer, on channel: any Channel) throws(MultipeerError) {
        switch frame {
        case .offer(let offer):
            offered(offer, by: peer, on: channel)
        case .want(let want):
            try outgoingTransfer(want.id, to: peer.id)?.want(want)
        case .chunk(let chunk):
            try incomingTransfer(chunk.id, from: peer.id)?.chunk(chunk)
        case .end(let end):
            if let transfer = outgoingTransfer(end.id, to: peer.id) {
                transfer.ended(end)
            } else {
                incomingTransfer(end.id, from: peer.id)?.ended(end)
            }
        }
    }

    private func outgoingTransfer(_ id: UUID, to peerID: UUID) -> OutgoingTransfer? {
        state.withLockedValue { $0.outgoing[id] }.flatMap { $0.peerID == peerID ? $0 : nil }
    }

    private func incomingTransfer(_ id: UUID, from peerID: UUID) -> IncomingTransfer? {
        state.withLockedValue { $0.incoming.transfer(id, from: peerID) }
    }

    /// A peer offers a file: its transfer is answered again, begun, or ended at once, as the
    /// registry decides (``IncomingResources``).
    private func offered(_ offer: ResourceOffer, by peer: Peer, on channel: any Channel) {
        let key = Incoming.Key(peer: peer.id, transfer: offer.id)
        let store: Incoming.Store =
            switch self.store {
            case nil: .none
            case .failure(let failure): .failed(failure.reason, failure.message)
            case .success(let store): .ready(store)
            }
        let decision = state.withLockedValue { state in
            state.incoming.offered(
                offer,
                by: peer.id,
                senderTakesResources: peers.binding(of: peer.id).hello?.features.contains(.resources) ?? true,
                sessionEnded: peers.end.hasEnded,
                store: store
            ) {
                IncomingTransfer(
                    offer: offer,
                    sender: peer,
                    on: channel,
                    queue: fileQueue("multipeer.resource.in"),
                    clock: clock
                ) { [weak self] reason in
                    self?.state.withLockedValue { $0.incoming.transferEnded(key, reason: reason) }
                }
            }
        }
        switch decision {
        case .again(let transfer):
            transfer.offeredAgain(on: channel)
        case .begin(let transfer, let store, let superseded):
            let route = state.withLockedValue { state in
                offer.metadata.keys.sorted().compactMap { state.routes[$0] }.first
            }
            let announced = (route ?? announce).yield(
                IncomingResource(
                    offer: offer,
                    sender: peer,
                    progress: transfer.progress,
                    outcome: transfer.outcome,
                    cancel: { [weak transfer] in transfer?.end(.cancelled) }
                )
            )
            if case .dropped = announced, !toldUnread.exchange(true, ordering: .relaxed) {
                logger.warning(
                    "a file arrives unannounced: the application has not read incomingResources for \(Self.maximumUnread) transfers (said once)",
                    metadata: [
                        "multipeer.peer.id": "\(peer.id)", "multipeer.resource": "\(offer.name)",
                    ]
                )
            }
            guard let first = superseded.first else {
                transfer.begin(in: store)
                return
            }
            // One at a time, each after its last write; then the new transfer opens the file.
            let chain = superseded.dropFirst().reduce({ transfer.begin(in: store) } as @Sendable () -> Void) {
                next,
                old in
                { old.supersede(then: next) }
            }
            first.supersede(then: chain)
        case .end(let reason, let why):
            channel.writeAndFlush(
                LinkMessage.resourceEnd(ResourceEnd(id: offer.id, reason: reason, text: why)),
                promise: nil
            )
        }
    }

    // MARK: Sending

    /// Starts sending `file` to `peerID` (hashed first, off the caller's thread).
    func send(
        _ file: URL,
        named name: String,
        metadata: [String: String],
        to peerID: UUID
    ) async throws -> OutgoingResource {
        let source = try await SourceFile.open(file, on: fileQueue("multipeer.resource.hash"))
        let offer: ResourceOffer
        do {
            offer = try ResourceOffer(
                id: random.uuid(),
                name: name,
                length: source.length,
                sha256: source.sha256,
                metadata: metadata
            )
        } catch let error as MultipeerError {
            throw MultipeerError(.invalidArgument, "cannot send \(file.path): \(error.message)")
        }
        let number = state.withLockedValue { state in
            state.sent += 1
            return state.sent
        }
        let transfer = OutgoingTransfer(
            offer: offer,
            number: number,
            peerID: peerID,
            source: source,
            queue: fileQueue("multipeer.resource.out"),
            clock: clock
        ) { [weak self] in
            self?.finished(offer.id, to: peerID)
        }
        let (toOffer, refused, ended) = state.withLockedValue { state in
            // (The peer's link read under this lock: one bound after this offers the transfer in
            // ``linkUp(_:)``, one bound before, here; `offered` keeps it to one offer a link.)
            let (link, hello) = peers.binding(of: peerID)
            let refused = !(hello?.features.contains(.resources) ?? true)
            let ended = peers.end.hasEnded
            if !ended { state.outgoing[offer.id] = transfer }
            let toOffer = link.flatMap { link in refused ? nil : (link, state.toOffer(on: link)) }
            return (toOffer, refused, ended)
        }
        let resource = OutgoingResource(
            id: offer.id,
            name: offer.name,
            length: Int64(offer.length),
            sha256: offer.sha256,
            peerID: peerID,
            progress: transfer.progress,
            outcome: transfer.outcome,
            cancel: { [weak transfer] in transfer?.end(.cancelled) },
            sent: { transfer.sent }
        )
        if ended {
            transfer.stop()
        } else if refused {
            transfer.refused()
        } else if let (link, transfers) = toOffer {
            for transfer in transfers { transfer.linkUp(Link(link)) }
        }
        return resource
    }

    /// Outgoing transfer `id` to `peerID` ended: the next waiting its turn is offered.
    private func finished(_ id: UUID, to peerID: UUID) {
        let toOffer = state.withLockedValue { state -> (PeerLink, [OutgoingTransfer])? in
            state.outgoing.removeValue(forKey: id)
            state.offered.removeValue(forKey: id)
            guard let link = peers.binding(of: peerID).link, link.hello.features.contains(.resources) else {
                return nil
            }
            return (link, state.toOffer(on: link))
        }
        guard let (link, transfers) = toOffer else { return }
        for transfer in transfers { transfer.linkUp(Link(link)) }
    }

    // MARK: Ending

    /// The session's run has ended (``Deliveries/end`` is set): every transfer fails with
    /// `sessionState`.
    func sessionEnded() {
        let (outgoing, incoming) = state.withLockedValue { state in
            (Array(state.outgoing.values), Array(state.incoming.transfers.values))
        }
        for transfer in outgoing { transfer.stop() }
        for transfer in incoming { transfer.stop() }
        announce.finish()
        let routes = state.withLockedValue { state in
            state.sessionEnded = true
            return state.routes.values
        }
        for route in routes { route.finish() }
    }

    /// The incoming transfers whose offer's metadata has `key`, as each begins, from now on:
    /// they go here instead of ``incoming`` (the first key of an offer, in byte order, that has
    /// a stream wins). A new stream for a key ends the one before.
    func routed(byMetadataKey key: String) -> AsyncStream<IncomingResource> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: IncomingResource.self,
            bufferingPolicy: .bufferingOldest(Self.maximumUnread)
        )
        let (previous, ended) = state.withLockedValue { state in
            defer { if !state.sessionEnded { state.routes[key] = continuation } }
            return (state.routes[key], state.sessionEnded)
        }
        previous?.finish()
        if ended { continuation.finish() }
        return stream
    }
}

extension ResourceChunk {
    /// A chunk frame's value before its bytes: the transfer UUID and the offset.
    static let headerLength = 24
}

/// A file being sent: open, so its bytes are read from the same file throughout, and checked
/// before each chunk against what it was when hashed.
struct SourceFile: Sendable {
    let path: String
    let descriptor: Int32
    let length: UInt64
    let sha256: [UInt8]
    /// The file as it was hashed: device, inode, size, modification time.
    private let identity: [Int]

    /// Opens and hashes `url`, on `queue` (a large file takes seconds).
    static func open(_ url: URL, on queue: any FileQueue) async throws -> SourceFile {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try SourceFile(url) })
            }
        }
    }

    private init(_ url: URL) throws {
        path = url.path
        descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw MultipeerError(
                .invalidArgument,
                "cannot open \(path) to send it: \(String(cString: strerror(errno)))"
            )
        }
        guard let before = Self.identity(of: descriptor, path: path) else {
            Glibc.close(descriptor)
            throw MultipeerError(.invalidArgument, "cannot read what \(path) is")
        }
        length = UInt64(before[2])
        do {
            sha256 = try ResourceStore.sha256(of: url, length: length)
        } catch {
            Glibc.close(descriptor)
            throw MultipeerError(.invalidArgument, "cannot read \(path) to send it: \(error)")
        }
        guard Self.identity(of: descriptor, path: path) == before else {
            Glibc.close(descriptor)
            throw MultipeerError(.resourceChanged, "\(path) changed while it was read to be sent")
        }
        identity = before
    }

    private static func identity(of descriptor: Int32, path: String) -> [Int]? {
        var open = stat()
        var named = stat()
        guard fstat(descriptor, &open) == 0, stat(path, &named) == 0, open.st_dev == named.st_dev,
            open.st_ino == named.st_ino,
            open.st_mode & S_IFMT == S_IFREG
        else { return nil }
        return [Int(open.st_dev), Int(open.st_ino), Int(open.st_size), open.st_mtim.tv_sec, open.st_mtim.tv_nsec]
    }

    /// `count` bytes from `offset`, if the file is still what was hashed (nil otherwise).
    func read(offset: UInt64, count: UInt64, allocator: ByteBufferAllocator) -> ByteBuffer? {
        var buffer = allocator.buffer(capacity: Int(count))
        let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: Int(count)) { bytes in
            var done = 0
            while done < Int(count) {
                let n = pread(descriptor, bytes.baseAddress! + done, Int(count) - done, off_t(offset) + off_t(done))
                guard n > 0 else { return done }
                done += n
            }
            return done
        }
        guard read == Int(count), Self.identity(of: descriptor, path: path) == identity else { return nil }
        return buffer
    }

    func close() {
        Glibc.close(descriptor)
    }
}

/// Reports a transfer's progress: bytes done, and the rate since the first report (a resumed
/// transfer's rate counts from where it resumed, not from zero).
final class ProgressReporter: Sendable {
    private let continuation: AsyncStream<ResourceProgress>.Continuation
    private let total: UInt64
    private let first = NIOLockedValueBox<(at: ContinuousClock.Instant, bytes: UInt64)?>(nil)
    private let clock: any SessionClock

    private init(continuation: AsyncStream<ResourceProgress>.Continuation, total: UInt64, clock: any SessionClock) {
        self.continuation = continuation
        self.total = total
        self.clock = clock
    }

    /// A reporter for a file of `total` bytes, and the stream it reports on (the latest report
    /// waits for its reader; earlier ones are replaced).
    static func make(total: UInt64, clock: any SessionClock) -> (AsyncStream<ResourceProgress>, ProgressReporter) {
        let (stream, continuation) = AsyncStream.makeStream(
            of: ResourceProgress.self,
            bufferingPolicy: .bufferingNewest(1)
        )
        return (stream, ProgressReporter(continuation: continuation, total: total, clock: clock))
    }

    func report(_ done: UInt64) {
        let now = clock.now
        let first = first.withLockedValue { first in
            if first == nil { first = (now, done) }
            return first!
        }
        let seconds = (now - first.at).seconds
        let rate = seconds > 0 && done >= first.bytes ? Double(done - first.bytes) / seconds : 0
        continuation.yield(ResourceProgress(bytesDone: Int64(done), totalBytes: Int64(total), bytesPerSecond: rate))
    }

    func finish() { continuation.finish() }
}

/// One resource this side sends: its chunks are read on its queue, ahead of its link's writer,
/// which takes them in its turns (``LinkSource``).
final class OutgoingTransfer: LinkSource {
    let peerID: UUID
    /// Its place in the order this side's transfers were sent.
    let number: UInt64
    private let offer: ResourceOffer
    private let source: SourceFile
    private let state: NIOLockedValueBox<State>
    private let queue: any FileQueue
    private let reporter: ProgressReporter
    /// The transfer's progress, as the receiver reports what it holds.
    let progress: AsyncStream<ResourceProgress>
    let outcome = ResourceOutcome<Void>()
    private let onFinish: @Sendable () -> Void

    private struct State {
        var machine: ResourceSendStateMachine
        var link: Resources.Link?
        /// Chunks read for the link, in order, waiting for the writer's turn.
        var chunks: [ResourceChunk] = []
        /// Chunks being read for the link.
        var reading = 0
        /// Counts the times what was read was dropped: a read begun before is not kept.
        var drops: UInt64 = 0
        /// The link whose writer was told chunks wait, until a turn takes the last.
        var readyOn: LinkID?
        var sent = ResourceSending()

        /// What was read for a link is not sent: the link went, or the transfer ended.
        mutating func dropChunks() {
            chunks = []
            reading = 0
            readyOn = nil
            drops += 1
        }
    }

    /// What it has sent so far.
    var sent: ResourceSending { state.withLockedValue { $0.sent } }

    init(
        offer: ResourceOffer,
        number: UInt64,
        peerID: UUID,
        source: SourceFile,
        queue: any FileQueue,
        clock: any SessionClock,
        onFinish: @escaping @Sendable () -> Void
    ) {
        self.queue = queue
        self.offer = offer
        self.number = number
        self.peerID = peerID
        self.source = source
        self.onFinish = onFinish
        state = NIOLockedValueBox(State(machine: ResourceSendStateMachine(offer: offer)))
        (progress, reporter) = ProgressReporter.make(total: offer.length, clock: clock)
    }

    var id: UUID { offer.id }

    /// Whether `other` sends the same file (the same SHA-256 and length), which a receiver takes
    /// from one transfer at a time.
    func isSameFile(as other: OutgoingTransfer) -> Bool {
        offer.sha256 == other.offer.sha256 && offer.length == other.offer.length
    }

    func linkUp(_ link: Resources.Link) {
        let action = state.withLockedValue { state in
            state.link = link
            state.dropChunks()
            return state.machine.linkUp()
        }
        perform([action])
    }

    func linkDown() {
        state.withLockedValue { state in
            state.machine.linkDown()
            state.link = nil
            state.dropChunks()
        }
    }

    func want(_ want: ResourceWant) throws(MultipeerError) {
        let received = try state.withLockedValue { state in
            Result { () throws(MultipeerError) in
                _ = try state.machine.want(received: want.received, granted: want.granted)
                return state.machine.received
            }
        }.get()
        reporter.report(received)
        pump()
    }

    func ended(_ end: ResourceEnd) {
        let action = state.withLockedValue { state in
            state.dropChunks()
            return state.machine.ended(end.reason)
        }
        perform([action], detail: end.text)
    }

    func end(_ reason: ResourceEndReason) {
        let actions = state.withLockedValue { state in
            state.dropChunks()
            return state.machine.end(reason)
        }
        perform(actions)
    }

    /// The peer does not take resources.
    func refused() {
        let actions = state.withLockedValue { state in
            state.dropChunks()
            return [state.machine.ended(.refused)]
        }
        perform(actions, detail: "it takes no resources: its HELLO does not announce them")
    }

    func stop() {
        guard !outcome.isResolved else { return }
        finish(.failure(MultipeerError(.sessionState, "the session stopped before \(offer.name) was sent")))
    }

    private func perform(_ actions: [ResourceSendStateMachine.Action], detail: String = "") {
        for action in actions {
            switch action {
            case .sendOffer(let offer):
                let link = state.withLockedValue { state in
                    state.sent.offers += 1
                    return state.link
                }
                link?.channel.writeAndFlush(LinkMessage.resourceOffer(offer), promise: nil)
            case .sendEnd(let reason):
                state.withLockedValue { $0.link }?.channel.writeAndFlush(
                    LinkMessage.resourceEnd(ResourceEnd(id: offer.id, reason: reason, text: "")),
                    promise: nil
                )
            case .finish(let reason, let bySender):
                finish(
                    reason == .complete
                        ? .success(())
                        : .failure(
                            MultipeerError(resource: offer.name, ended: reason, byPeer: !bySender, detail: detail)
                        )
                )
            case .none:
                break
            }
        }
    }

    private func finish(_ result: Result<Void, MultipeerError>) {
        if case .success = result { reporter.report(offer.length) }
        reporter.finish()
        // The session's record first: a task the outcome wakes finds the transfer over there too.
        onFinish()
        outcome.resolve(result)
        queue.async { self.source.close() }
    }

    /// Reads the next chunks granted, while fewer than ``Resources/chunksAhead`` wait for the
    /// link's writer.
    private func pump() {
        queue.async { self.readAhead() }
    }

    private func readAhead() {
        let next = state.withLockedValue {
            state -> (offset: UInt64, count: UInt64, link: Resources.Link, drops: UInt64)? in
            guard state.reading + state.chunks.count < Resources.chunksAhead, let link = state.link,
                let chunk = state.machine.nextChunk(maximum: link.chunkLimit)
            else { return nil }
            state.reading += 1
            state.sent.bytes += chunk.count
            return (chunk.offset, chunk.count, link, state.drops)
        }
        guard let (offset, count, link, drops) = next else { return }
        guard let bytes = source.read(offset: offset, count: count, allocator: ByteBufferAllocator()) else {
            end(.sourceChanged)
            return
        }
        let writer = state.withLockedValue { state -> LinkWriter? in
            guard state.drops == drops else { return nil }  // (dropped meanwhile)
            state.reading -= 1
            state.chunks.append(ResourceChunk(id: offer.id, offset: offset, bytes: bytes))
            guard state.readyOn != link.id else { return nil }
            state.readyOn = link.id
            return link.writer
        }
        writer?.ready(self)
        readAhead()  // (the next, if another may wait)
    }

    /// The transfer's turn on its link `id` (``LinkSource``): frames of the chunks read, about
    /// `budget` bytes of them (one at least); once a chunk is all sent, the next is read.
    func turn(on id: LinkID, budget: Int) -> (frames: [LinkMessage], more: Bool) {
        let (frames, more, sentAChunk) = state.withLockedValue { state -> ([LinkMessage], Bool, Bool) in
            guard state.link?.id == id else {
                if state.readyOn == id { state.readyOn = nil }
                return ([], false, false)
            }
            let chunks = state.chunks.count
            var frames: [LinkMessage] = []
            var taken = 0
            while taken < budget, !state.chunks.isEmpty {
                // A chunk read from disk goes in frames of at most a stream's: what is sent
                // beside it waits behind one of those, not behind the whole chunk.
                let piece = state.chunks[0].bytes.readSlice(
                    length: min(Resources.frameLength, state.chunks[0].bytes.readableBytes)
                )!
                frames.append(.resourceChunk(ResourceChunk(id: offer.id, offset: state.chunks[0].offset, bytes: piece)))
                state.chunks[0].offset += UInt64(piece.readableBytes)
                if state.chunks[0].bytes.readableBytes == 0 { state.chunks.removeFirst() }
                taken += piece.readableBytes
            }
            if state.chunks.isEmpty { state.readyOn = nil }
            return (frames, !state.chunks.isEmpty, state.chunks.count < chunks)
        }
        if sentAChunk { pump() }
        return (frames, more)
    }
}

/// One resource this side receives. The partial file is touched only on the transfer's queue.
// (`partial` and `writeFailed` only on `queue`; the rest under its lock)
final class IncomingTransfer: IncomingResourceRecord, @unchecked Sendable {
    let offer: ResourceOffer
    private let sender: UUID
    /// The sender's incarnation that offered it: a later one restarted, and does not send it on.
    let incarnation: UInt64
    private let state: NIOLockedValueBox<(machine: ResourceReceiveStateMachine, channel: (any Channel)?)>
    private let queue: any FileQueue
    private var partial: PartialResource?
    /// A write failed (the disk filled, say): no later chunk is written. (On `queue`.)
    private var writeFailed = false
    private let reporter: ProgressReporter
    /// The transfer's progress, after each write.
    let progress: AsyncStream<ResourceProgress>
    let outcome = ResourceOutcome<URL>()
    /// Told how the transfer ended: the reason its END gave, or nil if it ended with the session.
    private let onFinish: @Sendable (ResourceEndReason?) -> Void

    /// The bytes arrived and not yet written to the file.
    var unwritten: UInt64 { state.withLockedValue { $0.machine.unwritten } }

    /// A transfer offered on `channel`, which carries what it says (its END too) from the start:
    /// the application may cancel it as soon as it is announced, before the store is open.
    init(
        offer: ResourceOffer,
        sender: Peer,
        on channel: any Channel,
        queue: any FileQueue,
        clock: any SessionClock,
        onFinish: @escaping @Sendable (ResourceEndReason?) -> Void
    ) {
        self.queue = queue
        self.offer = offer
        self.sender = sender.id
        self.incarnation = sender.incarnation
        self.onFinish = onFinish
        state = NIOLockedValueBox((ResourceReceiveStateMachine(offer: offer, window: Resources.window), channel))
        (progress, reporter) = ProgressReporter.make(total: offer.length, clock: clock)
    }

    /// Opens the store's partial file (or finds a complete copy) and says where to begin, on
    /// the link the transfer has now (another than it was offered on, if that one went and the
    /// sender offered it again meanwhile).
    func begin(in store: ResourceStore) {
        queue.async {
            do throws(ResourceStoreFailure) {
                let partial = try store.open(self.offer, from: self.sender)
                self.partial = partial
                self.perform(self.state.withLockedValue { $0.machine.prepared(holding: partial.held) })
            } catch {
                self.end(error.reason, detail: error.message)
            }
        }
    }

    /// Offered again on a new link: on the queue, after the writes of chunks taken before the
    /// last link went, so that the WANT says where the writing really stands.
    func offeredAgain(on channel: any Channel) {
        queue.async {
            let actions = self.state.withLockedValue { state in
                state.channel = channel
                return state.machine.offeredAgain()
            }
            self.perform(actions)
        }
    }

    func chunk(_ chunk: ResourceChunk) throws(MultipeerError) {
        let action = try state.withLockedValue { state in
            Result { () throws(MultipeerError) in
                try state.machine.chunk(offset: chunk.offset, count: UInt64(chunk.bytes.readableBytes))
            }
        }.get()
        guard case .write(let offset, _) = action else { return }
        queue.async { self.write(chunk.bytes, at: offset) }
    }

    func linkDown() {
        state.withLockedValue { state in
            state.machine.linkDown()
            state.channel = nil
        }
    }

    func ended(_ end: ResourceEnd) {
        let action = state.withLockedValue { $0.machine.ended(end.reason) }
        queue.async { self.perform([action], detail: end.text) }
    }

    func end(_ reason: ResourceEndReason, detail: String = "") {
        let actions = state.withLockedValue { $0.machine.end(reason) }
        queue.async { self.perform(actions, detail: detail) }
    }

    /// Whether the transfer's link is up (its sender is there to send it).
    var isLinked: Bool { state.withLockedValue { $0.channel != nil } }

    /// The sender, restarted, offers the same file as a new transfer: this one ends (what it
    /// wrote stays, for the new one to resume from), then `next` runs, after its last write.
    func supersede(then next: @escaping @Sendable () -> Void) {
        queue.async {
            if !self.outcome.isResolved {
                self.finish(
                    .failure(
                        MultipeerError(
                            .resourceCancelled,
                            "the sender of \(self.offer.name) restarted and offered it again: it goes on as a new transfer, from what was written"
                        )
                    ),
                    ended: nil
                )
            }
            next()
        }
    }

    /// Its sender restarted before the file was whole: the application's wait ends, after the
    /// writes already queued (what was written stays, for the sender's next offer of the file).
    func retire() {
        queue.async {
            guard !self.outcome.isResolved else { return }
            self.finish(
                .failure(
                    MultipeerError(
                        .resourceCancelled,
                        "the sender of \(self.offer.name) restarted before it was whole: if it sends it again, it goes on as a new transfer, from what was written"
                    )
                ),
                ended: nil
            )
        }
    }

    func stop() {
        queue.async {
            guard !self.outcome.isResolved else { return }
            self.finish(
                .failure(MultipeerError(.sessionState, "the session stopped before \(self.offer.name) arrived")),
                ended: nil
            )
        }
    }

    /// On the queue.
    private func write(_ bytes: ByteBuffer, at offset: UInt64) {
        guard let partial, !writeFailed, !outcome.isResolved else { return }
        do {
            try partial.write(bytes, at: offset)
        } catch {
            // The chunks taken after this one, already queued, are not written: the transfer ends.
            writeFailed = true
            end(error.reason, detail: error.message)
            return
        }
        reporter.report(partial.held)
        perform([state.withLockedValue { $0.machine.wrote(through: partial.held) }])
    }

    /// On the queue.
    private func perform(_ actions: [ResourceReceiveStateMachine.Action], detail: String = "") {
        for action in actions {
            switch action {
            case .sendWant(let received, let granted):
                send(.resourceWant(ResourceWant(id: offer.id, received: received, granted: granted)))
            case .write:
                break  // (written as the chunk comes: ``chunk(_:)``)
            case .verify:
                verify()
            case .sendEnd(let reason):
                send(.resourceEnd(ResourceEnd(id: offer.id, reason: reason, text: reason == .complete ? "" : detail)))
            case .finish(let reason, let byReceiver, let keepPartial):
                guard reason != .complete else { continue }  // (resolved with the file by ``verify()``)
                if !keepPartial { partial?.discard() }
                finish(
                    .failure(MultipeerError(resource: offer.name, ended: reason, byPeer: !byReceiver, detail: detail)),
                    ended: reason
                )
            case .none:
                break
            }
        }
    }

    private func verify() {
        guard let partial else { return }
        do {
            let file = try partial.finish()
            perform(state.withLockedValue { $0.machine.verified(true) })
            reporter.report(offer.length)
            finish(.success(file), ended: .complete)
        } catch {
            perform(state.withLockedValue { $0.machine.verified(false) }, detail: error.message)
        }
    }

    private func send(_ message: LinkMessage) {
        state.withLockedValue { $0.channel }?.writeAndFlush(message, promise: nil)
    }

    private func finish(_ result: Result<URL, MultipeerError>, ended reason: ResourceEndReason?) {
        reporter.finish()
        // The session's record first: a task the outcome wakes finds the transfer over there too
        // (it once found it still incoming, under load).
        onFinish(reason)
        outcome.resolve(result)
    }
}
