import Foundation
import MultipeerCore
import Testing

@Suite struct PeerTableStateMachineTests {
    /// Two UUIDs with a known order.
    static let high = UUID(uuidString: "F0000000-0000-0000-0000-000000000000")!
    static let low = UUID(uuidString: "10000000-0000-0000-0000-000000000000")!

    /// The table trusts the link layer to have checked keys against IDs: any key does here.
    static let anyKey = try! PeerKey(rawRepresentation: [UInt8](repeating: 7, count: PeerKey.length))

    /// Backoff without jitter, so delays are exact.
    static let steady = ReconnectParameters(jitter: 0)

    static func hello(_ peerID: UUID, incarnation: UInt64 = 1) -> Hello {
        try! Hello(peerID: peerID, key: anyKey, incarnation: incarnation, displayName: "\(peerID.uuidString.prefix(2))")
    }

    static func target(_ peerID: UUID?, port: Int = 7000) -> DialTarget {
        DialTarget(peerID: peerID, endpoints: [DialTarget.Endpoint(host: "127.0.0.1", port: port)])
    }

    @Test func uuidOrderIsByteOrder() {
        #expect(Self.high.isGreater(than: Self.low))
        #expect(!Self.low.isGreater(than: Self.high))
        #expect(!Self.low.isGreater(than: Self.low))
    }

    @Test func onlyTheGreaterUUIDDials() {
        var high = PeerTableStateMachine(localPeerID: Self.high)
        var low = PeerTableStateMachine(localPeerID: Self.low)
        guard case .dial(_, let target)? = high.discovered(Self.target(Self.low)).first else {
            Issue.record("the greater UUID dials")
            return
        }
        #expect(target.peerID == Self.low)
        #expect(low.discovered(Self.target(Self.high)).isEmpty)
        #expect(high.discovered(Self.target(Self.low)).isEmpty, "one dial at a time")
        #expect(high.discovered(Self.target(Self.high)).isEmpty, "never itself")
    }

