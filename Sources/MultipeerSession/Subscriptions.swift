import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization

/// The streams the session hands out (``MultipeerSession/events``,
/// ``MultipeerSession/messages(of:)``) and what feeds them: events from the actor, messages
/// straight from the links' event loops, without a hop to the actor.
///
/// A message is decoded once for all subscribers of its Swift type: by the reader of the one
/// subscriber's stream, as it takes the message (so the link's event loop only reads, and the
/// decoded value is made and freed on the reader's thread); for several subscribers, on the
/// link's event loop; for a message larger than a fragment, in a task of its own, so that
/// decoding megabytes holds up neither the link nor the messages behind it on other streams (its
/// subscribers' streams keep their order: their readers wait for it). A payload that does not
/// decode is reported as it fails, and skipped; if it came reliably, its sender is told too
/// (REJECT, through `rejected`), since the sender had its acknowledgement. A message of a type nobody subscribed
/// to yet is held for the first subscriber, or refused, as ``MessageTypesStateMachine`` decides:
/// a hold is a stream without a reader yet, bounded by `Limits.unsubscribedMessages` per type
/// name and `Limits.maximumUnsubscribedTypes` names. The hold of a type the application reads
/// (declared, or subscribed to once) stops the links that fill it, as a full stream does, until
/// the first subscriber comes; a type on trial (a session that declared nothing) takes no more
/// than the bound, and what comes beyond is refused. A refused message counts as delivered,
/// and its sender is told (REJECT); what the session reads changes, and `announce` tells the
/// session, which tells its peers (TYPES). Nothing the session acknowledged is ever dropped
/// unsaid.
final class Subscriptions: Sendable {
    /// A message as a subscription hands it out: its sender, the value, and the trace context
    /// it was sent in.
    typealias Arrival<Message> = (peer: Peer, message: Message, context: TraceContext?)

    /// A message in a subscriber's buffer: to decode, decoded, or being decoded.
    enum Decoded: Sendable {
        /// Its stream's reader decodes it (the one subscriber of its type).
        case encoded(ByteBuffer)
        case value(any Sendable)
        case pending(PendingDecode)

        /// The read buffer the message keeps alive while it waits, if it is a slice of one.
        var storage: PayloadStorage? {
            if case .encoded(let payload) = self { PayloadStorage(of: payload) } else { nil }
        }
    }

    /// One subscriber's buffer, fed values its ``Decoding`` made.
    fileprivate struct Subscriber {
        var offer: @Sendable (Peer, UInt64, TraceContext?, Decoded, Int, @escaping @Sendable () -> Void) -> StreamOffer
        var finish: @Sendable () -> Void
        /// What its buffer holds (``StreamBuffer/load``).
        var load: @Sendable () -> (count: Int, bytes: Int)
        /// The messages in its buffer, oldest first.
        var unread: @Sendable () -> [Decoded]
    }

    /// The subscribers of one wire name that share a Swift type, and how to decode it.
    fileprivate struct Decoding {
        /// The Swift type.
        var type: ObjectIdentifier
        var decode: @Sendable (ByteBuffer) throws -> any Sendable
        var subscribers: [UInt64: Subscriber] = [:]
    }

    /// A wire name: its subscribers, or the messages held until the first one comes.
    private struct Topic {
        /// One a Swift type (an array, not a dictionary: a message's delivery copies it out
        /// of the lock, and there is mostly one).
        var decodings: [Decoding] = []
        /// What came before the first subscriber, for it.
        var hold = MessageHold<(peer: Peer, sequence: UInt64, context: TraceContext?, payload: ByteBuffer)>()

        var isEmpty: Bool { decodings.isEmpty && hold.isEmpty }
    }

    private struct State {
        var events: [UInt64: StreamBuffer<SessionEvent>] = [:]
        var topics: [String: Topic] = [:]
        /// What a new event stream starts with.
        var port: Int?
        var active: [UUID: Peer] = [:]
        var available: [UUID: AvailablePeer] = [:]
        /// The message types read, and what becomes of one nothing subscribes to.
        var types: MessageTypesStateMachine
        /// The peers and type names reported refused (``SessionEvent/messageNotRead(typeName:from:)``),
        /// each pair once, at most ``maximumNotReadReports``.
        var notReadReported: Set<NotRead> = []
    }

