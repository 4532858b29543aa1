import Foundation
import MultipeerCore
import NIOCore
import NIOConcurrencyHelpers

/// What this session has delivered from each sender, across that sender's links: one window
/// per sender, following the incarnation of the link the session keeps for it.
///
/// The incomplete messages of all senders together hold at most twice the largest message this
/// side takes (``budget(limit:)``): a message that begins beyond that first takes the memory of
/// incomplete messages whose senders have no link now (their place is kept, and they begin
/// again when their senders come back), and is refused if the rest all belong to senders
/// sending now. So no number of identities minted with the group key makes this side hold more.
final class ReceiveWindows: Sendable {
    private struct State {
        var windows: [UUID: ReceiveWindow] = [:]
        /// What every window's incomplete message holds, in all.
        var reserved = 0
        /// Adopted links open, per sender (a replaced link may close after its successor came).
        var links: [UUID: Int] = [:]

        /// Applies `change` to the sender's window, keeping ``reserved`` in step.
        mutating func update<Result>(_ peerID: UUID, _ change: (inout ReceiveWindow) -> Result) -> Result {
            let before = windows[peerID]?.reservedBytes ?? 0
            defer { reserved += (windows[peerID]?.reservedBytes ?? 0) - before }
            return change(&windows[peerID]!)
        }
    }

    private let state = NIOLockedValueBox(State())

    /// All incomplete messages together, for a side that takes messages of at most `limit`.
    static func budget(limit: Int) -> Int { 2 * limit }

    /// The session keeps a link of the sender's `incarnation` as its one link to it: the window
    /// follows that incarnation from now on (a new incarnation starts over). Returns what was
    /// delivered from it: where the sender resumes.
    func adopt(_ peerID: UUID, incarnation: UInt64) -> LinkMessage {
        state.withLockedValue { state in
            if state.windows[peerID] == nil { state.windows[peerID] = ReceiveWindow(incarnation: incarnation) }
            state.links[peerID, default: 0] += 1
            return state.update(peerID) { window in
                window.sender(incarnation: incarnation)
                window.linkAdopted()
                let (sequence, partial) = window.acknowledgement
                return .ack(sequence, partial: partial)
            }
        }
    }

    /// An adopted link of the sender closed.
    func linkClosed(_ peerID: UUID) {
        state.withLockedValue { state in
            state.links[peerID, default: 1] -= 1
            if state.links[peerID] == 0 { state.links[peerID] = nil }
        }
    }

    /// A reliable message, or a fragment of one, from the sender's `incarnation`; nil if the
    /// window follows another incarnation (the link it came on was replaced and is closing).
    /// `limit` is this side's Limits.maximumMessageLength.
    func receive(
        _ message: LinkMessage, from peerID: UUID, incarnation: UInt64, limit: Int
    ) -> (verdict: ReceiveWindow.Verdict, abandoned: String?)? {
        state.withLockedValue { state in
            guard state.windows[peerID]?.incarnation == incarnation else { return nil }
            switch message {
            case .data(let data):
                // (The name is made only for an error: formatting a UUID for every message was 2 % of a small one's cost.)
                return state.update(peerID) { $0.receive(data, from: "peer \(peerID)") }
            case .fragment(let fragment):
                let needed = state.windows[peerID]!.reservation(for: fragment)
                if needed > 0, let refusal = Self.makeRoom(needed, for: peerID, limit: limit, in: &state) {
                    return (.invalid(refusal), nil)
                }
                return state.update(peerID) { $0.receive(fragment, limit: limit, from: "peer \(peerID)") }
            default:
                return nil
            }
        }
    }

    /// Frees the memory of incomplete messages whose senders have no link, until `needed` more
    /// fits the budget; the error to refuse the message with if it still does not.
    private static func makeRoom(_ needed: Int, for peerID: UUID, limit: Int, in state: inout State) -> MultipeerError? {
        let budget = budget(limit: limit)
        guard state.reserved + needed > budget else { return nil }
        for (other, window) in state.windows where other != peerID && state.links[other] == nil && window.reservedBytes > 0 {
            _ = state.update(other) { $0.releasePartialBytes() }
            if state.reserved + needed <= budget { return nil }
        }
        return MultipeerError(
            .messageTooLarge,
            "peer \(peerID) began a message of \(needed) bytes while this side holds \(state.reserved) bytes of incomplete messages from peers sending now; all together may hold \(budget) (twice Limits.maximumMessageLength): the link is closed, and the peer sends it again on its next link")
    }

    /// The ACK for the sender's `incarnation`, if anything was delivered since the last one.
    func acknowledgement(for peerID: UUID, incarnation: UInt64) -> LinkMessage? {
        state.withLockedValue { state in
            guard let window = state.windows[peerID], window.incarnation == incarnation, window.unacknowledged > 0 else { return nil }
            state.windows[peerID]!.acknowledged()
            return .ack(window.acknowledgement.sequence, partial: window.acknowledgement.partial)
        }
    }

    /// What all incomplete messages hold now (for tests).
    var reservedBytes: Int { state.withLockedValue { $0.reserved } }
}