    @Test func aFailedDialIsRetriedAfterTheDelayWhileThePeerIsAdvertised() {
        var table = PeerTableStateMachine(
            localPeerID: Self.high,
            backoff: ReconnectParameters(initialDelay: .milliseconds(250), jitter: 0)
        )
        guard case .dial(let link, _)? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("dial")
            return
        }
        #expect(
            table.linkClosed(link, error: MultipeerError(.connectionFailed, "refused")) == [
                .scheduleRedial(.peer(Self.low), after: .milliseconds(250))
            ]
        )
        guard case .dial? = table.redialDue(.peer(Self.low)).first else {
            Issue.record("redial")
            return
        }
        #expect(table.redialDue(.peer(Self.low)).isEmpty, "a dial is already under way")
    }

    @Test func redialsBackOffAndAFreshAnnouncementResetsThem() {
        var table = PeerTableStateMachine(localPeerID: Self.high, backoff: Self.steady)
        var delays: [Duration] = []
        guard case .dial(var link, _)? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("dial")
            return
        }
        for _ in 0..<3 {
            guard
                case .scheduleRedial(_, let delay)? = table.linkClosed(
                    link,
                    error: MultipeerError(.connectionFailed, "no answer")
                ).first,
                case .dial(let next, _)? = table.redialDue(.peer(Self.low)).first
            else {
                Issue.record("redial")
                return
            }
            delays.append(delay)
            link = next
        }
        #expect(
            delays == [.milliseconds(100), .milliseconds(160), .milliseconds(256)],
            "a peer that does not answer is not redialled in a storm"
        )
        _ = table.discovered(Self.target(Self.low))  // announced again
        guard case .scheduleRedial(_, let delay)? = table.linkClosed(link).first else {
            Issue.record("redial")
            return
        }
        #expect(delay == .milliseconds(100))
    }

    @Test func aKeepaliveTimeoutIsItsOwnReason() {
        var table = PeerTableStateMachine(localPeerID: Self.low)
        let link = table.acceptedLink()
        _ = table.linkEstablished(link, hello: Self.hello(Self.high))
        _ = table.linkAdmitted(link)
        #expect(
            table.linkClosed(link, error: MultipeerError(.keepaliveTimeout, "silent")) == [
                .peerLeft(Self.hello(Self.high), .keepaliveTimeout)
            ]
        )
    }

    @Test func noRedialOnceThePeerIsNoLongerAdvertised() {
        var table = PeerTableStateMachine(localPeerID: Self.high)
        guard case .dial(let link, _)? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("dial")
            return
        }
        _ = table.lost(Self.low)
        #expect(table.linkClosed(link).isEmpty)
        #expect(table.redialDue(.peer(Self.low)).isEmpty)
    }

    @Test func anAdmittedLinkMakesThePeerActiveUntilItCloses() {
        var table = PeerTableStateMachine(localPeerID: Self.high, backoff: Self.steady)
        guard case .dial(let link, _)? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("dial")
            return
        }
        #expect(
            table.linkEstablished(link, hello: Self.hello(Self.low)).isEmpty,
            "kept, but not yet admitted by the peer"
        )
        #expect(table.activePeers.isEmpty)
        #expect(table.activeLink(for: Self.low) == link)
        #expect(table.isJoining(Self.low), "a send to it waits for its resume point")
        #expect(
            table.linkAdmitted(link) == [
                .linkAdmitted(link, Self.hello(Self.low)), .peerJoined(link, Self.hello(Self.low)),
            ]
        )
        #expect(table.linkAdmitted(link).isEmpty, "once")
        #expect(!table.isJoining(Self.low))
        #expect(table.activePeers[Self.low] == Self.hello(Self.low))
        let closed = table.linkClosed(link, goodbye: .keepaliveTimeout)
        #expect(
            closed == [
                .peerLeft(Self.hello(Self.low), .goodbye(.keepaliveTimeout)),
                .scheduleRedial(.peer(Self.low), after: .milliseconds(100)),
            ]
        )
        #expect(table.activePeers.isEmpty)
    }

    /// A peer that leaves saying it shuts down is dialled again only at the longest backoff
    /// while its advert lingers; its next announcement (a new session advertises anew) is
    /// dialled at once. One that suspends comes back under the same advert, which discovery need
    /// not report again, and a static endpoint has no advert: both are redialled as ever.
    @Test func aPeerThatShutDownIsDialledAgainAtOnceOnlyWhenAnnouncedAgain() {
        var table = PeerTableStateMachine(localPeerID: Self.high, backoff: Self.steady)
        guard case .dial(let link, _)? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("dial")
            return
        }
        _ = table.linkEstablished(link, hello: Self.hello(Self.low))
        _ = table.linkAdmitted(link)
        #expect(
            table.linkClosed(link, goodbye: .shutdown) == [
                .peerLeft(Self.hello(Self.low), .goodbye(.shutdown)),
                .scheduleRedial(.peer(Self.low), after: Self.steady.maximumDelay),
            ],
            "redialled only at the longest backoff"
        )
        #expect(table.availability[Self.low]?.state == .discovered, "still advertised, for now")
        var back = Self.target(Self.low, port: 7001)
        back.incarnation = 2
        guard case .dial? = table.discovered(back).first else {
            Issue.record("dialled once announced again")
            return
        }

        for (target, reason, key) in [
            (Self.target(Self.low), GoodbyeReason.suspended, DialTarget.Key.peer(Self.low)),
            (Self.target(nil), .shutdown, .endpoint("127.0.0.1:7000")),
        ] {
            var table = PeerTableStateMachine(localPeerID: Self.high, backoff: Self.steady)
            guard case .dial(let link, _)? = table.discovered(target).first else {
                Issue.record("dial")
                return
            }
            _ = table.linkEstablished(link, hello: Self.hello(Self.low))
            _ = table.linkAdmitted(link)
            #expect(
                table.linkClosed(link, goodbye: reason).contains(.scheduleRedial(key, after: Self.steady.initialDelay)),
                "\(key), \(reason): redialled from the first delay"
            )
        }
    }

    @Test func theAcceptingSideDoesNotRedial() {
        var table = PeerTableStateMachine(localPeerID: Self.low)
        _ = table.discovered(Self.target(Self.high))
        let link = table.acceptedLink()
        #expect(table.linkEstablished(link, hello: Self.hello(Self.high)).isEmpty)
        #expect(
            table.linkAdmitted(link) == [
                .linkAdmitted(link, Self.hello(Self.high)), .peerJoined(link, Self.hello(Self.high)),
            ]
        )
        #expect(table.linkClosed(link) == [.peerLeft(Self.hello(Self.high), .linkClosed(nil))])
    }

    @Test func aNewerIncarnationReplacesTheLinkAndAnOlderOneIsRefused() {
        var table = PeerTableStateMachine(localPeerID: Self.low)
        let first = table.acceptedLink()
        _ = table.linkEstablished(first, hello: Self.hello(Self.high, incarnation: 5))
        _ = table.linkAdmitted(first)
        let restarted = table.acceptedLink()
        #expect(
            table.linkEstablished(restarted, hello: Self.hello(Self.high, incarnation: 6)) == [
                .close(first, .duplicateLink), .peerLeft(Self.hello(Self.high, incarnation: 5), .restarted),
            ]
        )
        #expect(table.linkAdmitted(first).isEmpty, "a replaced link's resume point changes nothing")
        #expect(
            table.linkAdmitted(restarted) == [
                .linkAdmitted(restarted, Self.hello(Self.high, incarnation: 6)),
                .peerJoined(restarted, Self.hello(Self.high, incarnation: 6)),
            ]
        )
        #expect(table.linkClosed(first).isEmpty, "the replaced link leaves quietly")
        let stale = table.acceptedLink()
        #expect(
            table.linkEstablished(stale, hello: Self.hello(Self.high, incarnation: 5)) == [
                .close(stale, .duplicateLink)
            ]
        )
        #expect(table.activeLink(for: Self.high) == restarted)
    }

    @Test func theSameIncarnationKeepsTheLinkDialledByTheGreaterThenTheNewer() {
        var table = PeerTableStateMachine(localPeerID: Self.low)
        let stale = table.acceptedLink()
        _ = table.linkEstablished(stale, hello: Self.hello(Self.high))
        // The dialler gave up on the first link and dialled again: the newer link wins.
        _ = table.linkAdmitted(stale)
        let fresh = table.acceptedLink()
        #expect(table.linkEstablished(fresh, hello: Self.hello(Self.high)) == [.close(stale, .duplicateLink)])
        #expect(table.activeLink(for: Self.high) == fresh)
        #expect(table.activePeers[Self.high] != nil, "the peer stays active across the switch")
        #expect(table.isJoining(Self.high), "active, and its new link not yet admitted")
        #expect(
            table.linkAdmitted(fresh) == [.linkAdmitted(fresh, Self.hello(Self.high))],
            "delivery moves; no second join"
        )
    }

    @Test func stopClosesEverythingAndRestartDialsAgain() {
        var table = PeerTableStateMachine(localPeerID: Self.high)
        guard case .dial(let link, _)? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("dial")
            return
        }
        _ = table.linkEstablished(link, hello: Self.hello(Self.low))
        _ = table.linkAdmitted(link)
        #expect(
            table.stop(.suspended) == [.close(link, .suspended), .peerLeft(Self.hello(Self.low), .local(.suspended))]
        )
        #expect(table.linkClosed(link).isEmpty)
        #expect(table.discovered(Self.target(Self.low)).isEmpty, "nothing is dialled while stopped")
        guard case .dial? = table.restart().first else {
            Issue.record("restart dials")
            return
        }
    }

    /// A link whose handshake completes while the session is stopped (a dial under way at a
    /// suspend, an accept) is closed with the reason the session stopped: a suspended session
    /// says it is suspended, so the peer keeps its streams for it (`make simulate` seed 4549:
    /// it said shutdown, and the peer failed a stream the suspended side would have resumed).
    @Test(arguments: [GoodbyeReason.suspended, .shutdown])
    func aLinkThatComesUpWhileStoppedIsToldWhy(reason: GoodbyeReason) {
        var table = PeerTableStateMachine(localPeerID: Self.high)
        guard case .dial(let link, _)? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("dial")
            return
        }
        _ = table.stop(reason)
        #expect(table.linkEstablished(link, hello: Self.hello(Self.low)) == [.close(link, reason)])
        let accepted = table.acceptedLink()
        #expect(table.linkEstablished(accepted, hello: Self.hello(Self.low)) == [.close(accepted, reason)])
    }

    /// A session that resumes dials each discovered peer, even one whose UUID is the greater
    /// (its to dial, and its redials grew while this side was away), until a link both take: a
    /// failed dial of it is made again with the backoff (on a loaded machine, the one dial of a
    /// resume timed out, and the pair waited for the peer's redial a minute later), and a link
    /// it dials meanwhile is the one kept; once joined, it is the peer's to dial again.
    @Test func aResumedSideDialsEveryPeerEvenOneThatDialsItUntilTheyJoin() {
        var table = PeerTableStateMachine(localPeerID: Self.low, backoff: Self.steady)
        #expect(table.discovered(Self.target(Self.high)).isEmpty, "the greater UUID dials")
        _ = table.stop(.suspended)
        guard case .dial(let mine, let target)? = table.restart().first else {
            Issue.record("the resumed side dials")
            return
        }
        #expect(target.peerID == Self.high)
        #expect(
            table.linkClosed(mine, error: MultipeerError(.handshakeTimeout, "sent nothing within 1 s")) == [
                .scheduleRedial(.peer(Self.high), after: .milliseconds(100))
            ],
            "dialled again"
        )
        guard case .dial(let again, _)? = table.redialDue(.peer(Self.high)).first else {
            Issue.record("the redial dials")
            return
        }
        // The peer dials too: both links complete; its link is the one kept, on both sides.
        let theirs = table.acceptedLink()
        _ = table.linkEstablished(again, hello: Self.hello(Self.high))
        #expect(table.linkEstablished(theirs, hello: Self.hello(Self.high)).contains(.close(again, .duplicateLink)))
        #expect(table.activeLink(for: Self.high) == theirs)
        #expect(table.linkAdmitted(theirs).contains(.peerJoined(theirs, Self.hello(Self.high))))
        #expect(
            table.linkClosed(theirs) == [.peerLeft(Self.hello(Self.high), .linkClosed(nil))],
            "joined: the peer's to dial again"
        )
    }

    /// A peer whose UUID is the greater dials this side, and this side's roster refuses it: it
    /// holds this side at its longest backoff. When the roster changes, this side dials it
    /// itself, so the join comes about now, not at the peer's next redial; and again, with the
    /// backoff, after a dial that fails (a first-bytes deadline on a loaded machine: the peer's
    /// own redial is a minute away), until a link both take; then the peer dials again.
    @Test func aRosterChangeDialsARefusedPeerThatDialsThisSideUntilTheyJoin() {
        var table = PeerTableStateMachine(localPeerID: Self.low, backoff: Self.steady)
        #expect(table.discovered(Self.target(Self.high)).isEmpty, "the greater UUID dials")
        let inbound = table.acceptedLink()
        _ = table.linkClosed(
            inbound,
            goodbye: nil,
            error: MultipeerError(.notInRoster, "refused here"),
            provedPeer: Self.high
        )
        guard case .dial(let first, let target)? = table.reconsiderRefusals().first else {
            Issue.record("dialled now")
            return
        }
        #expect(target.peerID == Self.high)
        #expect(
            table.linkClosed(first, error: MultipeerError(.handshakeTimeout, "sent nothing within 1 s")) == [
                .scheduleRedial(.peer(Self.high), after: .milliseconds(100))
            ],
            "dialled again"
        )
        guard case .dial(let second, _)? = table.redialDue(.peer(Self.high)).first else {
            Issue.record("the redial dials")
            return
        }
        _ = table.linkEstablished(second, hello: Self.hello(Self.high))
        #expect(table.linkAdmitted(second).contains(.peerJoined(second, Self.hello(Self.high))))
        #expect(
            table.linkClosed(second) == [.peerLeft(Self.hello(Self.high), .linkClosed(nil))],
            "joined: the peer's to dial again"
        )
    }

    /// A peer whose roster does not list this device takes its HELLO and then says GOODBYE 5:
    /// it never joins (nor leaves), and it is dialled again only at the longest backoff, however
    /// often the same advert is resolved again, until something changes.
    @Test func aPeerThatRefusesThisDeviceNeverJoinsAndIsHeldAtTheLongestBackoff() {
        var table = PeerTableStateMachine(localPeerID: Self.high, backoff: Self.steady)
        guard case .dial(var link, _)? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("dial")
            return
        }
        for _ in 0..<3 {
            #expect(table.linkEstablished(link, hello: Self.hello(Self.low)).isEmpty)
            #expect(
                table.linkClosed(link, goodbye: .notInRoster) == [.scheduleRedial(.peer(Self.low), after: .seconds(10))]
            )
            #expect(table.activePeers.isEmpty)
            #expect(table.discovered(Self.target(Self.low)).isEmpty, "the same advert resolved again changes nothing")
            guard case .dial(let next, _)? = table.redialDue(.peer(Self.low)).first else {
                Issue.record("redial")
                return
            }
            link = next
        }
        // A refusal of the dial itself (another group key) holds it the same way.
        #expect(
            table.linkClosed(link, error: MultipeerError(.authenticationFailed, "keys differ")) == [
                .scheduleRedial(.peer(Self.low), after: .seconds(10))
            ]
        )
        // A new incarnation of the peer is news: dialled at once.
        guard
            case .dial(let fresh, _)? = table.discovered(
                DialTarget(peerID: Self.low, incarnation: 2, endpoints: Self.target(Self.low).endpoints)
            ).first
        else {
            Issue.record("a restarted peer is dialled at once")
            return
        }
        #expect(table.linkEstablished(fresh, hello: Self.hello(Self.low)).isEmpty)
        #expect(table.linkAdmitted(fresh).contains(.peerJoined(fresh, Self.hello(Self.low))))
        #expect(
            table.linkClosed(fresh) == [
                .peerLeft(Self.hello(Self.low), .linkClosed(nil)),
                .scheduleRedial(.peer(Self.low), after: .milliseconds(100)),
            ],
            "admitted once: the hold is over"
        )
    }

    /// This side's roster or keys changed: refused peers are dialled again at once.
    @Test func aChangedRosterOrKeyRingDialsRefusedPeersAtOnce() {
        var table = PeerTableStateMachine(localPeerID: Self.high, backoff: Self.steady)
        guard case .dial(let link, _)? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("dial")
            return
        }
        _ = table.linkClosed(link, error: MultipeerError(.notInRoster, "not listed"))
        guard case .dial? = table.reconsiderRefusals().first else {
            Issue.record("dialled at once")
            return
        }
        #expect(table.reconsiderRefusals().isEmpty, "nothing refused any more")
    }

    /// Static peers dial each other blind; both sides must keep the same one link.
    @Test func simultaneousStaticDialsLeaveTheSameOneLinkOnBothSides() {
        let network = InMemoryNetwork(peers: [Self.high, Self.low])
        network.discoverStatically()
        network.deliverAll()
        #expect(network.activePairs() == [[Self.high, Self.low]])
        let highEnd = InMemoryNetwork.End(owner: Self.high, link: network.tables[Self.high]!.activeLink(for: Self.low)!)
        let lowEnd = InMemoryNetwork.End(owner: Self.low, link: network.tables[Self.low]!.activeLink(for: Self.high)!)
        #expect(network.wire[highEnd] == lowEnd, "both ends of one connection")
        #expect(network.dialers[highEnd] == Self.high, "the link the greater UUID dialled")
        // The losing blind dial is not repeated while the peer is active.
        #expect(network.pendingRedials.isEmpty)
    }

    @Test func aStaticEndpointIsRedialledByEitherSideButNeverItself() {
        var table = PeerTableStateMachine(localPeerID: Self.low, backoff: Self.steady)
        guard case .dial(let link, _)? = table.discovered(Self.target(nil)).first else {
            Issue.record("dial")
            return
        }
        _ = table.linkEstablished(link, hello: Self.hello(Self.high))
        // The greater peer does not list us: the smaller side must redial.
        #expect(table.linkClosed(link).last == .scheduleRedial(.endpoint("127.0.0.1:7000"), after: .milliseconds(100)))

        var lonely = PeerTableStateMachine(localPeerID: Self.low)
        guard case .dial(let selfLink, _)? = lonely.discovered(Self.target(nil, port: 7001)).first else {
            Issue.record("dial")
            return
        }
        #expect(lonely.linkClosed(selfLink, error: MultipeerError(.selfConnection, "me")).isEmpty)
    }

    @Test func endpointsThatFailedAreTriedLastAndTheOneThatProvedThePeerFirst() {
        var table = PeerTableStateMachine(localPeerID: Self.high, backoff: Self.steady)
        let (sink, stale, real) = (
            DialTarget.Endpoint(host: "198.18.0.66", port: 9), DialTarget.Endpoint(host: "198.18.0.2", port: 7000),
            DialTarget.Endpoint(host: "198.18.0.12", port: 7000)
        )
        let target = DialTarget(peerID: Self.low, endpoints: [sink, stale, real])
        guard case .dial(let first, let offered)? = table.discovered(target).first else {
            Issue.record("expected a dial")
            return
        }
        #expect(offered.endpoints == [sink, stale, real], "discovery's order while nothing is known")
        table.endpointFailed(target.key, sink)
        table.endpointFailed(target.key, sink)
        table.endpointFailed(target.key, stale)
        table.endpointProved(target.key, real)
        // not the target's: ignored
        table.endpointFailed(target.key, DialTarget.Endpoint(host: "203.0.113.9", port: 1))
        _ = table.linkEstablished(first, hello: Self.hello(Self.low))
        guard case .scheduleRedial(let key, _)? = table.linkClosed(first).last,
            case .dial(let second, let next)? = table.redialDue(key).first
        else {
            Issue.record("expected a redial")
            return
        }
        #expect(next.endpoints == [real, stale, sink])
        // That dial fails too, so a redial is pending; then the peer moves: discovery withdraws the
        // endpoint that proved it and names a new one, which is dialled at once, before the
        // endpoints that failed, without waiting for the pending redial.
        let moved = DialTarget.Endpoint(host: "198.18.0.22", port: 7000)
        #expect(table.linkClosed(second).contains { if case .scheduleRedial = $0 { true } else { false } })
        guard
            case .dial(_, let after)? = table.discovered(DialTarget(peerID: Self.low, endpoints: [sink, stale, moved]))
                .first
        else {
            Issue.record("a moved peer is dialled at once, whatever redial is pending")
            return
        }
        #expect(after.endpoints == [moved, stale, sink], "a new endpoint before those that failed")
    }

    @Test func endpointsDiscoveredDuringADialAreAddedToIt() {
        var table = PeerTableStateMachine(localPeerID: Self.high)
        let (first, second) = (
            DialTarget.Endpoint(host: "127.0.0.1", port: 9), DialTarget.Endpoint(host: "127.0.0.1", port: 7000)
        )
        guard case .dial(let id, _)? = table.discovered(DialTarget(peerID: Self.low, endpoints: [first])).first else {
            Issue.record("expected a dial")
            return
        }
        #expect(
            table.discovered(DialTarget(peerID: Self.low, endpoints: [first, second])) == [.addEndpoints(id, [second])]
        )
        #expect(table.discovered(DialTarget(peerID: Self.low, endpoints: [second, first])).isEmpty, "nothing new")
        _ = table.linkEstablished(id, hello: Self.hello(Self.low))
        #expect(
            table.discovered(DialTarget(peerID: Self.low, endpoints: [first, second, .init(host: "::1", port: 1)]))
                .isEmpty,
            "no dial once linked"
        )
    }

    @Test func aLinkThatFailsSendsTheNextDialToTheOtherEndpointsFirst() {
        var table = PeerTableStateMachine(localPeerID: Self.high, backoff: Self.steady)
        let (old, new) = (
            DialTarget.Endpoint(host: "198.18.0.3", port: 7000), DialTarget.Endpoint(host: "198.18.0.13", port: 7000)
        )
        guard case .dial(let first, _)? = table.discovered(DialTarget(peerID: Self.low, endpoints: [old])).first else {
            Issue.record("expected a dial")
            return
        }
        table.endpointProved(.peer(Self.low), old)
        _ = table.linkEstablished(first, hello: Self.hello(Self.low))
        // The peer is renumbered: discovery names its new address beside the old (not yet
        // withdrawn), and the link fails.
        _ = table.discovered(DialTarget(peerID: Self.low, endpoints: [old, new]))
        let failure = MultipeerError(.keepaliveTimeout, "silent")
        let actions = table.linkClosed(first, error: failure)
        #expect(actions.contains(.lookUpAgain(Self.low)), "discovery asked for the peer's records afresh")
        guard case .scheduleRedial(let key, _)? = actions.last,
            case .dial(let second, let next)? = table.redialDue(key).first
        else {
            Issue.record("expected a redial")
            return
        }
        #expect(next.endpoints == [new, old])
        // A link that ends with GOODBYE says nothing about where the peer is.
        table.endpointProved(.peer(Self.low), new)
        _ = table.linkEstablished(second, hello: Self.hello(Self.low))
        #expect(!table.linkClosed(second, goodbye: .shutdown).contains(.lookUpAgain(Self.low)))
    }

    @Test func aTargetWithoutEndpointsIsNotDialledUntilOneAppears() {
        var table = PeerTableStateMachine(localPeerID: Self.high)
        #expect(table.discovered(DialTarget(peerID: Self.low, endpoints: [])).isEmpty)
        guard case .dial? = table.discovered(Self.target(Self.low)).first else {
            Issue.record("expected a dial")
            return
        }
    }

    @Test func aMeshOfFiveHasExactlyOneLinkPerPair() {
        let ids = (0..<5).map { _ in UUID() }
        let network = InMemoryNetwork(peers: ids)
        network.discoverAll()
        network.deliverAll()
        #expect(network.activePairs().count == 10)
        for id in ids { #expect(network.tables[id]!.activePeers.count == 4) }
    }
}

