public import Foundation
import Instrumentation
import Logging
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore
import Synchronization

extension MultipeerSession {
    /// The name a message type travels under, so several types share one link: its
    /// ``MultipeerMessage/wireName`` if it declares one, else its bare type name (`Note`, not
    /// `MyApp.Note`), which two programs defining the same type agree on. Both sides must use
    /// the same name.
    ///
    /// Two types of one program that travel under one name by accident (two `Note`s of two
    /// modules, both under their bare name) could not be told apart by a peer: the second to be
    /// used is logged as a warning, once in the process, naming both, to the logger of the
    /// session that first sends or reads it (here, `Logger.current`); give one of them a
    /// ``MultipeerMessage/wireName``. Types that both declare one wire name (two shapes of one
    /// message) share it on purpose, and are not.
    public nonisolated static func wireName<Message>(of type: Message.Type) -> String {
        MessageTypeTraits.of(type).name
    }

    /// Every message of type `Message` from now on, with the peer that sent it, and first those
    /// that arrived before anything subscribed to the type (held for a first subscriber, see
    /// ``Limits/unsubscribedMessages``). Each call is a new subscription, bounded
    /// (``MessageStream``): a subscriber that reads slowly slows the senders down. Messages
    /// are decoded as the stream's reader takes them (by the link when several streams take the
    /// type, or for one larger than 256 KiB); a payload that does not decode is reported as
    /// ``SessionEvent/undecodableMessage(from:typeName:error:)`` and skipped, and the link stays up;
    /// if it came reliably, its sender is told (``SessionEvent/messageRejected(by:typeName:sequence:reason:)``).
    public nonisolated func messages<Message: Codable & Sendable>(of type: Message.Type) -> MessageStream<Message> {
        MessageStream(subscriptions.messages(of: type, named: MessageTypeTraits.of(type, logger: logger).name)) {
            ($0.peer, $0.message)
        }
    }

    /// Runs `handler` for every message of type `Message` from now on (and first those held for
    /// a first subscriber), one at a time, in order, each inside the `ServiceContext` its sender
    /// sent it in, as swift-distributed-tracing propagates a request's context: a span the
    /// handler starts (`withSpan`) is a child of the sender's span, and a logger with the
    /// tracer's metadata provider names its trace. A message sent outside any context, or by a
    /// peer of an earlier release, runs in the calling task's context.
    ///
    /// The context travels only where the process's instrument writes it
    /// (`InstrumentationSystem.bootstrap`, an OpenTelemetry tracer, say) and only to a peer of
    /// this release or later (docs/PROTOCOL.md 2c); with no instrument bootstrapped nothing is
    /// sent. Otherwise this is ``messages(of:)``: the same bounded subscription, its
    /// undecodable messages reported and skipped. It returns when the session stops or the
    /// calling task is cancelled, and throws what `handler` throws (the subscription ends).
    public nonisolated(nonsending) func handleMessages<Message: Codable & Sendable>(
        of type: Message.Type,
        _ handler: (_ peer: Peer, _ message: Message) async throws -> Void
    ) async rethrows {
        let arrivals = subscriptions.messages(of: type, named: MessageTypeTraits.of(type, logger: logger).name)
        for await (peer, message, carried) in arrivals {
            if let context = MessageTracing.context(of: carried) {
                try await ServiceContext.withValue(context) { try await handler(peer, message) }
            } else {
                try await handler(peer, message)
            }
        }
    }

