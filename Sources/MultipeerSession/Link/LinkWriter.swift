import MultipeerCore
import NIOCore

/// What a link's writer takes its data frames from: a peer's messages (``PeerDelivery``), a
/// stream (``StreamCore``), a file (``OutgoingTransfer``).
protocol LinkSource: AnyObject, Sendable {
    /// The source's turn, on the link's event loop: its next frames for link `id`, about
    /// `budget` bytes (at least one frame, if it has any); `more`: it has more after these.
    /// None, and no more, if `id` is no longer its link. A turn with no frames is taken to mean
    /// no more, whatever it says: the source is asked again once it says it is ready.
    func turn(on id: LinkID, budget: Int) -> (frames: [LinkMessage], more: Bool)
}

/// The one writer of a session's link: every data frame it carries (DATA and FRAGMENT, STREAM_
/// and RESOURCE_ data) is taken from its source in turns that ``LinkWriterStateMachine``
/// decides, one turn in the link at a time; a source says when it has frames (``ready(_:)``).
/// A stream's OPEN, WANT and END go in its turns, in order with its bytes. Control frames (ACK,
/// FLOW, PING, PONG, TYPES, GOODBYE, REJECT, the offers, grants and ends of files, the answers
/// about streams this side does not have) go into the pipeline at once, so they wait behind at
/// most one turn.
///
/// It lives on its link's event loop; ``ready(_:)`` may be called from anywhere.
final class LinkWriter: Sendable {
    let id: LinkID
    private let channel: any Channel
    /// Where it goes when it yields, to let the event loop read (Swift's global pool but in a
    /// simulation): a task the loop ran itself would run before the loop read again.
    private let offload: any TaskExecutor
    private let state: NIOLoopBoundBox<State>

    private struct State {
        var machine = LinkWriterStateMachine()
        /// The sources that said they have frames, until their turn says they have no more.
        var sources: [ObjectIdentifier: any LinkSource] = [:]
        /// Where the turn being written is: being handed to the pipeline, or written to the
        /// socket while it was (so the socket took it at once).
        var handing: Handing = .no

        enum Handing {
            case no, handing, writtenAtOnce
        }
    }

    init(id: LinkID, channel: any Channel, offload: any TaskExecutor) {
        self.id = id
        self.channel = channel
        self.offload = offload
        state = NIOLoopBoundBox.makeBoxSendingValue(State(), eventLoop: channel.eventLoop)
        channel.closeFuture.whenComplete { [state] _ in
            state.value.machine.closed()
            state.value.sources = [:]
        }
    }

    /// `source` has frames for this link: it gets a turn (it is asked until it says it has no
    /// more, then waits to say this again).
    func ready(_ source: any LinkSource) {
        if channel.eventLoop.inEventLoop {
            readyOnLoop(source)
        } else {
            channel.eventLoop.execute { self.readyOnLoop(source) }
        }
    }

    private func readyOnLoop(_ source: any LinkSource) {
        // (Kept by a closed writer, a source would keep it, and its link, to the source's end.)
        guard !state.value.machine.isClosed else { return }
        let key = ObjectIdentifier(source)
        state.value.sources[key] = source
        run(state.value.machine.ready(key))
    }

    /// Carries out the machine's actions, turn after turn, until it waits for a write, yields,
    /// or has nothing to write.
    private func run(_ first: LinkWriterStateMachine.Action) {
        var action = first
        while true {
            switch action {
            case .none:
                return
            case .yield:
                Task(executorPreference: offload) {
                    self.channel.eventLoop.execute { self.run(self.state.value.machine.resumed()) }
                }
                return
            case .take(let key, let budget):
                let (frames, more) = state.value.sources[key]?.turn(on: id, budget: budget) ?? ([], false)
                if !more || frames.isEmpty { state.value.sources[key] = nil }
                var bytes = 0
                for frame in frames { bytes += LinkWriterStateMachine.frameHead + (frame.messageBytes ?? 0) }
                action = state.value.machine.took(key, bytes: bytes, more: more)
                if !frames.isEmpty, write(frames) {
                    action = state.value.machine.written(atOnce: true)
                }
            }
        }
    }

    /// Hands `frames` to the pipeline and flushes; returns whether the socket took them at once.
    private func write(_ frames: [LinkMessage]) -> Bool {
        let written = channel.eventLoop.makePromise(of: Void.self)
        written.futureResult.whenComplete { result in
            switch result {
            case .success where self.state.value.handing == .handing:
                self.state.value.handing = .writtenAtOnce  // (the turn that wrote them goes on)
            case .success:
                // Written as the socket made room: the next turn goes in a task of its own, not
                // from inside the pipeline that is still writing (taken from there, its TLS
                // records overtook those still being written: the peer read them as altered).
                self.channel.eventLoop.execute { self.run(self.state.value.machine.written(atOnce: false)) }
            case .failure:
                break  // the link is closing (its close ends the writer)
            }
        }
        state.value.handing = .handing
        for (index, frame) in frames.enumerated() {
            channel.write(frame, promise: index == frames.count - 1 ? written : nil)
        }
        channel.flush()
        defer { state.value.handing = .no }
        return state.value.handing == .writtenAtOnce
    }
}
