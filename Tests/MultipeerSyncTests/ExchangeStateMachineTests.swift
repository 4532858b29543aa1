import Foundation
import MultipeerSync
import Testing

@testable import MultipeerSync

/// Who initiates which exchange, when another follows, and what an exchange's end proves
/// (docs/SYNC.md 6 and 8).
@Suite struct ExchangeStateMachineTests {
    static let small = UUID(uuidString: "00000000-0000-4000-8000-000000000001")!
    static let large = UUID(uuidString: "F0000000-0000-4000-8000-000000000001")!
    static func at(_ value: UInt64) -> HLCTimestamp { HLCTimestamp(rawValue: value) }

    @Test func atAJoinTheSmallerPeerIDInitiates() {
        var small = ExchangeStateMachine<HLCTimestamp>(own: Self.small, first: 10)
        var large = ExchangeStateMachine<HLCTimestamp>(own: Self.large, first: 10)
        #expect(small.met(Self.large, latest: Self.at(1)) == 11)
        #expect(large.met(Self.small, latest: Self.at(1)) == nil, "one exchange per pair, not two")
        #expect(small.answered(11, by: Self.large, latest: Self.at(2)) == .running)
        #expect(large.answered(11, by: Self.small, latest: Self.at(2)) == .ignored, "never started here")
        #expect(small.answered(12, by: Self.large, latest: Self.at(2)) == .ignored, "another exchange's answer")
    }

    /// The initiator's empty round ends the exchange; the answer to it completes it, proving
    /// the peer holds what this station held at the end, when it stored nothing from elsewhere
    /// meanwhile.
    @Test func anExchangeEndsWithAnEmptyRoundAndItsAnswer() {
        var initiator = ExchangeStateMachine<HLCTimestamp>(own: Self.small, first: 0)
        var other = ExchangeStateMachine<HLCTimestamp>(own: Self.large, first: 0)
        let exchange = initiator.met(Self.large, latest: Self.at(100))!
        #expect(other.offered(exchange, by: Self.small, isEnd: false, latest: Self.at(70)) == nil)
        #expect(initiator.answered(exchange, by: Self.large, latest: Self.at(150)) == .running)
        #expect(other.offered(exchange, by: Self.small, isEnd: false, latest: Self.at(80)) == nil)
        initiator.ending(exchange, with: Self.large)
        #expect(
            other.offered(exchange, by: Self.small, isEnd: true, latest: Self.at(90)) == Self.at(90),
            "the other side proves what it holds at the end"
        )
        #expect(
            initiator.answered(exchange, by: Self.large, latest: Self.at(160))
                == .completed(.init(held: Self.at(160), next: nil))
        )
        #expect(initiator.answered(exchange, by: Self.large, latest: Self.at(160)) == .ignored, "completed once")
        #expect(
            other.offered(7, by: Self.small, isEnd: true, latest: Self.at(90)) == nil,
            "an end whose start it never saw proves nothing"
        )
    }

    /// What a station stores from the peer while their exchange runs the peer holds; from
    /// anywhere else (its own write, a third station), maybe not: the exchange proves what the
    /// station held just before the first such store, on either side.
    @Test func whatCameFromElsewhereWhileAnExchangeRanIsNotProved() {
        let third = UUID(uuidString: "80000000-0000-4000-8000-000000000001")!
        var initiator = ExchangeStateMachine<HLCTimestamp>(own: Self.small, first: 0)
        var other = ExchangeStateMachine<HLCTimestamp>(own: Self.large, first: 0)
        let exchange = initiator.met(Self.large, latest: Self.at(100))!
        #expect(other.offered(exchange, by: Self.small, isEnd: false, latest: Self.at(70)) == nil)
        initiator.storing(from: Self.large, latest: Self.at(110))
        other.storing(from: Self.small, latest: Self.at(75))
        initiator.storing(from: third, latest: Self.at(120))
        other.storing(from: nil, latest: Self.at(78))
        initiator.storing(from: nil, latest: Self.at(130))
        other.storing(from: third, latest: Self.at(79))
        initiator.ending(exchange, with: Self.large)
        #expect(other.offered(exchange, by: Self.small, isEnd: true, latest: Self.at(90)) == Self.at(78))
        #expect(
            initiator.answered(exchange, by: Self.large, latest: Self.at(160))
                == .completed(.init(held: Self.at(120), next: nil))
        )
        // (A store from elsewhere when no exchange runs changes nothing of the next one.)
        initiator.storing(from: third, latest: Self.at(170))
        let next = initiator.begin(with: Self.large, latest: Self.at(180))!
        initiator.ending(next, with: Self.large)
        #expect(
            initiator.answered(next, by: Self.large, latest: Self.at(190))
                == .completed(.init(held: Self.at(190), next: nil))
        )
    }

    /// An exchange whose round could not be sent is over: its answers are ignored, and the
    /// next one starts at once, not after it.
    @Test func anAbandonedExchangeLeavesRoomForTheNext() {
        var machine = ExchangeStateMachine<HLCTimestamp>(own: Self.large, first: 0)
        #expect(machine.begin(with: Self.small, latest: Self.at(5)) == 1)
        machine.abandon(7, with: Self.small)
        #expect(machine.begin(with: Self.small, latest: Self.at(6)) == nil, "another exchange's abandon")
        machine.abandon(1, with: Self.small)
        #expect(machine.answered(1, by: Self.small, latest: Self.at(9)) == .ignored)
        #expect(machine.begin(with: Self.small, latest: Self.at(9)) == 2)
    }

    @Test func anExchangeWantedWhileOneRunsFollowsItOnce() {
        var machine = ExchangeStateMachine<HLCTimestamp>(own: Self.large, first: 0)
        #expect(machine.begin(with: Self.small, latest: Self.at(5)) == 1)
        #expect(machine.begin(with: Self.small, latest: Self.at(6)) == nil)
        #expect(machine.begin(with: Self.small, latest: Self.at(7)) == nil, "wanted twice, run once")
        machine.storing(from: nil, latest: Self.at(8))
        machine.ending(1, with: Self.small)
        #expect(machine.answered(1, by: Self.small, latest: Self.at(9)) == .completed(.init(held: Self.at(8), next: 2)))
        #expect(machine.answered(2, by: Self.small, latest: Self.at(9)) == .running)
        machine.ending(2, with: Self.small)
        #expect(
            machine.answered(2, by: Self.small, latest: Self.at(9)) == .completed(.init(held: Self.at(9), next: nil))
        )
    }

    /// A new meeting drops what ran in the one before, on both sides: the initiator's exchange
    /// (its answers are then ignored) and the other side's record of the one it answered (whose
    /// end then proves nothing).
    @Test func aNewMeetingDropsWhatRanBefore() {
        var machine = ExchangeStateMachine<HLCTimestamp>(own: Self.small, first: 0)
        #expect(machine.met(Self.large, latest: Self.at(1)) == 1)
        #expect(machine.met(Self.large, latest: Self.at(1)) == 2)
        #expect(machine.answered(1, by: Self.large, latest: Self.at(1)) == .ignored, "its answers are ignored")
        #expect(machine.answered(2, by: Self.large, latest: Self.at(1)) == .running)

        var other = ExchangeStateMachine<HLCTimestamp>(own: Self.large, first: 0)
        #expect(other.offered(7, by: Self.small, isEnd: false, latest: Self.at(3)) == nil)
        #expect(other.met(Self.small, latest: Self.at(4)) == nil)
        #expect(
            other.offered(7, by: Self.small, isEnd: true, latest: Self.at(5)) == nil,
            "begun before: proves nothing"
        )
    }
}
