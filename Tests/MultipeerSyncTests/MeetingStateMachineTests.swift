import Foundation
import MultipeerCore
import MultipeerSync
import Testing

@testable import MultipeerSync

/// When two stations meet (docs/SYNC.md 6): once per pair of runs, whichever side sees the
/// join, in any order of the joins' events and the `keeps` on their way; and the exchanges a
/// station owes.
@Suite struct MeetingStateMachineTests {
    static let small = ExchangeStateMachineTests.small
    static let large = ExchangeStateMachineTests.large

    /// Two stations and the `keeps` on their way between them, each way in order, as a
    /// session delivers them.
    struct Pair {
        struct Keeps {
            var scope: SyncScope
            var run: UInt64
            var heard: UInt64
        }
        var machines: [UUID: MeetingStateMachine]
        var inFlight: [UUID: [Keeps]] = [small: [], large: []]
        /// The meetings begun on each side, in order, with the peer's run each was with.
        var meetings: [UUID: [UInt64]] = [small: [], large: []]
        var sent = 0

        init(smallRun: UInt64 = 11, largeRun: UInt64 = 22) {
            machines = [
                small: MeetingStateMachine(own: small, run: smallRun),
                large: MeetingStateMachine(own: large, run: largeRun),
            ]
        }

        static func other(_ station: UUID) -> UUID { station == small ? large : small }

        mutating func tell(from station: UUID) {
            let peer = Self.other(station)
            let machine = machines[station]!
            inFlight[peer]!.append(Keeps(scope: .everything, run: machine.run, heard: machine.run(of: peer)))
            sent += 1
        }

        /// The session told `station` its peer joined.
        mutating func join(at station: UUID) {
            if machines[station]!.joined(Self.other(station)).greet { tell(from: station) }
        }

        /// The link went, as `station` saw it.
        mutating func leave(at station: UUID) {
            machines[station]!.left(Self.other(station))
        }

        /// `station`'s store starts a new run (its session and link stay).
        mutating func restart(_ station: UUID, run: UInt64) {
            machines[station] = MeetingStateMachine(own: station, run: run)
            inFlight[station] = []  // (what came for the old run went with it)
            join(at: station)
        }

        /// `station` reads the next `keeps` for it.
        mutating func deliver(to station: UUID) {
            let keeps = inFlight[station]!.removeFirst()
            let peer = Self.other(station)
            for step in machines[station]!.heard(keeps.scope, run: keeps.run, heard: keeps.heard, from: peer) {
                switch step {
                case .meet:
                    if station == small {
                        #expect(machines[large]!.hasMet(small), "the smaller meets only once the larger has")
                    }
                    meetings[station]!.append(keeps.run)
                case .tell:
                    tell(from: station)
                }
            }
        }

        /// Delivers and runs `events` (each a station's join, in that station's order) in an
        /// order drawn from `random`, until nothing is left on its way.
        mutating func settle(joins: [UUID], using random: inout SplitMix64) {
            var joins = joins
            var steps = 0
            while !joins.isEmpty || inFlight.values.contains(where: { !$0.isEmpty }) {
                steps += 1
                #expect(steps < 100, "keeps answer keeps for ever")
                if steps >= 100 { return }
                let ready = [small, large].filter { !inFlight[$0]!.isEmpty }
                if !joins.isEmpty && (ready.isEmpty || Bool.random(using: &random)) {
                    join(at: joins.removeFirst())
                } else {
                    deliver(to: ready[Int.random(in: 0..<ready.count, using: &random)])
                }
            }
        }
    }

    /// Two runs that never met: both see the join, or only one does, and the events and the
    /// `keeps` interleave as they may. One meeting on each side, the smaller's after the
    /// larger's.
    @Test(arguments: 1...200 as ClosedRange<UInt64>)
    func twoRunsMeetOnceWhoeverSeesTheJoin(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let joins = [[Self.small, Self.large], [Self.large, Self.small], [Self.small], [Self.large]][Int(seed % 4)]
        var pair = Pair()
        pair.settle(joins: joins, using: &random)
        #expect(pair.meetings[Self.large] == [11], "\(joins)")
        #expect(pair.meetings[Self.small] == [22], "\(joins)")
        #expect(pair.sent <= 4)

        // The link goes and comes back, seen by either side or both: the runs met, nothing starts.
        let again = [[Self.small, Self.large], [Self.small], [Self.large]][Int(seed % 3)]
        for station in again { pair.leave(at: station) }
        pair.settle(joins: again, using: &random)
        #expect(pair.meetings[Self.large] == [11] && pair.meetings[Self.small] == [22], "\(again)")
    }

