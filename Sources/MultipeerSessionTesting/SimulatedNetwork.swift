import Glibc
import MultipeerCore
import NIOCore

/// The simulated network and the kernels of its hosts: addresses, listening ports, paths and
/// the TCP connections over them.
///
/// TCP is modelled as an application and the keepalive meet it: bytes arrive in order, after
/// the path's delay and the time its bandwidth takes (one queue a direction of a path, which
/// every connection on it shares, as one link's capacity is); a segment lost (to the path's
/// loss rate, or to a cut: a partition, a black hole or a one-way cut, which also loses what was
/// in flight across it) is sent again after a retransmission timeout; one held (a hold: what
/// crosses waits, then arrives at once when the hold goes) arrives late, and
/// what arrives meanwhile beyond it waits, out of order, until it does; the receiver
/// acknowledges what arrives and advertises the room left in its buffer, and the sender sends
/// no more than that (a reader that stops reading stops its sender, whose writes then wait),
/// nor, on a path with a bandwidth, more than its congestion window (``congestionWindow(_:_:)``:
/// the rest waits in its socket, and goes with it if its process dies);
/// unacknowledged data older than the connection's user timeout aborts it. A connection to a
/// port nobody listens on is refused; a host whose process is frozen still accepts connections
/// and acknowledges what arrives (its kernel runs); closing sends FIN after what was written,
/// and what arrives at a closed socket is answered with a reset. What the keepalive reads of a
/// socket (``SimulatedSocket/transportReading()``) comes from this bookkeeping.
///
/// Touched only on the world's thread (the scheduler's jobs); `@unchecked Sendable` for that.
final class SimulatedNetwork: @unchecked Sendable {
    /// What a direction of a path does to what crosses it.
    struct Path: Sendable {
        /// One way.
        var latency: Int64
        /// Each segment's delay varies by up to this much more (in order still: TCP reorders).
        var jitter: Int64 = 0
        /// The share of segments lost, 0 to 1.
        var loss: Double = 0
        /// Bytes a second; nil: as fast as the hosts go.
        var bandwidth: Int64?
    }

    let scheduler: SimulationScheduler
    /// Every direction of every path, but those given their own (``impair(from:to:_:)``) or
    /// whose machine was (``impair(_:_:)``).
    var defaultPath: Path
    /// The payload of one TCP segment, for counting segments.
    static let segmentSize = 1_448
    /// The most a socket takes in before its reader reads: Linux's default tcp_rmem maximum, 6 MiB.
    static let receiveBuffer = 6 << 20
    /// The most written and not yet sent that a socket takes: the links' TCP_NOTSENT_LOWAT (256 KiB).
    static let unsentLimit = 256 << 10
    /// Linux's least retransmission timeout, 200 ms, and the links' most (TCP_RTO_MAX_MS), 1 s.
    static let retransmissionTimeout: ClosedRange<Int64> = 200_000_000...1_000_000_000

    /// One direction between two machines, whatever addresses they take: what a path's
    /// impairment and its bandwidth's queue belong to.
    struct Direction: Hashable {
        var from: ObjectIdentifier
        var to: ObjectIdentifier

        init(_ from: SimulatedMachine, _ to: SimulatedMachine) {
            (self.from, self.to) = (ObjectIdentifier(from), ObjectIdentifier(to))
        }
    }

    private var addresses: [String: SimulatedMachine] = [:]
    /// Paths to and from a machine, as ``SimulatedHost/impair(latency:jitter:loss:bandwidth:)`` set them.
    private var impairments: [ObjectIdentifier: Path] = [:]
    /// Directions of paths given their own (``SimulatedWorld/impair(from:to:oneWay:latency:jitter:loss:bandwidth:)``),
    /// which come before either machine's.
    private var pathImpairments: [Direction: Path] = [:]
    /// When each direction's queue has sent what it was given, for a path with a bandwidth.
    private var departures: [Direction: Int64] = [:]
    private var listeners: [ListenKey: SimulatedListener] = [:]
    /// Groups of machines cut off from each other: a partition, a black hole (one machine
    /// against every other), a one-way cut, or a hold. Nothing crosses a cut; connections stay open.
    private(set) var cuts: [Cut] = []
    /// Segments a hold stopped, in the order they came: each lands when no hold stops it.
    private var held: [(flight: UInt64, arrive: () -> Void)] = []
    private var random: SplitMix64

