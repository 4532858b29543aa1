import Foundation
import NIOConcurrencyHelpers

/// What the simulated applications sent and received, and the promises it is checked against
/// (Sources/MultipeerSession/MultipeerSession.docc/DeliveryGuarantees.md).
final class Ledger: Sendable {
    /// A message's identity: the sender's incarnation and its number there.
    struct MessageID: Hashable, Sendable, CustomStringConvertible {
        var sender: UInt64
        var number: UInt64
        var description: String { "\(number) of incarnation \(sender)" }
    }

    enum Outcome: Sendable {
        /// The send is under way.
        case sending
        /// The send returned: queued (or, with `acknowledged`, in the peer's application).
        case queued(acknowledged: Bool)
        /// The send threw; `stillQueued` when the documentation says the message stays queued.
        case failed(String, stillQueued: Bool)
    }

    struct Sent: Sendable {
        var from: String
        var to: String
        var type: String
        var reliable: Bool
        var at: Duration
        var outcome: Outcome
        /// The receiver incarnations it reached.
        var deliveries: [UInt64] = []
        /// Its receiver's application had it, unread, when its process was killed: it was
        /// acknowledged, and died with that process (DeliveryGuarantees).
        var diedUnread = false
    }

    private struct State {
        var sent: [MessageID: Sent] = [:]
        /// The last number delivered, by receiver incarnation, sender incarnation, type and reliability.
        var lastDelivered: [String: UInt64] = [:]
        var violations: [Violation] = []
        var deliveries = 0
    }

    private let state = NIOLockedValueBox(State())

    func sending(_ id: MessageID, _ sent: Sent) {
        state.withLockedValue { $0.sent[id] = sent }
    }

    func outcome(_ id: MessageID, _ outcome: Outcome) {
        state.withLockedValue { $0.sent[id]?.outcome = outcome }
    }

    func violation(_ promise: Promise, _ text: String) {
        state.withLockedValue { $0.violations.append(Violation(promise: promise, text: text)) }
    }

    /// The promises broken since the last call.
    func takeViolations() -> [Violation] {
        state.withLockedValue { state in
            defer { state.violations = [] }
            return state.violations
        }
    }
    var deliveryCount: Int { state.withLockedValue { $0.deliveries } }
    var sentCount: Int { state.withLockedValue { $0.sent.count } }

    /// The application of a process killed now had these messages and had not read them.
    func diedUnread(_ ids: [MessageID]) {
        state.withLockedValue { state in
            for id in ids { state.sent[id]?.diedUnread = true }
        }
    }

    /// A message reached `receiver`'s application (of incarnation `incarnation`), at `at`.
    func delivered(
        _ id: MessageID,
        type: String,
        reliable: Bool,
        to receiver: String,
        incarnation: UInt64,
        at: Duration
    ) {
        state.withLockedValue { state in
            state.deliveries += 1
            guard var sent = state.sent[id] else {
                return state.violations.append(
                    .init(promise: .exactlyOnceInOrder, text: "\(at) \(receiver): got message \(id), never sent")
                )
            }
            if sent.to != "*" && sent.to != receiver {
                state.violations.append(
                    .init(
                        promise: .exactlyOnceInOrder,
                        text: "\(at) \(receiver): got message \(id), sent to \(sent.to)"
                    )
                )
            }
            if sent.deliveries.contains(incarnation) {
                state.violations.append(
                    .init(
                        promise: .exactlyOnceInOrder,
                        text:
                            "\(at) \(receiver): got message \(id) from \(sent.from) twice in one incarnation (exactly once)"
                    )
                )
            }
            sent.deliveries.append(incarnation)
            state.sent[id] = sent
            let stream = "\(incarnation) \(id.sender) \(type) \(reliable)"
            if let last = state.lastDelivered[stream], last >= id.number {
                state.violations.append(
                    .init(
                        promise: .exactlyOnceInOrder,
                        text:
                            "\(at) \(receiver): got \(type) \(id) from \(sent.from) after number \(last) (in order per sender incarnation)"
                    )
                )
            }
            state.lastDelivered[stream] = max(state.lastDelivered[stream] ?? 0, id.number)
        }
    }

    /// The reliable messages that must have arrived by now and have not: sent (the send
    /// returned, or it threw and the message stayed queued) by an incarnation that was not
    /// killed, or acknowledged whoever was killed, to a host among `alive`, unless the
    /// receiver's application had it when its process was killed.
    func undelivered(killed: Set<UInt64>, alive: Set<String>) -> [(MessageID, Sent)] {
        state.withLockedValue { state in
            state.sent.filter { id, sent in
                guard sent.reliable, sent.to != "*", alive.contains(sent.to), sent.deliveries.isEmpty, !sent.diedUnread
                else { return false }
                switch sent.outcome {
                case .sending: return false
                case .queued(let acknowledged): return acknowledged || !killed.contains(id.sender)
                case .failed(_, let stillQueued): return stillQueued && !killed.contains(id.sender)
                }
            }.sorted { ($0.key.sender, $0.key.number) < ($1.key.sender, $1.key.number) }
        }
    }

    /// Sends still under way (not returned nor thrown) begun before `before`.
    func sendsUnderWay(before: Duration) -> [(MessageID, Sent)] {
        state.withLockedValue { state in
            state.sent.filter { _, sent in
                if case .sending = sent.outcome { return sent.at < before } else { return false }
            }.sorted { ($0.key.sender, $0.key.number) < ($1.key.sender, $1.key.number) }
        }
    }
}
