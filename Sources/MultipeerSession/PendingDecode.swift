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
        var waiters: [CheckedContinuation<(any Sendable)?, Never>] = []
    }

    private let state = NIOLockedValueBox(State())

    /// The decoding ended.
    func complete(_ result: Result<any Sendable, any Error>) {
        let waiters = state.withLockedValue { state in
            state.result = result
            defer { state.waiters = [] }
            return state.waiters
        }
        let value = try? result.get()
        for waiter in waiters { waiter.resume(returning: value) }
    }

    /// The value if it is decoded now.
    var decoded: (any Sendable)? { state.withLockedValue { try? $0.result?.get() } }

    /// The value once decoded; nil if it did not decode.
    func value() async -> (any Sendable)? {
        await withCheckedContinuation { continuation in
            let result = state.withLockedValue { state in
                if state.result == nil { state.waiters.append(continuation) }
                return state.result
            }
            if let result { continuation.resume(returning: try? result.get()) }
        }
    }
}
