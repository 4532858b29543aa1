package import struct Foundation.UUID

/// Which reconciliations (docs/SYNC.md 4 and 6) this station runs as initiator, with whom, and
/// when to run another. Sans-IO: the store tells it what happened and sends what it says.
///
/// At a join, the station with the smaller peer ID initiates, so a pair runs one exchange, not
/// two. Either side may initiate at any other time (its pushes to the peer were skipped: the
/// peer may lack them), and an exchange asked for while one runs is run when it ends. A
/// station answers every exchange it is offered, so answering needs no state here; an answer
/// to an exchange this station did not start, or no longer runs (a peer that left, a previous
/// run of this station), is ignored.
package struct ExchangeStateMachine {
    private enum PeerState {
        /// Runs `exchange`; `again`: another is wanted when it ends.
        case running(exchange: UInt64, again: Bool)
    }

    private let own: UUID
    private var peers: [UUID: PeerState] = [:]
    private var next: UInt64

    /// The machine of the station `own`; exchanges are numbered from `first` (random in the
    /// store, so a previous run's answers never match this run's exchanges).
    package init(own: UUID, first: UInt64 = .random(in: 0...UInt64.max / 2)) {
        self.own = own
        next = first
    }

    /// `peer` joined (or was active when the store started): the exchange to start with it,
    /// if this side initiates.
    package mutating func peerJoined(_ peer: UUID) -> UInt64? {
        guard Self.initiates(own, with: peer) else { return nil }
        return begin(with: peer)
    }

    /// An exchange with `peer` is wanted now: the one to start, or nil if one runs (another
    /// follows it).
    package mutating func begin(with peer: UUID) -> UInt64? {
        if case .running(let exchange, _) = peers[peer] {
            peers[peer] = .running(exchange: exchange, again: true)
            return nil
        }
        next &+= 1
        peers[peer] = .running(exchange: next, again: false)
        return next
    }

    /// Whether an answer in `exchange` from `peer` belongs to an exchange this station runs.
    package func isRunning(_ exchange: UInt64, with peer: UUID) -> Bool {
        if case .running(exchange, _) = peers[peer] { return true }
        return false
    }

    /// `exchange` with `peer` ended: the next one to start, if one was wanted meanwhile.
    package mutating func ended(_ exchange: UInt64, with peer: UUID) -> UInt64? {
        guard case .running(exchange, let again) = peers[peer] else { return nil }
        peers[peer] = nil
        return again ? begin(with: peer) : nil
    }

    /// `peer` left: what runs with it is dropped (its join starts afresh).
    package mutating func peerLeft(_ peer: UUID) {
        peers[peer] = nil
    }

    /// Whether `station` initiates with `peer` at a join: the smaller peer ID, byte by byte.
    static func initiates(_ station: UUID, with peer: UUID) -> Bool {
        withUnsafeBytes(of: station.uuid) { own in
            withUnsafeBytes(of: peer.uuid) { other in own.lexicographicallyPrecedes(other) }
        }
    }
}
