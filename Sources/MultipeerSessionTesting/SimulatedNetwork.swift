import Glibc
import NIOCore

/// The simulated network and the kernels of its hosts: addresses, listening ports, and the TCP
/// connections between them, with a delay on every path.
///
/// It models TCP as an application meets it: bytes arrive in order, after the path's delay; a
/// connection to a port nobody listens on is refused; a host whose process is frozen still
/// accepts connections and acknowledges what arrives (its kernel runs); closing sends FIN, and
/// bytes arriving at a closed socket are answered with a reset. What the keepalive reads of a
/// socket (``SimulatedSocket/transportReading()``) comes from the same bookkeeping.
///
/// Touched only on the world's thread (the scheduler's jobs); `@unchecked Sendable` for that.
final class SimulatedNetwork: @unchecked Sendable {
    let scheduler: SimulationScheduler
    /// One way, on every path: 250 µs, a quiet LAN.
    var latency: Int64 = 250_000
    /// The payload of one TCP segment, for counting segments.
    static let segmentSize = 1_448

    private var addresses: [String: SimulationScheduler.HostID] = [:]
    private var listeners: [ListenKey: SimulatedListener] = [:]
    private var nextPort: [SimulationScheduler.HostID: Int] = [:]

    struct ListenKey: Hashable {
        var host: SimulationScheduler.HostID
        var port: Int
    }

    init(scheduler: SimulationScheduler) {
        self.scheduler = scheduler
    }

    func assign(_ address: String, to host: SimulationScheduler.HostID) {
        addresses[address] = host
    }

    func host(at address: String) -> SimulationScheduler.HostID? {
        addresses[address]
    }

    func address(of host: SimulationScheduler.HostID) -> String? {
        addresses.first { $0.value == host }?.key
    }

    /// An ephemeral port of `host`.
    func ephemeralPort(of host: SimulationScheduler.HostID) -> Int {
        let port = nextPort[host, default: 49_152]
        nextPort[host] = port + 1
        return port
    }

    /// Listens on `port` (0: an ephemeral one) of `host`; throws EADDRINUSE if taken.
    func listen(_ listener: SimulatedListener, host: SimulationScheduler.HostID, port: Int) throws -> Int {
        var port = port
        if port == 0 {
            repeat { port = ephemeralPort(of: host) } while listeners[ListenKey(host: host, port: port)] != nil
        }
        guard listeners[ListenKey(host: host, port: port)] == nil else {
            throw IOError(errnoCode: EADDRINUSE, reason: "bind")
        }
        listeners[ListenKey(host: host, port: port)] = listener
        return port
    }

    func stopListening(host: SimulationScheduler.HostID, port: Int) {
        listeners[ListenKey(host: host, port: port)] = nil
    }

    /// One way from `from` to `to` (nil: nothing gets through).
    func delay(from: SimulationScheduler.HostID, to: SimulationScheduler.HostID) -> Int64? {
        latency
    }

    /// Sends `segment` across the path after its delay, in order with what went before on the
    /// same direction of the connection; runs `arrive` in the world when it arrives.
    func carry(from: SimulatedSocket, to host: SimulationScheduler.HostID, _ arrive: @escaping () -> Void) {
        guard let delay = delay(from: from.host, to: host) else { return }
        let at = max(scheduler.now + delay, from.lastDeparture)
        from.lastDeparture = at
        _ = scheduler.schedule(nil, at: at, arrive)
    }

    /// A SYN from `socket` for `address:port`: answered by the listener there (accepted in the
    /// kernel, to be taken by the process), refused by the host, or lost.
    func connect(_ socket: SimulatedSocket, to address: String, port: Int) {
        guard let target = host(at: address) else { return }  // nobody there: the SYN is lost
        carry(from: socket, to: target) { [self] in
            guard let listener = listeners[ListenKey(host: target, port: port)] else {
                // RST for the SYN: refused.
                carry(from: socket, to: socket.host) { socket.refused() }
                return
            }
            let accepted = SimulatedSocket(network: self, host: target, local: address, localPort: port)
            accepted.peer = socket
            accepted.remote = (socket.local, socket.localPort)
            accepted.state = .established
            listener.arrived(accepted)
            carry(from: accepted, to: socket.host) { socket.established(with: accepted) }
        }
    }
}

/// A listening port's kernel side: what it accepted waits for the process (``SimulatedListener/arrived(_:)``).
final class SimulatedListener: @unchecked Sendable {
    private let accept: (SimulatedSocket) -> Void

    init(accept: @escaping (SimulatedSocket) -> Void) {
        self.accept = accept
    }

