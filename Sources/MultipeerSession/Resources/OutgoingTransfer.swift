import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

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
    /// The transfer's progress, as the receiver reports what it holds.
    let progress: AsyncStream<ResourceProgress>
    let outcome = ResourceOutcome<Void>()
    private let onFinish: @Sendable () -> Void

    private struct State {
        var machine: ResourceSendStateMachine
        var link: LinkHandle?
        /// Chunks read for the link, in order, waiting for the writer's turn.
        var chunks: [ResourceChunk] = []
        /// Chunks being read for the link.
        var reading = 0
        /// Counts the times what was read was dropped: a read begun before is not kept.
        var drops: UInt64 = 0
        /// The link whose writer was told chunks wait, until a turn takes the last.
        var readyOn: LinkID?
        var sent = ResourceSending()
        /// Reports ``progress``.
        var reporter: ProgressReporter

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
        let reporter: ProgressReporter
        (progress, reporter) = ProgressReporter.make(total: offer.length, clock: clock)
        state = NIOLockedValueBox(State(machine: ResourceSendStateMachine(offer: offer), reporter: reporter))
    }

    var id: UUID { offer.id }

    /// Whether `other` sends the same file (the same SHA-256 and length), which a receiver takes
    /// from one transfer at a time.
    func isSameFile(as other: OutgoingTransfer) -> Bool {
        offer.sha256 == other.offer.sha256 && offer.length == other.offer.length
    }

    func linkUp(_ link: LinkHandle) {
        let action = state.withLockedValue { state in
            state.link = link
            state.dropChunks()
            return state.machine.linkUp()
        }
        perform([action])
    }

    /// Link `id` went: the transfer waits for the next, if it was on that one (a link that
    /// went after its successor came leaves the transfer on the successor).
    func linkDown(_ id: LinkID) {
        state.withLockedValue { state in
            guard state.link?.id == id else { return }
            state.machine.linkDown()
            state.link = nil
            state.dropChunks()
        }
    }

    func want(_ want: ResourceWant) throws(MultipeerError) {
        try state.withLockedValue { state in
            Result { () throws(MultipeerError) in
                _ = try state.machine.want(received: want.received, granted: want.granted)
                state.reporter.report(state.machine.received)
            }
        }.get()
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
        state.withLockedValue { state in
            if case .success = result { state.reporter.report(offer.length) }
            state.reporter.finish()
        }
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
            state -> (offset: UInt64, count: UInt64, link: LinkHandle, drops: UInt64)? in
            guard state.reading + state.chunks.count < Resources.chunksAhead, let link = state.link,
                let chunk = state.machine.nextChunk(maximum: Resources.chunkLimit(on: link))
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