    /// A type name refused from a peer.
    private struct NotRead: Hashable {
        var peer: UUID
        var typeName: String
    }

    /// How many pairs of a peer and a type name refused for not being read are reported one by
    /// one; later ones are counted by the metric and told to their senders (REJECT) only, so
    /// peers sending many names cannot grow this session's memory.
    static let maximumNotReadReports = 256

    let limits: MultipeerSession.Limits
    private let metrics: SessionMetrics
    /// Tells the sender of a reliable message that did not decode (the session sends REJECT).
    private let rejected: @Sendable (Peer, Rejection) -> Void
    /// Tells the session that the list of types read changed (a subscription extended it).
    private let announce: @Sendable () -> Void
    private let state: NIOLockedValueBox<State>
    /// Counts the changes to who subscribes to what, made under the lock: a link's ``Cache`` of
    /// an earlier count is out of date.
    private let changes = Atomic<UInt64>(0)
    /// Names event streams and subscriptions, in the order they were made (so a simulated run
    /// wakes them in the same order every time).
    private let names = Atomic<UInt64>(0)
    /// Decodes a large message off the links' loop.
    private let blockingWork: @Sendable (@escaping @Sendable () -> Void) -> Void
    /// Runs as the application reads (``SessionEnvironment/readerCheck``).
    private let readerCheck: (@Sendable () -> Void)?
    /// Whether the session's run has ended: a stream asked for then ends at once.
    private let end: SessionEnd

    /// A link's copy of the subscribers of the types it brought, while nobody subscribes or
    /// unsubscribes: a message of such a type goes to its subscribers' streams without the
    /// session-wide lock, only the streams' own. It holds only subscribed names, and starts over
    /// at every change.
    struct Cache {
        fileprivate var changes: UInt64 = .max
        fileprivate var decodings: [String: [Decoding]] = [:]

        init() {}
        fileprivate init(changes: UInt64) { self.changes = changes }
    }

    /// - Parameter reads: The message types the application declared it reads; nil: every type.
    init(
        limits: MultipeerSession.Limits,
        metrics: SessionMetrics,
        reads: MessageTypeList? = nil,
        rejected: @escaping @Sendable (Peer, Rejection) -> Void = { _, _ in },
        announce: @escaping @Sendable () -> Void = {},
        blockingWork: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void = SessionEnvironment.threadPool,
        readerCheck: (@Sendable () -> Void)? = nil,
        end: SessionEnd = SessionEnd()
    ) {
        self.blockingWork = blockingWork
        self.readerCheck = readerCheck
        self.end = end
        self.limits = limits
        self.metrics = metrics
        self.rejected = rejected
        self.announce = announce
        self.state = NIOLockedValueBox(State(types: MessageTypesStateMachine(declared: reads)))
    }

    /// The message types this session reads now: what its HELLO and TYPES frames announce.
    var reads: MessageTypesRead { state.withLockedValue { $0.types.reads } }

    // MARK: Events

    func events() -> EventStream {
        let id = names.add(1, ordering: .relaxed).newValue
        let buffer = StreamBuffer<SessionEvent>(
            limits: BufferLimits(maximumCount: limits.eventBuffer, maximumBytes: .max),
            shedNotice: { .eventsDropped(count: $0) },
            onTermination: { [weak self] in self?.state.withLockedValue { _ = $0.events.removeValue(forKey: id) } }
        )
        state.withLockedValue { state in
            guard !end.hasEnded else { return buffer.finish() }
            // (Nobody reads the stream yet: these wake no reader.)
            if let port = state.port { _ = buffer.offerShedding(.listening(port: port), expendable: Self.isStats) }
            for peer in Self.sorted(state.active) {
                _ = buffer.offerShedding(.peerJoined(peer), expendable: Self.isStats)
            }
            for peer in Self.sorted(state.available) {
                _ = buffer.offerShedding(.availablePeerChanged(peer), expendable: Self.isStats)
            }
            state.events[id] = buffer
        }
        return EventStream(buffer, check: readerCheck)
    }

