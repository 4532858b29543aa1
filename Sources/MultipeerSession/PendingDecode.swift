import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization

/// A large message being decoded in a task of its own: its readers wait for the value.
final class PendingDecode: Sendable {
    private struct State {
        var result: Result<any Sendable, any Error>?
        var waiting = Waiters()
    }

    private let state = NIOLockedValueBox(State())

    /// The decoding ended.
    func complete(_ result: Result<any Sendable, any Error>) {
        let waiting = state.withLockedValue { state in
            state.result = result
            return state.waiting.takeAll()
        }
        for waiter in waiting { waiter.resume() }
    }

    /// The value if it is decoded now.
    var decoded: (any Sendable)? { state.withLockedValue { try? $0.result?.get() } }

    /// The value once decoded; nil if it did not decode, or the waiting task is cancelled first
    /// (its stream ends: ``StreamBuffer/next()``).
    func value() async -> (any Sendable)? {
        await state.wait(in: \.waiting, unless: { $0.result != nil })
        return try? state.withLockedValue { $0.result }?.get()
    }
}