/// Tables joined by an in-memory transport: a dial makes both ends of a connection, which are
/// established with each other's HELLO when delivered; closes reach both ends.
final class InMemoryNetwork {
    /// One end of a connection: whose table, and its link ID there.
    struct End: Hashable {
        var owner: UUID
        var link: LinkID
    }

    var tables: [UUID: PeerTableStateMachine] = [:]
    /// Each end of a connection, mapped to the other end.
    var wire: [End: End] = [:]
    var dialers: [End: UUID] = [:]
    private var pending: [(UUID, PeerTableStateMachine.Action)] = []
    var pendingRedials: [(UUID, DialTarget.Key)] = []

    init(peers: [UUID]) {
        for id in peers { tables[id] = PeerTableStateMachine(localPeerID: id) }
    }

    func discoverAll(statically: Bool = false) {
        for id in tables.keys.sorted(by: { $0.uuidString < $1.uuidString }) {
            for other in tables.keys where other != id {
                let target = DialTarget(
                    peerID: statically ? nil : other,
                    endpoints: [DialTarget.Endpoint(host: other.uuidString, port: 1)]
                )
                pending += tables[id]!.discovered(target).map { (id, $0) }
            }
        }
    }

    func discoverStatically() { discoverAll(statically: true) }

    func deliverAll() {
        while !pending.isEmpty {
            let (owner, action) = pending.removeFirst()
            switch action {
            case .dial(let link, let target):
                let remote = UUID(uuidString: target.endpoints[0].host)!
                let near = End(owner: owner, link: link)
                let far = End(owner: remote, link: tables[remote]!.acceptedLink())
                wire[near] = far
                wire[far] = near
                dialers[near] = owner
                dialers[far] = owner
                pending += tables[owner]!.linkEstablished(link, hello: hello(remote)).map { (owner, $0) }
                pending += tables[remote]!.linkEstablished(far.link, hello: hello(owner)).map { (remote, $0) }
                // Each side that keeps the link sends its resume point, which admits it at the other.
                for (end, other) in [(near, far), (far, near)]
                where tables[end.owner]!.activeLink(for: other.owner) == end.link {
                    pending += tables[other.owner]!.linkAdmitted(other.link).map { (other.owner, $0) }
                }
            case .close(let link, let reason):
                let near = End(owner: owner, link: link)
                guard let far = wire.removeValue(forKey: near) else { continue }
                wire[far] = nil
                pending += tables[owner]!.linkClosed(link).map { (owner, $0) }
                pending += tables[far.owner]!.linkClosed(far.link, goodbye: reason).map { (far.owner, $0) }
            case .scheduleRedial(let key, _):
                pendingRedials.append((owner, key))
            case .linkAdmitted, .peerJoined, .peerLeft, .addEndpoints, .lookUpAgain:
                break
            }
        }
    }

    func hello(_ id: UUID) -> Hello {
        try! Hello(peerID: id, key: PeerTableStateMachineTests.anyKey, incarnation: 1, displayName: "peer")
    }

    /// Pairs of peers that see each other as active, each pair sorted.
    func activePairs() -> Set<[UUID]> {
        var pairs: Set<[UUID]> = []
        for (id, table) in tables {
            for peer in table.activePeers.keys where tables[peer]!.activePeers[id] != nil {
                pairs.insert([id, peer].sorted { $0.isGreater(than: $1) })
            }
        }
        return pairs
    }
}
