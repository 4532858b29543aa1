import NIOConcurrencyHelpers

/// The readers subscribed to something the store reports (its events, its changes): each call
/// of ``subscribe(holding:where:)`` is a new reader with a buffer of its own, and
/// ``yield(_:)`` gives every open buffer the element if its filter takes it. A buffer holds at
/// most its limit of what its reader has not taken: beyond it the oldest go, and the reader is
/// told how many before the next element it reads (``SubscriberBuffer/Read/dropped(_:)``), so
/// a reader that stalls costs the store its limit and no more, and never loses an element
/// silently. A buffer nobody holds leaves; every buffer ends with the store.
final class Subscribers<Element: Sendable>: Sendable {
    private let buffers = NIOLockedValueBox<[ObjectIdentifier: Weak]>([:])

    private struct Weak: @unchecked Sendable {  // (the buffer is Sendable; `weak` is not a type)
        weak var buffer: SubscriberBuffer<Element>?
    }

    /// A new reader's buffer, holding at most `limit` elements (1 or more), taking those
    /// `isIncluded` says.
    func subscribe(
        holding limit: Int,
        where isIncluded: @escaping @Sendable (Element) -> Bool = { _ in true }
    ) -> SubscriberBuffer<Element> {
        let buffer = SubscriberBuffer(limit: limit, isIncluded: isIncluded)
        buffers.withLockedValue { buffers in
            buffers = buffers.filter { $0.value.buffer != nil }
            buffers[ObjectIdentifier(buffer)] = Weak(buffer: buffer)
        }
        return buffer
    }

    func yield(_ element: Element) {
        for buffer in buffers.withLockedValue({ $0.values.compactMap(\.buffer) }) { buffer.offer(element) }
    }

    deinit {  // (the store is gone: every reader's stream ends)
        for buffer in buffers.withLockedValue({ $0.values.compactMap(\.buffer) }) { buffer.finish() }
    }
}

/// One reader's elements, at most `limit` of them, oldest first (``Subscribers``).
final class SubscriberBuffer<Element: Sendable>: Sendable {
    /// What a read gives.
    enum Read {
        /// `count` elements went, oldest first, since the reader last read: it fell `limit`
        /// behind. The elements after them follow.
        case dropped(Int)
        case element(Element)
    }

    private enum Step {
        case read(Read)
        case end
        case wait
    }

    private struct State {
        var elements: [Element] = []
        /// Where the oldest element not yet read is in `elements`.
        var head = 0
        var dropped = 0
        var finished = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let limit: Int
    private let isIncluded: @Sendable (Element) -> Bool
    private let state = NIOLockedValueBox(State())

    fileprivate init(limit: Int, isIncluded: @escaping @Sendable (Element) -> Bool) {
        precondition(limit > 0, "a subscriber's buffer holds at least one element")
        self.limit = limit
        self.isIncluded = isIncluded
    }

    fileprivate func offer(_ element: Element) {
        guard isIncluded(element) else { return }
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            guard !state.finished else { return nil }
            if state.elements.count - state.head == limit {
                state.head += 1
                state.dropped += 1
            }
            if state.head > 0, state.head >= state.elements.count / 2 {
                state.elements.removeFirst(state.head)
                state.head = 0
            }
            state.elements.append(element)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    fileprivate func finish() {
        let waiter = state.withLockedValue { state in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// The next read: the count of elements dropped since the last, if any went, else the
    /// oldest element; nil once the store is gone and every element was read, or when the
    /// reading task is cancelled.
    func next() async -> Read? {
        while !Task.isCancelled {
            let step = state.withLockedValue { state -> Step in
                if state.dropped > 0 {
                    defer { state.dropped = 0 }
                    return .read(.dropped(state.dropped))
                }
                guard state.head < state.elements.count else { return state.finished ? .end : .wait }
                let element = state.elements[state.head]
                state.head += 1
                if state.head == state.elements.count {  // (all read: nothing kept alive)
                    state.elements.removeAll()
                    state.head = 0
                }
                return .read(.element(element))
            }
            switch step {
            case .read(let read): return read
            case .end: return nil
            case .wait: break
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let ready = state.withLockedValue { state in
                        guard !Task.isCancelled, !state.finished, state.dropped == 0,
                            state.head == state.elements.count
                        else { return true }
                        state.waiter = continuation  // (one reader: a stream is iterated once)
                        return false
                    }
                    if ready { continuation.resume() }
                }
            } onCancel: {
                let waiter = state.withLockedValue { state in
                    defer { state.waiter = nil }
                    return state.waiter
                }
                waiter?.resume()
            }
        }
        return nil
    }
}
