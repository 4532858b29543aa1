import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// One stream's core (``ByteStreamStateMachine``) behind a lock of its own, with the
/// application's tasks waiting on it. Its frames are made only in its turns on its link's
/// writer (``LinkSource``), on the link's event loop, so that they leave in the order the core
/// made them whoever wrote or read.
final class StreamCore: LinkSource {
    let key: Streams.Key
    let name: String
    let opener: Bool
    /// The peer's incarnation it was opened with: a link from another is a restarted peer's.
    let incarnation: UInt64
    private let state: NIOLockedValueBox<State>
    private let onEnd: @Sendable (Streams.Ended) -> Void

    /// What it holds in memory of each direction (``ByteStreamStateMachine/held``).
    var held: (reading: UInt64, writing: UInt64) { state.withLockedValue { $0.machine.held } }

    private struct State {
        var machine: ByteStreamStateMachine
        var link: LinkHandle?
        /// The link whose writer was told the stream has frames, until a turn takes the last.
        var readyOn: LinkID?
        /// The application's reader, waiting for bytes.
        var reader = Waiters()
        /// The application's writers, waiting for room (or for the end to be acknowledged).
        var writers = Waiters()
        /// The end was reported to ``Streams`` (it forgot the stream).
        var endReported = false

        enum Waiting: Sendable {
            case reader, writers
        }

        subscript(waiting: Waiting) -> Waiters {
            get { waiting == .reader ? reader : writers }
            set { if waiting == .reader { reader = newValue } else { writers = newValue } }
        }
    }

    init(
        key: Streams.Key,
        name: String,
        opener: Bool,
        incarnation: UInt64,
        onEnd: @escaping @Sendable (Streams.Ended) -> Void
    ) {
        self.key = key
        self.name = name
        self.opener = opener
        self.incarnation = incarnation
        self.onEnd = onEnd
        state = NIOLockedValueBox(
            State(machine: ByteStreamStateMachine(id: key.stream, name: name, opener: opener, window: Streams.window))
        )
    }

    /// Runs `body` under the lock, with its typed error.
    private func locked<Value>(_ body: (inout State) throws(MultipeerError) -> Value) throws(MultipeerError) -> Value {
        try state.withLockedValue { state in Result { () throws(MultipeerError) in try body(&state) } }.get()
    }

    // MARK: The link

    /// The stream goes on on `link` (once: the stream's opener and the link's coming may both
    /// bring it up there).
    func linkUp(_ link: LinkHandle) {
        let up = state.withLockedValue { state in
            guard state.link?.id != link.id else { return false }
            state.link = link
            state.machine.linkUp()
            return true
        }
        if up { flush() }
    }

    /// Link `id` went: the stream waits for the next, if it was on that one (a link that went
    /// after its successor came leaves the stream on the successor).
    func linkDown(_ id: LinkID) {
        state.withLockedValue { state in
            guard state.link?.id == id else { return }
            state.link = nil
            state.machine.linkDown()
        }
    }

    /// Tells the link's writer that the core has frames due.
    private func flush() {
        let writer = state.withLockedValue { state -> LinkWriter? in
            guard let link = state.link, state.readyOn != link.id, state.machine.hasFramesDue else { return nil }
            state.readyOn = link.id
            return link.writer
        }
        writer?.ready(self)
    }

    /// The stream's turn on its link `id` (``LinkSource``): the frames due, in order, about
    /// `budget` bytes of them.
    func turn(on id: LinkID, budget: Int) -> (frames: [LinkMessage], more: Bool) {
        state.withLockedValue { state in
            guard let link = state.link, link.id == id else {
                if state.readyOn == id { state.readyOn = nil }
                return ([], false)
            }
            let frames = state.machine.framesDue(chunkLimit: Streams.chunkLimit(on: link), budget: budget)
            guard !frames.isEmpty, state.machine.hasFramesDue else {
                state.readyOn = nil
                return (frames, false)
            }
            return (frames, true)
        }
    }

    // MARK: Frames from the peer (on the link's event loop)

    func want(_ want: StreamWant) throws(MultipeerError) {
        let wake = try locked { state throws(MultipeerError) in
            try state.machine.want(received: want.received, granted: want.granted, endReceived: want.endReceived)
                ? state.writers.takeAll() : []
        }
        for waiter in wake { waiter.resume() }
        settle()
    }

    func data(_ data: StreamData) throws(MultipeerError) {
        let wake = try locked { state throws(MultipeerError) in
            try state.machine.data(offset: data.offset, bytes: data.bytes, end: data.end)
            return state.machine.readable ? state.reader.takeAll() : []
        }
        for waiter in wake { waiter.resume() }
        settle()
    }

    func ended(_ end: StreamEnd) {
        finish { $0.ended(end.reason, text: end.text) }
    }

    // MARK: This side