    /// Sends `message` to a peer.
    ///
    /// Reliable messages (the default) go to a peer that is active now or was earlier in this
    /// session: they wait in its outbox until acknowledged, through any number of redials. The
    /// call returns once the message is in the outbox (waiting for room there unless
    /// `failWhenOutboxFull`), not when it is written: a peer that reads slowly holds up nobody.
    /// Unreliable ones go only to a peer active now: the call returns once the message waits for
    /// the peer's link (waiting for room while ``Limits/unreliableQueue`` is full); if the link
    /// goes before the message is written, it is lost, and reported as
    /// ``SessionEvent/messagesDropped(typeName:count:reason:)`` (``MessageDropReason/linkLost``).
    ///
    /// - Parameters:
    ///   - message: What to send; it travels under its ``MultipeerSession/wireName(of:)``.
    ///   - peerID: The peer it is for.
    ///   - delivery: ``Delivery/reliable`` (the default) or ``Delivery/unreliable``.
    ///   - awaitAcknowledgement: Return only once the peer's application has the message (it is
    ///     in the peer's stream, or held for the type's first subscriber there). Waits as long as
    ///     the peer is active, and at most ``Limits/sendTimeout`` of its absence. Reliable
    ///     delivery only: an unreliable message is never acknowledged.
    /// - Throws: `peerNotActive` for a peer this session has not seen (or, unreliable, that is not
    ///   active now; a peer that is joining, whose first message can reach the application just
    ///   before its ``SessionEvent/peerJoined(_:)``, is waited for); `outboxFull` when so configured; `peerAway` when the peer has been away
    ///   for `Limits.sendTimeout` with its outbox full or without acknowledging an awaited
    ///   message (which stays queued), or was forgotten; `invalidArgument` for
    ///   `awaitAcknowledgement` with ``Delivery/unreliable``; `messageTooLarge` when
    ///   the message is larger than the peer takes (its `Limits.maximumMessageLength`, announced
    ///   in HELLO); `codingFailed`; `CancellationError` when its task is cancelled while it
    ///   waits for room (the message is not queued). A message larger than 256 KiB goes in fragments, which other
    ///   messages pass: messages of one type and delivery arrive in the order sent; of different
    ///   types, or one reliable and one unreliable, not necessarily.
    public nonisolated func send<Message: Codable & Sendable>(
        _ message: Message,
        to peerID: UUID,
        delivery: Delivery = .reliable,
        awaitAcknowledgement: Bool = false
    ) async throws {
        guard !awaitAcknowledgement || delivery == .reliable else {
            throw MultipeerError(
                .invalidArgument,
                "send(_:to:delivery:awaitAcknowledgement:) was asked to await the acknowledgement of an unreliable message, which is never acknowledged: send it reliably, or do not wait"
            )
        }
        // Encoded and offered in the caller's task: senders encode in parallel, and a large
        // message holds up nobody else's.
        let (ticket, peer) = try await enqueue(try encode(message), for: peerID, delivery: delivery)
        if awaitAcknowledgement { try await peer.waitForAcknowledgement(of: ticket) }
    }

    /// Sends `message` to every peer; returns how many it was handed to.
    ///
    /// A peer that takes no message that large (its `Limits.maximumMessageLength`) is skipped,
    /// and a notice logged.
    ///
    /// Reliable broadcasts go to every active peer, and also to every peer that was active
    /// earlier in this session and is away now (a link being redialled), as long as its outbox
    /// has room: a broadcast never waits for one peer, gone or slow, and a peer it skips is not
    /// counted and is reported (``SessionEvent/broadcastSkipped(to:typeName:_:)`` with
    /// `outboxFull`, once per type until the peer's link comes up or goes). Unreliable ones go
    /// to the active peers whose unreliable queues have room (``Limits/unreliableQueue``): a
    /// slow peer misses them, as unreliable messages may be.
    @discardableResult
    public nonisolated func broadcast<Message: Codable & Sendable>(
        _ message: Message,
        delivery: Delivery = .reliable
    ) async throws -> Int {
        try await broadcast(encoded: try encode(message), delivery: delivery)
    }

    private func broadcast(encoded data: DataMessage, delivery: Delivery) async throws -> Int {
        var sent = 0
        let active = core.activePeers.keys
        let peers = delivery == .reliable ? Set(active).union(deliveries.known) : Set(active)
        for peerID in peers {
            guard fits(data, to: peerID) else { continue }
            guard deliveries[peerID]?.hasRoom(for: data.payload.readableBytes, reliably: delivery == .reliable) == true
            else {
                logger.debug(
                    "broadcast skipped a peer that has no room for it",
                    metadata: [
                        "multipeer.peer.id": "\(peerID)", "multipeer.delivery": "\(delivery)",
                    ]
                )
                // (A reliable message the peer will never get: its application may need to know.)
                if delivery == .reliable, let peer = deliveries[peerID]?.skippedFull(data.typeName) {
                    let error = MultipeerError(
                        .outboxFull,
                        "a broadcast of \(data.typeName) skipped \(peer), whose outbox was full (Limits.outbox): it never gets that message"
                    )
                    subscriptions.emit(.broadcastSkipped(to: peer, typeName: data.typeName, error))
                }
                continue
            }
            _ = try await enqueue(data, for: peerID, delivery: delivery)  // (at once: there is room)
            sent += 1
        }
        return sent
    }

    /// The encoding `Message` travels in: its own choice, else the session's.
    nonisolated func wireEncoding<Message>(of type: Message.Type) -> MessageEncoding {
        wireEncoding(MessageTypeTraits.of(type, logger: logger))
    }

    private nonisolated func wireEncoding(_ traits: MessageTypeTraits.Traits) -> MessageEncoding {
        traits.encoding ?? configuration.messageEncoding
    }

