import Foundation
import MultipeerCore
import NIOCore
import Testing

/// The session's decisions, driven by events alone (time is a value): the scenarios of the
/// integration tests that are about what the session decides, in milliseconds.
@Suite struct SessionStateMachineTests {
    static let local = UUID(uuidString: "F0000000-0000-0000-0000-000000000000")!
    static let peer = UUID(uuidString: "10000000-0000-0000-0000-000000000000")!
    static let start = ContinuousClock.now

    static func key(_ byte: UInt8) -> PeerKey {
        try! PeerKey(rawRepresentation: [UInt8](repeating: byte, count: PeerKey.length))
    }

    static func hello(_ peerID: UUID = peer, key: PeerKey = key(2), incarnation: UInt64 = 1) -> Hello {
        try! Hello(peerID: peerID, key: key, incarnation: incarnation, displayName: "peer")
    }

    static func endpoint(_ port: Int) -> DialTarget.Endpoint { DialTarget.Endpoint(host: "198.18.0.2", port: port) }

    /// A running session of `local`, holding `keys` group keys; no jitter, so delays are exact.
    static func running(roster: Roster? = nil, keys: Int = 1) -> SessionStateMachine {
        var session = SessionStateMachine(
            localPeerID: local,
            localKey: key(1),
            backoff: ReconnectParameters(initialDelay: .seconds(1), jitter: 0),
            roster: roster,
            keyCount: keys,
            seed: 1
        )
        try! session.begin()
        #expect(session.listening(on: 7000, now: start).isEmpty)
        return session
    }

    /// Takes the dial `actions` start: its link and first attempt.
    static func dial(_ actions: [SessionStateMachine.Action]) -> (LinkID, SessionStateMachine.Attempt)? {
        guard actions.count == 1, case .connect(let id, let attempt) = actions[0] else { return nil }
        return (id, attempt)
    }

    static func failed(
        _ address: String,
        _ error: MultipeerError,
        _ disposition: SessionStateMachine.Disposition = .reported(held: 0)
    ) -> SessionStateMachine.Action {
        .report(.connectionFailed(address: address, error, inbound: false, disposition))
    }

