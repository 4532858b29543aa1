import MultipeerCore
import Testing

/// The keepalive, backoff and link-quality cores, driven by a manual clock (plain durations).
@Suite struct KeepaliveStateMachineTests {
    static let defaults = KeepaliveParameters()  // 500 ms, 1.5 s

    @Test func anIdleLinkIsPingedEveryIntervalAndTimesOut() {
        var keepalive = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        #expect(keepalive.nextWakeUp == .milliseconds(500))
        #expect(keepalive.wakeUp(now: .milliseconds(499)) == .wait)
        #expect(keepalive.wakeUp(now: .milliseconds(500)) == .sendPing(Probe(nonce: 1, timestamp: 500_000_000)))
        #expect(keepalive.wakeUp(now: .milliseconds(700)) == .wait, "one ping per interval")
        #expect(keepalive.nextWakeUp == .milliseconds(1000))
        #expect(keepalive.wakeUp(now: .milliseconds(1000)) == .sendPing(Probe(nonce: 2, timestamp: 1_000_000_000)))
        #expect(keepalive.nextWakeUp == .milliseconds(1500), "the timeout comes before the third ping")
        #expect(keepalive.wakeUp(now: .milliseconds(1500)) == .timedOut)
        #expect(keepalive.wakeUp(now: .milliseconds(2000)) == .wait, "a link times out once")
    }

    /// The timeout is judged from the stalls the path has shown, as a phi-accrual detector
    /// judges a heartbeat: a clean path (silences of an interval, some jitter) keeps the
    /// configured timeout; one stall moves it part of the way; a lossy path's stalls make it the
    /// silence that fewer than one stall in 1,000 of theirs would reach, at most the stall limit;
    /// and it comes back down when the stalls stop.
    @Test func theTimeoutIsJudgedFromThePathsStalls() {
        var keepalive = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        var now = Duration.zero
        func arrive(after silence: Duration) {
            now += silence
            keepalive.inboundActivity(now: now)
        }
        #expect(keepalive.stallThreshold == .seconds(1), "two intervals")
        for _ in 0..<20 { arrive(after: .milliseconds(900)) }
        #expect(keepalive.timeout == .milliseconds(1500), "silences of an interval and its jitter are no stalls")
        #expect(keepalive.suspicion(of: .milliseconds(1000)) == 0)
        #expect(
            keepalive.suspicion(of: .milliseconds(1500)) >= KeepaliveStateMachine.suspicionThreshold,
            "the prior gives the configured timeout"
        )

