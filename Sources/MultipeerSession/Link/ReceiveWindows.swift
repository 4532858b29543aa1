import Foundation
import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore

/// What this session has delivered from each sender, across that sender's links: one window
/// per sender, following the incarnation of the link the session keeps for it.
///
/// The incomplete messages of all senders together hold at most twice the largest message this
/// side takes (``budget(limit:)``): a message that begins beyond that first takes the memory of
/// incomplete messages whose senders have no link now (their place is kept, and they begin
/// again when their senders come back), and is refused if the rest all belong to senders
/// sending now. So no number of identities minted with the group key makes this side hold more.
///
/// Each sender's window has a lock of its own: a link takes its sender's window once, when the
/// session keeps it (``window(of:)``), and a whole DATA message then costs that lock alone. The
/// session-wide lock is taken for what concerns all senders: a window made or adopted, a
/// message beginning in fragments (the budget), and a DATA message that comes while the
/// sender's window holds an incomplete one (it may give that up, and its bytes with it). Lock
/// order: the session-wide lock, then a window's.
final class ReceiveWindows: Sendable {
    /// One sender's window, behind its own lock.
    final class Window: Sendable {
        fileprivate let state: NIOLockedValueBox<ReceiveWindow>
        fileprivate init(incarnation: UInt64) { state = NIOLockedValueBox(ReceiveWindow(incarnation: incarnation)) }
    }

    private struct State {
        var windows: [UUID: Window] = [:]
        /// What every window's incomplete message holds, in all.
        var reserved = 0
        /// Adopted links open, per sender (a replaced link may close after its successor came).
        var links: [UUID: Int] = [:]

        /// Applies `change` to a sender's window, keeping ``reserved`` in step.
        mutating func update<Result>(_ window: Window, _ change: (inout ReceiveWindow) -> Result) -> Result {
            let (result, delta) = window.state.withLockedValue { window in
                let before = window.reservedBytes
                let result = change(&window)
                return (result, window.reservedBytes - before)
            }
            reserved += delta
            return result
        }
    }

    private let state = NIOLockedValueBox(State())

    /// What the incomplete messages of all senders hold now (at most ``budget(limit:)``).
    var reserved: Int { state.withLockedValue { $0.reserved } }

    /// All incomplete messages together, for a side that takes messages of at most `limit`.
    static func budget(limit: Int) -> Int { 2 * limit }

    /// The session keeps a link of the sender's `incarnation` as its one link to it: the window
    /// follows that incarnation from now on (a new incarnation starts over). Returns what was
    /// delivered from it: where the sender resumes.
    func adopt(_ peerID: UUID, incarnation: UInt64) -> LinkMessage {
        state.withLockedValue { state in
            if state.windows[peerID] == nil { state.windows[peerID] = Window(incarnation: incarnation) }
            state.links[peerID, default: 0] += 1
            return state.update(state.windows[peerID]!) { window in
                window.sender(incarnation: incarnation)
                window.linkAdopted()
                let (sequence, partial) = window.acknowledgement
                return .ack(sequence, partial: partial)
            }
        }
    }

    /// The sender's window, once a link of it was adopted: what its link passes to
    /// ``receive(_:in:from:incarnation:limit:)`` and ``acknowledgement(in:incarnation:)``.
    func window(of peerID: UUID) -> Window? {
        state.withLockedValue { $0.windows[peerID] }
    }

    /// An adopted link of the sender closed.
    func linkClosed(_ peerID: UUID) {
        state.withLockedValue { state in
            state.links[peerID, default: 1] -= 1
            if state.links[peerID] == 0 { state.links[peerID] = nil }
        }
    }

    /// A reliable message, or a fragment of one, from the sender's `incarnation`; nil if the
    /// window follows another incarnation (the link it came on was replaced and is closing), or
    /// the sender has none. `limit` is this side's Limits.maximumMessageLength.
    func receive(
        _ message: LinkMessage,
        from peerID: UUID,
        incarnation: UInt64,
        limit: Int
    ) -> (verdict: ReceiveWindow.Verdict, abandoned: String?)? {
        guard let window = window(of: peerID) else { return nil }
        return receive(message, in: window, from: peerID, incarnation: incarnation, limit: limit)
    }

    /// The same, in the sender's `window`.
    func receive(
        _ message: LinkMessage,
        in window: Window,
        from peerID: UUID,
        incarnation: UInt64,
        limit: Int
    ) -> (verdict: ReceiveWindow.Verdict, abandoned: String?)? {
        if case .data(let data) = message {
            // A whole message, and nothing incomplete in the window: no other window's concern.
            // (The name is made only for an error: formatting a UUID for every message was 2 % of a small one's cost.)
            let received = window.state.withLockedValue {
                window -> (verdict: ReceiveWindow.Verdict, abandoned: String?)?? in
                guard window.incarnation == incarnation else { return .some(nil) }
                guard window.reservedBytes == 0 else { return nil }
                return .some(window.receive(data, from: "peer \(peerID)"))
            }
            if let received { return received }
        }
        return state.withLockedValue { state in
            guard window.state.withLockedValue({ $0.incarnation }) == incarnation else { return nil }
            switch message {
            case .data(let data):
                return state.update(window) { $0.receive(data, from: "peer \(peerID)") }
            case .fragment(let fragment):
                let needed = window.state.withLockedValue { $0.reservation(for: fragment) }
                if needed > 0, let refusal = Self.makeRoom(needed, for: peerID, limit: limit, in: &state) {
                    return (.invalid(refusal), nil)
                }
                return state.update(window) { $0.receive(fragment, limit: limit, from: "peer \(peerID)") }
            default:
                return nil
            }
        }
    }

    /// Frees the memory of incomplete messages whose senders have no link, until `needed` more
    /// fits the budget; the error to refuse the message with if it still does not.
    private static func makeRoom(_ needed: Int, for peerID: UUID, limit: Int, in state: inout State) -> MultipeerError?
    {
        let budget = budget(limit: limit)
        guard state.reserved + needed > budget else { return nil }
        for (other, window) in state.windows where other != peerID && state.links[other] == nil {
            _ = state.update(window) { $0.releasePartialBytes() }
            if state.reserved + needed <= budget { return nil }
        }
        return MultipeerError(
            .messageTooLarge,
            "peer \(peerID) began a message of \(needed) bytes while this side holds \(state.reserved) bytes of incomplete messages from peers sending now; all together may hold \(budget) (twice Limits.maximumMessageLength): the link is closed, and the peer sends it again on its next link"
        )
    }

    /// The ACK for the sender's `incarnation`, if anything was delivered since the last one.
    func acknowledgement(for peerID: UUID, incarnation: UInt64) -> LinkMessage? {
        window(of: peerID).flatMap { acknowledgement(in: $0, incarnation: incarnation) }
    }

    /// The same, in the sender's `window`.
    func acknowledgement(in window: Window, incarnation: UInt64) -> LinkMessage? {
        window.state.withLockedValue { window in
            guard window.incarnation == incarnation, window.unacknowledged > 0 else { return nil }
            window.acknowledged()
            return .ack(window.acknowledgement.sequence, partial: window.acknowledgement.partial)
        }
    }

    /// What all incomplete messages hold now (for tests).
    var reservedBytes: Int { state.withLockedValue { $0.reserved } }
}