    struct ListenKey: Hashable {
        var address: String
        var port: Int
    }

    /// Two sides nothing crosses between: machines, whatever addresses they take meanwhile.
    struct Cut {
        /// Tells this cut from another of the same sides.
        var number: Int
        var side: Set<ObjectIdentifier>
        /// Nil: every machine not on `side`.
        var otherSide: Set<ObjectIdentifier>?
        /// Only what `side` sends to `otherSide` is cut; the other way crosses.
        var oneWay = false
        /// What the cut stops waits until it goes, rather than being lost.
        var holds = false

        func stops(from sender: SimulatedMachine, to receiver: SimulatedMachine) -> Bool {
            let (a, b) = (ObjectIdentifier(sender), ObjectIdentifier(receiver))
            if side.contains(a), !side.contains(b), otherSide?.contains(b) ?? true { return true }
            return !oneWay && side.contains(b) && !side.contains(a) && (otherSide?.contains(a) ?? true)
        }
    }

    init(scheduler: SimulationScheduler, latency: Int64, seed: UInt64) {
        self.scheduler = scheduler
        self.defaultPath = Path(latency: latency)
        self.random = SplitMix64(seed: seed)
    }

    // MARK: Addresses and ports

    func assign(_ address: String, to machine: SimulatedMachine) {
        addresses[address] = machine
    }

    func machine(at address: String) -> SimulatedMachine? {
        addresses[address]
    }

    /// Listens on `port` (0: an ephemeral one) of `machine`'s addresses; throws EADDRINUSE if taken.
    func listen(_ listener: SimulatedListener, on machine: SimulatedMachine, port: Int) throws -> Int {
        var port = port
        if port == 0 {
            repeat {
                port = machine.ephemeralPort()
            } while machine.addresses.contains { listeners[ListenKey(address: $0, port: port)] != nil }
        }
        guard !machine.addresses.contains(where: { listeners[ListenKey(address: $0, port: port)] != nil }) else {
            throw IOError(errnoCode: EADDRINUSE, reason: "bind")
        }
        listener.port = port
        listener.machine = machine
        for address in machine.addresses { listeners[ListenKey(address: address, port: port)] = listener }
        return port
    }

    func stopListening(_ listener: SimulatedListener) {
        for (key, value) in listeners where value === listener { listeners[key] = nil }
    }

    /// The machine moved to another address: what was bound to the old one listens on the new
    /// one; connections of the old one go dead (nothing reaches or leaves that address).
    func renumber(_ machine: SimulatedMachine, from old: String, to new: String) {
        lose { $0.from == old || $0.to == old }
        addresses[old] = nil
        addresses[new] = machine
        machine.addresses = [new]
        for (key, listener) in listeners where key.address == old {
            listeners[key] = nil
            listeners[ListenKey(address: new, port: key.port)] = listener
        }
    }

    /// The machine's process was killed: its kernel closes its sockets and ports.
    func killed(_ machine: SimulatedMachine) {
        for (key, listener) in listeners where listener.machine === machine { listeners[key] = nil }
        for (_, socket) in machine.sockets.sorted(by: { $0.key < $1.key }) { socket.killed() }
    }

    /// Gives every path to and from `machine` these properties (nil: the default again).
    func impair(_ machine: SimulatedMachine, _ path: Path?) {
        impairments[ObjectIdentifier(machine)] = path
    }

    /// Gives the path from `sender` to `receiver` these properties, before either machine's
    /// own (nil: theirs, or the default, again).
    func impair(from sender: SimulatedMachine, to receiver: SimulatedMachine, _ path: Path?) {
        pathImpairments[Direction(sender, receiver)] = path
    }

    // MARK: Faults

    func cut(_ cut: Cut) {
        cuts.append(cut)
        if !cut.holds { lose { cut.stops(from: $0.sender, to: $0.receiver) } }
    }