    /// Hands `event` to every event stream, and keeps the state a new stream starts with.
    func emit(_ event: SessionEvent) {
        // Under the lock, so that streams see events in the order they were emitted, and a new
        // stream's starting state is exactly what came before its first event. The readers
        // waiting are woken after it: one cancelled meanwhile takes the lock to leave.
        let wakes = state.withLockedValue { state in
            switch event {
            case .listening(let port): state.port = port
            case .peerJoined(let peer): state.active[peer.id] = peer
            case .peerLeft(let peer, _): state.active[peer.id] = nil
            case .availablePeerChanged(let peer): state.available[peer.id] = peer.state == .gone ? nil : peer
            default: break
            }
            return state.events.values.compactMap { $0.offerShedding(event, expendable: Self.isStats) }
        }
        for wake in wakes { wake.resume() }
    }

    /// The session listens on `port` (reported), or no longer listens (nil: suspended).
    func listening(_ port: Int?) {
        if let port { return emit(.listening(port: port)) }
        state.withLockedValue { $0.port = nil }
    }

    private static func isStats(_ event: SessionEvent) -> Bool {
        if case .stats = event { true } else { false }
    }

    // MARK: Messages

    /// A subscription to `type`'s messages under `typeName`: each with its sender and the
    /// trace context it was sent in (``MessageTracing``).
    func messages<Message: Decodable & Sendable>(
        of type: Message.Type,
        named typeName: String
    ) -> SessionStream<Arrival<Message>> {
        let id = names.add(1, ordering: .relaxed).newValue
        let key = ObjectIdentifier(type)
        let buffer = StreamBuffer<(peer: Peer, sequence: UInt64, context: TraceContext?, message: Decoded)>(
            limits: limits.receiveBuffer
        ) {
            [weak self] in
            self?.unsubscribe(id, of: key, named: typeName)
        }
        let subscriber = Subscriber(
            offer: { peer, sequence, context, value, cost, whenRoom in
                buffer.offer((peer, sequence, context, value), cost: cost, storage: value.storage, whenRoom: whenRoom)
            },
            finish: { buffer.finish() },
            load: { buffer.load },
            unread: { buffer.unread.map(\.message) }
        )
        let decode: @Sendable (ByteBuffer) throws -> any Sendable = { payload in
            try MessageEncoding.decode(Message.self, from: payload)
        }
        let (stopped, extended) = state.withLockedValue { state -> ([@Sendable () -> Void], Bool) in
            guard !end.hasEnded else {
                buffer.finish()
                return ([], false)
            }
            changes.add(1, ordering: .releasing)
            // Read from now on: a name off the declared list joins it, a refused one is read again.
            let extended = state.types.subscribed(typeName)
            var topic = state.topics[typeName, default: Topic()]
            if let index = topic.decodings.firstIndex(where: { $0.type == key }) {
                topic.decodings[index].subscribers[id] = subscriber
            } else {
                topic.decodings.append(Decoding(type: key, decode: decode, subscribers: [id: subscriber]))
            }
            // The first subscriber takes what was held for it, before anything newer, and with
            // it the links the hold stopped: they read again once its stream has room.
            let (held, stopped) = topic.hold.take()
            state.topics[typeName] = topic
            return (
                buffer.take(
                    held.map {
                        (
                            ($0.peer, $0.sequence, $0.context, .encoded($0.payload)),
                            $0.payload.readableBytes + ($0.context?.encodedLength ?? 0)
                        )
                    },
                    stopped: stopped
                ), extended
            )
        }
        stopped.forEach { $0() }
        if extended { announce() }
        let (lifetime, check) = (StreamLifetime(buffer), readerCheck)
        return SessionStream {
            check?()
            // Skips a message that did not decode (reported as it failed).
            while let stored = await lifetime.buffer.next() {
                switch stored.message {
                case .encoded(let payload):
                    do {
                        return (stored.peer, try MessageEncoding.decode(Message.self, from: payload), stored.context)
                    } catch {
                        self.undecodable(stored.sequence, named: typeName, from: stored.peer, error)
                    }
                case .value(let value):
                    return (stored.peer, value as! Message, stored.context)
                case .pending(let pending):
                    if let value = await pending.value() { return (stored.peer, value as! Message, stored.context) }
                }
            }
            return nil
        }
    }

