import Synchronization

/// The streams subscribed to something the store reports (its events, its changes): each call
/// of ``subscribe()`` is a new stream, and ``yield(_:)`` gives every open stream the element.
/// A stream buffers what its reader has not taken yet; one that is cancelled or dropped leaves;
/// every stream ends with the store.
final class Subscribers<Element: Sendable>: Sendable {
    private let streams = Mutex<(next: Int, open: [Int: AsyncStream<Element>.Continuation])>((0, [:]))

    func subscribe() -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self)
        let key = streams.withLock { state in
            state.next += 1
            state.open[state.next] = continuation
            return state.next
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.streams.withLock { $0.open.removeValue(forKey: key) }
        }
        return stream
    }

    func yield(_ element: Element) {
        for continuation in streams.withLock({ Array($0.open.values) }) { continuation.yield(element) }
    }

    deinit {  // (the store is gone: every stream ends)
        for continuation in streams.withLock({ Array($0.open.values) }) { continuation.finish() }
    }
}