    /// Heals the cut numbered `number` (nil: every cut); what a hold kept lands now, in the
    /// order it came, unless another hold still stops it.
    func heal(_ number: Int? = nil) {
        if let number { cuts.removeAll { $0.number == number } } else { cuts.removeAll() }
        let waiting = held
        held = []
        for (flight, arrive) in waiting { land(flight, arrive) }
    }

    private func path(_ sender: SimulatedMachine, _ receiver: SimulatedMachine) -> Path {
        pathImpairments[Direction(sender, receiver)] ?? impairments[ObjectIdentifier(sender)]
            ?? impairments[ObjectIdentifier(receiver)] ?? defaultPath
    }

    /// Sends a segment of `length` bytes from `from` to `to`; it leaves once the path's queue in
    /// that direction has sent what went before (its bandwidth, shared by every connection on
    /// it). Unless it is lost (to the path's loss rate, or a cut), `arrive` runs when it
    /// arrives, no earlier than `notBefore` (a connection's segments arrive in order), and the
    /// arrival is returned (a hold may make it later). What is in flight when a cut comes
    /// between its ends, or when either end's address goes, is lost too, as a link that goes
    /// down loses what was on it.
    @discardableResult
    func cross(
        from: String,
        to: String,
        length: Int,
        notBefore: Int64 = 0,
        _ arrive: @escaping () -> Void
    ) -> Int64? {
        // An address no machine has (any more) sends and receives nothing.
        guard let sender = addresses[from], let receiver = addresses[to] else { return nil }
        let path = path(sender, receiver)
        let now = scheduler.now
        var departure = now
        if let bandwidth = path.bandwidth, bandwidth > 0 {
            let direction = Direction(sender, receiver)
            departure = max(now, departures[direction] ?? 0)
            departures[direction] = departure + Int64(length) * 1_000_000_000 / bandwidth
        }
        guard !cuts.contains(where: { !$0.holds && $0.stops(from: sender, to: receiver) }) else { return nil }
        if path.loss > 0, Double.random(in: 0..<1, using: &random) < path.loss { return nil }
        let jitter = path.jitter > 0 ? Int64.random(in: 0...path.jitter, using: &random) : 0
        let arrival = max(notBefore, departure + path.latency + jitter)
        let flight = flightsMade
        flightsMade += 1
        inFlight[flight] = Flight(from: from, to: to, sender: sender, receiver: receiver)
        _ = scheduler.schedule(nil, at: arrival) { [self] in land(flight, arrive) }
        return arrival
    }

    /// A segment's arrival: dropped if it was lost on the way, kept back while a hold stops
    /// it, else `arrive`.
    private func land(_ flight: UInt64, _ arrive: @escaping () -> Void) {
        guard let landed = inFlight[flight], !landed.lost else {
            inFlight[flight] = nil
            return
        }
        if cuts.contains(where: { $0.holds && $0.stops(from: landed.sender, to: landed.receiver) }) {
            held.append((flight, arrive))
            return
        }
        inFlight[flight] = nil
        arrive()
    }

    /// A segment on its way: lost if a cut comes between its ends, or either end's address goes,
    /// before it arrives.
    private struct Flight {
        var from: String
        var to: String
        var sender: SimulatedMachine
        var receiver: SimulatedMachine
        var lost = false
    }
    private var inFlight: [UInt64: Flight] = [:]
    private var flightsMade: UInt64 = 0

    /// Loses what is in flight that `isLost` says.
    private func lose(where isLost: (Flight) -> Bool) {
        for (number, flight) in inFlight where !flight.lost && isLost(flight) { inFlight[number]!.lost = true }
    }

    /// The most a connection from `a` to `b` keeps in flight on a path with a bandwidth, as
    /// TCP's congestion window does: twice what the path holds in a round trip, and 64 KiB at
    /// least (nil: as much as the receiver's window allows, on a path without one).
    func congestionWindow(_ a: String, _ b: String) -> UInt64? {
        guard let sender = addresses[a], let receiver = addresses[b],
            let bandwidth = path(sender, receiver).bandwidth, bandwidth > 0
        else { return nil }
        return UInt64(max(64 << 10, 2 * bandwidth * roundTrip(a, b) / 1_000_000_000))
    }

