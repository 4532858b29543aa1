import Dispatch
import Foundation
import Logging
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore
import Synchronization

/// The session's resource transfers (docs/PROTOCOL.md 3c), both ways: each transfer is driven by
/// its core (``ResourceSendStateMachine``, ``ResourceReceiveStateMachine``) behind a lock of its
/// own, with its file read or written on a serial queue of its own, never on the link's event
/// loop. The links hand their RESOURCE_ frames here on their event loop (``received(_:from:on:)``).
/// A peer's link is its delivery's (``LinkHandle``): read from there, and told here when it comes
/// and goes (``PeerLinkFeature``).
///
/// Bounds: an incoming transfer grants at most ``window`` bytes beyond what it has written, so
/// that is what it can make this side hold in memory; a peer has at most
/// ``maximumIncomingPerPeer`` transfers under way towards this side (more are refused); an
/// outgoing transfer has at most ``chunksAhead`` chunks (each at most ``chunkLength``) read ahead
/// of its link's writer, which takes them in turns with the peer's messages and other
/// transfers and streams (``LinkWriter``), and one more in the link.
final class Resources: PeerLinkFeature {
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
        mutating func toOffer(on link: LinkHandle) -> [OutgoingTransfer] {
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

    /// The peer is active on `link` (its delivery holds it now): what waits for it is offered
    /// (``PeerLinkFeature``: on the link's event loop, in order with its frames).
    /// What an earlier incarnation of it was sending is not under way any more (its application
    /// gets told); the next offer of a file resumes what was written.
    func linkUp(_ link: LinkHandle) {
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
        for transfer in transfers { transfer.linkUp(link) }
        for transfer in refused { transfer.refused() }
    }

    /// The peer's `link` went: its transfers on it wait for the next (and resume from there).
    func linkDown(_ link: LinkHandle) {
        let (outgoing, incoming) = state.withLockedValue { state -> ([OutgoingTransfer], [IncomingTransfer]) in
            (
                state.outgoing.values.filter { $0.peerID == link.peerID },
                state.incoming.transfers(from: link.peerID)
            )
        }
        for transfer in outgoing { transfer.linkDown(link.id) }
        for transfer in incoming { transfer.linkDown(link.channel) }
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
            for transfer in transfers { transfer.linkUp(link) }
        }
        return resource
    }

    /// Outgoing transfer `id` to `peerID` ended: the next waiting its turn is offered.
    private func finished(_ id: UUID, to peerID: UUID) {
        let toOffer = state.withLockedValue { state -> (LinkHandle, [OutgoingTransfer])? in
            state.outgoing.removeValue(forKey: id)
            state.offered.removeValue(forKey: id)
            guard let link = peers.binding(of: peerID).link, link.hello.features.contains(.resources) else {
                return nil
            }
            return (link, state.toOffer(on: link))
        }
        guard let (link, transfers) = toOffer else { return }
        for transfer in transfers { transfer.linkUp(link) }
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

extension Resources {
    /// The largest chunk read for `link`'s peer: its maximum frame, less the chunk's own fields.
    static func chunkLimit(on link: LinkHandle) -> UInt64 {
        UInt64(link.payloadLimit(header: ResourceChunk.headerLength, cap: Int(chunkLength)))
    }
}

extension ResourceChunk {
    /// A chunk frame's value before its bytes: the transfer UUID and the offset.
    static let headerLength = 24
}
