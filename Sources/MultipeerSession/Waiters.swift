import Foundation

/// Tasks waiting (on a stream, for a transfer's outcome), each until it is woken or its task is
/// cancelled. Kept under its owner's lock.
struct Waiters {
    private var waiting: [(id: UUID, continuation: UnsafeContinuation<Void, Never>)] = []

    mutating func add(_ id: UUID, _ continuation: UnsafeContinuation<Void, Never>) {
        waiting.append((id, continuation))
    }

    mutating func take(_ id: UUID) -> UnsafeContinuation<Void, Never>? {
        guard let index = waiting.firstIndex(where: { $0.id == id }) else { return nil }
        return waiting.remove(at: index).continuation
    }

    mutating func takeAll() -> [UnsafeContinuation<Void, Never>] {
        defer { waiting = [] }
        return waiting.map(\.continuation)
    }
}
