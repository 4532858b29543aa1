import MultipeerCore
import NIOConcurrencyHelpers

public import struct Foundation.URL
public import struct Foundation.UUID

/// How far a resource's transfer has come.
public struct ResourceProgress: Hashable, Sendable {
    /// The bytes the receiver holds: written to its disk (the sender learns it from the receiver).
    public var bytesDone: Int64
    /// The file's length.
    public var totalBytes: Int64
    /// The bytes done per second since the transfer's first report in this session (a resumed
    /// transfer counts from where it resumed).
    public var bytesPerSecond: Double

    /// A progress report (for applications that test their own handling of it).
    public init(bytesDone: Int64, totalBytes: Int64, bytesPerSecond: Double) {
        self.bytesDone = bytesDone
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
    }

    /// The share done, from 0 to 1 (1 for an empty file).
    public var fractionDone: Double { totalBytes == 0 ? 1 : Double(bytesDone) / Double(totalBytes) }
}

/// A file this session sends to a peer (``MultipeerSession/sendResource(at:named:metadata:to:)``):
/// its progress, its outcome, and a way to cancel it.
///
/// What an outgoing transfer has sent: the bytes of its chunks, and its offers (one on each link
/// it went over).
package struct ResourceSending: Sendable {
    package var bytes: UInt64 = 0
    package var offers = 0
}

/// The transfer goes on across broken links: when the peer comes back, it resumes from what the
/// receiver wrote. It ends when the receiver holds the whole file with its SHA-256 checked, or
/// fails with a `MultipeerError` saying why (`resourceCancelled`, and the
/// other resource codes).
public final class OutgoingResource: Sendable {
    /// Names the transfer (the same on the receiving side: ``IncomingResource/id``).
    public let id: UUID
    /// The name the receiver sees.
    public let name: String
    /// The file's length in bytes.
    public let length: Int64
    /// The SHA-256 of the file's bytes, as sent.
    public let sha256: [UInt8]
    /// The peer it goes to.
    public let peerID: UUID
    /// The transfer's progress, each time the receiver says how much it holds; ends with the transfer.
    public let progress: AsyncStream<ResourceProgress>

    let outcome: ResourceOutcome<Void>
    private let cancelling: @Sendable () -> Void
    private let sent: @Sendable () -> ResourceSending

    /// What the transfer has sent so far (for the simulator's check of what is sent again
    /// after a break).
    package var sending: ResourceSending { sent() }

    init(
        id: UUID,
        name: String,
        length: Int64,
        sha256: [UInt8],
        peerID: UUID,
        progress: AsyncStream<ResourceProgress>,
        outcome: ResourceOutcome<Void>,
        cancel: @escaping @Sendable () -> Void,
        sent: @escaping @Sendable () -> ResourceSending
    ) {
        self.sent = sent
        self.id = id
        self.name = name
        self.length = length
        self.sha256 = sha256
        self.peerID = peerID
        self.progress = progress
        self.outcome = outcome
        self.cancelling = cancel
    }

    /// Returns once the receiver holds the whole file, its hash checked; throws the
    /// `MultipeerError` that ended the transfer otherwise. Cancelling the waiting task stops
    /// the wait (it throws `CancellationError`), not the transfer (``cancel()`` does).
    public func completion() async throws {
        try await outcome.value()
    }

    /// Ends the transfer; the receiver is told (its ``IncomingResource/file()`` throws
    /// `resourceCancelled`) and drops what it has of it. Does nothing once the transfer is over.
    public func cancel() {
        cancelling()
    }
}