    private func unsubscribe(_ id: UInt64, of key: ObjectIdentifier, named typeName: String) {
        state.withLockedValue { state in
            guard var topic = state.topics[typeName], let index = topic.decodings.firstIndex(where: { $0.type == key })
            else { return }
            changes.add(1, ordering: .releasing)
            topic.decodings[index].subscribers[id] = nil
            if topic.decodings[index].subscribers.isEmpty { topic.decodings.remove(at: index) }
            state.topics[typeName] = topic.isEmpty ? nil : topic
        }
    }

    /// Hands a DATA message to every subscriber of its type (decoded once per Swift type), or
    /// holds it for the first one. Returns how many subscriber buffers (or holds) it filled: the
    /// link stops reading until `whenRoom` has been called as many times. `cache` is the link's
    /// own (``Cache``).
    func deliver(
        _ message: DataMessage,
        from peer: Peer,
        cache: inout Cache,
        whenRoom: @escaping @Sendable () -> Void
    ) -> Int {
        switch plan(message, from: peer, cache: &cache, whenRoom: whenRoom) {
        case .decode(let decodings):
            return offer(message, from: peer, to: decodings, whenRoom: whenRoom)
        case .held(let full, let reports):
            reports.forEach(emit)
            return full ? 1 : 0
        case .notRead(let reason, let report, let announce):
            notRead(message, from: peer, reason: reason, report: report)
            if announce { self.announce() }
            return 0
        }
    }

    /// Where a message goes.
    private enum Plan {
        /// To these decodings' subscribers.
        case decode([Decoding])
        /// Held for a first subscriber (done): `full`, the link stops.
        case held(full: Bool, reports: [SessionEvent])
        /// Of a type this session does not read: refused, for `reason` (reported if this is the
        /// first from the peer; `announce`: what the session reads changed).
        case notRead(reason: String, report: Bool, announce: Bool)
    }

    /// Where `message` goes: its type's subscribers, from the link's cache while nobody
    /// subscribed or unsubscribed since it was filled; else, under the lock, the subscribers, or
    /// a hold for the first one, or a refusal (``MessageTypesStateMachine`` decides).
    private func plan(
        _ message: DataMessage,
        from peer: Peer,
        cache: inout Cache,
        whenRoom: @escaping @Sendable () -> Void
    ) -> Plan {
        if cache.changes == changes.load(ordering: .acquiring), let decodings = cache.decodings[message.typeName] {
            return .decode(decodings)
        }
        let (plan, count) = state.withLockedValue { state -> (Plan, UInt64) in
            let count = changes.load(ordering: .relaxed)
            if let decodings = state.topics[message.typeName]?.decodings, !decodings.isEmpty {
                return (.decode(decodings), count)
            }
            // (The names held are counted only for a name not held yet.)
            let held: MessageTypesStateMachine.Hold =
                state.topics[message.typeName].map {
                    .holding(count: $0.hold.messages.count, isFull: $0.hold.isFull(limits.unsubscribedMessages))
                } ?? .none(heldNames: state.topics.values.count { $0.decodings.isEmpty })
            let verdict = state.types.unsubscribed(
                message.typeName,
                hold: held,
                maximumHeldNames: limits.maximumUnsubscribedTypes
            )
            switch verdict {
            case .hold(let stopsWhenFull):
                return (
                    hold(message, from: peer, stopsWhenFull: stopsWhenFull, held: held, whenRoom, in: &state), count
                )
            case .refuse(let reason, let announce):
                let report =
                    state.notReadReported.count < Self.maximumNotReadReports
                    && state.notReadReported.insert(NotRead(peer: peer.id, typeName: message.typeName)).inserted
                return (.notRead(reason: reason, report: report, announce: announce), count)
            }
        }
        if case .decode(let decodings) = plan {
            if cache.changes != count { cache = Cache(changes: count) }
            cache.decodings[message.typeName] = decodings
        }
        return plan
    }