    nonisolated func encode<Message: Codable & Sendable>(
        _ message: Message,
        as name: String? = nil
    ) throws -> DataMessage {
        let traits = MessageTypeTraits.of(Message.self, logger: logger)
        let typeName = name ?? traits.name
        let encoding = wireEncoding(traits)
        var payload = PayloadMemory.allocator.buffer(capacity: 256)
        do {
            try encoding.encode(message, into: &payload)
        } catch {
            throw MultipeerError(
                .codingFailed,
                "a \(typeName) could not be encoded (\(encoding))",
                underlying: "\(error)"
            )
        }
        return try DataMessage(sequence: 0, typeName: typeName, payload: payload, context: MessageTracing.carried())
    }

    /// Whether the peer takes `message`; when it does not, tells the application (once per
    /// type and link: ``SessionEvent/broadcastSkipped(to:typeName:_:)``).
    private func fits(_ message: DataMessage, to peerID: UUID) -> Bool {
        let localLimits = (configuration.limits.maximumFrameLength, configuration.limits.maximumMessageLength)
        guard let (error, report) = deliveries[peerID]?.skip(message, localLimits: localLimits) else { return true }
        if error.code == .messageTypeNotRead { metrics.notRead(inbound: false) }
        if let report {
            logger.debug(
                "broadcast skipped a peer that would refuse it",
                metadata: ["multipeer.peer.id": "\(peerID)", "multipeer.error": "\(error)"]
            )
            subscriptions.emit(.broadcastSkipped(to: report, typeName: message.typeName, error))
        }
        return false
    }
}

/// What a message type declares of itself (``MultipeerMessage``), looked up once per type: the
/// conformance check (`as? any MultipeerMessage.Type`) costs a few percent of sending or
/// receiving a small message, every time. Read without a lock (every send reads it): the types
/// known are an immutable table, replaced whole when a type is first seen, and every table made
/// is kept for the process's life (one per message type), so a reader never finds its table
/// freed.
enum MessageTypeTraits {
    /// A type's wire name and encoding, and, when another type of this program took the same
    /// name first and one of the two did not declare it (its bare type name stands in: two
    /// `Note`s of two modules), that type's full name: a peer could not tell their messages
    /// apart. Types that both declare one ``MultipeerMessage/wireName`` do so on purpose (two
    /// shapes of one message), and may.
    typealias Traits = (name: String, encoding: MessageEncoding?, takenBy: String?)

    private final class Table: Sendable {
        let traits: [ObjectIdentifier: Traits]
        /// The full name of the first type to travel under each wire name, and whether it declared it.
        let owners: [String: (type: String, declared: Bool)]
        init(_ traits: [ObjectIdentifier: Traits], owners: [String: (type: String, declared: Bool)]) {
            self.traits = traits
            self.owners = owners
        }
    }

    /// The first table, empty.
    private static let empty = Table([:], owners: [:])
    /// The current table's address.
    private static let current = Atomic<UInt>(UInt(bitPattern: Unmanaged.passUnretained(empty).toOpaque()))
    /// Writers, one at a time; and every table made, kept.
    private static let writer = NIOLockedValueBox<[Table]>([])

    /// `type`'s traits; the first time the process meets a type that travels under another's
    /// name by accident, `logger` is told (the session's that met it).
    static func of<Message>(_ type: Message.Type, logger: Logger = .current) -> Traits {
        let key = ObjectIdentifier(type)
        if let traits = table().traits[key] { return traits }
        let conforming = type as? any MultipeerMessage.Type
        let bareName = String(describing: type)
        let name = conforming?.wireName ?? bareName
        // A name declared on purpose: not the bare name a type keeps by default.
        let declared = name != bareName
        let fullName = String(reflecting: type)
        return writer.withLockedValue { kept in
            let before = table()
            if let traits = before.traits[key] { return traits }  // (another thread's, meanwhile)
            var owners = before.owners
            let owner = owners[name, default: (fullName, declared)]
            owners[name] = owner
            let accidental = owner.type != fullName && !(owner.declared && declared)
            let traits: Traits = (name, conforming?.wireEncoding ?? nil, accidental ? owner.type : nil)
            if accidental {
                logger.warning(
                    "two message types travel under one wire name: a peer cannot tell their messages apart",
                    metadata: [
                        "multipeer.message.type": "\(fullName)", "multipeer.message.wireName": "\(name)",
                        "multipeer.message.firstType": "\(owner.type)",
                        "multipeer.fix": "declare a MultipeerMessage.wireName of its own for one of them",
                    ]
                )
            }
            var known = before.traits
            known[key] = traits
            let table = Table(known, owners: owners)
            kept.append(table)
            current.store(UInt(bitPattern: Unmanaged.passUnretained(table).toOpaque()), ordering: .releasing)
            return traits
        }
    }

    private static func table() -> Table {
        Unmanaged<Table>.fromOpaque(UnsafeRawPointer(bitPattern: current.load(ordering: .acquiring))!)
            .takeUnretainedValue()
    }
}
