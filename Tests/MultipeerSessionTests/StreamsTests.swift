import Foundation
import MultipeerCore
import MultipeerTLS
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// The session's streams on an EmbeddedChannel standing for a link: frames on a link that is not
/// the peer's are not listened to, a stream opened before the peer's link came goes up with it,
/// a peer's opens beyond its share are refused, and a stream this side does not have is said to
/// be unknown.
@Suite struct StreamsTests {
    struct Link {
        let channel = EmbeddedChannel()
        let peers = Deliveries(metrics: SessionMetrics(localName: "test"))
        let streams: Streams
        let remote: Hello
        let peer: Peer

        init() throws {
            var hello = try Hello(
                identity: PeerIdentity(),
                incarnation: 7,
                displayName: "remote",
                maximumMessageLength: 1 << 20
            )
            hello.features = [.resources, .streams]
            remote = hello
            peer = Peer(hello)
            streams = Streams(peers: peers)
        }

        func finish() { _ = try? channel.finish(acceptAlreadyClosed: true) }

        /// The peer is active on the link: its delivery holds it, and the streams are told.
        func bind() {
            let link = LinkHandle(id: LinkID(1), channel: channel, hello: remote)
            peers.bind(link, reads: .every)
            streams.linkUp(link)
            channel.embeddedEventLoop.run()
        }

        func receive(_ message: LinkMessage) throws {
            let frame: StreamFrame
            switch message {
            case .streamOpen(let open): frame = .open(open)
            case .streamWant(let want): frame = .want(want)
            case .streamData(let data): frame = .data(data)
            case .streamEnd(let end): frame = .end(end)
            default: preconditionFailure("not a stream's frame: \(message)")
            }
            try streams.received(frame, from: peer, on: channel)
            channel.embeddedEventLoop.run()
        }

        /// The frames this side wrote since the last call.
        func written() throws -> [LinkMessage] {
            var frames: [LinkMessage] = []
            while let frame = try channel.readOutbound(as: LinkMessage.self) { frames.append(frame) }
            return frames
        }
    }

    static func open(_ id: UUID, resuming: Bool = false) throws -> LinkMessage {
        .streamOpen(try StreamOpen(id: id, resuming: resuming, name: "log"))
    }

