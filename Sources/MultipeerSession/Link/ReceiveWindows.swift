import Foundation
import MultipeerCore
import NIOCore
import Synchronization

/// What this session has delivered from each sender, across that sender's links: one window
/// per sender, following the incarnation of the link the session keeps for it.
///
/// The incomplete messages of all senders together hold at most twice the largest message this
/// side takes (``budget(limit:)``): a message that begins beyond that first takes the memory of
/// incomplete messages whose senders have no link now (their place is kept, and they begin
/// again when their senders come back), and is refused if the rest all belong to senders
/// sending now. So no number of identities minted with the group key makes this side hold more.
///
/// Confined to the event loop every link of the session runs on (``Inbox/executor``'s, the
/// session environment's one loop), where the links' handlers call it, as everything confined
/// to a loop in this package is: in SwiftNIO's loop-bound boxes (`NIOLoopBoundBox`), whose every
/// access checks the loop, and no lock is taken. A whole DATA message costs its sender's
/// window, found by the link when the session kept it (``window(of:)``), and that check. Only
/// ``reserved`` is read from elsewhere (the simulator's check of memory, from any thread): an
/// atomic, changed on the loop.
final class ReceiveWindows: Sendable {
    /// One sender's window, on the windows' loop.
    final class Window: Sendable {
        fileprivate let state: NIOLoopBoundBox<ReceiveWindow>
        fileprivate init(incarnation: UInt64, on eventLoop: any EventLoop) {
            state = NIOLoopBoundBox(ReceiveWindow(incarnation: incarnation), eventLoop: eventLoop)
        }
    }

    /// Every sender's window, and the link each follows now: the one the session keeps for the
    /// sender (adopted), until that link closes. A sender without one sends nothing now.
    private struct Senders: Sendable {
        var windows: [UUID: Window] = [:]
        var links: [UUID: LinkID] = [:]
    }

    private let eventLoop: any EventLoop
    private let senders: NIOLoopBoundBox<Senders>
    /// What every window's incomplete message holds, in all.
    private let held = Atomic<Int>(0)

    /// Windows for the links of `eventLoop` (made anywhere, used on that loop).
    init(on eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
        senders = NIOLoopBoundBox.makeBoxSendingValue(Senders(), eventLoop: eventLoop)
    }

    /// What the incomplete messages of all senders hold now (at most ``budget(limit:)``); read
    /// from any thread.
    var reserved: Int { held.load(ordering: .relaxed) }

    /// All incomplete messages together, for a side that takes messages of at most `limit`.
    static func budget(limit: Int) -> Int { 2 * limit }

    /// Applies `change` to a sender's window, keeping ``held`` in step.
    private func update<Result>(_ window: Window, _ change: (inout ReceiveWindow) -> Result) -> Result {
        let (result, delta) = { (state: inout ReceiveWindow) in
            let before = state.reservedBytes
            let result = change(&state)
            return (result, state.reservedBytes - before)
        }(&window.state.value)
        if delta != 0 { held.add(delta, ordering: .relaxed) }
        return result
    }

    /// The session keeps `link`, of the sender's `incarnation`, as its one link to it (the
    /// core's `adopt`): the window follows that link and incarnation from now on (a new
    /// incarnation starts over). Returns what was delivered from it: where the sender resumes.
    func adopt(_ peerID: UUID, incarnation: UInt64, on link: LinkID) -> LinkMessage {
        let window = senders.value.windows[peerID] ?? Window(incarnation: incarnation, on: eventLoop)
        senders.value.windows[peerID] = window
        senders.value.links[peerID] = link
        return update(window) { window in
            window.sender(incarnation: incarnation)
            window.linkAdopted()
            let (sequence, partial) = window.acknowledgement
            return .ack(sequence, partial: partial)
        }
    }

    /// The sender's window, once a link of it was adopted: what its link passes to
    /// ``receive(_:in:from:incarnation:limit:)`` and ``acknowledgement(in:incarnation:)``.
    func window(of peerID: UUID) -> Window? {
        senders.value.windows[peerID]
    }

    /// The sender's adopted `link` closed: if its window follows that one (not a successor
    /// adopted before it closed), the sender has no link now.
    func linkClosed(_ peerID: UUID, link: LinkID) {
        if senders.value.links[peerID] == link { senders.value.links[peerID] = nil }
    }

    /// A reliable message, or a fragment of one, from the sender's `incarnation`; nil if the
    /// window follows another incarnation (the link it came on was replaced and is closing), or
    /// the sender has none. `limit` is this side's Limits.maximumMessageLength.
    func receive(
        _ message: ReliableFrame,
        from peerID: UUID,
        incarnation: UInt64,
        limit: Int
    ) -> (verdict: ReceiveWindow.Verdict, abandoned: String?)? {
        guard let window = window(of: peerID) else { return nil }
        return receive(message, in: window, from: peerID, incarnation: incarnation, limit: limit)
    }

    /// The same, in the sender's `window`.
    func receive(
        _ message: ReliableFrame,
        in window: Window,
        from peerID: UUID,
        incarnation: UInt64,
        limit: Int
    ) -> (verdict: ReceiveWindow.Verdict, abandoned: String?)? {
        guard window.state.value.incarnation == incarnation else { return nil }
        // (The sender's name is made only for an error: nothing is formatted for a message that is fine.)
        switch message {
        case .data(let data):
            return update(window) { $0.receive(data, from: "peer \(peerID)") }
        case .fragment(let fragment):
            let needed = window.state.value.reservation(for: fragment)
            if needed > 0, let refusal = makeRoom(needed, for: peerID, limit: limit) {
                return (.invalid(refusal), nil)
            }
            return update(window) { $0.receive(fragment, limit: limit, from: "peer \(peerID)") }
        }
    }

    /// Frees the memory of incomplete messages whose senders have no link, until `needed` more
    /// fits the budget; the error to refuse the message with if it still does not.
    private func makeRoom(_ needed: Int, for peerID: UUID, limit: Int) -> MultipeerError? {
        let budget = Self.budget(limit: limit)
        guard reserved + needed > budget else { return nil }
        let senders = senders.value
        for (other, window) in senders.windows where other != peerID && senders.links[other] == nil {
            _ = update(window) { $0.releasePartialBytes() }
            if reserved + needed <= budget { return nil }
        }
        return MultipeerError(
            .messageTooLarge,
            "peer \(peerID) began a message of \(needed) bytes while this side holds \(reserved) bytes of incomplete messages from peers sending now; all together may hold \(budget) (twice Limits.maximumMessageLength): the link is closed, and the peer sends it again on its next link"
        )
    }

    /// The ACK for the sender's `incarnation`, if anything was delivered since the last one.
    func acknowledgement(for peerID: UUID, incarnation: UInt64) -> LinkMessage? {
        window(of: peerID).flatMap { acknowledgement(in: $0, incarnation: incarnation) }
    }

    /// The same, in the sender's `window`.
    func acknowledgement(in window: Window, incarnation: UInt64) -> LinkMessage? {
        { (state: inout ReceiveWindow) -> LinkMessage? in
            guard state.incarnation == incarnation, state.unacknowledged > 0 else { return nil }
            state.acknowledged()
            return .ack(state.acknowledgement.sequence, partial: state.acknowledgement.partial)
        }(&window.state.value)
    }
}
