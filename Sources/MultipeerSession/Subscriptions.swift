import Foundation
import MultipeerCore
import NIOCore
import NIOConcurrencyHelpers

/// The streams handed out by ``MultipeerSession/events`` and ``MultipeerSession/messages(of:)``.
/// Shared by the actor and the link tasks, which deliver messages without a hop to the actor.
final class Subscriptions: Sendable {
    /// Decodes one payload for one subscriber and yields it; returns the error if it did not decode.
    typealias Decoder = @Sendable (Peer, ByteBuffer) -> (any Error)?

    private struct Subscriber {
        var decode: Decoder
        var finish: @Sendable () -> Void
    }

    private struct State {
        var events: [UUID: AsyncStream<SessionEvent>.Continuation] = [:]
        var messages: [String: [UUID: Subscriber]] = [:]
    }

    private let state = NIOLockedValueBox(State())

    func events() -> AsyncStream<SessionEvent> {
        let (stream, continuation) = AsyncStream<SessionEvent>.makeStream()
        let id = UUID()
        state.withLockedValue { $0.events[id] = continuation }
        continuation.onTermination = { [weak self] _ in self?.state.withLockedValue { _ = $0.events.removeValue(forKey: id) } }
        return stream
    }

    func emit(_ event: SessionEvent) {
        for continuation in state.withLockedValue({ Array($0.events.values) }) { continuation.yield(event) }
    }

    func messages<Message: Decodable & Sendable>(of type: Message.Type, named typeName: String) -> AsyncStream<(peer: Peer, message: Message)> {
        let (stream, continuation) = AsyncStream<(peer: Peer, message: Message)>.makeStream()
        let id = UUID()
        let decode: Decoder = { peer, payload in
            do {
                let message = try JSONDecoder().decode(Message.self, from: Data(payload.readableBytesView))
                continuation.yield((peer, message))
                return nil
            } catch {
                return error
            }
        }
        state.withLockedValue { $0.messages[typeName, default: [:]][id] = Subscriber(decode: decode, finish: { continuation.finish() }) }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLockedValue { _ = $0.messages[typeName]?.removeValue(forKey: id) }
        }
        return stream
    }

    /// Hands a DATA message to every subscriber of its type; reports one that does not decode.
    func deliver(_ message: DataMessage, from peer: Peer) {
        let subscribers = state.withLockedValue { $0.messages[message.typeName].map { Array($0.values) } ?? [] }
        for subscriber in subscribers {
            if let error = subscriber.decode(peer, message.payload) {
                emit(.undecodableMessage(from: peer, typeName: message.typeName, error: "\(error)"))
                return
            }
        }
    }

    /// Ends every stream (the session has stopped).
    func finish() {
        let (events, messages) = state.withLockedValue { state in
            defer { state = State() }
            return (Array(state.events.values), state.messages.values.flatMap(\.values))
        }
        events.forEach { $0.finish() }
        messages.forEach { $0.finish() }
    }
}