    /// A store restarted over a session that kept its link (its peer sees no join): the pair
    /// meets again, once, whichever side restarted.
    @Test(arguments: 1...100 as ClosedRange<UInt64>)
    func aStoreRestartedOverALiveLinkIsMetAgainOnce(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var pair = Pair()
        pair.settle(joins: [Self.small, Self.large], using: &random)
        let restarted = seed.isMultiple(of: 2) ? Self.small : Self.large
        pair.restart(restarted, run: 33)
        pair.settle(joins: [], using: &random)
        // (Each run of the restarted side meets the peer's one run once.)
        if restarted == Self.small {
            #expect(pair.meetings[Self.large] == [11, 33])
            #expect(pair.meetings[Self.small] == [22, 22])
        } else {
            #expect(pair.meetings[Self.large] == [11, 11])
            #expect(pair.meetings[Self.small] == [22, 33])
        }
    }

    /// A `keeps` of the peer's previous run read after its new run's (a restart racing its
    /// queue): the larger station meets the runs in the order read, and the pair settles on
    /// a meeting of the runs that run, on both sides.
    @Test func aPreviousRunsKeepsReadLateEndsInAMeetingOfTheRunsThatRun() {
        var random = SplitMix64(seed: 1)
        var pair = Pair()
        pair.settle(joins: [Self.small, Self.large], using: &random)
        pair.machines[Self.small] = MeetingStateMachine(own: Self.small, run: 44)
        pair.tell(from: Self.small)
        pair.inFlight[Self.large]!.append(.init(scope: .everything, run: 11, heard: 22))
        pair.settle(joins: [], using: &random)
        #expect(pair.meetings[Self.large] == [11, 44, 11, 44])
        #expect(pair.meetings[Self.small] == [22, 22], "the new run met once")
        #expect(pair.machines[Self.small]!.hasMet(Self.large) && pair.machines[Self.large]!.hasMet(Self.small))
    }

    /// A peer away when this station took versions it would relay (or whose send failed) is
    /// owed an exchange at its next join, once; a peer not heard in this run is owed nothing
    /// (their meeting covers it), and a meeting settles what was owed.
    @Test func aPeerMissedWhileAwayIsOwedAnExchangeAtItsNextJoin() {
        var machine = MeetingStateMachine(own: Self.large, run: 5)
        machine.missed(Self.small)
        #expect(machine.joined(Self.small) == (greet: true, exchange: false), "not heard in this run")
        #expect(machine.heard(.everything, run: 9, heard: 0, from: Self.small) == [.meet, .tell])
        #expect(machine.joined(Self.small) == (greet: false, exchange: false), "greeted once a join")
        machine.left(Self.small)
        machine.missed(Self.small)
        machine.missed(Self.small)
        #expect(machine.joined(Self.small) == (greet: true, exchange: true))
        machine.left(Self.small)
        #expect(machine.joined(Self.small) == (greet: true, exchange: false), "owed once")
        machine.left(Self.small)
        machine.missed(Self.small)
        #expect(machine.heard(.everything, run: 10, heard: 5, from: Self.small) == [.meet, .tell])
        #expect(machine.joined(Self.small) == (greet: true, exchange: false), "the meeting settled it")
    }

    /// What a peer keeps is what it last said, and the peers heard are listed in order of ID.
    @Test func whatAPeerKeepsIsWhatItLastSaid() {
        var machine = MeetingStateMachine(own: Self.small, run: 5)
        #expect(machine.scope(of: Self.large) == nil)
        _ = machine.heard(.only(["log"]), run: 9, heard: 0, from: Self.large)
        _ = machine.heard(.everything, run: 3, heard: 0, from: Self.small.advanced)
        #expect(machine.scope(of: Self.large) == .only(["log"]))
        #expect(machine.scopes.map(\.peer) == [Self.small.advanced, Self.large])
    }
}

extension UUID {
    /// Another UUID, just above this one.
    fileprivate var advanced: UUID {
        var bytes = uuid
        bytes.15 &+= 1
        return UUID(uuid: bytes)
    }
}
