package import struct Foundation.UUID

/// When this station meets each peer (docs/SYNC.md 6), and when it owes a peer an exchange.
/// Sans-IO: the store tells it what happened and does what it says.
///
/// Each run of a store has a number of its own (its *run*). Two stations meet once per pair of
/// runs: each says, in a `keeps` at every join, its run and the peer's as it last heard it, and
/// the pair's meeting begins when the station with the larger peer ID first hears a run of the
/// peer, and when the smaller one first hears, from a run of the peer, that the peer knows its
/// own run. A join of two runs that met says nothing new and starts nothing: the sessions
/// deliver what was sent while the link was down, in order. So whichever side sees a link come
/// back (or a store start over a running session), the pair meets when a run is new to either,
/// and once, however many joins each side sees, in whatever order the joins' events and the
/// peers' messages reach the store.
///
/// What the sessions do not deliver this station knows it did not send: a relay that skipped
/// a peer away, a send that failed. Such a peer is *owed* an exchange, which this station
/// starts at the peer's next join.
package struct MeetingStateMachine {
    /// What this station knows of a peer in this run.
    private struct Peer {
        /// The collections it keeps, as it last said.
        var scope: SyncScope?
        /// Its run, as last heard.
        var run: UInt64?
        /// The run of the peer whose meeting began on this side.
        var met: UInt64?
        /// It may lack what this station did not send it.
        var owed = false
        /// Told at its current join (a peer active when the store starts may also be told of by
        /// the session's event).
        var greeted = false
    }

    /// What the store does when a peer's `keeps` came.
    package enum Step: Equatable {
        /// A meeting begins on this side: drop what ran with the peer, then (the larger peer ID)
        /// push what was stored since they last met, or (the smaller) begin their exchange.
        case meet
        /// Send the peer a `keeps` naming its run (it does not know this station's).
        case tell
    }

    private let own: UUID
    /// This run's number: never 0 (which says "none" on the wire).
    package let run: UInt64
    private var peers: [UUID: Peer] = [:]

    package init(own: UUID, run: UInt64 = .random(in: 1...UInt64.max)) {
        precondition(run != 0, "a run is numbered from 1")
        self.own = own
        self.run = run
    }

    /// The collections `peer` said it keeps in this run, if it said.
    package func scope(of peer: UUID) -> SyncScope? { peers[peer]?.scope }

    /// The peers that said what they keep in this run, in ascending order of peer ID.
    package var scopes: [(peer: UUID, scope: SyncScope)] {
        peers.compactMap { peer, state in state.scope.map { (peer, $0) } }
            .sorted { ExchangeStateMachine<Int>.initiates($0.peer, with: $1.peer) }
    }

    /// Whether the meeting with `peer`'s run as last heard has begun on this side.
    package func hasMet(_ peer: UUID) -> Bool {
        guard let state = peers[peer], let run = state.run else { return false }
        return state.met == run
    }

    /// Whether a `keeps` this station sends `peer` now may open their meeting on this side (it
    /// has the smaller peer ID, and has not met the peer's run): what is pushed either way
    /// counts towards that meeting from here, since the peer's push of what it stored since
    /// they last met may come before the `keeps` that begins the meeting here.
    package func mayOpenMeeting(with peer: UUID) -> Bool {
        ExchangeStateMachine<Int>.initiates(own, with: peer) && !hasMet(peer)
    }

    /// `peer`'s run as this station last heard it, or 0: what its `keeps` says it heard.
    package func run(of peer: UUID) -> UInt64 { peers[peer]?.run ?? 0 }

    /// `peer` joined (or was active when the store started). Whether to greet it (send its
    /// `keeps`: not twice for one join), and whether this station owes it an exchange.
    package mutating func joined(_ peer: UUID) -> (greet: Bool, exchange: Bool) {
        var state = peers[peer] ?? Peer()
        defer { peers[peer] = state }
        guard !state.greeted else { return (false, false) }
        state.greeted = true
        // (A peer not met in this run is owed nothing: their meeting covers it.)
        let exchange = state.owed && state.met != nil
        state.owed = false
        return (true, exchange)
    }

    /// `peer` left: its next join is greeted.
    package mutating func left(_ peer: UUID) {
        peers[peer]?.greeted = false
    }

    /// This station did not send `peer` what it may lack (a relay while it was away, a send
    /// that failed): an exchange at its next join.
    package mutating func missed(_ peer: UUID) {
        guard peers[peer]?.run != nil else { return }  // (not heard in this run: their meeting covers it)
        peers[peer]?.owed = true
    }

    /// `peer`'s `keeps` came: it keeps `scope`, its run is `run`, and it last heard this
    /// station's run as `heard` (0: none).
    package mutating func heard(_ scope: SyncScope, run: UInt64, heard: UInt64, from peer: UUID) -> [Step] {
        var state = peers[peer] ?? Peer()
        defer { peers[peer] = state }
        state.scope = scope
        if !ExchangeStateMachine<Int>.initiates(own, with: peer) {
            // The larger peer ID meets each run of the peer once, when it first hears it.
            guard state.run != run else { return [] }
            state.run = run
            state.met = run
            state.owed = false
            return [.meet, .tell]
        }
        // The smaller meets once the peer's run knows its own: it then holds this station's scope.
        state.run = run
        guard heard == self.run else { return [.tell] }
        guard state.met != run else { return [] }
        state.met = run
        state.owed = false
        return [.meet]
    }
}
