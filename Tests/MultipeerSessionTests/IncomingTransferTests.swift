import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// A file being received, on a channel standing for its link.
@Suite struct IncomingTransferTests {
    /// The application may cancel a file the moment it is announced, which the session does
    /// before the store is opened for it; the sender must hear of it all the same. (It once did
    /// not: the transfer learnt its link only as the store opened, and a cancel in between sent
    /// its END nowhere, so the sender waited for ever. A consumer test met it under load.)
    @Test func aCancelBeforeTheStoreIsOpenReachesTheSender() async throws {
        let channel = NIOAsyncTestingChannel()
        let offer = try ResourceOffer(
            id: UUID(),
            name: "chart.pdf",
            length: 1 << 20,
            sha256: [UInt8](repeating: 7, count: 32)
        )
        let ended = NIOLockedValueBox<ResourceEndReason?>(nil)
        // The session records the end before the outcome wakes anyone: a waiter that returns
        // finds it recorded (it once raced the record, and lost under load).
        let resolvedBeforeRecorded = NIOLockedValueBox<Bool?>(nil)
        let made = NIOLockedValueBox<IncomingTransfer?>(nil)
        let transfer = IncomingTransfer(
            offer: offer,
            sender: Peer(id: UUID(), key: PeerIdentity().key, displayName: "sender"),
            on: channel,
            queue: DispatchFileQueue(label: "test"),
            clock: SystemClock()
        ) { reason in
            ended.withLockedValue { $0 = reason }
            resolvedBeforeRecorded.withLockedValue { $0 = made.withLockedValue { $0 }?.outcome.isResolved }
        }
        made.withLockedValue { $0 = transfer }

        transfer.end(.cancelled)

        do {
            _ = try await transfer.outcome.value()
            Issue.record("a cancelled transfer ended without an error")
        } catch {
            #expect((error as? MultipeerError)?.code == .resourceCancelled, "\(error)")
        }
        #expect(ended.withLockedValue { $0 } == .cancelled)
        #expect(resolvedBeforeRecorded.withLockedValue { $0 } == false, "the end is recorded before the outcome wakes")
        // The END was written before the outcome was resolved; whatever the loop still holds of
        // it is run, then read.
        try await channel.testingEventLoop.executeInContext {}
        let written = try await channel.readOutbound(as: LinkMessage.self)
        #expect(written == .resourceEnd(ResourceEnd(id: offer.id, reason: .cancelled, text: "")), "the sender is told")
        _ = try await channel.finish(acceptAlreadyClosed: true)
        // The transfer's end callback holds `made`, which holds the transfer: let it go
        // (LeakSanitizer, in make sanitize, found the cycle).
        made.withLockedValue { $0 = nil }
    }

    /// Waiting for a transfer's end (`completion()`, `file()`) stops when the waiting task is
    /// cancelled, before it waits or while it does; the transfer goes on, and its outcome still
    /// reaches the tasks that wait for it.
    @Test func aCancelledWaiterStopsWaitingAndTheOthersGetTheOutcome() async throws {
        let outcome = ResourceOutcome<Int>()
        let cancelledFirst = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await outcome.value()
        }
        await #expect(throws: CancellationError.self) { try await cancelledFirst.value }

        let started = AsyncStream<Void>.makeStream()
        let waiting = Task {
            started.continuation.yield()
            return try await outcome.value()
        }
        let staying = Task { try await outcome.value() }
        for await _ in started.stream { break }
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(!outcome.isResolved, "the transfer goes on")

        outcome.resolve(.success(42))
        #expect(try await staying.value == 42)
        #expect(try await outcome.value() == 42, "a wait that begins later gets it at once")
    }
}
