import MultipeerCore
import Testing

/// A send refused while its peer joins waits for the join, once, for at most its patience.
@Suite struct JoinWaitTests {
    static let start = ContinuousClock.now

    @Test func aPeerNeitherJoiningNorLetInIsRefusedAtOnce() {
        var join = JoinWait(patience: .seconds(10))
        #expect(join.refused(joining: false, woken: false, now: Self.start) == .refuse)
    }

    @Test func aJoiningPeerIsWaitedForUntilTheFirstRefusalsPatienceRunsOut() {
        var join = JoinWait(patience: .seconds(10))
        let deadline = Self.start + .seconds(10)
        #expect(join.refused(joining: true, woken: false, now: Self.start) == .wait(until: deadline))
        #expect(
            join.refused(joining: true, woken: false, now: Self.start + .seconds(4)) == .wait(until: deadline),
            "a later look does not extend the wait"
        )
        #expect(join.refused(joining: true, woken: false, now: deadline) == .refuse, "patience spent")
    }

    @Test func aWakeSinceTheLookIsLookedAtAgainThoughThePeerIsNotJoining() {
        var join = JoinWait(patience: .seconds(10))
        #expect(
            join.refused(joining: false, woken: true, now: Self.start) == .wait(until: Self.start + .seconds(10)),
            "admitted between the offer's look and this one: offered again"
        )
        #expect(join.refused(joining: false, woken: false, now: Self.start + .seconds(1)) == .refuse)
    }
}
