import Foundation
import Testing

@testable import MultipeerSync

/// Who initiates which exchange, and when another follows (docs/SYNC.md 6).
@Suite struct ExchangeStateMachineTests {
    static let small = UUID(uuidString: "00000000-0000-4000-8000-000000000001")!
    static let large = UUID(uuidString: "F0000000-0000-4000-8000-000000000001")!

    @Test func atAJoinTheSmallerPeerIDInitiates() {
        var small = ExchangeStateMachine(own: Self.small, first: 10)
        var large = ExchangeStateMachine(own: Self.large, first: 10)
        #expect(small.peerJoined(Self.large) == 11)
        #expect(large.peerJoined(Self.small) == nil, "one exchange per pair, not two")
        #expect(small.isRunning(11, with: Self.large))
        #expect(!large.isRunning(11, with: Self.small), "an answer to an exchange never started is ignored")
    }

    @Test func anExchangeWantedWhileOneRunsFollowsItOnce() {
        var machine = ExchangeStateMachine(own: Self.large, first: 0)
        let first = machine.begin(with: Self.small)
        #expect(first == 1)
        #expect(machine.begin(with: Self.small) == nil)
        #expect(machine.begin(with: Self.small) == nil, "wanted twice, run once")
        #expect(machine.ended(5, with: Self.small) == nil, "another exchange's end changes nothing")
        let second = machine.ended(1, with: Self.small)
        #expect(second == 2)
        #expect(!machine.isRunning(1, with: Self.small) && machine.isRunning(2, with: Self.small))
        #expect(machine.ended(2, with: Self.small) == nil, "nothing more was wanted")
        #expect(!machine.isRunning(2, with: Self.small))
    }

    @Test func aPeerThatLeftStartsAfreshAtItsJoin() {
        var machine = ExchangeStateMachine(own: Self.small, first: 0)
        #expect(machine.peerJoined(Self.large) == 1)
        machine.peerLeft(Self.large)
        #expect(!machine.isRunning(1, with: Self.large), "its answers are ignored")
        #expect(machine.peerJoined(Self.large) == 2)
    }
}