/// A file a peer sends this session (``MultipeerSession/incomingResources``): what it is, its
/// progress, and where it is once it has arrived whole.
///
/// It is written under a temporary name in the session's resource directory
/// (``MultipeerSession/Configuration/resourceDirectory``), synced as it comes, and moved into
/// place under its name (or `name (2)`, ... if that is taken) only once whole with the offered
/// SHA-256. A transfer broken by a reconnect, or by a restart of either side that keeps the
/// directory and the identity, resumes from what was written.
public final class IncomingResource: Sendable {
    /// Names the transfer.
    public let id: UUID
    /// The name the sender gave it.
    public let name: String
    /// Its length in bytes.
    public let length: Int64
    /// Who sends it.
    public let sender: Peer
    /// The sender's application's entries.
    public let metadata: [String: String]
    /// The SHA-256 its bytes must have.
    public let sha256: [UInt8]
    /// The transfer's progress, after each write; ends with the transfer.
    public let progress: AsyncStream<ResourceProgress>

    let outcome: ResourceOutcome<URL>
    private let cancelling: @Sendable () -> Void

    init(
        offer: ResourceOffer,
        sender: Peer,
        progress: AsyncStream<ResourceProgress>,
        outcome: ResourceOutcome<URL>,
        cancel: @escaping @Sendable () -> Void
    ) {
        id = offer.id
        name = offer.name
        length = Int64(offer.length)
        self.sender = sender
        metadata = offer.metadata
        sha256 = offer.sha256
        self.progress = progress
        self.outcome = outcome
        self.cancelling = cancel
    }

    /// The file, in place in the resource directory, once it has arrived whole with its hash
    /// checked; throws the `MultipeerError` that ended the transfer otherwise. Cancelling the
    /// waiting task stops the wait (it throws `CancellationError`), not the transfer
    /// (``cancel()`` does).
    public func file() async throws -> URL {
        try await outcome.value()
    }

    /// Ends the transfer; the sender is told (its ``OutgoingResource/completion()`` throws
    /// `resourceCancelled`), and what was written of it is removed.
    public func cancel() {
        cancelling()
    }
}

/// How a transfer ended, once it has: awaited by any number of tasks. A waiting task that is
/// cancelled stops waiting (`CancellationError`); the transfer goes on.
final class ResourceOutcome<Value: Sendable>: Sendable {
    private struct State {
        var result: Result<Value, MultipeerError>?
        var waiting = Waiters()
    }
    private let state = NIOLockedValueBox(State())

    /// Sets the outcome (the first one set stays) and wakes the waiting.
    func resolve(_ result: Result<Value, MultipeerError>) {
        let waiting = state.withLockedValue { state -> [UnsafeContinuation<Void, Never>] in
            guard state.result == nil else { return [] }
            state.result = result
            return state.waiting.takeAll()
        }
        for continuation in waiting { continuation.resume() }
    }

    var isResolved: Bool { state.withLockedValue { $0.result != nil } }

    /// The outcome, once there is one: the value, or the `MultipeerError` that ended the
    /// transfer; `CancellationError` if the waiting task is cancelled first.
    func value() async throws -> Value {
        await state.wait(in: \.waiting, unless: { $0.result != nil })
        guard let result = state.withLockedValue({ $0.result }) else { throw CancellationError() }
        return try result.get()
    }
}

extension MultipeerError {
    /// The error a transfer that ended for `reason` fails with; `byPeer`: the peer said so.
    init(resource name: String, ended reason: ResourceEndReason, byPeer: Bool, detail: String) {
        let who = byPeer ? "the peer" : "this side"
        let code: Code
        let what: String
        switch reason {
        case .cancelled: (code, what) = (.resourceCancelled, "\(who) cancelled it")
        case .hashMismatch: (code, what) = (.resourceCorrupted, "the bytes received do not have the offered SHA-256")
        case .diskFull: (code, what) = (.resourceDiskFull, "the receiver's disk is full")
        case .unwritable: (code, what) = (.resourceUnwritable, "the receiver cannot write where it keeps resources")
        case .sourceChanged: (code, what) = (.resourceChanged, "the sender's file changed or went while it was sent")
        case .refused: (code, what) = (.resourceRefused, "the receiver refused it")
        default: (code, what) = (.resourceCancelled, "\(who) ended it (\(reason))")
        }
        self.init(code, "the transfer of \(name) failed: \(what)" + (detail.isEmpty ? "" : " (\(detail))"))
    }
}