    @Test func aDialTriesEachKeyAtAnEndpointThatRefusesItsKeyAndEachEndpointInTurn() throws {
        var session = Self.running(keys: 2)
        let target = DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1), Self.endpoint(2)])
        let (id, first) = try #require(Self.dial(session.discovered(target, now: Self.start)))
        #expect(
            first == .init(endpoint: Self.endpoint(1), peerID: Self.peer, key: 0),
            "the first endpoint, the newest key"
        )

        let refused = MultipeerError(.authenticationFailed, "no key in common")
        #expect(
            session.attemptFailed(id, refused, now: Self.start) == [
                .connect(id, .init(endpoint: Self.endpoint(1), peerID: Self.peer, key: 1))
            ],
            "the older key, unreported"
        )
        #expect(
            session.attemptFailed(id, refused, now: Self.start) == [
                Self.failed(Self.endpoint(1).description, refused),
                .connect(id, .init(endpoint: Self.endpoint(2), peerID: Self.peer, key: 0)),
            ],
            "no key taken: reported, and the next endpoint from the newest key"
        )

        let silent = MultipeerError(.connectionFailed, "no answer")
        #expect(
            session.attemptFailed(id, silent, now: Self.start) == [
                Self.failed(Self.endpoint(2).description, silent),
                .lookUpAgain(Self.peer),
                .schedule(.redial(.peer(Self.peer)), after: .seconds(1)),
            ],
            "not a key: no other key tried; none left: looked up again, and dialled again later"
        )

        let (_, again) = try #require(
            Self.dial(session.fired(.redial(.peer(Self.peer)), now: Self.start + .seconds(1)))
        )
        #expect(again.endpoint == Self.endpoint(1), "both failed once: discovery's order")
    }

    /// Found by the simulator (seeds 20060 and 20193): a dial offered the newest of two keys,
    /// the peer refused it, and meanwhile the ring became one key; the failure was reported,
    /// though the one key left was never offered.
    @Test func anAttemptRefusedAfterTheKeysChangedIsMadeAgainWithTheNewestKeyHeldNow() throws {
        var session = Self.running(keys: 2)
        let target = DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1)])
        let (id, first) = try #require(Self.dial(session.discovered(target, now: Self.start)))
        #expect(first.key == 0)
        _ = session.keysChanged(count: 1, now: Self.start)
        let refused = MultipeerError(.authenticationFailed, "keys differ")
        #expect(
            session.attemptFailed(id, refused, now: Self.start) == [
                .connect(id, .init(endpoint: Self.endpoint(1), peerID: Self.peer, key: 0))
            ],
            "the newest key of the ring held now, unreported"
        )
        #expect(
            session.attemptFailed(id, refused, now: Self.start).first
                == Self.failed(Self.endpoint(1).description, refused),
            "refused with every key held since: reported"
        )
    }

    @Test func theEndpointThatProvedThePeerIsTriedFirstNextTime() throws {
        var session = Self.running()
        let target = DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1), Self.endpoint(2)])
        let (id, _) = try #require(Self.dial(session.discovered(target, now: Self.start)))
        _ = session.attemptFailed(id, MultipeerError(.connectionFailed, "no answer"), now: Self.start)
        #expect(
            session.linkEstablished(id, hello: Self.hello(), address: "198.18.0.2", now: Self.start)
                == .carried(closing: nil, [.adopt(id)])
        )
        _ = session.linkClosed(id, goodbye: .keepaliveTimeout, error: nil, now: Self.start)
        let (_, next) = try #require(Self.dial(session.fired(.redial(.peer(Self.peer)), now: Self.start + .seconds(1))))
        #expect(next.endpoint == Self.endpoint(2))
    }

    @Test func aPeerJoinsOnItsResumePointAndItsDeliveryMovesOntoTheLinkThen() throws {
        var session = Self.running()
        let (id, _) = try #require(
            Self.dial(session.discovered(DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1)]), now: Self.start))
        )
        #expect(
            session.linkEstablished(id, hello: Self.hello(), address: "a", now: Self.start)
                == .carried(closing: nil, [.adopt(id)])
        )
        #expect(session.activePeers.isEmpty, "kept, not yet admitted by the peer")
        #expect(session.isJoining(Self.peer), "a send to it waits for its resume point")
        #expect(
            session.admitted(id, now: Self.start + .seconds(1)) == [
                .bind(id, Self.hello(), reads: .every), .peerJoined(id, Self.hello()), .admitMessages(id),
            ],
            "the application hears of the join before it has any message the link brings"
        )
        #expect(!session.isJoining(Self.peer))
        #expect(session.presence(of: Self.peer)?.since == Self.start + .seconds(1))
        #expect(session.admitted(id, now: Self.start + .seconds(2)).isEmpty, "admitted once")
        #expect(
            session.linkClosed(id, goodbye: .keepaliveTimeout, error: nil, now: Self.start + .seconds(3)) == [
                .unbind(Self.peer, id), .unbind(Self.peer, nil), .peerLeft(Self.hello(), .goodbye(.keepaliveTimeout)),
                .schedule(.redial(.peer(Self.peer)), after: .seconds(1)),
            ],
            "its delivery leaves the link, it leaves, and it is dialled again while advertised"
        )
    }

    /// How long a peer that left on a failure took to come back is reported once, before its
    /// join; a peer that shut down and came back is not (it chose to be away).
    @Test func aPeerBackAfterAFailureIsReportedWithTheTimeItWasAway() throws {
        var session = Self.running()
        /// The link `dialling` starts, taken and admitted at `time`: its id and what the admission did.
        func join(
            _ dialling: [SessionStateMachine.Action],
            at time: Duration
        ) throws -> (
            LinkID, [SessionStateMachine.Action]
        ) {
            let (id, _) = try #require(Self.dial(dialling))
            _ = session.linkEstablished(id, hello: Self.hello(), address: "a", now: Self.start + time)
            return (id, session.admitted(id, now: Self.start + time))
        }
        let target = DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1)])
        let (first, joined) = try join(session.discovered(target, now: Self.start), at: .zero)
        #expect(
            joined == [
                .bind(first, Self.hello(), reads: .every), .peerJoined(first, Self.hello()), .admitMessages(first),
            ]
        )

        _ = session.linkClosed(first, goodbye: nil, error: nil, now: Self.start + .seconds(3))
        let redial = session.fired(.redial(.peer(Self.peer)), now: Self.start + .milliseconds(4_250))
        let (second, rejoined) = try join(redial, at: .milliseconds(4_250))
        #expect(
            rejoined == [
                .bind(second, Self.hello(), reads: .every),
                .report(.rejoined(Self.peer, after: .milliseconds(1_250))),
                .peerJoined(second, Self.hello()), .admitMessages(second),
            ],
            "away from its link's failure to its join, told before the join"
        )
        #expect(rejoined.filter { if case .report = $0 { true } else { false } }.count == 1)

        _ = session.linkClosed(second, goodbye: .shutdown, error: nil, now: Self.start + .seconds(5))
        let (_, back) = try join(
            session.fired(.redial(.peer(Self.peer)), now: Self.start + .seconds(20)),
            at: .seconds(20)
        )
        #expect(back.contains { if case .peerJoined = $0 { true } else { false } })
        #expect(!back.contains { if case .report = $0 { true } else { false } }, "it shut down: nothing to report")
    }

    @Test func aSendWaitingForAPeerWhoseLinkClosedBeforeItJoinedIsWokenToBeRefused() throws {
        var session = Self.running()
        let (id, _) = try #require(
            Self.dial(session.discovered(DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1)]), now: Self.start))
        )
        _ = session.linkEstablished(id, hello: Self.hello(), address: "a", now: Self.start)
        let closed = session.linkClosed(
            id,
            goodbye: nil,
            error: MultipeerError(.connectionFailed, "reset"),
            now: Self.start
        )
        #expect(
            closed.prefix(2) == [.unbind(Self.peer, id), .wakeSenders(Self.peer)],
            "those waiting for it to join look again"
        )
        #expect(!session.isJoining(Self.peer), "and find it is not joining")
    }

    @Test func aPeerTheRosterDoesNotListIsRefusedReportedOnceAndAdmittedWhenTheRosterChanges() throws {
        let stranger = Self.key(9)
        var session = Self.running(roster: Roster(keys: [Self.key(2)]))
        let target = DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1)])
        let (id, _) = try #require(Self.dial(session.discovered(target, now: Self.start)))
        guard
            case .refused(let actions) = session.linkEstablished(
                id,
                hello: Self.hello(key: stranger),
                address: "a",
                now: Self.start
            ),
            case .report(.connectionFailed(_, let error, false, .reported))? = actions.first
        else {
            Issue.record("refused, and reported")
            return
        }
        #expect(error.code == .notInRoster)
        #expect(!session.carries(id), "never a link of the session")
        #expect(session.activePeers.isEmpty)
        guard case .schedule(.redial, let delay)? = actions.last else {
            Issue.record("dialled again, late")
            return
        }
        #expect(delay == ReconnectParameters().maximumDelay, "held at the longest backoff")

        let (again, _) = try #require(Self.dial(session.fired(.redial(.peer(Self.peer)), now: Self.start + delay)))
        guard
            case .refused(let second) = session.linkEstablished(
                again,
                hello: Self.hello(key: stranger),
                address: "a",
                now: Self.start + delay
            ),
            case .report(.connectionFailed(_, _, _, .refusedAgain))? = second.first
        else {
            Issue.record("the same refusal again: counted, not reported")
            return
        }
        let admitted = session.rosterChanged(Roster(keys: [Self.key(2), stranger]), now: Self.start + delay)
        let (third, _) = try #require(Self.dial(admitted), "admitted now: dialled again at once")
        #expect(
            session.linkEstablished(third, hello: Self.hello(key: stranger), address: "a", now: Self.start + delay)
                == .carried(closing: nil, [.adopt(third)])
        )
    }

    @Test func aPeerWhoseRosterRefusesThisDeviceIsReportedOnceAndNeverJoins() throws {
        var session = Self.running()
        let (id, _) = try #require(
            Self.dial(session.discovered(DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1)]), now: Self.start))
        )
        _ = session.linkEstablished(id, hello: Self.hello(), address: "a", now: Self.start)
        let actions = session.linkClosed(id, goodbye: .notInRoster, error: nil, now: Self.start)
        guard case .report(.connectionFailed(_, let error, false, .reported))? = actions.first else {
            Issue.record("reported")
            return
        }
        #expect(error.code == .notInRoster)
        #expect(
            error.message.contains(Self.key(1).fingerprint),
            "names this device's key, which the peer's roster lacks"
        )
        #expect(!actions.contains { if case .peerLeft = $0 { true } else { false } }, "never joined, so never left")
    }

    @Test func inboundFailuresAreReportedTenAtOnceThenHeldAndCounted() {
        var session = Self.running()
        let refused = MultipeerError(.authenticationFailed, "no key in common")
        for _ in 0..<10 {
            #expect(
                session.inboundFailed(address: "x", refused, now: Self.start) == [
                    .report(.connectionFailed(address: "x", refused, inbound: true, .reported(held: 0)))
                ]
            )
        }
        #expect(
            session.inboundFailed(address: "x", refused, now: Self.start) == [
                .report(.connectionFailed(address: "x", refused, inbound: true, .heldBack)),
                .schedule(.heldFailuresReport, after: .seconds(1)),
            ]
        )
        #expect(
            session.inboundFailed(address: "x", refused, now: Self.start) == [
                .report(.connectionFailed(address: "x", refused, inbound: true, .heldBack))
            ],
            "one report scheduled"
        )
        #expect(
            session.fired(.heldFailuresReport, now: Self.start + .seconds(1)) == [
                .report(.connectionsFailed(count: 2, code: .authenticationFailed))
            ]
        )
    }

    @Test func aDialCancelledByASuspendIsNeverMadeNorReportedAndResumingDialsAgain() throws {
        var session = Self.running()
        let target = DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1)])
        let (id, _) = try #require(Self.dial(session.discovered(target, now: Self.start)))
        #expect(session.stopRunning(.suspended, now: Self.start) == [.close(id, .suspended)])
        #expect(session.lifecycle == .stopping(port: 7000), "its port still held, until the listener lets it go")
        #expect(
            session.attemptFailed(id, MultipeerError(.connectionFailed, "cancelled"), now: Self.start).isEmpty,
            "not reported"
        )
        session.stoppedListening()
        #expect(session.lifecycle == .suspended)
        #expect(session.discovered(target, now: Self.start).isEmpty, "nothing dialled while suspended")
        let (_, attempt) = try #require(Self.dial(session.listening(on: 7000, now: Self.start)))
        #expect(attempt.endpoint == Self.endpoint(1))
    }

    @Test func rejectIsTakenOnlyOnThePeersKeptLinkForAMessageSent() throws {
        var session = Self.running()
        let (id, _) = try #require(
            Self.dial(session.discovered(DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(1)]), now: Self.start))
        )
        _ = session.linkEstablished(id, hello: Self.hello(), address: "a", now: Self.start)
        _ = session.admitted(id, now: Self.start)
        let rejection = Rejection(sequence: 1, typeName: "Note", reason: "bad")
        #expect(
            session.rejected(rejection, by: Self.peer, on: id, written: false) == [
                .report(.rejectIgnored(Self.peer, rejection))
            ],
            "not written yet"
        )
        #expect(
            session.rejected(rejection, by: Self.peer, on: id, written: true) == [
                .report(.rejectedByPeer(Self.hello(), rejection))
            ]
        )
        #expect(
            session.rejected(rejection, by: Self.peer, on: LinkID(99), written: true) == [
                .report(.rejectIgnored(Self.peer, rejection))
            ],
            "another link"
        )
        #expect(session.reject(rejection, from: Self.peer, incarnation: 1) == [.sendReject(id, rejection)])
        #expect(
            session.reject(rejection, from: Self.peer, incarnation: 2) == [
                .report(.rejectionNotSent(Self.peer, rejection))
            ],
            "another incarnation could not tell which message it was"
        )
    }

    @Test func itListensAgainWhereItListenedTheFirstTimeWhereTheSystemChose() {
        var session = SessionStateMachine(
            localPeerID: Self.local,
            localKey: Self.key(1),
            backoff: ReconnectParameters(),
            roster: nil,
            keyCount: 1
        )
        try! session.begin()
        #expect(
            session.listenPort == (0, false),
            "the first time: the port configured (0, any), and a failure is the run's"
        )
        _ = session.listening(on: 41_234, now: Self.start)
        _ = session.stopRunning(.suspended, now: Self.start)
        session.stoppedListening()
        #expect(session.listenPort == (41_234, true), "on resume: the one it had, or another if taken")
        var fixed = SessionStateMachine(
            localPeerID: Self.local,
            localKey: Self.key(1),
            backoff: ReconnectParameters(),
            roster: nil,
            keyCount: 1,
            port: 7000
        )
        try! fixed.begin()
        _ = fixed.listening(on: 7000, now: Self.start)
        #expect(fixed.listenPort == (7000, true))
    }

    @Test func aSessionRunsOnce() {
        var session = Self.running()
        #expect(throws: MultipeerError.self) { try session.begin() }
        #expect(session.finish() == [.ended], "what the session holds for the application ends")
        #expect(session.lifecycle == .stopped)
        #expect(throws: MultipeerError.self) { try session.begin() }
    }
    // MARK: Availability

    static func available(
        _ state: AvailablePeer.State,
        _ name: String,
        key: PeerKey? = nil,
        _ id: UUID = peer,
        metadata: [String: String] = [:]
    ) -> AvailablePeer {
        AvailablePeer(id: id, state: state, displayName: name, metadata: metadata, key: key)
    }

    @Test func aPeerIsDiscoveredConnectingActiveAndGoneAsItsAdvertAndLinksSay() throws {
        var session = Self.running()
        #expect(session.availabilityChanges().isEmpty, "no one yet")
        let target = DialTarget(
            peerID: Self.peer,
            endpoints: [Self.endpoint(1)],
            displayName: "claimed",
            metadata: ["seat": "L"]
        )
        let (id, _) = try #require(Self.dial(session.discovered(target, now: Self.start)))
        #expect(
            session.availabilityChanges() == [Self.available(.connecting, "claimed", metadata: ["seat": "L"])],
            "dialled at once, under its advert's claims"
        )
        #expect(session.availabilityChanges().isEmpty, "told once")

        _ = session.attemptFailed(id, MultipeerError(.connectionFailed, "no answer"), now: Self.start)
        #expect(
            session.availabilityChanges() == [Self.available(.discovered, "claimed", metadata: ["seat": "L"])],
            "between dials"
        )

        let (again, _) = try #require(
            Self.dial(session.fired(.redial(.peer(Self.peer)), now: Self.start + .seconds(1)))
        )
        #expect(session.availabilityChanges() == [Self.available(.connecting, "claimed", metadata: ["seat": "L"])])
        _ = session.linkEstablished(again, hello: Self.hello(), address: "a", now: Self.start)
        #expect(
            session.availabilityChanges() == [Self.available(.connecting, "peer", key: Self.key(2))],
            "its HELLO speaks for it now, and proves its key; it has not admitted the link yet"
        )
        _ = session.admitted(again, now: Self.start)
        #expect(session.availabilityChanges() == [Self.available(.active, "peer", key: Self.key(2))])

        _ = session.linkClosed(again, goodbye: .shutdown, error: nil, now: Self.start)
        #expect(
            session.availabilityChanges() == [Self.available(.discovered, "peer")],
            "still advertised, under the name its HELLO proved; no link speaks for it, so no key"
        )
        _ = session.lost(Self.peer, now: Self.start)
        #expect(session.availabilityChanges() == [Self.available(.gone, "peer")], "no advert, no link: gone")
    }

    @Test func aPeerRefusedEitherWayIsRefusedNeverActiveUntilTheRosterChanges() throws {
        // This side's roster refuses an inbound peer, which (the lesser UUID here) never dials it.
        let greater = UUID(uuidString: "FF000000-0000-0000-0000-000000000000")!
        var session = Self.running(roster: Roster(keys: [Self.key(2)]))
        _ = session.discovered(
            DialTarget(peerID: greater, endpoints: [Self.endpoint(1)], displayName: "claimed"),
            now: Self.start
        )
        #expect(session.availabilityChanges() == [Self.available(.discovered, "claimed", greater)], "its to dial")
        let inbound = session.acceptedLink()
        guard
            case .refused = session.linkEstablished(
                inbound,
                hello: Self.hello(greater, key: Self.key(9)),
                address: "a",
                now: Self.start
            )
        else {
            Issue.record("refused by the roster")
            return
        }
        #expect(session.availabilityChanges() == [Self.available(.refused, "claimed", greater)])

        // The peer's roster refuses this device: its link closes with GOODBYE notInRoster.
        let (id, _) = try #require(
            Self.dial(session.discovered(DialTarget(peerID: Self.peer, endpoints: [Self.endpoint(2)]), now: Self.start))
        )
        _ = session.linkEstablished(id, hello: Self.hello(), address: "b", now: Self.start)
        _ = session.linkClosed(id, goodbye: .notInRoster, error: nil, now: Self.start)
        #expect(
            session.availabilityChanges() == [Self.available(.refused, "peer")],
            "refused by the peer: never joined either"
        )

        _ = session.rosterChanged(Roster(keys: [Self.key(2), Self.key(9)]), now: Self.start)
        #expect(
            session.availabilityChanges().map(\.state) == [.connecting, .connecting],
            "reconsidered: both dialled at once, the one whose turn it is to dial too (its redial is seconds away)"
        )
    }

    /// Found by the simulator (seed 11 of `--duration 120`): a member removed from the roster
    /// while its link waited for its resume point joined once the resume point came.
    @Test func aMemberRemovedWhileItsLinkIsJoiningNeverJoins() throws {
        var session = Self.running(roster: Roster(keys: [Self.key(2)]))
        let inbound = session.acceptedLink()
        guard case .carried = session.linkEstablished(inbound, hello: Self.hello(), address: "a", now: Self.start)
        else {
            Issue.record("a member's link is carried")
            return
        }
        let removed = session.rosterChanged(Roster(), now: Self.start)
        #expect(removed.contains(.close(inbound, .notInRoster)), "its joining link closes: \(removed)")
        #expect(!removed.contains { if case .peerJoined = $0 { true } else { false } })
        let admitted = session.admitted(inbound, now: Self.start)
        #expect(!admitted.contains { if case .peerJoined = $0 { true } else { false } }, "never joins: \(admitted)")
        #expect(session.activePeers.isEmpty)
    }

    @Test func aStaticEndpointIsAvailableOnceAHelloNamedItsPeerAndNoOneWhileSuspended() throws {
        var session = Self.running()
        let (id, _) = try #require(
            Self.dial(session.discovered(DialTarget(peerID: nil, endpoints: [Self.endpoint(1)]), now: Self.start))
        )
        #expect(session.availabilityChanges().isEmpty, "who is there is unknown until its HELLO")
        _ = session.linkEstablished(id, hello: Self.hello(), address: "a", now: Self.start)
        _ = session.admitted(id, now: Self.start)
        #expect(session.availabilityChanges() == [Self.available(.active, "peer", key: Self.key(2))])
        _ = session.linkClosed(id, goodbye: nil, error: MultipeerError(.connectionFailed, "reset"), now: Self.start)
        #expect(session.availabilityChanges() == [Self.available(.discovered, "peer")], "named by the HELLO it gave")

        _ = session.stopRunning(.suspended, now: Self.start)
        #expect(session.availabilityChanges() == [Self.available(.gone, "peer")], "a suspended session knows of no one")
        session.stoppedListening()
        _ = session.listening(on: 7000, now: Self.start)
        #expect(session.availabilityChanges().map(\.state) == [.connecting], "resumed: dialled again")
    }
}