        arrive(after: .seconds(2))  // one stall, 1 s beyond the threshold, and the prior's two
        // The scale: (1 s + 2 x 0.0724 s) / 3 = 0.382 s; the timeout 1 s + 3 ln 10 x 0.382 s.
        #expect(abs(keepalive.tailScale - 0.3816) < 0.001)
        #expect(abs(keepalive.timeout.seconds - 3.636) < 0.01)
        #expect(
            abs(keepalive.suspicion(of: keepalive.timeout) - KeepaliveStateMachine.suspicionThreshold) < 0.001,
            "timed out where phi reaches 3"
        )
        var afterOne = keepalive
        #expect(afterOne.wakeUp(now: now + .milliseconds(3600)) != .timedOut, "a silence like the stall is survived")

        // A lossy path: stalls running 1 and 3 s beyond the threshold, between seconds of traffic.
        for _ in 0..<8 {
            arrive(after: .seconds(2))
            arrive(after: .seconds(4))
            for _ in 0..<4 { arrive(after: .milliseconds(500)) }
        }
        // 17 stalls, 33 s beyond in all, and the prior's 2: (33 + 0.145) / 19 = 1.744 s.
        #expect(keepalive.recentStalls == StallTally(count: 17, excess: .seconds(33)))
        #expect(abs(keepalive.timeout.seconds - (1 + 3 * 2.302_585 * 1.7445)) < 0.01)
        #expect(keepalive.timeout > keepalive.ceiling, "beyond the old ceiling: stalls of 4 s are this path's")
        var silent = keepalive  // (a copy: a link times out once)
        #expect(silent.wakeUp(now: now + .seconds(10)) != .timedOut)
        #expect(silent.wakeUp(now: now + keepalive.timeout) == .timedOut)

        // Stalls that long and longer: never more than the stall limit.
        var worse = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        for at in stride(from: 6, through: 60, by: 6) { worse.inboundActivity(now: .seconds(at)) }
        #expect(worse.timeout == worse.stallLimit)

        // A configured timeout shorter than two intervals stands while there is no stall to judge by.
        var tight = KeepaliveStateMachine(
            parameters: KeepaliveParameters(interval: .seconds(1), timeout: .milliseconds(1500)),
            now: .zero
        )
        for at in 1...10 { tight.inboundActivity(now: .seconds(at)) }
        #expect(tight.timeout == .milliseconds(1500))
        #expect(tight.wakeUp(now: .milliseconds(11_500)) == .timedOut)

        // Two minutes of a clean link: back to the configured timeout.
        for _ in 0..<260 { arrive(after: .milliseconds(500)) }
        #expect(keepalive.recentStalls == StallTally())
        #expect(keepalive.timeout == .milliseconds(1500))
        // And a dead link is still timed out, at the timeout of the moment.
        #expect(keepalive.wakeUp(now: now + .milliseconds(1499)) != .timedOut)
        #expect(keepalive.wakeUp(now: now + .milliseconds(1500)) == .timedOut)
    }

    /// A path that has lost packets (a segment of the peer's out of order, or a loss in a silence
    /// that ended in an arrival) is judged from a prior of the ceiling until it shows stalls: a
    /// silence there with nothing heard from the peer's host (both ends retransmitting) is kept
    /// to 4.5 s, where a link replacing one on a lossy path was torn down at 1.5 s. A black hole
    /// on a clean path shows loss only in the silence that ends the link (this side
    /// retransmitting): it is timed out at 1.5 s, and the peer's next link knows no loss.
    @Test func aPathThatLostPacketsIsJudgedFromAHeavierPrior() {
        func reading(
            retransmitted: UInt32 = 0,
            outOfOrder: UInt32 = 0,
            heardAgo: Int,
            recovering: Bool = false
        ) -> TransportReading {
            TransportReading(
                outOfOrderSegments: outOfOrder,
                retransmittedSegments: retransmitted,
                sinceHeard: .milliseconds(heardAgo),
                unacknowledgedSegments: 1,
                recoveringLoss: recovering
            )
        }
        var replacement = KeepaliveStateMachine(
            parameters: Self.defaults,
            now: .zero,
            path: PathHistory(lossSeen: true)
        )
        #expect(replacement.timeout == replacement.ceiling)
        for at in stride(from: 700, to: 4500, by: 500) {
            #expect(
                replacement.wakeUp(
                    now: .milliseconds(at),
                    transport: reading(retransmitted: UInt32(at / 500), heardAgo: at, recovering: true)
                ) != .timedOut
            )
        }
        #expect(
            replacement.wakeUp(
                now: .milliseconds(4500),
                transport: reading(retransmitted: 9, heardAgo: 4500, recovering: true)
            ) == .timedOut
        )

        var reordered = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        _ = reordered.wakeUp(now: .milliseconds(700), transport: reading(outOfOrder: 2, heardAgo: 100))
        #expect(reordered.timeout == reordered.ceiling, "a segment out of order: at once")

        // A black hole on a clean path, twice on one peer.
        var path = PathHistory()
        for fault in 1...2 {
            var link = KeepaliveStateMachine(parameters: Self.defaults, now: .zero, path: path)
            _ = link.wakeUp(now: .milliseconds(700), transport: reading(retransmitted: 0, heardAgo: 700))
            _ = link.wakeUp(
                now: .milliseconds(1000),
                transport: reading(retransmitted: 1, heardAgo: 1000, recovering: true)
            )
            #expect(link.hasSeenLoss)
            #expect(
                link.wakeUp(
                    now: .milliseconds(1500),
                    transport: reading(retransmitted: 2, heardAgo: 1500, recovering: true)
                ) == .timedOut,
                "fault \(fault)"
            )
            path = link.history
            #expect(path == PathHistory(), "the silence that ended the link is no evidence")
        }

        // The same loss in a silence that ended in an arrival: the path's.
        var survived = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        _ = survived.wakeUp(now: .milliseconds(700), transport: reading(retransmitted: 0, heardAgo: 700))
        _ = survived.wakeUp(
            now: .milliseconds(1000),
            transport: reading(retransmitted: 1, heardAgo: 1000, recovering: true)
        )
        #expect(survived.timeout == .milliseconds(1500))
        survived.inboundActivity(now: .milliseconds(1200))
        #expect(survived.history.lossSeen)
        #expect(survived.timeout == survived.ceiling)
    }

    /// A silence during which the transport shows the peer's segments arriving out of order
    /// (beyond a lost one TCP is still repairing) is kept until the peer has been seen sending
    /// for the ceiling, at most the stall limit; one during which this side's TCP retransmits
    /// and the peer's host answers is kept to the ceiling. A dead path, and a frozen peer on a
    /// clean one, are timed out at the timeout as before.
    @Test func aStallTheTransportExplainsIsKeptAsLongAsItShows() {
        func reading(retransmitted: UInt32 = 0, outOfOrder: UInt32 = 0, heardAgo: Int) -> TransportReading {
            TransportReading(
                outOfOrderSegments: outOfOrder,
                retransmittedSegments: retransmitted,
                sinceHeard: .milliseconds(heardAgo)
            )
        }
        var keepalive = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        var reads = 0
        // Nothing read before the peer is overdue (an interval and a late wake-up's worth): an
        // idle link costs no system call, even on wake-ups the timer grid made a little late.
        #expect(keepalive.overdue == .milliseconds(600))
        for at in [499, 520, 600] {
            _ = keepalive.wakeUp(
                now: .milliseconds(at),
                transport: {
                    reads += 1
                    return reading(heardAgo: 0)
                }()
            )
        }
        #expect(reads == 0)
        // the first reading
        _ = keepalive.wakeUp(now: .milliseconds(700), transport: reading(outOfOrder: 3, heardAgo: 100))
        // The peer's segments keep arriving beyond a gap, up to 10 s: the link stays.
        var now = Duration.milliseconds(700)
        var outOfOrder: UInt32 = 3
        while now < .seconds(10) {
            now += .milliseconds(500)
            outOfOrder += 1
            #expect(keepalive.wakeUp(now: now, transport: reading(outOfOrder: outOfOrder, heardAgo: 100)) != .timedOut)
        }
        // Then nothing more arrives (a black hole): timed out when the peer was last seen
        // sending a ceiling (4.5 s) ago, not before.
        let lastSent = now - .milliseconds(100)
        while now < lastSent + keepalive.ceiling - .milliseconds(500) {
            now += .milliseconds(500)
            #expect(
                keepalive.wakeUp(
                    now: now,
                    transport: reading(outOfOrder: outOfOrder, heardAgo: Int((now - lastSent).milliseconds))
                ) != .timedOut
            )
        }
        #expect(keepalive.nextWakeUp == lastSent + keepalive.ceiling)
        #expect(
            keepalive.wakeUp(
                now: lastSent + keepalive.ceiling,
                transport: reading(outOfOrder: outOfOrder, heardAgo: 4500)
            ) == .timedOut
        )

        // A peer seen sending forever: timed out at the stall limit.
        var stalled = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        now = .milliseconds(700)
        outOfOrder = 0
        while now < stalled.stallLimit {
            outOfOrder += 1
            #expect(stalled.wakeUp(now: now, transport: reading(outOfOrder: outOfOrder, heardAgo: 10)) != .timedOut)
            now += .milliseconds(500)
        }
        #expect(
            stalled.wakeUp(now: stalled.stallLimit, transport: reading(outOfOrder: outOfOrder + 1, heardAgo: 10))
                == .timedOut
        )

        // This side retransmits and the peer's host answers: kept to the ceiling, however
        // often the host answers (its kernel does, its application may be frozen). (At the
        // leader's wake-ups to ping: the first reading is at the second, the peer overdue.)
        var lossy = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        _ = lossy.wakeUp(now: .milliseconds(500), transport: reading(retransmitted: 2, heardAgo: 100))
        _ = lossy.wakeUp(now: .milliseconds(1000), transport: reading(retransmitted: 3, heardAgo: 100))
        #expect(
            lossy.wakeUp(now: .milliseconds(1500), transport: reading(retransmitted: 4, heardAgo: 100)) != .timedOut
        )
        #expect(lossy.nextWakeUp == .milliseconds(2000), "the next ping")
        for at in stride(from: 2000, to: 4500, by: 500) {
            #expect(
                lossy.wakeUp(now: .milliseconds(at), transport: reading(retransmitted: 5, heardAgo: 50)) != .timedOut
            )
        }
        #expect(lossy.wakeUp(now: lossy.ceiling, transport: reading(retransmitted: 6, heardAgo: 50)) == .timedOut)

        // A black hole on a clean link: this side retransmits, but nothing has been heard since
        // the silence began. Timed out at the timeout.
        var dead = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        _ = dead.wakeUp(now: .milliseconds(500), transport: reading(heardAgo: 500))
        _ = dead.wakeUp(now: .milliseconds(1000), transport: reading(retransmitted: 1, heardAgo: 1000))
        #expect(
            dead.wakeUp(now: .milliseconds(1500), transport: reading(retransmitted: 2, heardAgo: 1500)) == .timedOut
        )

        // A frozen peer on a clean link: its host acknowledges every PING, nothing is lost.
        var frozen = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        for at in [500, 1000] { _ = frozen.wakeUp(now: .milliseconds(at), transport: reading(heardAgo: 50)) }
        #expect(frozen.wakeUp(now: .milliseconds(1500), transport: reading(heardAgo: 50)) == .timedOut)

        // A loss shown in this silence alone (this side retransmitting), with the peer's host
        // still heard after the last arrival: a lossy path's stall at its onset, kept to the
        // ceiling; with the host heard from no more (a black hole), timed out at the timeout.
        for heardSinceTheArrival in [true, false] {
            var link = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
            func heard(_ at: Int) -> Int { heardSinceTheArrival ? 10 : at - 200 }
            _ = link.wakeUp(now: .milliseconds(700), transport: reading(heardAgo: heard(700)))
            _ = link.wakeUp(now: .milliseconds(1000), transport: reading(retransmitted: 1, heardAgo: heard(1000)))
            let verdict = link.wakeUp(
                now: .milliseconds(1500),
                transport: reading(retransmitted: 2, heardAgo: heard(1500))
            )
            #expect((verdict == .timedOut) == !heardSinceTheArrival)
            if heardSinceTheArrival {
                #expect(
                    link.wakeUp(now: .milliseconds(4000), transport: reading(retransmitted: 3, heardAgo: 10))
                        != .timedOut
                )
                #expect(link.wakeUp(now: link.ceiling, transport: reading(retransmitted: 4, heardAgo: 10)) == .timedOut)
            }
        }

        // A packet lost marks the path for the link's life: after an arrival, its timeout is the
        // ceiling at least, whether the peer's host is heard in the next silence or not.
        for heardSinceTheArrival in [true, false] {
            var link = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
            _ = link.wakeUp(now: .milliseconds(700), transport: reading(heardAgo: 10))
            _ = link.wakeUp(now: .milliseconds(1000), transport: reading(retransmitted: 1, outOfOrder: 1, heardAgo: 10))
            link.inboundActivity(now: .milliseconds(1100))
            #expect(link.timeout == link.ceiling)
            let arrival = Duration.milliseconds(1100)
            func heard(_ now: Duration) -> Int {
                Int((heardSinceTheArrival ? .milliseconds(50) : now - arrival + .milliseconds(50)).milliseconds)
            }
            var now = Duration.milliseconds(1800)
            while now < arrival + link.ceiling {
                #expect(
                    link.wakeUp(now: now, transport: reading(retransmitted: 1, outOfOrder: 1, heardAgo: heard(now)))
                        != .timedOut
                )
                now += .milliseconds(500)
            }
            let due = arrival + link.ceiling
            #expect(
                link.wakeUp(now: due, transport: reading(retransmitted: 1, outOfOrder: 1, heardAgo: heard(due)))
                    == .timedOut
            )
        }
    }

    /// At a loss's onset: the peer's data was lost, and what it sent next arrived out of order
    /// before the silence's first reading, so no reading saw the count change; its host is heard
    /// after the last arrival. Kept to the ceiling, not timed out at the timeout (as it was: a
    /// link torn down in its first seconds of loss, "the path has lost no packet", its host
    /// heard 0.4 s before). Without segments out of order, the same silence is timed out.
    @Test func segmentsOutOfOrderBeforeTheFirstReadingMarkTheLossOnset() {
        for outOfOrder: UInt32 in [2, 0] {
            var link = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
            for at in [700, 1000] {
                #expect(
                    link.wakeUp(
                        now: .milliseconds(at),
                        transport: TransportReading(
                            outOfOrderSegments: outOfOrder,
                            retransmittedSegments: 0,
                            sinceHeard: .milliseconds(at - 600),
                            unacknowledgedSegments: 1
                        )
                    ) != .timedOut
                )
            }
            let verdict = link.wakeUp(
                now: .milliseconds(1500),
                transport: TransportReading(
                    outOfOrderSegments: outOfOrder,
                    retransmittedSegments: 0,
                    sinceHeard: .milliseconds(400),
                    unacknowledgedSegments: 1
                )
            )
            #expect((verdict == .timedOut) == (outOfOrder == 0), "out of order: \(outOfOrder)")
            if outOfOrder > 0 {
                #expect(link.history.lossSeen, "and the peer's next link knows")
                #expect(link.nextWakeUp <= link.ceiling)
            }
        }
    }

    /// The peer's data waiting unread in this side's kernel (its event loop busy writing) is no
    /// silence of the peer's: the silence counts from the latest arrival the transport shows.
    /// A peer that sends nothing more is timed out a timeout after that arrival.
    @Test func dataWaitingUnreadIsNoSilenceOfThePeers() {
        func reading(arrivedAgo: Int) -> TransportReading {
            TransportReading(
                outOfOrderSegments: 0,
                retransmittedSegments: 0,
                sinceHeard: .milliseconds(arrivedAgo),
                sinceDataArrived: .milliseconds(arrivedAgo)
            )
        }
        var keepalive = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        // Nothing read since 0; the kernel got the peer's PINGs at 800 and 1,300 ms.
        _ = keepalive.wakeUp(now: .milliseconds(500), transport: reading(arrivedAgo: 500))
        _ = keepalive.wakeUp(now: .milliseconds(1000), transport: reading(arrivedAgo: 200))
        #expect(keepalive.wakeUp(now: .milliseconds(1500), transport: reading(arrivedAgo: 200)) != .timedOut)
        #expect(keepalive.nextWakeUp <= .milliseconds(2300))
        #expect(
            keepalive.wakeUp(now: .milliseconds(2000), transport: reading(arrivedAgo: 1200)) != .timedOut,
            "an older reading changes nothing"
        )
        // Then nothing more arrives: timed out 1.5 s after the last arrival, 1,300 ms.
        #expect(keepalive.wakeUp(now: .milliseconds(2799), transport: reading(arrivedAgo: 1499)) != .timedOut)
        #expect(keepalive.wakeUp(now: .milliseconds(2800), transport: reading(arrivedAgo: 1500)) == .timedOut)
        // Once read, the data is an arrival like any other, and the next silence counts from it.
        var read = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        _ = read.wakeUp(now: .milliseconds(700), transport: reading(arrivedAgo: 100))
        read.inboundActivity(now: .milliseconds(700))
        #expect(read.wakeUp(now: .milliseconds(2199), transport: reading(arrivedAgo: 1599)) != .timedOut)
        #expect(read.wakeUp(now: .milliseconds(2200), transport: reading(arrivedAgo: 1600)) == .timedOut)
    }

    /// A peer whose host acknowledges everything sent to it, retransmits nothing and sends
    /// nothing of its own is hung (a frozen process): it is timed out at the configured timeout,
    /// even on a link whose earlier stalls raised the timeout. A silent path (what was sent is
    /// not acknowledged) keeps the raised timeout.
    /// Found by the simulator (seed 2 of `multipeer-simulator --hosts 8-8 --duration 600
    /// --fault-every 10`): a path's stalls and its loss were handed from link to link as if seen
    /// at each new link's start, so a peer whose links were replaced within two minutes of each
    /// other kept a lossy path's judgement long after the loss ended, and a frozen peer there
    /// was found after seconds instead of 1.5 s. Each piece of a history now keeps its age.
    @Test func aPathsStallsAndLossAgeAcrossItsLinks() {
        var first = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        var now = Duration.zero
        // A lossy spell: three stalls of 3 s, a segment out of order.
        for _ in 0..<3 {
            now += .seconds(3)
            first.inboundActivity(now: now)
        }
        _ = first.wakeUp(
            now: now + .milliseconds(700),
            transport: TransportReading(outOfOrderSegments: 2, retransmittedSegments: 0, sinceHeard: .zero)
        )
        #expect(first.timeout > Self.defaults.timeout)
        // Then 90 s of a clean path, and the link is replaced.
        for _ in 0..<180 {
            now += .milliseconds(500)
            first.inboundActivity(now: now)
        }
        #expect(first.history.stalls.count == 3 && first.history.lossSeen, "within two minutes: still the path's")

        // The next link begins at once (its own clock starts at zero), and lives 40 s, clean.
        var second = KeepaliveStateMachine(parameters: Self.defaults, now: .zero, path: first.history)
        #expect(second.timeout == first.timeout, "the same stalls, the same judgement")
        var later = Duration.zero
        for _ in 0..<80 {
            later += .milliseconds(500)
            second.inboundActivity(now: later)
        }
        // The spell is now over two minutes old: the third link judges a clean path.
        let third = KeepaliveStateMachine(parameters: Self.defaults, now: .zero, path: second.history)
        #expect(third.recentStalls == StallTally(), "stalls over two minutes old")
        #expect(!third.history.lossSeen, "a loss over two minutes old")
        #expect(third.timeout == Self.defaults.timeout)

        // Kept a while between links (PathMemory ages what it keeps), as much.
        let kept = KeepaliveStateMachine(
            parameters: Self.defaults,
            now: .zero,
            path: first.history.aged(by: .seconds(40))
        )
        #expect(kept.recentStalls == StallTally() && kept.timeout == Self.defaults.timeout)
    }

    @Test func aHungPeerIsTimedOutAtTheConfiguredTimeoutWhateverTheLinkShowedBefore() {
        func reading(unacknowledged: UInt32, retransmitted: UInt32 = 0, heardAgo: Int = 100) -> TransportReading {
            TransportReading(
                outOfOrderSegments: 0,
                retransmittedSegments: retransmitted,
                sinceHeard: .milliseconds(heardAgo),
                unacknowledgedSegments: unacknowledged
            )
        }
        func stalledOnce() -> KeepaliveStateMachine {
            var keepalive = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
            keepalive.inboundActivity(now: .milliseconds(2000))  // a 2 s stall it survived
            #expect(keepalive.timeout > .milliseconds(3600))
            return keepalive
        }
        var frozen = stalledOnce()
        _ = frozen.wakeUp(now: .milliseconds(2700), transport: reading(unacknowledged: 0))
        #expect(frozen.peerHung)
        #expect(frozen.wakeUp(now: .milliseconds(3499), transport: reading(unacknowledged: 0)) != .timedOut)
        #expect(
            frozen.wakeUp(now: .milliseconds(3500), transport: reading(unacknowledged: 0)) == .timedOut,
            "1.5 s after the last arrival"
        )

        var blackHole = stalledOnce()
        _ = blackHole.wakeUp(now: .milliseconds(2700), transport: reading(unacknowledged: 1, heardAgo: 700))
        #expect(!blackHole.peerHung)
        #expect(
            blackHole.wakeUp(now: .milliseconds(3500), transport: reading(unacknowledged: 1, heardAgo: 1500))
                != .timedOut,
            "the link's raised timeout"
        )
        let due = .milliseconds(2000) + blackHole.timeout
        #expect(
            blackHole.wakeUp(
                now: due,
                transport: reading(
                    unacknowledged: 2,
                    retransmitted: 1,
                    heardAgo: Int((due - .milliseconds(2000)).milliseconds)
                )
            ) == .timedOut
        )

        // Retransmissions from before the silence (a tail-loss probe on a clean path counts as
        // one) are no loss in it: a frozen peer there is still hung.
        var probed = stalledOnce()
        _ = probed.wakeUp(now: .milliseconds(2700), transport: reading(unacknowledged: 0, retransmitted: 3))
        #expect(
            probed.wakeUp(now: .milliseconds(3500), transport: reading(unacknowledged: 0, retransmitted: 3))
                == .timedOut
        )

        // A path that lost packets in a silence, then a black hole: the peer's host acknowledged
        // the last arrival 40 ms after it (a delayed acknowledgement), and nothing since. Timed
        // out at the link's timeout, not kept to the ceiling.
        var cut = stalledOnce()
        _ = cut.wakeUp(now: .milliseconds(2700), transport: reading(unacknowledged: 1, heardAgo: 660))
        _ = cut.wakeUp(
            now: .milliseconds(3200),
            transport: reading(unacknowledged: 1, retransmitted: 1, heardAgo: 1160)
        )
        let cutDue = .milliseconds(2000) + cut.timeout
        #expect(
            cut.wakeUp(
                now: cutDue,
                transport: reading(
                    unacknowledged: 2,
                    retransmitted: 2,
                    heardAgo: Int((cutDue - .milliseconds(2040)).milliseconds)
                )
            ) == .timedOut
        )

        // Acknowledged, but only after this side retransmitted: a lossy path, not a hung peer.
        var lossy = stalledOnce()
        _ = lossy.wakeUp(now: .milliseconds(2700), transport: reading(unacknowledged: 1))
        _ = lossy.wakeUp(now: .milliseconds(3200), transport: reading(unacknowledged: 0, retransmitted: 1))
        #expect(!lossy.peerHung)
        #expect(
            lossy.wakeUp(now: .milliseconds(3500), transport: reading(unacknowledged: 0, retransmitted: 1)) != .timedOut
        )
        // And an arrival ends the verdict with the silence.
        frozen = stalledOnce()
        _ = frozen.wakeUp(now: .milliseconds(2700), transport: reading(unacknowledged: 0))
        frozen.inboundActivity(now: .milliseconds(2800))
        #expect(!frozen.peerHung)
    }

    /// A peer's next link starts from what its earlier links showed of the path: the stalls
    /// they survived (never the silence that ended a link) and whether a packet was ever lost. On
    /// a path that lost packets, a silence in which the peer's host acknowledges everything is a
    /// peer in loss recovery as much as a hung one: it gets the link's timeout.
    @Test func aNewLinkStartsFromWhatThePathShowedNotFromTheSilenceThatEndedALink() {
        var first = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        first.inboundActivity(now: .milliseconds(1400))  // survived
        #expect(first.wakeUp(now: .milliseconds(8000)) == .timedOut)
        #expect(
            first.history == PathHistory(stalls: StallTally(count: 1, excess: .milliseconds(400)), lossSeen: false),
            "not the 6.6 s that ended it"
        )
        var next = KeepaliveStateMachine(parameters: Self.defaults, now: .zero, path: first.history)
        #expect(next.timeout == first.timeout, "the next link judges by the same stalls")
        next.inboundActivity(now: .milliseconds(500))
        #expect(next.timeout == first.timeout)

        let acknowledged = TransportReading(
            outOfOrderSegments: 0,
            retransmittedSegments: 0,
            sinceHeard: .milliseconds(100),
            unacknowledgedSegments: 0
        )
        let stalled = StallTally(count: 3, excess: .seconds(6))  // 1 s + 3 ln 10 x 6.145 s / 5: 9.49 s
        var clean = KeepaliveStateMachine(
            parameters: Self.defaults,
            now: .zero,
            path: PathHistory(stalls: stalled, lossSeen: false)
        )
        #expect(abs(clean.timeout.seconds - 9.49) < 0.01)
        _ = clean.wakeUp(now: .milliseconds(700), transport: acknowledged)
        #expect(
            clean.wakeUp(now: .milliseconds(1500), transport: acknowledged) == .timedOut,
            "hung on a clean path: the configured timeout"
        )

        let lossy = PathHistory(stalls: stalled, lossSeen: true)
        var recovering = KeepaliveStateMachine(parameters: Self.defaults, now: .zero, path: lossy)
        _ = recovering.wakeUp(now: .milliseconds(700), transport: acknowledged)
        #expect(!recovering.peerHung)
        #expect(recovering.wakeUp(now: .milliseconds(1500), transport: acknowledged) != .timedOut)
        #expect(
            recovering.wakeUp(now: .milliseconds(3000), transport: acknowledged) != .timedOut,
            "its host heard: a lossy path's stall"
        )
        #expect(
            recovering.wakeUp(now: recovering.ceiling, transport: acknowledged) != .timedOut,
            "the stall it inherited is longer"
        )
        #expect(recovering.wakeUp(now: recovering.timeout, transport: acknowledged) == .timedOut)
        #expect(recovering.history.lossSeen)
    }

    /// While this side does not read (its application is behind), silence is its own doing: it
    /// goes on pinging, is never timed out, and the timeout counts afresh once it reads again.
    @Test func aSideThatStoppedReadingPingsOnAndIsNotTimedOut() {
        var keepalive = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        keepalive.reading(paused: true, now: .milliseconds(100))
        var pings = 0
        for step in 1...20 {
            switch keepalive.wakeUp(now: .milliseconds(step * 500)) {
            case .sendPing: pings += 1
            case .timedOut: Issue.record("not while paused (\(step * 500) ms)")
            case .wait: break
            }
        }
        #expect(pings == 20, "a ping every interval, as on any quiet link")
        keepalive.reading(paused: false, now: .milliseconds(10_000))
        #expect(keepalive.nextWakeUp == .milliseconds(10_500))
        #expect(keepalive.wakeUp(now: .milliseconds(11_499)) != .timedOut)
        #expect(keepalive.wakeUp(now: .milliseconds(11_500)) == .timedOut, "1.5 s after reading again")
    }

    @Test func anyInboundTrafficProvesLifeAndOurOwnTrafficDefersPings() {
        var keepalive = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        var pings = 0
        for step in 1...20 {
            let now = Duration.milliseconds(step * 400)
            keepalive.inboundActivity(now: now)
            switch keepalive.wakeUp(now: now) {
            case .sendPing: pings += 1
            case .timedOut: Issue.record("traffic every 400 ms is never a timeout")
            case .wait: break
            }
        }
        #expect(pings == 10, "receiving only, this side still pings every interval (at 800, 1600, ... ms)")
        // Sending every 400 ms: no pings needed.
        var sender = KeepaliveStateMachine(parameters: Self.defaults, now: .zero)
        for step in 1...20 {
            let now = Duration.milliseconds(step * 400)
            sender.outboundActivity(now: now)
            sender.inboundActivity(now: now)
            #expect(sender.wakeUp(now: now) == .wait)
        }
        #expect(sender.nextWakeUp == .milliseconds(8500))
        #expect(sender.wakeUp(now: .milliseconds(9499)) != .timedOut)
        #expect(sender.wakeUp(now: .milliseconds(9500)) == .timedOut)
    }

    /// Two ends of an idle link, exchanging frames instantly: the leader pings every interval,
    /// the follower only answers, but for one PING every eight intervals to measure the round
    /// trip, sent with a PONG; neither times out.
    @Test func anIdleLinkCarriesOnePingPerIntervalFromTheLeader() {
        var leader = KeepaliveStateMachine(parameters: Self.defaults, role: .leading, now: .zero)
        var follower = KeepaliveStateMachine(parameters: Self.defaults, role: .following, now: .zero)
        var pings: (leader: Int, follower: Int, withPong: Int) = (0, 0, 0)
        var samples: [Duration] = []
        for step in 1...400 {  // 10 s in 25 ms steps
            let now = Duration.milliseconds(step * 25)
            if case .sendPing = leader.wakeUp(now: now) {
                pings.leader += 1
                follower.inboundActivity(now: now)
                let sample = follower.pingReceived(now: now)
                follower.outboundActivity(now: now)  // its PONG
                leader.inboundActivity(now: now)
                if sample != nil {
                    pings.withPong += 1
                    samples.append(now)
                    leader.outboundActivity(now: now)  // the leader's PONG
                    follower.inboundActivity(now: now)
                }
            }
            switch follower.wakeUp(now: now) {
            case .sendPing:
                pings.follower += 1
                leader.inboundActivity(now: now)
                leader.outboundActivity(now: now)
                follower.inboundActivity(now: now)
            case .timedOut: Issue.record("the follower timed out")
            case .wait: break
            }
        }
        #expect(pings.leader == 20, "every 500 ms")
        #expect(pings.withPong == 2, "every 4 s or a little sooner, with a PONG, to measure the round trip")
        #expect(samples == [.milliseconds(3500), .milliseconds(7000)])
        #expect(pings.follower == 0, "none on its own")
    }

    /// A follower whose leader's PINGs stop still samples the round trip every eight intervals,
    /// on its own: once the leader is quiet it pings as the leader would anyway.
    @Test func aFollowersSampleWaitsForNoPing() {
        var follower = KeepaliveStateMachine(parameters: Self.defaults, role: .following, now: .zero)
        #expect(follower.pingReceived(now: .milliseconds(500)) == nil, "not due yet")
        #expect(follower.pingReceived(now: .milliseconds(3499)) == nil)
        #expect(follower.pingReceived(now: .milliseconds(3500)) != nil, "due within an interval: sent with the PONG")
        #expect(follower.pingReceived(now: .milliseconds(4000)) == nil, "the next in eight intervals")
        var leader = KeepaliveStateMachine(parameters: Self.defaults, role: .leading, now: .zero)
        #expect(leader.pingReceived(now: .seconds(10)) == nil, "the leader measures with its own PINGs")
    }

    @Test func aFollowerPingsWhenTheLeaderStopsPinging() {
        // The leader sends a bulk transfer: its PINGs wait behind the data, and the follower
        // must be heard. (It last had a PING at 0.)
        var follower = KeepaliveStateMachine(parameters: Self.defaults, role: .following, now: .zero)
        follower.inboundActivity(now: .milliseconds(700))
        #expect(follower.wakeUp(now: .milliseconds(749)) == .wait)
        #expect(follower.nextWakeUp == .milliseconds(750))
        guard case .sendPing = follower.wakeUp(now: .milliseconds(750)) else {
            Issue.record("one and a half intervals of quiet: a ping")
            return
        }
        #expect(follower.nextWakeUp == .milliseconds(1250), "from now on every interval, as the leader would")
        #expect(follower.wakeUp(now: .milliseconds(1250)) != .wait)
    }

    @Test func bothSidesUseTheStricterPair() {
        let mine = KeepaliveParameters(interval: .milliseconds(500), timeout: .milliseconds(1500))
        let theirs = KeepaliveParameters(interval: .milliseconds(200), timeout: .seconds(3))
        #expect(
            mine.stricter(than: theirs)
                == KeepaliveParameters(interval: .milliseconds(200), timeout: .milliseconds(1500))
        )
        #expect(theirs.stricter(than: mine) == mine.stricter(than: theirs))
        let silent = KeepaliveParameters(interval: .zero, timeout: .zero)
        #expect(mine.stricter(than: silent) == mine, "zero means no opinion")
        #expect(silent.stricter(than: silent) == KeepaliveParameters(), "nobody has one: the defaults")
    }
}

