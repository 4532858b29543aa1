import Foundation
import Logging
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// The session's byte streams (docs/PROTOCOL.md 3d), both those it opened and those its peers
/// opened: each is driven by its core (``ByteStreamStateMachine``) in a ``StreamCore``, and its
/// frames go out on the link's event loop only, so that they leave in the order the core made
/// them. The links hand their STREAM_ frames here on their event loop
/// (``received(_:from:on:)``). A peer's link is its delivery's (``LinkHandle``): read from there,
/// and told here when it comes and goes (``PeerLinkFeature``).
///
/// Bounds: a direction holds at most ``window`` bytes at each end (the writer's application
/// waits for room beyond); a peer has at most ``maximumIncomingPerPeer`` streams it opened open
/// here at once (more are refused), and at most ``maximumUnaccepted`` wait for the application
/// to take them from ``incoming`` (more are refused). So what peers can make this side hold is
/// at most 16 streams x 256 KiB x 2 directions, 8 MiB, a peer.
final class Streams: PeerLinkFeature {
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

    struct Key: Hashable, Sendable {
        var peer: UUID
        var stream: UUID
    }

    /// How a stream this side forgot ended.
    enum Ended: Sendable {
        /// Both ways, with `received` bytes of the peer's direction.
        case complete(received: UInt64)
        /// With the END's reason and text, said again as they were: an END said again may reach
        /// the peer before the first (a frame of the stream came while that was being written).
        case failed(StreamEndReason, text: String)
    }

    private struct State {
        var streams: [Key: StreamCore] = [:]
        /// How the latest streams ended.
        var ended = RememberedEnds<Key, Ended>(capacity: Streams.rememberedEnds)

        mutating func forget(_ key: Key, ended how: Ended) {
            streams.removeValue(forKey: key)
            ended.remember(key, how)
        }
    }

    private let state = OrderedLock(State(), rank: .registry)
    /// The streams peers opened, as each arrives.
    let incoming: AsyncStream<PeerStream>
    private let announce: AsyncStream<PeerStream>.Continuation
    /// Where the IDs of the streams this side opens come from.
    private let random: RandomSource
    /// The peers' deliveries, which hold each peer's link, and the session's end.
    private let peers: Deliveries