    func arrived(_ socket: SimulatedSocket) {
        accept(socket)
    }
}

/// One end of a simulated TCP connection, as the kernel keeps it.
final class SimulatedSocket: @unchecked Sendable {
    enum State {
        case connecting
        case established
        /// The process closed it, or the peer reset it.
        case closed
    }

    let network: SimulatedNetwork
    let host: SimulationScheduler.HostID
    let local: String
    let localPort: Int
    var remote: (address: String, port: Int)?
    var peer: SimulatedSocket?
    var state = State.connecting
    /// The process's side, told when there is something to read.
    weak var channel: SimulatedChannel?

    /// Bytes arrived, not yet read by the process.
    private(set) var received: [ByteBuffer] = []
    /// The peer's FIN arrived (after the bytes in ``received``).
    private(set) var finished = false
    /// The peer reset the connection.
    private(set) var resetByPeer = false
    /// When the last segment sent on this direction arrives: later ones arrive after it.
    var lastDeparture: Int64 = 0

    // What TCP_INFO would say.
    private var unacknowledgedSegments: UInt32 = 0
    private var lastAcknowledgement: Int64
    private var lastDataArrival: Int64

    init(network: SimulatedNetwork, host: SimulationScheduler.HostID, local: String, localPort: Int) {
        self.network = network
        self.host = host
        self.local = local
        self.localPort = localPort
        lastAcknowledgement = network.scheduler.now
        lastDataArrival = network.scheduler.now
    }

    /// Sends what the process wrote (the world's thread).
    func send(_ buffer: ByteBuffer) {
        guard state == .established, let peer else { return }
        let segments = UInt32((buffer.readableBytes + SimulatedNetwork.segmentSize - 1) / SimulatedNetwork.segmentSize)
        unacknowledgedSegments += segments
        network.carry(from: self, to: peer.host) { [self] in
            peer.arrived(buffer, from: self, segments: segments)
        }
    }

    /// Closes this end: FIN to the peer after what was sent.
    func close() {
        guard state != .closed else { return }
        let wasEstablished = state == .established
        state = .closed
        received.removeAll()
        guard wasEstablished, let peer else { return }
        network.carry(from: self, to: peer.host) { peer.finArrived() }
    }

    private func arrived(_ buffer: ByteBuffer, from sender: SimulatedSocket, segments: UInt32) {
        guard state == .established else {
            // Data for a closed socket: reset.
            network.carry(from: self, to: sender.host) { sender.reset() }
            return
        }
        received.append(buffer)
        lastDataArrival = network.scheduler.now
        network.carry(from: self, to: sender.host) { sender.acknowledged(segments) }
        notify()
    }

    private func acknowledged(_ segments: UInt32) {
        unacknowledgedSegments -= min(segments, unacknowledgedSegments)
        lastAcknowledgement = network.scheduler.now
    }

    private func finArrived() {
        guard state == .established else { return }
        finished = true
        notify()
    }

    private func reset() {
        guard state != .closed else { return }
        state = .closed
        resetByPeer = true
        received.removeAll()
        notify()
    }

    fileprivate func refused() {
        state = .closed
        channel?.connectFailed(IOError(errnoCode: ECONNREFUSED, reason: "connect"))
    }

    fileprivate func established(with peer: SimulatedSocket) {
        guard state == .connecting else {
            // Given up (a connect timeout) before the answer came: reset the other end.
            network.carry(from: self, to: peer.host) { peer.reset() }
            return
        }
        self.peer = peer
        state = .established
        lastAcknowledgement = network.scheduler.now
        channel?.connected()
    }

    private func notify() {
        channel?.readable()
    }

    /// Takes what arrived, at most `limit` bytes in one buffer (the process reads).
    func read(limit: Int) -> ByteBuffer? {
        guard !received.isEmpty else { return nil }
        if received[0].readableBytes <= limit { return received.removeFirst() }
        return received[0].readSlice(length: limit)
    }

    /// What the process learns once ``received`` is empty: the peer finished, reset, or neither.
    var ending: SimulatedChannel.Ending? {
        guard received.isEmpty else { return nil }
        if resetByPeer { return .reset }
        if finished { return .finished }
        return nil
    }

    /// What Linux's TCP_INFO would say of this socket.
    func transportReading() -> (unacknowledged: UInt32, sinceHeard: Int64, sinceDataArrived: Int64) {
        let now = network.scheduler.now
        return (unacknowledgedSegments, now - max(lastAcknowledgement, lastDataArrival), now - lastDataArrival)
    }
}
