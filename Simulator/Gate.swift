import Synchronization

/// Where an application's reader waits while the application does not read: it passes while
/// the gate is open, and waits at it while it is closed, until the simulation opens it.
final class Gate: Sendable {
    private struct State {
        var closed = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    var isClosed: Bool { state.withLock { $0.closed } }

    func close() {
        state.withLock { $0.closed = true }
    }

    /// Opens it: the readers waiting go on, in the order they came.
    func open() {
        let waiting = state.withLock { state in
            state.closed = false
            defer { state.waiting = [] }
            return state.waiting
        }
        for reader in waiting { reader.resume() }
    }

    /// Returns at once if it is open, else once it is opened.
    func pass() async {
        await withCheckedContinuation { reader in
            let closed = state.withLock { state in
                if state.closed { state.waiting.append(reader) }
                return state.closed
            }
            if !closed { reader.resume() }
        }
    }
}
