package import struct Foundation.UUID

/// The reconciliations (docs/SYNC.md 4 and 6) this station runs with each peer, on either side,
/// and what each one's end proves. Sans-IO: the store tells it what happened and does what it
/// says.
///
/// When a meeting begins (docs/SYNC.md 6: the peer's `keeps` came), what ran with the peer is
/// dropped, and the station with the smaller peer ID initiates, so a pair runs one exchange, not
/// two. Either side may initiate at any other time (its pushes to the peer were skipped: the
/// peer may lack them), and an exchange asked for while one runs is run when it ends. An answer
/// to an exchange this station did not start, or no longer runs (one of an earlier meeting, or of
/// a previous run of this station), is ignored.
///
/// An exchange ends with an empty round from the initiator, which the other side answers with
/// an empty round of its own. Each side then knows that the peer holds every version it held
/// when the exchange began, since everything either side sent or asked for was taken before
/// that last round was read; and every version it took from the peer meanwhile. So the proof
/// (``Completion/held``) is the `Mark` the store gave (what it held: its clock's latest
/// timestamp and its last storage sequence) just before it first stored, after the exchange
/// began, a version from anywhere else (``storing(from:latest:)``), or at the end if it stored
/// none: a station that took a whole store from the peer in one exchange has nothing of it to
/// look through when they next meet.
package struct ExchangeStateMachine<Mark: Hashable & Sendable> {
    private struct Initiated {
        var exchange: UInt64
        /// What the exchange proves, at most: what this station held when it began, until it
        /// stores a version from elsewhere; then what it held just before.
        var proof: Mark
        /// A version from elsewhere was stored since it began: `proof` stays.
        var cut = false
        /// The empty round that ends it was sent.
        var ending = false
        /// Another is wanted when it ends.
        var again = false
    }

    /// Where an answer from the peer leaves an exchange this station runs.
    package enum Answer: Equatable {
        /// Not an exchange this station runs: ignore it.
        case ignored
        /// The exchange goes on: answer with the next round (or, if that is empty, end it with
        /// ``ending(_:with:)`` and an empty round).
        case running
        /// The peer answered the end: the exchange is complete.
        case completed(Completion)
    }

    /// What a completed exchange proves, and what to do next.
    package struct Completion: Equatable {
        /// The peer holds every version this station held at this mark.
        package var held: Mark
        /// The exchange to start next with the peer, if one was wanted meanwhile.
        package var next: UInt64?
    }

    private let own: UUID
    private var initiated: [UUID: Initiated] = [:]
    /// The exchanges each peer runs with this station, and what each proves at most (what this
    /// station held when its first round came, until it stored a version from elsewhere).
    private var answering: [UUID: (exchange: UInt64, proof: Mark, cut: Bool)] = [:]
    private var next: UInt64

    /// The machine of the station `own`; exchanges are numbered from `first` (random in the
    /// store, so a previous run's answers never match this run's exchanges).
    package init(own: UUID, first: UInt64 = .random(in: 0...UInt64.max / 2)) {
        self.own = own
        next = first
    }

    /// A meeting with `peer` begins while this station holds `latest`: what ran with it before
    /// is dropped (its answers are ignored); the exchange to start with it, if this side
    /// initiates.
    package mutating func met(_ peer: UUID, latest: Mark) -> UInt64? {
        initiated[peer] = nil
        answering[peer] = nil
        guard Self.initiates(own, with: peer) else { return nil }
        return begin(with: peer, latest: latest)
    }

    /// An exchange with `peer` is wanted now: the one to start, or nil if one runs (another
    /// follows it).
    package mutating func begin(with peer: UUID, latest: Mark) -> UInt64? {
        if initiated[peer] != nil {
            initiated[peer]?.again = true
            return nil
        }
        next &+= 1
        initiated[peer] = Initiated(exchange: next, proof: latest)
        return next
    }

    /// A round of `exchange` with `peer` could not be sent (the session refused it): the
    /// exchange is over, unfinished; the next one with the peer starts afresh.
    package mutating func abandon(_ exchange: UInt64, with peer: UUID) {
        guard initiated[peer]?.exchange == exchange else { return }
        initiated[peer] = nil
    }

    /// An answer in `exchange` came from `peer`.
    package mutating func answered(_ exchange: UInt64, by peer: UUID, latest: Mark) -> Answer {
        guard let state = initiated[peer], state.exchange == exchange else { return .ignored }
        guard state.ending else { return .running }
        initiated[peer] = nil
        let completion = Completion(
            held: state.cut ? state.proof : latest,
            next: state.again ? begin(with: peer, latest: latest) : nil
        )
        return .completed(completion)
    }

    /// This station sent the empty round that ends `exchange` with `peer`.
    package mutating func ending(_ exchange: UInt64, with peer: UUID) {
        guard initiated[peer]?.exchange == exchange else { return }
        initiated[peer]?.ending = true
    }

    /// A round of `peer`'s exchange came (`isEnd`: the empty round that ends it), this
    /// station's clock at `latest`. At the end: what the exchange proves, if this station saw
    /// it begin (a round of it came in this run).
    package mutating func offered(
        _ exchange: UInt64,
        by peer: UUID,
        isEnd: Bool,
        latest: Mark
    )
        -> Mark?
    {
        let known = answering[peer]?.exchange == exchange
        if isEnd {
            guard known, let state = answering.removeValue(forKey: peer) else {
                return nil  // (begun before this run: what it proves is unknown)
            }
            return state.cut ? state.proof : latest
        }
        if !known { answering[peer] = (exchange, latest, false) }
        return nil
    }

    /// This station is about to store versions that came from `source` (nil: its own writes,
    /// or versions it imports), holding `latest`: an exchange running with another peer proves
    /// no more than `latest`, since the peer may lack them. (What comes from the peer while
    /// their exchange runs the peer holds.)
    package mutating func storing(from source: UUID?, latest: Mark) {
        for (peer, state) in initiated where peer != source && !state.cut {
            initiated[peer]?.proof = latest
            initiated[peer]?.cut = true
        }
        for (peer, state) in answering where peer != source && !state.cut {
            answering[peer] = (state.exchange, latest, true)
        }
    }

    /// Whether a round of `exchange` from `peer` came before (in this run).
    package func isAnswering(_ exchange: UInt64, by peer: UUID) -> Bool {
        answering[peer]?.exchange == exchange
    }

    /// Whether `station` initiates with `peer` when they meet: the smaller peer ID, byte by byte.
    static func initiates(_ station: UUID, with peer: UUID) -> Bool {
        withUnsafeBytes(of: station.uuid) { own in
            withUnsafeBytes(of: peer.uuid) { other in own.lexicographicallyPrecedes(other) }
        }
    }
}