@Suite struct BackoffTests {
    @Test func delaysGrowByTheMultiplierUpToTheCap() {
        var backoff = Backoff()
        let middle = (0..<12).map { _ in backoff.next(random: 0.5) }  // 0.5: no jitter
        #expect(
            middle.prefix(4) == [.milliseconds(100), .milliseconds(160), .milliseconds(256), .nanoseconds(409_600_000)]
        )
        #expect(middle.last == .seconds(10), "capped at 10 s")
        #expect(backoff.attempts == 12)
    }

    @Test func jitterStaysWithinTwentyPercent() {
        var low = Backoff()
        var high = Backoff()
        #expect(low.next(random: 0) == .milliseconds(80))
        #expect(high.next(random: 0.999_999).nanoseconds <= 120_000_000)
        var backoff = Backoff()
        for _ in 0..<30 {
            let expected = Double(min(100_000_000 * pow16(backoff.attempts), 10_000_000_000))
            let delay = Double(backoff.next(random: Double.random(in: 0..<1)).nanoseconds)
            #expect(delay >= expected * 0.8 - 1 && delay <= expected * 1.2 + 1)
        }
    }

    @Test func resetStartsAgainFromTheFirstDelay() {
        var backoff = Backoff()
        _ = backoff.next(random: 0.5)
        _ = backoff.next(random: 0.5)
        backoff.reset()
        #expect(backoff.next(random: 0.5) == .milliseconds(100))
    }

    private func pow16(_ attempts: Int) -> Double {
        (0..<attempts).reduce(1.0) { value, _ in value * 1.6 }
    }
}