    /// Keeps a message nobody subscribed to for the first subscriber, under the lock (its type's
    /// holds were `held` when the verdict was made): whether that filled its hold (the link
    /// stops), and what to report.
    private func hold(
        _ message: DataMessage,
        from peer: Peer,
        stopsWhenFull: Bool,
        held: MessageTypesStateMachine.Hold,
        _ whenRoom: @escaping @Sendable () -> Void,
        in state: inout State
    ) -> Plan {
        var topic = state.topics[message.typeName] ?? Topic()
        // Held for as long as nobody subscribes: a copy of its own, not a slice keeping the
        // whole read buffer it came in alive.
        let (full, reports) = topic.hold.hold(
            (peer, message.sequence, message.context, Self.compacted(message.payload)),
            cost: message.payload.readableBytes + (message.context?.encodedLength ?? 0),
            stopsWhenFull: stopsWhenFull,
            hold: held,
            limits: limits.unsubscribedMessages,
            maximumHeldNames: limits.maximumUnsubscribedTypes,
            whenRoom: whenRoom
        )
        state.topics[message.typeName] = topic
        if reports.contains(.full) { metrics.holdFull() }
        return .held(
            full: full,
            reports: reports.map { report in
                switch report {
                case .held: .messageHeld(typeName: message.typeName, from: peer)
                case .full: .heldMessagesFull(typeName: message.typeName, from: peer)
                }
            }
        )
    }

    /// Hands `message` to the subscribers of each of its decodings; returns how many of their
    /// buffers it filled.
    private func offer(
        _ message: DataMessage,
        from peer: Peer,
        to decodings: [Decoding],
        whenRoom: @escaping @Sendable () -> Void
    ) -> Int {
        // What it keeps in a stream: its payload and its trace context (up to 8 KiB of it,
        // counted so that small messages with large contexts stay within the bounds).
        let cost = message.payload.readableBytes + (message.context?.encodedLength ?? 0)
        var filled = 0
        for decoding in decodings {
            guard let value = value(of: message, for: decoding, from: peer) else { continue }
            for subscriber in decoding.subscribers.values
            where subscriber.offer(peer, message.sequence, message.context, value, cost, whenRoom) == .full {
                filled += 1
            }
        }
        return filled
    }

    /// `message` as `decoding`'s subscribers take it: decoded in a task of its own if it is larger
    /// than a fragment, by the reader of the one subscriber's stream, or here for several; nil
    /// if it did not decode here (reported).
    private func value(of message: DataMessage, for decoding: Decoding, from peer: Peer) -> Decoded? {
        if message.payload.readableBytes > DataMessage.fragmentLength {
            let pending = PendingDecode()
            // On a thread of its own, not Swift's pool: decoding megabytes there would hold up
            // every task of the process that waits for a thread.
            blockingWork {
                do {
                    pending.complete(.success(try decoding.decode(message.payload)))
                } catch {
                    pending.complete(.failure(error))
                    self.undecodable(message.sequence, named: message.typeName, from: peer, error)
                }
            }
            return .pending(pending)
        }
        if decoding.subscribers.count == 1 { return .encoded(message.payload) }
        do {
            return .value(try decoding.decode(message.payload))
        } catch {
            undecodable(message.sequence, named: message.typeName, from: peer, error)
            return nil
        }
    }

