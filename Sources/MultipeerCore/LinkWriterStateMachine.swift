/// Which of a link's data sources writes next: the link's one fairness policy. Sans-IO: the
/// shell (`LinkWriter`) tells it which sources have frames, takes a turn from the source it
/// names, writes that turn's frames, and tells it when they are written.
///
/// The policy:
/// - **One turn in the link at a time.** The next turn is taken only once the last is written
///   to the socket, so the pipeline holds at most one turn of data (a turn is one frame or a few,
///   at most one frame more than its budget: a stream's or a file's, 64 KiB, or a large message's
///   fragment, 256 KiB). A control frame (ACK, FLOW, PING, PONG, TYPES, GOODBYE, and the offers,
///   grants and ends of files) is written into the pipeline at once, so it waits behind at most
///   that turn and the bytes the socket holds unsent (TCP_NOTSENT_LOWAT). A stream's own control
///   frames go in its turns, in order with its bytes.
/// - **A source that was idle goes first.** A source that becomes ready is served before every
///   source that was already sending, for one ``quantum`` (the "new flows" of FQ-CoDel, RFC
///   8290): a 1 KiB message sent while a 1 GiB file and a 256 MiB stream run waits for the turn
///   in the link, not for their turns.
/// - **Sources that keep sending share the link by bytes.** Those are served in turn by
///   deficit round robin (RFC 8290's old flows): each visit adds a ``quantum`` to a source's
///   credit, a turn spends what it wrote (a turn may overdraw: frames are not split, and the debt
///   delays its next turns), so over time each writes as many bytes as the others.
/// - **The link's event loop reads between turns.** Turns whose frames the socket took at once
///   are taken one after another up to ``turnBytes``; then the writer yields (its shell goes off
///   the loop and back), so the loop reads its sockets before it writes more.
package struct LinkWriterStateMachine: Sendable {
    /// What a source may write in one visit; a turn may write more (a whole frame), which the
    /// source pays back on its next visits.
    package static let quantum = 64 << 10
    /// What the writer writes, in turns the socket took at once, before it lets the event loop
    /// read.
    package static let turnBytes = 256 << 10

    /// What a turn counts for each frame beside its data bytes (its head and fields).
    package static let frameHead = 16

    /// A data source, as its shell names it.
    package typealias Source = ObjectIdentifier

    package enum Action: Equatable, Sendable {
        /// Take a turn from `source`: frames of about `budget` bytes (at least one, if it has
        /// any), then report them with ``took(_:bytes:more:)``.
        case take(Source, budget: Int)
        /// Leave the event loop and come back (``resumed()``): it has written ``turnBytes`` since
        /// it last read its sockets.
        case yield
        case none
    }

    private enum Stage: Equatable {
        /// Nothing in the link: a ready source is served at once.
        case idle
        /// A turn is being taken from a source.
        case taking
        /// A turn's frames are in the link, not yet written to the socket.
        case writing
        /// Gone off the event loop to let it read; back with ``resumed()``.
        case yielded
        /// The link closed: nothing is written any more.
        case closed
    }

    /// A source waiting for a turn, or served lately.
    private struct Entry {
        /// What it may write: a quantum a visit, less what it wrote.
        var credit: Int
        /// It has frames to write now.
        var hasFrames: Bool
    }

    private var stage = Stage.idle
    private var sources: [Source: Entry] = [:]
    /// Sources that became ready, not having been served lately: served first, in the order
    /// they came.
    private var newSources: [Source] = []
    /// Sources served lately, in the order they are served. One whose turn left it with
    /// nothing stays in this list until its next visit (RFC 8290's rule): a source that empties
    /// at every turn (a sender whose every batch takes all it queued) does not come back as new
    /// and go ahead of the others each time.
    private var oldSources: [Source] = []
    /// Bytes written in turns the socket took at once, since the event loop last read.
    private var sinceRead = 0

    package init() {}

    /// Whether the link closed: a source that says it is ready is not kept.
    package var isClosed: Bool { stage == .closed }

    /// `source` has frames to write (said again while it waits, nothing changes).
    package mutating func ready(_ source: Source) -> Action {
        guard stage != .closed else { return .none }
        if sources[source] != nil {
            sources[source]!.hasFrames = true
        } else {
            sources[source] = Entry(credit: Self.quantum, hasFrames: true)
            newSources.append(source)
        }
        return stage == .idle ? next() : .none
    }

    /// The turn taken from `source` wrote `bytes` (0: it had nothing after all, and is not
    /// asked again until it says it is ready); `more`: it has more to write after these.
    package mutating func took(_ source: Source, bytes: Int, more: Bool) -> Action {
        precondition(stage == .taking || stage == .closed, "a turn was taken while \(stage)")
        guard stage == .taking, var entry = sources[source] else { return .none }
        let more = more && bytes > 0
        entry.credit -= bytes
        entry.hasFrames = more
        sources[source] = entry
        // The source served is at the front of its list: it stays there while it has frames
        // and credit, then goes to the back of the old sources (an old one with nothing left
        // leaves).
        if newSources.first == source {
            newSources.removeFirst()
            if more, entry.credit > 0 { newSources.insert(source, at: 0) } else { oldSources.append(source) }
        } else if oldSources.first == source {
            oldSources.removeFirst()
            if !more {
                sources[source] = nil
            } else if entry.credit > 0 {
                oldSources.insert(source, at: 0)
            } else {
                oldSources.append(source)
            }
        }
        guard bytes > 0 else { return next() }
        stage = .writing
        sinceRead += bytes
        return .none
    }

    /// The turn's frames are written to the socket; `atOnce`: the socket took them as they came
    /// (the event loop has not read since), else they waited for room (it has).
    package mutating func written(atOnce: Bool) -> Action {
        guard stage == .writing else { return .none }
        if !atOnce { sinceRead = 0 }
        let waiting = !newSources.isEmpty || oldSources.contains { sources[$0]!.hasFrames }
        guard sinceRead < Self.turnBytes || !waiting else {
            stage = .yielded
            return .yield
        }
        return next()
    }

    /// Back on the event loop after ``Action/yield``, which has read its sockets since.
    package mutating func resumed() -> Action {
        guard stage == .yielded else { return .none }
        sinceRead = 0
        return next()
    }

    /// The link closed: no more turns.
    package mutating func closed() {
        stage = .closed
        sources = [:]
        newSources = []
        oldSources = []
    }

    /// The next source to take a turn from, if any.
    private mutating func next() -> Action {
        if let source = newSources.first {
            stage = .taking
            return .take(source, budget: sources[source]!.credit)
        }
        // An old source with nothing to write leaves. One that spent its credit gets a quantum
        // as its visit begins; if it is still in debt (it wrote more than its credit: a frame
        // is not split), it waits for its next visit.
        while let source = oldSources.first {
            var entry = sources[source]!
            guard entry.hasFrames else {
                oldSources.removeFirst()
                sources[source] = nil
                continue
            }
            if entry.credit <= 0 {
                entry.credit += Self.quantum
                sources[source] = entry
            }
            guard entry.credit > 0 else {
                oldSources.append(oldSources.removeFirst())
                continue
            }
            stage = .taking
            return .take(source, budget: entry.credit)
        }
        stage = .idle
        sinceRead = 0  // (what comes next comes from a read, or from another thread's task)
        return .none
    }
}