@Suite struct LateWakeUpTests {
    let parameters = KeepaliveParameters(interval: .milliseconds(500), timeout: .milliseconds(1500))

    @Test func aLateWakeUpLooksAgainBeforeTimingOut() {
        var keepalive = KeepaliveStateMachine(parameters: parameters, now: .zero)
        // This side's loop stalled for 3 s: the wake-up due at 500 ms comes at 3,000 ms.
        let first = keepalive.wakeUp(now: .milliseconds(3000), late: .milliseconds(2500))
        #expect(first != .timedOut, "no verdict while what the peer sent may still be unread")
        #expect(keepalive.nextWakeUp > .milliseconds(3000) && keepalive.nextWakeUp <= .milliseconds(3010))
        // The loop reads: the peer's bytes were there.
        keepalive.inboundActivity(now: .milliseconds(3002))
        #expect(keepalive.wakeUp(now: keepalive.nextWakeUp) != .timedOut)
        #expect(keepalive.nextWakeUp > .milliseconds(3010), "back to the usual schedule")
        #expect(keepalive.timeout == .milliseconds(1500), "the silence across this side's own stall is not the link's")
    }

    /// Found by the simulator (seed 1 of DeterminismTests): a process stopped for 4 s (SIGSTOP,
    /// a laptop asleep) reads what waited before its overdue timers fire. That read's silence
    /// was taken for a 4 s stall of the path, and the next link to the peer judged its timeout
    /// from it: a black hole right after was found in 7.8 s instead of 1.5 s.
    @Test func anArrivalReadBeforeAnOverdueWakeUpIsThisSidesStallNotThePaths() {
        var keepalive = KeepaliveStateMachine(parameters: parameters, now: .zero)
        // The wake-up due at 500 ms has not come: the loop reads first, at 4,000 ms.
        keepalive.inboundActivity(now: .milliseconds(4000), late: .milliseconds(3500))
        #expect(keepalive.recentStalls == StallTally(), "no stall of the path")
        #expect(keepalive.history.stalls == StallTally())
        #expect(keepalive.timeout == .milliseconds(1500))
        // The overdue wake-up comes next, and the link goes on as usual.
        #expect(keepalive.wakeUp(now: .milliseconds(4001), late: .milliseconds(3501)) != .timedOut)
        keepalive.inboundActivity(now: .milliseconds(4300))
        #expect(keepalive.timeout == .milliseconds(1500))
        // Read with its wake-up on time, a silence as long is the path's.
        var running = KeepaliveStateMachine(parameters: parameters, now: .zero)
        running.inboundActivity(now: .milliseconds(4000), late: .milliseconds(99))
        #expect(running.recentStalls.count == 1)
    }

