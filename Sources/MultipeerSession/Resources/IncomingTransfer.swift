import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// One resource this side receives: its core (``ResourceReceiveStateMachine``) and its link
/// behind one lock; its partial file opened, written and finished on the transfer's queue
/// alone (``QueueBound``), never on the link's event loop.
final class IncomingTransfer: IncomingResourceRecord, Sendable {
    let offer: ResourceOffer
    private let sender: UUID
    /// The sender's incarnation that offered it: a later one restarted, and does not send it on.
    let incarnation: UInt64
    private let state: NIOLockedValueBox<State>
    private let queue: any FileQueue
    /// The file's side, on the queue.
    private let file: QueueBound<File>

    private struct State {
        var machine: ResourceReceiveStateMachine
        /// The link its frames go on: the one it was last offered on, while that is up.
        var channel: (any Channel)?
    }

    private struct File {
        /// The store's partial file, once open.
        var partial: PartialResource?
        /// A write failed (the disk filled, say): no later chunk is written.
        var writeFailed = false
        /// Reports ``progress``, after each write.
        var reporter: ProgressReporter
    }
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
        state = NIOLockedValueBox(
            State(machine: ResourceReceiveStateMachine(offer: offer, window: Resources.window), channel: channel)
        )
        let reporter: ProgressReporter
        (progress, reporter) = ProgressReporter.make(total: offer.length, clock: clock)
        file = QueueBound(File(reporter: reporter), on: queue)
    }

    /// Opens the store's partial file (or finds a complete copy) and says where to begin, on
    /// the link the transfer has now (another than it was offered on, if that one went and the
    /// sender offered it again meanwhile).
    func begin(in store: ResourceStore) {
        queue.async {
            do throws(ResourceStoreFailure) {
                let partial = try store.open(self.offer, from: self.sender)
                self.file.value.partial = partial
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

    /// The link of `channel` went: the transfer waits for its sender's next offer, if it was
    /// on that link (one that went after the sender offered it again on its successor leaves it
    /// there).
    func linkDown(_ channel: any Channel) {
        state.withLockedValue { state in
            guard state.channel === channel else { return }
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
        guard let partial = file.value.partial, !file.value.writeFailed, !outcome.isResolved else { return }
        do {
            try partial.write(bytes, at: offset)
        } catch {
            // The chunks taken after this one, already queued, are not written: the transfer ends.
            file.value.writeFailed = true
            end(error.reason, detail: error.message)
            return
        }
        file.value.reporter.report(partial.held)
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
                if !keepPartial { file.value.partial?.discard() }
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
        guard let partial = file.value.partial else { return }
        do {
            let url = try partial.finish()
            perform(state.withLockedValue { $0.machine.verified(true) })
            file.value.reporter.report(offer.length)
            finish(.success(url), ended: .complete)
        } catch {
            perform(state.withLockedValue { $0.machine.verified(false) }, detail: error.message)
        }
    }

    private func send(_ message: LinkMessage) {
        state.withLockedValue { $0.channel }?.writeAndFlush(message, promise: nil)
    }

    private func finish(_ result: Result<URL, MultipeerError>, ended reason: ResourceEndReason?) {
        file.value.reporter.finish()
        // The session's record first: a task the outcome wakes finds the transfer over there too
        // (it once found it still incoming, under load).
        onFinish(reason)
        outcome.resolve(result)
    }
}
