import MultipeerCore
import Testing

/// The link writer's fairness policy, by its actions: one turn in the link at a time, a source
/// that was idle first, the ones that keep sending sharing by bytes, and a yield to the event
/// loop after a turn's worth written at once.
@Suite struct LinkWriterTests {
    final class Source {}

    let message = Source()
    let file = Source()
    let stream = Source()

    static let quantum = LinkWriterStateMachine.quantum

    @Test func aReadySourceIsTakenAtOnceAndTheNextTurnWaitsForTheWrite() {
        var writer = LinkWriterStateMachine()
        #expect(writer.ready(id(message)) == .take(id(message), budget: Self.quantum))
        #expect(writer.ready(id(file)) == .none, "a turn is being taken")
        #expect(writer.took(id(message), bytes: 1_024, more: false) == .none, "its frames are in the link")
        #expect(writer.ready(id(stream)) == .none, "one turn in the link at a time")
        #expect(writer.written(atOnce: false) == .take(id(file), budget: Self.quantum))
    }

    @Test func aSourceThatHadNothingAfterAllLetsTheNextGo() {
        var writer = LinkWriterStateMachine()
        _ = writer.ready(id(message))
        _ = writer.ready(id(file))
        #expect(writer.took(id(message), bytes: 0, more: false) == .take(id(file), budget: Self.quantum))
        #expect(writer.took(id(file), bytes: 0, more: false) == .none)
        #expect(writer.ready(id(message)) == .take(id(message), budget: Self.quantum), "idle again")
    }

    /// A 1 KiB message that comes while a file and a stream keep the link busy is taken next,
    /// before either of them: it waits for the turn in the link, not for theirs.
    @Test func aSourceThatWasIdleGoesBeforeThoseThatKeepSending() {
        var writer = LinkWriterStateMachine()
        _ = writer.ready(id(file))
        _ = writer.ready(id(stream))
        #expect(writer.took(id(file), bytes: 256 << 10, more: true) == .none)
        #expect(writer.written(atOnce: false) == .take(id(stream), budget: Self.quantum))
        #expect(writer.took(id(stream), bytes: 64 << 10, more: true) == .none)
        #expect(writer.ready(id(message)) == .none)
        #expect(writer.written(atOnce: false) == .take(id(message), budget: Self.quantum), "the idle one first")
        #expect(writer.took(id(message), bytes: 1_024, more: false) == .none)
        // The file is 192 KiB in debt: the stream goes on until it has written as much.
        #expect(writer.written(atOnce: false) == .take(id(stream), budget: Self.quantum))
    }

    /// Over many turns, sources that keep sending write as many bytes each, however large their
    /// frames: a file's 256 KiB chunks against a stream's 64 KiB ones.
    @Test func sourcesThatKeepSendingShareTheLinkByBytes() {
        var writer = LinkWriterStateMachine()
        var written: [ObjectIdentifier: Int] = [id(file): 0, id(stream): 0]
        let frame = [id(file): 256 << 10, id(stream): 64 << 10]
        var action = writer.ready(id(file))
        _ = writer.ready(id(stream))
        for _ in 0..<1_000 {
            guard case .take(let source, _) = action else {
                Issue.record("a source waits, yet \(action)")
                return
            }
            written[source]! += frame[source]!
            #expect(writer.took(source, bytes: frame[source]!, more: true) == .none)
            action = writer.written(atOnce: false)
        }
        let file = Double(written[id(file)]!)
        let stream = Double(written[id(stream)]!)
        #expect(abs(file - stream) / (file + stream) < 0.01, "file \(file), stream \(stream) bytes")
    }

    /// A source that empties at every turn (a sender whose every batch takes all it queued)
    /// keeps its place among those that keep sending until its next visit: it does not come
    /// back as new each time and go ahead of the file every turn.
    @Test func aSourceThatEmptiesAtEveryTurnDoesNotComeBackAsNew() {
        var writer = LinkWriterStateMachine()
        _ = writer.ready(id(file))
        #expect(writer.took(id(file), bytes: 64 << 10, more: true) == .none)
        #expect(writer.ready(id(message)) == .none)
        #expect(writer.written(atOnce: false) == .take(id(message), budget: Self.quantum))
        #expect(writer.took(id(message), bytes: 64 << 10, more: false) == .none, "it spent its quantum")
        #expect(writer.ready(id(message)) == .none, "more came while its batch was in the link")
        #expect(
            writer.written(atOnce: false) == .take(id(file), budget: Self.quantum),
            "the file's turn: both spent their quantum, and the message is not new"
        )
    }

    /// Turns the socket takes at once are taken one after another up to a turn's worth of
    /// bytes; then the writer yields, so the event loop reads before it writes more.
    @Test func afterATurnsWorthWrittenAtOnceTheWriterYields() {
        var writer = LinkWriterStateMachine()
        var action = writer.ready(id(file))
        var written = 0
        while case .take(let source, _) = action {
            #expect(writer.took(source, bytes: 64 << 10, more: true) == .none)
            written += 64 << 10
            action = writer.written(atOnce: true)
        }
        #expect(action == .yield)
        #expect(written == LinkWriterStateMachine.turnBytes)
        #expect(writer.ready(id(message)) == .none, "yielded: nothing is taken until it is back")
        #expect(writer.resumed() == .take(id(message), budget: Self.quantum))
        #expect(writer.took(id(message), bytes: 1_024, more: false) == .none)
        #expect(writer.written(atOnce: false) == .take(id(file), budget: Self.quantum))
    }

    @Test func nothingIsTakenOnceTheLinkClosed() {
        var writer = LinkWriterStateMachine()
        _ = writer.ready(id(file))
        writer.closed()
        #expect(writer.isClosed, "a source that says it is ready is not kept")
        #expect(writer.took(id(file), bytes: 1_024, more: true) == .none)
        #expect(writer.written(atOnce: true) == .none)
        #expect(writer.ready(id(message)) == .none)
    }

    private func id(_ source: Source) -> ObjectIdentifier { ObjectIdentifier(source) }
}
