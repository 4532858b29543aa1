import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// The buffer behind one stream handed to the application (``MessageStream``, ``EventStream``):
/// one consumer, producers that never wait, and a bound.
///
/// A message stream pushes back: an offer that fills the buffer is still taken, and the
/// producer (a link's reader) is told to stop and given a call for when the consumer has taken
/// it down to half the bound (``offer(_:cost:whenRoom:)``). An event stream sheds instead
/// (``offerShedding(_:expendable:)``): the oldest expendable element goes first, else the
/// oldest, and the consumer is told how many went before its next element.
///
/// The consumer takes what is buffered up to a quarter of the bound at a time (one element at a
/// time while a producer waits for room), under the lock the producers take, and then hands it
/// out one by one without it: a reader that keeps up costs the producers' lock one look a batch,
/// not one an element. A batch counts against the bound until the consumer comes back for more.
///
/// The bound's bytes are the memory the buffered elements keep alive, not only their payloads:
/// a payload is a slice of the buffer its link read it into, and keeps all of it. So each such
/// buffer counts once, at its capacity, however many elements share it (``PayloadStorage``): a
/// stream of small messages that each came in a read of their own, beside other traffic, fills
/// at the bound's bytes of reads, not of payloads.
final class StreamBuffer<Element: Sendable>: Sendable {
    typealias Offer = StreamOffer
    /// The consumer waiting for an element. Unchecked (no object made per wait, which a checked
    /// continuation is): it is resumed exactly once, by whoever takes it out of the state under
    /// the lock.
    typealias Waiter = UnsafeContinuation<Element?, Never>

    private struct Stored {
        var element: Element
        var cost: Int
        /// The buffer its payload is a slice of, if it keeps one alive.
        var storage: PayloadStorage?
    }

    private struct State {
        var elements = CircularBuffer<Stored>()
        /// The memory `elements` and the consumer's batch keep alive: each payload storage once,
        /// at its capacity, and the cost of the elements without one. What the bound's bytes bound.
        var held = 0
        /// How many elements (buffered, or in the batch) keep each payload storage alive, and the
        /// capacity it was counted at.
        var storages: [ObjectIdentifier: (elements: Int, capacity: Int)] = [:]
        /// The elements of the consumer's batch, which count against the bound until it is used up.
        var batchCount = 0
        var waiter: Waiter?
        /// The producers ended the stream: what is buffered is still read, then it ends.
        var finished = false
        /// The consumer ended it (cancelled, or dropped the stream): nothing more is kept.
        var terminated = false
        /// Producers stopped by a full buffer, called when it is half empty (or the consumer goes).
        var whenRoom: [@Sendable () -> Void] = []
        /// Elements shed since the consumer last took one.
        var shed = 0

        var count: Int { elements.count + batchCount }

        /// An element of `cost`, keeping `storage` alive, is buffered (or in the batch) from now on.
        mutating func keep(_ cost: Int, _ storage: PayloadStorage?) {
            guard let storage else {
                held += cost
                return
            }
            if let counted = storages[storage.id] {
                storages[storage.id] = (counted.elements + 1, counted.capacity)
            } else {
                storages[storage.id] = (1, storage.capacity)
                held += storage.capacity
            }
        }

        /// Such an element was handed out (or dropped): what it kept alive is released.
        mutating func release(_ cost: Int, _ storage: PayloadStorage?) {
            guard let storage, let counted = storages[storage.id] else {
                held -= cost
                return
            }
            if counted.elements > 1 {
                storages[storage.id] = (counted.elements - 1, counted.capacity)
            } else {
                storages[storage.id] = nil
                held -= counted.capacity
            }
        }
    }

    /// What the consumer took from ``State/elements`` in one go, handed out one at a time.
    private struct Batch {
        var elements = CircularBuffer<Stored>()
        /// What every element taken into it, handed out or not, keeps alive until the consumer
        /// comes back for more.
        var taken: [(cost: Int, storage: PayloadStorage?)] = []
    }

    let limits: BufferLimits
    /// What it holds now against its bound: elements (the consumer's batch among them), and the
    /// memory they keep alive.
    var load: (count: Int, bytes: Int) { state.withLockedValue { ($0.count, $0.held) } }

    /// The elements not handed to the consumer yet, oldest first (its batch's, then the rest).
    var unread: [Element] {
        batch.withLockedValue { batch in
            batch.elements.map(\.element) + state.withLockedValue { $0.elements.map(\.element) }
        }
    }
    /// What the consumer is told before its next element when elements were shed.
    private let shedNotice: (@Sendable (Int) -> Element)?
    private let state = NIOLockedValueBox(State())
    /// The consumer's alone (one at a time), so never waited for.
    private let batch = NIOLockedValueBox(Batch())
    /// Called once when the consumer ends the stream.
    private let onTermination: @Sendable () -> Void