    @Test func aMachineLateAtEveryWakeUpStillTimesADeadLinkOut() {
        var keepalive = KeepaliveStateMachine(parameters: parameters, now: .zero)
        #expect(keepalive.wakeUp(now: .milliseconds(1800), late: .milliseconds(300)) != .timedOut)
        let recheck = keepalive.nextWakeUp
        #expect(
            keepalive.wakeUp(now: recheck + .milliseconds(300), late: .milliseconds(300)) == .timedOut,
            "one look more, not one each time"
        )
    }

    @Test func aLateWakeUpStillTimesOutWhenNothingWasWaiting() {
        var keepalive = KeepaliveStateMachine(parameters: parameters, now: .zero)
        _ = keepalive.wakeUp(now: .milliseconds(3000), late: .milliseconds(2500))
        let recheck = keepalive.nextWakeUp
        #expect(keepalive.wakeUp(now: recheck, late: .milliseconds(1)) == .timedOut)
    }

    @Test func aWakeUpOnTimeTimesOutAtOnce() {
        var keepalive = KeepaliveStateMachine(parameters: parameters, now: .zero)
        #expect(keepalive.wakeUp(now: .milliseconds(1600), late: .milliseconds(99)) == .timedOut)
    }
}

@Suite struct LinkQualityEstimatorTests {
    @Test func roundTripsJitterAndLoss() {
        var estimator = LinkQualityEstimator(windowSize: 4)
        let rtts: [Duration] = [.milliseconds(10), .milliseconds(20), .milliseconds(10), .milliseconds(20)]
        for (index, rtt) in rtts.enumerated() {
            let sent = Duration.seconds(index)
            estimator.pingSent(Probe(nonce: UInt64(index), timestamp: 0), at: sent)
            #expect(estimator.pongReceived(Probe(nonce: UInt64(index), timestamp: 0), at: sent + rtt) == rtt)
        }
        let quality = estimator.quality
        #expect(quality.latestRTT == .milliseconds(20))
        #expect(quality.minimumRTT == .milliseconds(10))
        #expect(quality.medianRTT == .milliseconds(20))
        #expect(abs(quality.jitter!.seconds - 0.005) < 1e-9, "standard deviation of 10, 20, 10, 20 ms")
        #expect(quality.smoothedJitter! > .zero)
        #expect(quality.loss == 0)
        // Two pings that never get an answer.
        estimator.pingSent(Probe(nonce: 10, timestamp: 0), at: .seconds(10))
        estimator.pingSent(Probe(nonce: 11, timestamp: 0), at: .seconds(11))
        #expect(
            estimator.expire(olderThan: .milliseconds(1500), now: .milliseconds(11_600)) == 1,
            "one ping still awaited"
        )
        #expect(
            estimator.quality.loss == 1.0 / 5.0,
            "one of five settled pings lost; the other still within the timeout"
        )
        #expect(
            estimator.pongReceived(Probe(nonce: 10, timestamp: 0), at: .seconds(12)) == nil,
            "a late pong after expiry is ignored"
        )
        #expect(estimator.quality.pingsSent == 6)
    }

    @Test func windowHoldsTheLatestRoundTrips() {
        var estimator = LinkQualityEstimator(windowSize: 3)
        // 100, 100, 100 ms, then 1, 2, 3 ms: the first three leave the window.
        let rtts: [Duration] = [100, 100, 100, 1, 2, 3].map { .milliseconds($0) }
        for (index, rtt) in rtts.enumerated() {
            estimator.pingSent(Probe(nonce: UInt64(index), timestamp: 0), at: .seconds(index))
            estimator.pongReceived(Probe(nonce: UInt64(index), timestamp: 0), at: .seconds(index) + rtt)
        }
        let quality = estimator.quality
        #expect(quality.medianRTT == .milliseconds(2))
        #expect(quality.p99RTT == .milliseconds(3))
        #expect(quality.minimumRTT == .milliseconds(1))
        #expect(quality.pongsReceived == 6)
    }
}