    /// The path's round trip, as TCP would estimate it for its retransmission timeout.
    func roundTrip(_ a: String, _ b: String) -> Int64 {
        guard let a = addresses[a], let b = addresses[b] else { return 2 * defaultPath.latency }
        let there = path(a, b)
        let back = path(b, a)
        return there.latency + there.jitter + back.latency + back.jitter
    }

    // MARK: Connecting

    /// Sends a SYN from `socket` to `address:port` (and again after 1 s and 3 s while
    /// unanswered): answered by the listener there (accepted in the kernel, to be taken by its
    /// process), refused (RST), or lost.
    func connect(_ socket: SimulatedSocket, to address: String, port: Int, attempt: Int = 0) {
        guard socket.state == .connecting else { return }
        if attempt < 2 {
            _ = scheduler.schedule(nil, at: scheduler.now + (attempt == 0 ? 1_000_000_000 : 2_000_000_000)) { [self] in
                connect(socket, to: address, port: port, attempt: attempt + 1)
            }
        }
        cross(from: socket.local, to: address, length: 0) { [self] in
            guard let target = machine(at: address) else { return }
            guard let listener = listeners[ListenKey(address: address, port: port)] else {
                // Refused: RST for the SYN.
                cross(from: address, to: socket.local, length: 0) { socket.refused() }
                return
            }
            // A retransmitted SYN finds the connection it made.
            let accepted =
                listener.connection(from: socket)
                ?? {
                    let accepted = SimulatedSocket(network: self, machine: target, local: address, localPort: port)
                    accepted.connect(to: socket, userTimeout: nil)
                    listener.arrived(accepted, from: socket)
                    // Long after the dialler's last SYN could come.
                    _ = scheduler.schedule(nil, at: scheduler.now + 10_000_000_000) { listener.forget(socket) }
                    return accepted
                }()
            cross(from: address, to: socket.local, length: 0) { socket.established(with: accepted) }
        }
    }
}

/// A machine's kernel: its addresses and ports. Its process runs on a host of the scheduler.
final class SimulatedMachine: @unchecked Sendable {
    var addresses: [String]
    /// What its clocks read: its process's, and the times its kernel reports (TCP_INFO's).
    let time = HostTime()
    private var nextPort = 49_152
    /// The sockets open on it, by the order they were made (so they close in that order when
    /// its process is killed, the same in every run: not by address, which changes from run to run).
    var sockets: [UInt64: SimulatedSocket] = [:]
    private var socketsMade: UInt64 = 0

    /// A number for a socket made on this machine.
    func nextSocketNumber() -> UInt64 {
        socketsMade += 1
        return socketsMade
    }

    init(address: String) {
        addresses = [address]
    }

    var address: String { addresses[0] }

    func ephemeralPort() -> Int {
        defer { nextPort = nextPort == 65_535 ? 49_152 : nextPort + 1 }
        return nextPort
    }
}

/// A listening port's kernel side: what it accepted waits for the process.
final class SimulatedListener: @unchecked Sendable {
    private let accept: (SimulatedSocket) -> Void
    var port = 0
    weak var machine: SimulatedMachine?
    /// Connections accepted, by the dialling socket, so a SYN sent again finds its connection.
    private var accepted: [ObjectIdentifier: SimulatedSocket] = [:]

    init(accept: @escaping (SimulatedSocket) -> Void) {
        self.accept = accept
    }

    func connection(from dialler: SimulatedSocket) -> SimulatedSocket? {
        accepted[ObjectIdentifier(dialler)]
    }

    func forget(_ dialler: SimulatedSocket) {
        accepted[ObjectIdentifier(dialler)] = nil
    }

    func arrived(_ socket: SimulatedSocket, from dialler: SimulatedSocket) {
        accepted[ObjectIdentifier(dialler)] = socket
        accept(socket)
    }
}
