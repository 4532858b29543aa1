import Foundation
import MultipeerSession
import MultipeerSessionTesting

/// A session's events as they come, each with the simulated time it came at: read from the
/// world's thread, so the record is the same every run of a seed.
final class EventRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: [(at: Duration, event: SessionEvent)] = []
    private var task: Task<Void, Never>?

    init(_ session: MultipeerSession, in world: SimulatedWorld) {
        let events = session.events
        task = Task(executorPreference: world.executor) { [weak self] in
            for await event in events {
                guard let self else { return }
                lock.withLock { seen.append((world.now, event)) }
            }
        }
    }

    deinit { task?.cancel() }

    /// Every event so far, in order.
    var events: [SessionEvent] { lock.withLock { seen.map(\.event) } }

    /// Why `peerID` left, each time it did, with when.
    func departures(of peerID: UUID) -> [(at: Duration, reason: PeerLeftReason)] {
        lock.withLock {
            seen.compactMap {
                if case .peerLeft(let peer, let reason) = $0.event, peer.id == peerID { ($0.at, reason) } else { nil }
            }
        }
    }

    /// The refusals this session reported (`authenticationFailed`), with when.
    var refusals: [(at: Duration, error: MultipeerError)] {
        lock.withLock {
            seen.compactMap { if case .authenticationFailed(_, let error) = $0.event { ($0.at, error) } else { nil } }
        }
    }

    /// When each dial this session made failed (`connectionFailed`).
    var failedDials: [Duration] {
        lock.withLock { seen.compactMap { if case .connectionFailed = $0.event { $0.at } else { nil } } }
    }

    /// Whether some event so far matches `match`.
    func contains(_ match: (SessionEvent) -> Bool) -> Bool { lock.withLock { seen.contains { match($0.event) } } }
}

/// What a reader task collected, read between the world's jobs.
final class Collected<Element: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var elements: [Element] = []
    private var ending: (any Error)??

    func append(_ element: Element) { lock.withLock { elements.append(element) } }
    func append(contentsOf more: some Sequence<Element>) { lock.withLock { elements.append(contentsOf: more) } }
    func end(_ error: (any Error)? = nil) { lock.withLock { ending = .some(error) } }

    var all: [Element] { lock.withLock { elements } }
    var count: Int { lock.withLock { elements.count } }
    /// Whether the reader ended, and the error it ended with.
    var ended: Bool { lock.withLock { ending != nil } }
    var error: (any Error)? { lock.withLock { ending ?? nil } }
}