extension SessionStateMachineTests {
    static func types(_ names: String...) -> MessageTypesRead { .only(try! MessageTypeList(names)) }

    /// A link of `peerID` dialled and taken in, this side having said in its HELLO that it reads
    /// `announced`; the peer takes TYPES if `takesTypes`. Returns the link and the peer's HELLO.
    static func carried(
        _ peerID: UUID,
        takesTypes: Bool,
        announced: MessageTypesRead,
        in session: inout SessionStateMachine
    ) throws -> (LinkID, Hello) {
        let target = DialTarget(peerID: peerID, endpoints: [endpoint(Int(peerID.uuid.0))])
        let (id, _) = try #require(dial(session.discovered(target, now: start)))
        var hello = hello(peerID)
        if takesTypes { hello.features.insert(.takesTypes) }
        _ = session.linkEstablished(id, hello: hello, announced: announced, address: "a", now: start)
        return (id, hello)
    }

    /// What this side reads is told once per change, and only to the peers that take TYPES; the
    /// list outgrown is reported with it.
    @Test func aChangeOfTheTypesReadIsToldOnceToEveryPeerThatTakesTypes() throws {
        var session = Self.running()
        let notes = Self.types("Note")
        let (taking, _) = try Self.carried(Self.peer, takesTypes: true, announced: notes, in: &session)
        let other = UUID(uuidString: "20000000-0000-0000-0000-000000000000")!
        _ = try Self.carried(other, takesTypes: false, announced: notes, in: &session)

        #expect(session.announce(notes).isEmpty, "what their HELLOs said")
        let more = Self.types("Note", "Chart")
        #expect(session.announce(more) == [.sendTypes(taking, more)], "only to the peer that takes TYPES")
        #expect(session.announce(more).isEmpty, "once")
        #expect(
            session.announce(.every) == [.sendTypes(taking, .every), .report(.typesOutgrown)],
            "a list outgrown: told, and reported"
        )
        #expect(session.announce(.every).isEmpty)
    }

    /// What a peer reads reaches its delivery on the link it came on every time; the
    /// application hears of it only when it changes on the link the peer joined on.
    @Test func whatAPeerReadsReachesItsDeliveryAndTheApplicationHearsOfAChange() throws {
        var session = Self.running()
        let (id, hello) = try Self.carried(Self.peer, takesTypes: true, announced: .every, in: &session)
        let notes = Self.types("Note")
        #expect(
            session.peerReads(notes, on: id) == [.peerReads(Self.peer, id, notes)],
            "not joined yet: its join tells the application"
        )
        #expect(session.admitted(id, now: Self.start).first == .bind(id, hello, reads: notes))
        #expect(session.peerReads(of: Self.peer) == notes)
        #expect(session.peerReads(notes, on: id) == [.peerReads(Self.peer, id, notes)], "no change: nothing to tell")
        let more = Self.types("Note", "Chart")
        #expect(
            session.peerReads(more, on: id) == [
                .peerReads(Self.peer, id, more), .report(.peerReadsChanged(hello)),
            ]
        )
        #expect(session.peerReads(of: Self.peer) == more)
        #expect(session.peerReads(notes, on: LinkID(99)).isEmpty, "a link not carried")
        _ = session.linkClosed(id, goodbye: nil, error: nil, now: Self.start)
        #expect(session.peerReads(of: Self.peer) == nil, "not active")
    }
}
