import MultipeerCore
import Testing

@Suite struct ReportThrottleTests {
    @Test func reportsABurstAtOnceThenOnceASecondWithTheCount() {
        var throttle = ReportThrottle(burst: 3)
        let start = ContinuousClock.now
        let at = { (milliseconds: Int) in start + .milliseconds(milliseconds) }
        #expect((0..<3).map { throttle.count(now: at($0)) } == [1, 1, 1], "the burst, one by one")
        #expect(throttle.count(now: at(10)) == nil)
        #expect(throttle.count(now: at(500)) == nil)
        #expect(throttle.count(now: at(1_010)) == 3, "a second on: this one and the two held back")
        #expect(throttle.count(now: at(1_100)) == nil)
        // A quiet spell refills the burst, up to its size.
        #expect((0..<4).map { throttle.count(now: at(60_000 + $0)) } == [2, 1, 1, nil])
    }

    @Test func withoutABurstTheFirstIsReportedAtOnce() {
        var throttle = ReportThrottle()
        let start = ContinuousClock.now
        #expect(throttle.count(now: start) == 1)
        #expect(throttle.count(now: start + .milliseconds(999)) == nil)
        #expect(throttle.count(now: start + .milliseconds(1_999)) == 2)
        // What is held back can be taken at the end of a flood, once.
        #expect(throttle.count(now: start + .milliseconds(2_100)) == nil)
        #expect(throttle.takeHeld() == 1)
        #expect(throttle.takeHeld() == 0)
    }
}
