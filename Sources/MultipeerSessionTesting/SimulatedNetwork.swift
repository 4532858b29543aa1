import Glibc
import MultipeerCore
import NIOCore

/// The simulated network and the kernels of its hosts: addresses, listening ports, paths and
/// the TCP connections over them.
///
/// TCP is modelled as an application and the keepalive meet it: bytes arrive in order, after
/// the path's delay and the time its bandwidth takes; a segment lost (to the path's loss rate,
/// or to a cut: a partition or a black hole, which also loses what was in flight across it) is
/// sent again after a retransmission timeout, and
/// what arrives meanwhile beyond it waits, out of order, until it does; the receiver
/// acknowledges what arrives and advertises the room left in its buffer, and the sender sends
/// no more than that (a reader that stops reading stops its sender, whose writes then wait);
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
    /// Every direction of every path, but those given their own in ``paths``.
    var defaultPath: Path
    var paths: [PathKey: Path] = [:]
    /// The payload of one TCP segment, for counting segments.
    static let segmentSize = 1_448
    /// The most a socket takes in before its reader reads: Linux's default tcp_rmem maximum, 6 MiB.
    static let receiveBuffer = 6 << 20
    /// The most written and not yet sent that a socket takes: the links' TCP_NOTSENT_LOWAT (256 KiB).
    static let unsentLimit = 256 << 10
    /// Linux's least retransmission timeout, 200 ms, and the links' most (TCP_RTO_MAX_MS), 1 s.
    static let retransmissionTimeout: ClosedRange<Int64> = 200_000_000...1_000_000_000

    struct PathKey: Hashable {
        var from: String
        var to: String
    }

    private var addresses: [String: SimulatedMachine] = [:]
    /// Paths to and from a machine, as ``SimulatedHost/impair(latency:jitter:loss:bandwidth:)`` set them.
    private var impairments: [ObjectIdentifier: Path] = [:]
    private var listeners: [ListenKey: SimulatedListener] = [:]
    /// Groups of addresses cut off from each other: a partition, or a black hole (one address
    /// against every other). Nothing crosses a cut; connections stay open.
    private(set) var cuts: [Cut] = []
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

        func separates(_ a: SimulatedMachine, _ b: SimulatedMachine) -> Bool {
            let (a, b) = (ObjectIdentifier(a), ObjectIdentifier(b))
            if side.contains(a) { return !side.contains(b) && (otherSide?.contains(b) ?? true) }
            if side.contains(b) { return otherSide?.contains(a) ?? true }
            return false
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

    // MARK: Faults

    func cut(_ cut: Cut) {
        cuts.append(cut)
        lose { cut.separates($0.sender, $0.receiver) }
    }

    /// Heals the cut numbered `number` (nil: every cut).
    func heal(_ number: Int? = nil) {
        if let number { cuts.removeAll { $0.number == number } } else { cuts.removeAll() }
    }

    private func path(_ from: String, _ to: String) -> Path {
        if let path = paths[PathKey(from: from, to: to)] { return path }
        for address in [from, to] {
            if let machine = addresses[address], let path = impairments[ObjectIdentifier(machine)] { return path }
        }
        return defaultPath
    }

    /// Sends a segment of `length` bytes from `from` to `to`; it leaves once the path has sent
    /// what went before (`previous`, the sender's departure clock). Unless it is lost (to the
    /// path's loss rate, or a cut), `arrive` runs when it arrives, no earlier than `notBefore`
    /// (a connection's segments arrive in order), and the arrival is returned. What is in flight
    /// when a cut comes between its ends, or when either end's address goes, is lost too, as a
    /// link that goes down loses what was on it.
    @discardableResult
    func cross(
        from: String,
        to: String,
        length: Int,
        after previous: inout Int64,
        notBefore: Int64 = 0,
        _ arrive: @escaping () -> Void
    ) -> Int64? {
        let path = path(from, to)
        let now = scheduler.now
        var departure = now
        if let bandwidth = path.bandwidth, bandwidth > 0 {
            departure = max(now, previous)
            previous = departure + Int64(length) * 1_000_000_000 / bandwidth
        }
        // An address no machine has (any more) sends and receives nothing.
        guard let sender = addresses[from], let receiver = addresses[to], !separated(sender, receiver) else {
            return nil
        }
        if path.loss > 0, Double.random(in: 0..<1, using: &random) < path.loss { return nil }
        let jitter = path.jitter > 0 ? Int64.random(in: 0...path.jitter, using: &random) : 0
        let arrival = max(notBefore, departure + path.latency + jitter)
        let flight = flightsMade
        flightsMade += 1
        inFlight[flight] = Flight(from: from, to: to, sender: sender, receiver: receiver)
        _ = scheduler.schedule(nil, at: arrival) { [self] in
            guard let landed = inFlight.removeValue(forKey: flight), !landed.lost else { return }
            arrive()
        }
        return arrival
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

    private func separated(_ a: SimulatedMachine, _ b: SimulatedMachine) -> Bool {
        cuts.contains { $0.separates(a, b) }
    }

    /// The path's round trip, as TCP would estimate it for its retransmission timeout.
    func roundTrip(_ a: String, _ b: String) -> Int64 {
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
        var unused: Int64 = 0
        cross(from: socket.local, to: address, length: 0, after: &unused) { [self] in
            guard let target = machine(at: address) else { return }
            var unused: Int64 = 0
            guard let listener = listeners[ListenKey(address: address, port: port)] else {
                // Refused: RST for the SYN.
                cross(from: address, to: socket.local, length: 0, after: &unused) { socket.refused() }
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
            cross(from: address, to: socket.local, length: 0, after: &unused) { socket.established(with: accepted) }
        }
    }
}

/// A machine's kernel: its addresses and ports. Its process runs on a host of the scheduler.
final class SimulatedMachine: @unchecked Sendable {
    var addresses: [String]
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
