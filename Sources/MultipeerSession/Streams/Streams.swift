import Foundation
import Logging
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// The session's byte streams (docs/PROTOCOL.md 3d), both those it opened and those its peers
/// opened: each is driven by its core (``ByteStreamStateMachine``) in a ``StreamCore``, and its
/// frames go out on the link's event loop only, so that they leave in the order the core made
/// them. The links hand their STREAM_ frames here on their event loop
/// (``received(_:from:on:)``); the session attaches and detaches each peer's link.
///
/// Bounds: a direction holds at most ``window`` bytes at each end (the writer's application
/// waits for room beyond); a peer has at most ``maximumIncomingPerPeer`` streams it opened open
/// here at once (more are refused), and at most ``maximumUnaccepted`` wait for the application
/// to take them from ``incoming`` (more are refused). So what peers can make this side hold is
/// at most 16 streams x 256 KiB x 2 directions, 8 MiB, a peer.
final class Streams: Sendable {
    /// What a direction holds at most at each end.
    static let window: UInt64 = 256 << 10
    /// The largest STREAM_DATA's bytes (smaller to a peer whose maximum frame is smaller).
    static let chunkLength = 64 << 10
    /// Streams a peer opened that are open here at once; an open beyond is refused.
    static let maximumIncomingPerPeer = 16
    /// Streams opened towards this side and not yet taken from ``incoming``: beyond, refused.
    static let maximumUnaccepted = 64
    /// Streams whose end is remembered, to answer their peer's WANT or OPEN of them after a
    /// broken link.
    static let rememberedEnds = 64
    /// Stream frames a link may bring before the session attached it (a peer that counts this
    /// side active sends an OPEN and a WANT for each stream it has, and waits for a WANT before
    /// it sends bytes): beyond, the link is closed.
    static let maximumEarly = 256

    /// A peer's link, while it is active and takes streams.
    struct Link: Sendable {
        var id: LinkID
        var channel: any Channel
        var incarnation: UInt64
        /// The most bytes a STREAM_DATA to the peer carries.
        var chunkLimit: Int
    }

    /// A peer's stream frames that came on a link before the session attached it.
    struct Early {
        var channel: any Channel
        var frames: [(LinkMessage, Peer)] = []
    }

    struct Key: Hashable, Sendable {
        var peer: UUID
        var stream: UUID
    }

    /// How a stream this side forgot ended.
    enum Ended: Sendable {
        /// Both ways, with `received` bytes of the peer's direction.
        case complete(received: UInt64)
        case failed(StreamEndReason)
    }

    private struct State {
        var links: [UUID: Link] = [:]
        /// Each peer's incarnation when it was last attached: a stream is opened to that one.
        var incarnations: [UUID: UInt64] = [:]
        /// Peers whose HELLO did not announce streams, with the link it came on (their stream
        /// frames are ignored).
        var withoutStreams: [UUID: ObjectIdentifier] = [:]
        var streams: [Key: StreamCore] = [:]
        /// Frames that wait for their link to be attached, by peer.
        var early: [UUID: Early] = [:]
        /// How the latest streams ended, oldest first.
        var ended: [(key: Key, how: Ended)] = []
        var stopped = false

        mutating func forget(_ key: Key, ended how: Ended) {
            streams.removeValue(forKey: key)
            ended.removeAll { $0.key == key }
            ended.append((key, how))
            if ended.count > Streams.rememberedEnds { ended.removeFirst() }
        }
    }

    private let state = NIOLockedValueBox(State())
    /// The streams peers opened, as each arrives.
    let incoming: AsyncStream<PeerStream>
    private let announce: AsyncStream<PeerStream>.Continuation
    /// Where the IDs of the streams this side opens come from.
    private let random: RandomSource