    @Test func framesOnALinkThatIsNotThePeersAreNotListenedTo() async throws {
        let link = try Link()
        let id = UUID()
        // The link's part, on this thread (an embedded channel's is the thread that made it);
        // the link is gone before the stream is read, so nothing reading does writes into it.
        do {
            defer { link.finish() }
            try link.receive(try Self.open(id))
            try link.receive(.streamWant(StreamWant(id: id, received: 0, granted: 1_000, endReceived: false)))
            #expect(try link.written().isEmpty, "not the peer's link: no answer")
            #expect(link.streams.held.isEmpty, "and no stream")
            link.bind()
            try link.receive(try Self.open(id))
            #expect(
                try link.written() == [
                    .streamWant(StreamWant(id: id, received: 0, granted: Streams.window, endReceived: false))
                ],
                "the peer's link: the OPEN made the stream, which says what it holds of the opener's direction"
            )
            try link.receive(
                .streamData(StreamData(id: id, offset: 0, end: false, bytes: ByteBuffer(bytes: [1, 2, 3])))
            )
            link.streams.linkDown(LinkHandle(id: LinkID(1), channel: link.channel, hello: link.remote))
        }
        var incoming = link.streams.incoming.makeAsyncIterator()
        let stream = try #require(await incoming.next())
        #expect(stream.id == id && stream.name == "log" && !stream.openedHere)
        var reading = stream.makeAsyncIterator()
        #expect(try await reading.next() == [1, 2, 3])
    }

    @Test func aStreamOpenedWhileThePeerIsAwayGoesUpWithItsNextLinkOnce() throws {
        let link = try Link()
        defer { link.finish() }
        link.bind()
        _ = link.peers.unbind(link.remote.peerID, link: LinkID(1), now: .now)
        let stream = try link.streams.open(named: "log", to: link.remote.peerID)
        link.channel.embeddedEventLoop.run()
        #expect(try link.written().isEmpty, "no link: the OPEN waits")
        let next = LinkHandle(id: LinkID(2), channel: link.channel, hello: link.remote)
        link.peers.bind(next, reads: .every)
        link.streams.linkUp(next)
        link.streams.linkUp(next)  // (as the opener and the link's coming both may)
        link.channel.embeddedEventLoop.run()
        let opens = try link.written().filter { if case .streamOpen = $0 { true } else { false } }
        #expect(opens.count == 1, "one OPEN on the new link")
        #expect(stream.id == (opens.first.flatMap { if case .streamOpen(let open) = $0 { open.id } else { nil } }))
    }

    /// A frame of a stream that ended here, arriving while its END is on its way, is answered
    /// with that END again, reason and text: the peer may hear the answer first. (A consumer
    /// test found the answer's own text overtaking the END's "let go" under load.)
    @Test func aFrameOfAStreamThatEndedIsAnsweredWithTheSameEnd() throws {
        let link = try Link()
        defer { link.finish() }
        link.bind()
        var stream: PeerStream? = try link.streams.open(named: "log", to: link.remote.peerID)
        let id = try #require(stream?.id)
        stream = nil  // let go of: cancelled, saying so
        link.channel.embeddedEventLoop.run()
        let ends = try link.written().compactMap { if case .streamEnd(let end) = $0 { end } else { nil } }
        let first = try #require(ends.first)
        try link.receive(.streamWant(StreamWant(id: id, received: 0, granted: 100, endReceived: false)))
        guard case .streamEnd(let again)? = try link.written().first else {
            Issue.record("the WANT is answered with the END")
            return
        }
        #expect(again.id == first.id && again.reason == first.reason && again.text == first.text && !first.text.isEmpty)
    }

    @Test func aStreamToAPeerNeverMetIsRefused() throws {
        let link = try Link()
        defer { link.finish() }
        let error = try #require(throws: MultipeerError.self) {
            try link.streams.open(named: "log", to: link.remote.peerID)
        }
        #expect(error.code == .peerNotActive)
    }

    @Test func aPeerOpensSixteenStreamsAtOnceAndTheNextIsRefused() throws {
        let link = try Link()
        defer { link.finish() }
        link.bind()
        for _ in 0..<Streams.maximumIncomingPerPeer { try link.receive(try Self.open(UUID())) }
        #expect(try link.written().allSatisfy { if case .streamWant = $0 { true } else { false } })
        let seventeenth = UUID()
        try link.receive(try Self.open(seventeenth))
        guard case .streamEnd(let end)? = try link.written().first else {
            Issue.record("the seventeenth is refused")
            return
        }
        #expect(end.id == seventeenth && end.reason == .refused)
    }

    @Test func aStreamThisSideDoesNotHaveIsUnknownButANewOneIsTaken() throws {
        let link = try Link()
        defer { link.finish() }
        link.bind()
        let lost = UUID()
        try link.receive(.streamWant(StreamWant(id: lost, received: 10, granted: 100, endReceived: false)))
        try link.receive(try Self.open(lost, resuming: true))
        let answers = try link.written()
        #expect(answers.count == 2)
        #expect(
            answers.allSatisfy {
                if case .streamEnd(let end) = $0 { end.id == lost && end.reason == .unknown } else { false }
            }
        )
        // Its bytes and END are ignored.
        try link.receive(.streamData(StreamData(id: lost, offset: 0, end: false, bytes: ByteBuffer(bytes: [1]))))
        try link.receive(.streamEnd(StreamEnd(id: lost, reason: .cancelled, text: "")))
        #expect(try link.written().isEmpty)
        // An open that is not resuming is a new stream.
        try link.receive(try Self.open(UUID()))
        guard case .streamWant? = try link.written().first else {
            Issue.record("a new stream is taken")
            return
        }
    }

    @Test func bytesOutOfSequenceBreakTheProtocol() throws {
        let link = try Link()
        defer { link.finish() }
        link.bind()
        let id = UUID()
        try link.receive(try Self.open(id))
        let error = try #require(throws: MultipeerError.self) {
            try link.receive(.streamData(StreamData(id: id, offset: 5, end: false, bytes: ByteBuffer(bytes: [1]))))
        }
        #expect(error.code == .outOfSequence)
    }
}