    init(random: RandomSource = .system, peers: Deliveries) {
        self.random = random
        self.peers = peers
        (incoming, announce) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(Self.maximumUnaccepted))
    }

    // MARK: Links

    /// The peer is active on `link` (its delivery holds it now): its streams go on there; those
    /// of an earlier incarnation of it are lost (``PeerLinkFeature``: on the link's event loop,
    /// in order with its frames).
    func linkUp(_ link: LinkHandle) {
        let hello = link.hello
        let streams = state.withLockedValue { state in state.streams.filter { $0.key.peer == hello.peerID }.map(\.value)
        }
        for stream in streams {
            if stream.incarnation != hello.incarnation {
                stream.lose("the peer restarted: its session no longer has the stream")
            } else if !hello.features.contains(.streams) {
                stream.lose("the peer's HELLO no longer announces streams")
            } else {
                stream.linkUp(link)
            }
        }
    }

    /// The peer's `link` went: its streams on it wait for the next.
    func linkDown(_ link: LinkHandle) {
        let streams = state.withLockedValue { state in
            state.streams.filter { $0.key.peer == link.peerID }.map(\.value)
        }
        for stream in streams { stream.linkDown(link.id) }
    }

    /// The peer's session stopped (it said GOODBYE 0): its streams are gone with it.
    func peerStopped(_ peerID: UUID) {
        let streams = state.withLockedValue { state in state.streams.filter { $0.key.peer == peerID }.map(\.value) }
        for stream in streams { stream.lose("the peer's session stopped") }
    }

    // MARK: Frames

    /// A STREAM_ frame from `peer` arrived on `channel` (on its event loop). Throws what breaks
    /// the protocol: the link is then closed (GOODBYE 3). A link delivers these only once the
    /// peer is active on it (``LinkDeliveryStateMachine``); one that is no longer the peer's
    /// link (it was replaced, and is closing) is not listened to: the streams go on, from where
    /// each side stands, on the link that replaced it. So is a peer whose HELLO announced no
    /// streams.
    func received(_ frame: StreamFrame, from peer: Peer, on channel: any Channel) throws(MultipeerError) {
        guard let link = peers.binding(of: peer.id).link, link.channel === channel,
            link.hello.features.contains(.streams)
        else { return }
        switch frame {
        case .open(let open):
            opened(open, by: peer, on: link)
        case .want(let want):
            let key = Key(peer: peer.id, stream: want.id)
            if let stream = stream(key) {
                try stream.want(want)
            } else {
                answerForgotten(key, on: channel)
            }
        case .data(let data):
            try stream(Key(peer: peer.id, stream: data.id))?.data(data)
        case .end(let end):
            stream(Key(peer: peer.id, stream: end.id))?.ended(end)
        }
    }

    private func stream(_ key: Key) -> StreamCore? {
        state.withLockedValue { $0.streams[key] }
    }

    /// A frame of a stream this side does not have: if it remembers how it ended, it says so
    /// again (the peer did not hear it before its link went); otherwise the stream is unknown.
    private func answerForgotten(_ key: Key, on channel: any Channel) {
        let how = state.withLockedValue { state in state.ended[key] }
        let answer: LinkMessage
        switch how {
        case .complete(let received)?:
            answer = .streamWant(StreamWant(id: key.stream, received: received, granted: received, endReceived: true))
        case .failed(let reason, let text)?:
            answer = .streamEnd(StreamEnd(id: key.stream, reason: reason, text: text))
        case nil:
            answer = .streamEnd(StreamEnd(id: key.stream, reason: .unknown, text: "this side does not have the stream"))
        }
        channel.writeAndFlush(answer, promise: nil)
    }

    private func opened(_ open: StreamOpen, by peer: Peer, on link: LinkHandle) {
        let key = Key(peer: peer.id, stream: open.id)
        let channel = link.channel
        enum Decision {
            case known
            case forgotten
            case begin(StreamCore)
            case refuse(StreamEndReason, String)
        }
        let decision = state.withLockedValue { state -> Decision in
            if state.streams[key] != nil { return .known }  // (its WANT went when the link came up)
            if open.resuming || state.ended[key] != nil { return .forgotten }
            guard !peers.end.hasEnded else { return .refuse(.closed, "the session is stopping") }
            guard
                state.streams.count(where: { $0.key.peer == peer.id && !$0.value.opener }) < Self.maximumIncomingPerPeer
            else {
                return .refuse(.refused, "\(Self.maximumIncomingPerPeer) streams this peer opened are open")
            }
            let stream = StreamCore(
                key: key,
                name: open.name,
                opener: false,
                incarnation: link.hello.incarnation,
                onEnd: self.onEnd(key)
            )
            state.streams[key] = stream
            return .begin(stream)
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
        case .begin(let stream):
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

    /// What each stream holds in memory of each direction (``StreamCore/held``).
    var held: [(reading: UInt64, writing: UInt64)] {
        state.withLockedValue { Array($0.streams.values) }.map(\.held)
    }

    /// Opens a stream named `name` to `peerID`, which this session has met. Throws
    /// `streamRefused` for a peer whose HELLO does not announce streams, `sessionState` once
    /// the session stopped.
    func open(named name: String, to peerID: UUID) throws(MultipeerError) -> PeerStream {
        let open = try StreamOpen(id: random.uuid(), resuming: false, name: name)
        let key = Key(peer: peerID, stream: open.id)
        let (stream, link) = try state.withLockedValue { state in
            Result { () throws(MultipeerError) -> (StreamCore, LinkHandle?) in
                guard !peers.end.hasEnded else {
                    throw MultipeerError(.sessionState, "the session is not running: no stream can be opened")
                }
                // (Under the streams' lock: a link bound after this is brought up by ``linkUp(_:)``,
                // which finds the stream; one bound before, by this.)
                let (link, hello) = peers.binding(of: peerID)
                guard let hello else {
                    throw MultipeerError(
                        .peerNotActive,
                        "peer \(peerID) has never been active in this session: there is no one to open a stream to"
                    )
                }
                guard hello.features.contains(.streams) else {
                    throw MultipeerError(
                        .streamRefused,
                        "peer \(peerID) takes no streams: its HELLO does not announce them"
                    )
                }
                let stream = StreamCore(
                    key: key,
                    name: name,
                    opener: true,
                    incarnation: hello.incarnation,
                    onEnd: onEnd(key)
                )
                state.streams[key] = stream
                return (stream, link)
            }
        }.get()
        if let link { stream.linkUp(link) }
        return PeerStream(stream)
    }

    // MARK: Ending

    /// The session's run has ended (``Deliveries/end`` is set): every stream ends, its peer told
    /// where there is a link.
    func sessionEnded() {
        let streams = state.withLockedValue { Array($0.streams.values) }
        for stream in streams { stream.end(.closed, "the session stopped") }
        announce.finish()
    }
}

extension Streams {
    /// The most bytes a STREAM_DATA to `link`'s peer carries: within its maximum frame.
    static func chunkLimit(on link: LinkHandle) -> Int {
        link.payloadLimit(header: StreamData.headerLength, cap: chunkLength)
    }
}