    /// Ends the stream, both ways; the peer is told if there is a link.
    func end(_ reason: StreamEndReason, _ text: String) {
        finish { $0.end(reason, text: text) }
    }

    /// Ends the stream without a word to the peer, which no longer has it.
    func lose(_ why: String) {
        finish { $0.ended(.unknown, text: why) }
    }

    private func finish(_ change: (inout ByteStreamStateMachine) -> Void) {
        let wake = state.withLockedValue { state in
            change(&state.machine)
            return state.reader.takeAll() + state.writers.takeAll()
        }
        for waiter in wake { waiter.resume() }
        settle()
    }

    /// Sends what is due, and reports the end once there is one.
    private func settle() {
        flush()
        let ended = state.withLockedValue { state -> Streams.Ended? in
            guard !state.endReported, let outcome = state.machine.outcome else { return nil }
            state.endReported = true
            switch outcome {
            case .complete: return .complete(received: state.machine.received)
            case .failed(let reason, _, let text): return .failed(reason, text: text)
            }
        }
        if let ended { onEnd(ended) }
    }

    // MARK: The application

    /// Writes all of `bytes`, waiting for room as the peer's application reads.
    func write(_ bytes: inout ByteBuffer) async throws {
        while bytes.readableBytes > 0 {
            let taken = try locked { state throws(MultipeerError) -> Bool in
                try state.machine.writable(for: self)
                let before = bytes.readableBytes
                state.machine.write(&bytes)
                return bytes.readableBytes < before
            }
            if taken {
                flush()
            } else {
                try await wait(.writers) { $0.writeCapacity > 0 || $0.outcome != nil }
            }
        }
    }

    /// Ends this side's direction and waits until the peer holds every byte of it and the end.
    func finishWriting() async throws {
        try locked { state throws(MultipeerError) in
            try state.machine.writable(for: self)
            state.machine.finishWriting()
        }
        flush()
        try await wait(.writers) { $0.endAcknowledged || $0.outcome != nil }
        try locked { state throws(MultipeerError) in
            if case .failed(let reason, let byPeer, let text) = state.machine.outcome {
                throw MultipeerError(stream: name, ended: reason, byPeer: byPeer, detail: text)
            }
        }
    }

    /// The next bytes from the peer (at most a STREAM_DATA's worth), or nil at the end of its
    /// direction; throws the stream's failure once what arrived before it was read.
    func read() async throws -> [UInt8]? {
        while true {
            let read = state.withLockedValue { $0.machine.read(maximum: Streams.chunkLength) }
            switch read {
            case .bytes(let bytes):
                flush()  // (reading may have made a grant due)
                return Array(bytes.readableBytesView)
            case .end:
                return nil
            case .failed(let reason, let byPeer, let text):
                throw MultipeerError(stream: name, ended: reason, byPeer: byPeer, detail: text)
            case .wait:
                try await wait(.reader) { $0.readable }
            }
        }
    }

    /// Waits until `ready` holds of the core, or the waiting task is cancelled (which throws
    /// `CancellationError`; the stream goes on).
    private func wait(
        _ waiters: State.Waiting,
        until ready: (ByteStreamStateMachine) -> Bool
    ) async throws {
        await state.wait(in: \.[waiters], unless: { ready($0.machine) })
        try Task.checkCancellation()
    }
}

extension ByteStreamStateMachine {
    /// Throws what ended the stream, or `invalidArgument` once its application ended its direction.
    fileprivate func writable(for stream: StreamCore) throws(MultipeerError) {
        if case .failed(let reason, let byPeer, let text) = outcome {
            throw MultipeerError(stream: stream.name, ended: reason, byPeer: byPeer, detail: text)
        }
        guard !writingFinished, outcome == nil else {
            throw MultipeerError(
                .invalidArgument,
                "stream \(stream.name) was finished: nothing is written after its end"
            )
        }
    }
}

extension MultipeerError {
    /// The error a stream that ended for `reason` fails with; `byPeer`: the peer said so.
    init(stream name: String, ended reason: StreamEndReason, byPeer: Bool, detail: String) {
        let who = byPeer ? "the peer" : "this side"
        let code: Code
        let what: String
        switch reason {
        case .cancelled: (code, what) = (.streamCancelled, "\(who) cancelled it")
        case .refused: (code, what) = (.streamRefused, "the peer does not take it")
        case .unknown: (code, what) = (.streamLost, "the peer no longer has it")
        case .closed where byPeer: (code, what) = (.streamLost, "the peer's session stopped")
        case .closed: (code, what) = (.sessionState, "this session stopped")
        default: (code, what) = (.streamCancelled, "\(who) ended it (\(reason))")
        }
        self.init(code, "stream \(name) ended: \(what)" + (detail.isEmpty ? "" : " (\(detail))"))
    }
}