    /// A message did not decode as a subscriber's type: the application is told, and so is its
    /// sender, if it came reliably (sequence 0 is unreliable: never acknowledged, so the sender
    /// assumes nothing of it).
    private func undecodable(_ sequence: UInt64, named typeName: String, from peer: Peer, _ error: any Error) {
        let reason = MessageEncoding.reason(error, decoding: typeName)
        emit(.undecodableMessage(from: peer, typeName: typeName, error: reason))
        guard sequence > 0 else { return }
        rejected(peer, Rejection(sequence: sequence, typeName: typeName, reason: reason))
    }

    /// A message of a type this session does not read came (from a peer that did not know yet,
    /// or an earlier release): refused, not held. Its sender is told if it came reliably (it had
    /// its acknowledgement: the message counts as delivered, and refused); the application once
    /// per peer and type name.
    private func notRead(_ message: DataMessage, from peer: Peer, reason: String, report: Bool) {
        metrics.notRead()
        if report { emit(.messageNotRead(typeName: message.typeName, from: peer)) }
        guard message.sequence > 0 else { return }
        rejected(peer, Rejection(sequence: message.sequence, typeName: message.typeName, reason: reason))
    }

    /// `payload` in a buffer of its own size, if it is a slice of a larger one.
    static func compacted(_ payload: ByteBuffer) -> ByteBuffer {
        guard payload.storageCapacity > payload.readableBytes + 1024 else { return payload }
        var copy = PayloadMemory.allocator.buffer(capacity: payload.readableBytes)
        copy.writeImmutableBuffer(payload)
        return copy
    }

    /// The active peers, as the events so far say (by peer ID): what ``MultipeerSession/activePeers`` reads.
    var activePeers: [Peer] {
        Self.sorted(state.withLockedValue { $0.active })
    }

    /// The peers known, as the events so far say: what ``MultipeerSession/availablePeers`` reads.
    var availablePeers: [AvailablePeer] { Self.sorted(state.withLockedValue { $0.available }) }

    /// In order of peer ID (its bytes, as its string sorts), active or available peers alike.
    private static func sorted<P: Identifiable>(_ peers: [UUID: P]) -> [P] where P.ID == UUID {
        peers.values.sorted { $1.id.isGreater(than: $0.id) }
    }

    /// What the application's streams and the holds for first subscribers keep now.
    var held: HeldInMemory {
        let (events, streams, holds) = state.withLockedValue { state in
            (
                Array(state.events.values),
                state.topics.flatMap { name, topic in
                    topic.decodings.flatMap { $0.subscribers.values.map { (name, $0.load) } }
                },
                state.topics.compactMap { name, topic in
                    topic.hold.isEmpty
                        ? nil
                        : HeldInMemory.Messages(
                            typeName: name,
                            count: topic.hold.messages.count,
                            bytes: topic.hold.bytes
                        )
                }
            )
        }
        // (Each stream's lock once the session-wide one is let go.)
        return HeldInMemory(
            streams: streams.map { name, load in
                let (count, bytes) = load()
                return .init(typeName: name, count: count, bytes: bytes)
            },
            holds: holds,
            events: events.map(\.load.count)
        )
    }

    /// The messages of wire name `typeName` the application has (acknowledged) and has not read:
    /// in its streams, and held for a first subscriber.
    func unread(named typeName: String) -> [Decoded] {
        let (subscribers, held) = state.withLockedValue { state in
            (
                state.topics[typeName]?.decodings.flatMap(\.subscribers.values) ?? [],
                state.topics[typeName]?.hold.messages.map(\.payload) ?? []
            )
        }
        return subscribers.flatMap { $0.unread() } + held.map { .encoded($0) }
    }

    /// The session's run has ended (its ``SessionEnd`` is set): every stream ends; readers still
    /// get what is buffered.
    func sessionEnded() {
        let (events, subscribers) = state.withLockedValue { state in
            defer { state = State(types: state.types) }
            changes.add(1, ordering: .releasing)
            return (
                Array(state.events.values), state.topics.values.flatMap { $0.decodings.flatMap(\.subscribers.values) }
            )
        }
        events.forEach { $0.finish() }
        subscribers.forEach { $0.finish() }
    }
}