    init(
        limits: BufferLimits,
        shedNotice: (@Sendable (Int) -> Element)? = nil,
        onTermination: @escaping @Sendable () -> Void
    ) {
        self.limits = limits
        self.shedNotice = shedNotice
        self.onTermination = onTermination
    }

    /// At its count, or over its bytes with more than one element: one element larger than the
    /// bound alone (a large message the reader will take next) is no reason to stop.
    private static func isFull(_ state: State, _ limits: BufferLimits) -> Bool {
        state.count >= limits.maximumCount || (state.held >= limits.maximumBytes && state.count > 1)
    }

    /// Hands `element` (of `cost` bytes, a slice of `storage` if it keeps one alive) to the
    /// consumer; never waits. When this fills the buffer, `whenRoom` is kept and called once
    /// the consumer has taken it down to half.
    func offer(
        _ element: Element,
        cost: Int,
        storage: PayloadStorage? = nil,
        whenRoom: @escaping @Sendable () -> Void
    ) -> Offer {
        let (outcome, waiter) = state.withLockedValue { state -> (Offer, Waiter?) in
            guard !state.terminated, !state.finished else { return (.gone, nil) }
            if let waiter = state.waiter {
                state.waiter = nil
                return (.taken, waiter)
            }
            state.elements.append(Stored(element: element, cost: cost, storage: storage))
            state.keep(cost, storage)
            guard Self.isFull(state, limits) else { return (.taken, nil) }
            state.whenRoom.append(whenRoom)
            return (.full, nil)
        }
        waiter?.resume(returning: element)
        return outcome
    }

    /// Takes `elements` (with their costs) before anything else is offered, for a stream not
    /// read yet, with the producers they stopped: those are kept if this fills the buffer, and
    /// called once the consumer has taken it down to half; else returned, to be called now.
    func take(_ elements: [(Element, Int)], stopped: [@Sendable () -> Void]) -> [@Sendable () -> Void] {
        state.withLockedValue { state in
            precondition(state.waiter == nil && state.count == 0, "a stream takes what was held before anything else")
            for (element, cost) in elements {
                state.elements.append(Stored(element: element, cost: cost))
                state.keep(cost, nil)
            }
            guard Self.isFull(state, limits) else { return stopped }
            state.whenRoom += stopped
            return []
        }
    }

    /// A consumer that waited, and the element it gets once ``resume()`` is called.
    struct Wake: Sendable {
        fileprivate let waiter: Waiter
        fileprivate let element: Element

        func resume() {
            waiter.resume(returning: element)
        }
    }

