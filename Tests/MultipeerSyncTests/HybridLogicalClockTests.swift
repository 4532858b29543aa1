import Testing

@testable import MultipeerSync

/// The clock every write is stamped with (docs/SYNC.md, 2).
@Suite struct HybridLogicalClockTests {
    @Test func ticksFollowTheWallClockAndNeverRunBackwards() {
        var clock = HybridLogicalClock()
        let first = clock.tick(now: 1000)
        #expect(first == HLCTimestamp(milliseconds: 1000, counter: 0))
        #expect(clock.tick(now: 1000) == HLCTimestamp(milliseconds: 1000, counter: 1))
        // The wall clock stepped back: the counter carries on.
        #expect(clock.tick(now: 900) == HLCTimestamp(milliseconds: 1000, counter: 2))
        #expect(clock.tick(now: 1001) == HLCTimestamp(milliseconds: 1001, counter: 0))
    }

    @Test func anObservedTimestampOrdersLaterEditsAfterIt() {
        var clock = HybridLogicalClock()
        #expect(clock.observe(HLCTimestamp(milliseconds: 5000, counter: 3), now: 1000) == true)
        #expect(clock.tick(now: 1000) == HLCTimestamp(milliseconds: 5000, counter: 4))
        #expect(clock.observe(HLCTimestamp(milliseconds: 10, counter: 0), now: 1000) == true)
        #expect(clock.tick(now: 1000) == HLCTimestamp(milliseconds: 5000, counter: 5))
    }

    /// A peer whose clock is far ahead (or that lies) cannot drag this host's clock along: taken
    /// in, the largest timestamp would wrap the next tick round to zero.
    @Test func aTimestampMoreThanADayAheadIsRefused() {
        let now: UInt64 = 1_795_300_000_000
        var clock = HybridLogicalClock(latest: HLCTimestamp(milliseconds: now, counter: 0))
        #expect(
            clock.observe(HLCTimestamp(milliseconds: now + HybridLogicalClock.maximumLead, counter: .max), now: now)
                == true
        )
        #expect(
            clock.tick(now: now) == HLCTimestamp(milliseconds: now + HybridLogicalClock.maximumLead + 1, counter: 0)
        )
        let before = clock.latest
        #expect(
            clock.observe(HLCTimestamp(milliseconds: now + HybridLogicalClock.maximumLead + 1, counter: 0), now: now)
                == false
        )
        #expect(clock.observe(HLCTimestamp(rawValue: .max), now: now) == false)
        #expect(clock.latest == before, "a refused timestamp changes nothing")
        #expect(clock.tick(now: now) > before)
    }

    @Test func aFullCounterCarriesIntoTheMilliseconds() {
        var clock = HybridLogicalClock(latest: HLCTimestamp(milliseconds: 7, counter: .max))
        #expect(clock.tick(now: 7) == HLCTimestamp(milliseconds: 8, counter: 0))
    }
}