    init(random: RandomSource = .system) {
        self.random = random
        (incoming, announce) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(Self.maximumUnaccepted))
    }

    // MARK: Links

    /// `hello`'s peer is active on link `id`: its streams go on there; those of an earlier
    /// incarnation of it are lost. Done on the link's event loop, in order with its frames: those
    /// that came before (the peer counted this side active first) wait for it (``received(_:from:on:)``).
    func attach(_ hello: Hello, link id: LinkID, channel: any Channel) {
        let link = Link(
            id: id,
            channel: channel,
            incarnation: hello.incarnation,
            chunkLimit: min(Self.chunkLength, hello.maximumFrameLength - StreamData.headerLength)
        )
        // At once, so that a stream can be opened to the peer from when it is active.
        state.withLockedValue { $0.incarnations[hello.peerID] = hello.incarnation }
        if channel.eventLoop.inEventLoop {
            attachOnLoop(link, hello)
        } else {
            channel.eventLoop.execute { self.attachOnLoop(link, hello) }
        }
    }

    private func attachOnLoop(_ link: Link, _ hello: Hello) {
        let peerID = hello.peerID
        let (streams, takesStreams, early) = state.withLockedValue {
            state -> ([StreamCore], Bool, [(LinkMessage, Peer)]) in
            let early =
                state.early.removeValue(forKey: peerID).flatMap { $0.channel === link.channel ? $0.frames : nil } ?? []
            let streams = state.streams.filter { $0.key.peer == peerID }.map(\.value)
            guard hello.features.contains(.streams) else {
                state.links[peerID] = nil
                state.withoutStreams[peerID] = ObjectIdentifier(link.channel)
                return (streams, false, [])
            }
            state.withoutStreams[peerID] = nil
            state.links[peerID] = link
            return (streams, true, early)
        }
        for stream in streams {
            if stream.incarnation != hello.incarnation {
                stream.lose("the peer restarted: its session no longer has the stream")
            } else if !takesStreams {
                stream.lose("the peer's HELLO no longer announces streams")
            } else {
                stream.linkUp(link)
            }
        }
        do throws(MultipeerError) {
            for (message, peer) in early { try process(message, from: peer, on: link.channel) }
        } catch {
            link.channel.writeAndFlush(LinkMessage.goodbye(.protocolError, error.message), promise: nil)
            link.channel.pipeline.fireErrorCaught(error)
            link.channel.close(promise: nil)
        }
    }

    /// The peer's link `id` went: its streams wait for the next.
    func detach(_ peerID: UUID, link id: LinkID?) {
        let streams = state.withLockedValue { state -> [StreamCore] in
            guard let link = state.links[peerID], id == nil || link.id == id else { return [] }
            state.links[peerID] = nil
            state.early[peerID] = nil
            return state.streams.filter { $0.key.peer == peerID }.map(\.value)
        }
        for stream in streams { stream.linkDown(id) }
    }

    /// The peer's session stopped (it said GOODBYE 0): its streams are gone with it.
    func peerStopped(_ peerID: UUID) {
        let streams = state.withLockedValue { state in state.streams.filter { $0.key.peer == peerID }.map(\.value) }
        for stream in streams { stream.lose("the peer's session stopped") }
    }

    // MARK: Frames

    /// A STREAM_ frame from `peer` arrived on `channel` (on its event loop). Throws what breaks
    /// the protocol: the link is then closed (GOODBYE 3). One that comes before the session
    /// attached the link (the peer counted this side active a moment before it did) waits for
    /// it, with at most ``maximumEarly`` others.
    func received(_ message: LinkMessage, from peer: Peer, on channel: any Channel) throws(MultipeerError) {
        let now = try state.withLockedValue { state in
            Result { () throws(MultipeerError) -> Bool in
                if let link = state.links[peer.id], link.channel === channel, state.early[peer.id] == nil {
                    return true
                }
                if state.withoutStreams[peer.id] == ObjectIdentifier(channel) { return false }  // (ignored)
                if state.early[peer.id]?.channel !== channel { state.early[peer.id] = Early(channel: channel) }
                guard state.early[peer.id]!.frames.count < Self.maximumEarly else {
                    throw MultipeerError(
                        .malformedMessage,
                        "peer \(peer.id) sent more than \(Self.maximumEarly) stream frames before it could have heard from this side"
                    )
                }
                state.early[peer.id]!.frames.append((message, peer))
                return false
            }
        }.get()
        if now { try process(message, from: peer, on: channel) }
    }

    private func process(_ message: LinkMessage, from peer: Peer, on channel: any Channel) throws(MultipeerError) {
        switch message {
        case .streamOpen(let open):
            opened(open, by: peer, on: channel)
        case .streamWant(let want):
            let key = Key(peer: peer.id, stream: want.id)
            if let stream = stream(key) {
                try stream.want(want)
            } else {
                answerForgotten(key, on: channel)
            }
        case .streamData(let data):
            try stream(Key(peer: peer.id, stream: data.id))?.data(data)
        case .streamEnd(let end):
            stream(Key(peer: peer.id, stream: end.id))?.ended(end)
        default:
            break
        }
    }

    private func stream(_ key: Key) -> StreamCore? {
        state.withLockedValue { $0.streams[key] }
    }

    /// A frame of a stream this side does not have: if it remembers how it ended, it says so
    /// again (the peer did not hear it before its link went); otherwise the stream is unknown.
    private func answerForgotten(_ key: Key, on channel: any Channel) {
        let how = state.withLockedValue { state in state.ended.last { $0.key == key }?.how }
        let answer: LinkMessage
        switch how {
        case .complete(let received)?:
            answer = .streamWant(StreamWant(id: key.stream, received: received, granted: received, endReceived: true))
        case .failed(let reason)?:
            answer = .streamEnd(StreamEnd(id: key.stream, reason: reason, text: "this stream ended here"))
        case nil:
            answer = .streamEnd(StreamEnd(id: key.stream, reason: .unknown, text: "this side does not have the stream"))
        }
        channel.writeAndFlush(answer, promise: nil)
    }

    private func opened(_ open: StreamOpen, by peer: Peer, on channel: any Channel) {
        let key = Key(peer: peer.id, stream: open.id)
        enum Decision {
            case known
            case forgotten
            case begin(StreamCore, Link)
            case refuse(StreamEndReason, String)
        }
        let decision = state.withLockedValue { state -> Decision in
            if state.streams[key] != nil { return .known }  // (its WANT went when the link came up)
            if open.resuming || state.ended.contains(where: { $0.key == key }) { return .forgotten }
            guard !state.stopped else { return .refuse(.closed, "the session is stopping") }
            guard let link = state.links[peer.id], link.channel === channel else {
                return .refuse(.refused, "the link it came on is gone")
            }
            guard
                state.streams.count(where: { $0.key.peer == peer.id && !$0.value.opener }) < Self.maximumIncomingPerPeer
            else {
                return .refuse(.refused, "\(Self.maximumIncomingPerPeer) streams this peer opened are open")
            }
            let stream = StreamCore(
                key: key,
                name: open.name,
                opener: false,
                incarnation: link.incarnation,
                onEnd: self.onEnd(key)
            )
            state.streams[key] = stream
            return .begin(stream, link)
        }
        switch decision {
        case .known:
            break
        case .forgotten:
            answerForgotten(key, on: channel)
        case .refuse(let reason, let why):
            channel.writeAndFlush(
                LinkMessage.streamEnd(StreamEnd(id: open.id, reason: reason, text: why)),
                promise: nil
            )
        case .begin(let stream, let link):
            stream.linkUp(link)
            // (Kept until the end of the scope: a stream let go of is cancelled, and this one is refused.)
            let announced = announce.yield(PeerStream(stream))
            if case .dropped = announced {
                stream.end(
                    .refused,
                    "the application has not taken \(Self.maximumUnaccepted) streams opened towards it"
                )
            }
        }
    }

    /// What a stream does when it ends: it is forgotten, and how it ended remembered.
    private func onEnd(_ key: Key) -> @Sendable (Ended) -> Void {
        { [weak self] how in self?.state.withLockedValue { $0.forget(key, ended: how) } }
    }

    // MARK: Opening

    /// Opens a stream named `name` to `peerID`, which this session has met. Throws
    /// `streamRefused` for a peer whose HELLO does not announce streams, `sessionState` once
    /// the session stopped.
    /// What each stream holds in memory of each direction (``StreamCore/held``).
    var held: [(reading: UInt64, writing: UInt64)] {
        state.withLockedValue { Array($0.streams.values) }.map(\.held)
    }

    func open(named name: String, to peerID: UUID) throws(MultipeerError) -> PeerStream {
        let open = try StreamOpen(id: random.uuid(), resuming: false, name: name)
        let key = Key(peer: peerID, stream: open.id)
        let (stream, link) = try state.withLockedValue { state in
            Result { () throws(MultipeerError) -> (StreamCore, Link?) in
                guard !state.stopped else {
                    throw MultipeerError(.sessionState, "the session is not running: no stream can be opened")
                }
                guard let incarnation = state.incarnations[peerID] else {
                    throw MultipeerError(
                        .peerNotActive,
                        "peer \(peerID) has never been active in this session: there is no one to open a stream to"
                    )
                }
                guard state.withoutStreams[peerID] == nil else {
                    throw MultipeerError(
                        .streamRefused,
                        "peer \(peerID) takes no streams: its HELLO does not announce them"
                    )
                }
                let stream = StreamCore(key: key, name: name, opener: true, incarnation: incarnation, onEnd: onEnd(key))
                state.streams[key] = stream
                return (stream, state.links[peerID])
            }
        }.get()
        if let link { stream.linkUp(link) }
        return PeerStream(stream)
    }

    // MARK: Ending

    /// The session's run ended: every stream ends, its peer told where there is a link.
    func stop() {
        let streams = state.withLockedValue { state in
            state.stopped = true
            return Array(state.streams.values)
        }
        for stream in streams { stream.end(.closed, "the session stopped") }
        announce.finish()
    }
}