    /// Hands `element` to the consumer; when the buffer is full, sheds the oldest element for
    /// which `expendable` holds, or else the oldest, and counts it for the consumer.
    ///
    /// Returns the consumer's wake if it was waiting: the caller resumes it once it holds no
    /// lock of its own. (A consumer's cancellation ends the stream holding its task's lock and
    /// then calls `onTermination`, which takes the lock of whoever offers; resuming the task
    /// needs the task's lock. Under the offerer's lock, that deadlocked both threads.)
    func offerShedding(_ element: Element, expendable: (Element) -> Bool) -> Wake? {
        state.withLockedValue { state -> Wake? in
            guard !state.terminated, !state.finished else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return Wake(waiter: waiter, element: element)
            }
            // (What the consumer's batch holds is the consumer's: only what is still here is shed.)
            if Self.isFull(state, limits), !state.elements.isEmpty {
                let index = state.elements.firstIndex { expendable($0.element) } ?? state.elements.startIndex
                let shed = state.elements.remove(at: index)
                state.release(shed.cost, shed.storage)
                state.shed += 1
            }
            state.elements.append(Stored(element: element, cost: 0))
            return nil
        }
    }

    private enum Take {
        case element(Element)
        case ended
        case empty
    }

    /// The next element, waiting for one; nil once the stream has ended, or the consumer's task
    /// is cancelled. One consumer at a time.
    func next() async -> Element? {
        // Before what is buffered: a cancelled consumer whose elements keep coming would never
        // run out of them and wait, where the cancellation handler ends the stream.
        if Task.isCancelled {
            terminate()
            return nil
        }
        if let element = batch.withLockedValue({ $0.elements.popFirst()?.element }) { return element }
        switch refill() {
        case .element(let element): return element
        case .ended: return nil
        case .empty: break
        }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { continuation in
                switch refill(orWait: continuation) {
                case .element(let element): continuation.resume(returning: element)
                case .ended: continuation.resume(returning: nil)
                case .empty: break  // the next offer, or the end, resumes it
                }
            }
        } onCancel: {
            terminate()
        }
    }

    /// The consumer's batch is used up: gives it back and takes the next, returning its first
    /// element; if nothing is buffered, leaves `waiter` for the next offer.
    private func refill(orWait waiter: Waiter? = nil) -> Take {
        let (taken, room) = batch.withLockedValue { batch in
            state.withLockedValue { state -> (Take, [@Sendable () -> Void]) in
                for (cost, storage) in batch.taken { state.release(cost, storage) }
                batch.taken.removeAll(keepingCapacity: true)
                state.batchCount = 0
                if state.shed > 0, let shedNotice {
                    defer { state.shed = 0 }
                    return (.element(shedNotice(state.shed)), [])
                }
                guard let first = state.elements.popFirst() else {
                    if state.finished || state.terminated { return (.ended, []) }
                    if let waiter { state.waiter = waiter }
                    return (.empty, [])
                }
                state.release(first.cost, first.storage)
                // The rest of the batch: up to a quarter of the bound (all of what is buffered
                // when that fits, its storage swapped for the used-up batch's); none while a
                // producer waits for room, so that room comes as soon as the consumer makes it.
                let (most, mostBytes) =
                    state.whenRoom.isEmpty ? (limits.maximumCount / 4, limits.maximumBytes / 4) : (0, 0)
                if state.elements.count <= most, state.held <= mostBytes {
                    swap(&batch.elements, &state.elements)
                } else {
                    var bytes = 0
                    while batch.elements.count < most, let next = state.elements.first, bytes + next.cost <= mostBytes {
                        batch.elements.append(state.elements.removeFirst())
                        bytes += next.cost
                    }
                }
                // (Still kept alive, and counted, until the consumer comes back.)
                for taken in batch.elements { batch.taken.append((taken.cost, taken.storage)) }
                state.batchCount = batch.elements.count
                var room: [@Sendable () -> Void] = []
                if !state.whenRoom.isEmpty, state.count <= limits.maximumCount / 2,
                    state.held <= limits.maximumBytes / 2
                {
                    swap(&room, &state.whenRoom)
                }
                return (.element(first.element), room)
            }
        }
        room.forEach { $0() }
        return taken
    }

    /// The producers are done (the session stopped): the consumer reads what is left, then the end.
    func finish() {
        let waiter = state.withLockedValue { state -> Waiter? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// The consumer is gone: drop what is buffered, release stopped producers, end the stream.
    func terminate() {
        let (waiter, room, first) = batch.withLockedValue { batch in
            batch = Batch()
            return state.withLockedValue { state -> (Waiter?, [@Sendable () -> Void], Bool) in
                let first = !state.terminated
                state.terminated = true
                state.elements.removeAll()
                state.held = 0
                state.storages = [:]
                state.batchCount = 0
                defer {
                    state.waiter = nil
                    state.whenRoom = []
                }
                return (state.waiter, state.whenRoom, first)
            }
        }
        waiter?.resume(returning: nil)
        room.forEach { $0() }
        if first { onTermination() }
    }
}

/// The buffer a payload is a slice of, which the payload keeps alive whole, counted at its
/// capacity (``StreamBuffer``). It keeps the storage alive itself: counted by the identity of
/// the storage object, which must not go (and its address be taken by another's) while an
/// element counted with it is still accounted for, handed to the consumer or not.
///
/// `@unchecked Sendable`: the storage object is only retained and compared by identity, never used.
struct PayloadStorage: @unchecked Sendable {
    private let storage: AnyObject
    let capacity: Int

    var id: ObjectIdentifier { ObjectIdentifier(storage) }

    init(of payload: ByteBuffer) {
        storage = payload.withUnsafeReadableBytesWithStorageManagement { _, storage in storage.takeUnretainedValue() }
        capacity = payload.storageCapacity
    }
}

/// What became of an element offered to a ``StreamBuffer``.
enum StreamOffer: Equatable {
    /// Taken; offer more.
    case taken
    /// Taken, and the buffer is full: stop until `whenRoom` is called.
    case full
    /// The consumer has gone; nothing was taken.
    case gone
}

/// Ends a stream's subscription when the last copy of the stream, and its iterator, are gone.
final class StreamLifetime<Element: Sendable>: Sendable {
    let buffer: StreamBuffer<Element>

    init(_ buffer: StreamBuffer<Element>) {
        self.buffer = buffer
    }

    deinit {
        buffer.terminate()
    }
}
