import Glibc
import NIOCore

/// One end of a simulated TCP connection, as its machine's kernel keeps it (``SimulatedNetwork``
/// says what is modelled). Touched only on the world's thread.
final class SimulatedSocket: @unchecked Sendable {
    enum State {
        case connecting
        case established
        /// Closed by its process: what it wrote and its FIN still go (and are sent again until
        /// acknowledged); what arrives is answered with a reset.
        case closing
        /// Done: closed and acknowledged, reset by the peer, aborted by the user timeout, refused.
        case closed
    }

    /// A piece of the byte stream in flight: sent, not yet acknowledged.
    private struct Segment {
        var offset: UInt64
        var bytes: ByteBuffer
        var fin: Bool
        var segments: UInt32 {
            UInt32(max(1, (bytes.readableBytes + SimulatedNetwork.segmentSize - 1) / SimulatedNetwork.segmentSize))
        }
        var end: UInt64 { offset + UInt64(bytes.readableBytes) + (fin ? 1 : 0) }
    }

    let network: SimulatedNetwork
    let machine: SimulatedMachine
    /// Its number on its machine, in the order made.
    private let number: UInt64
    let local: String
    let localPort: Int
    private(set) var remote: (address: String, port: Int)?
    private(set) weak var peer: SimulatedSocket?
    var state = State.connecting
    /// The process's side, told when there is something to read, or room to write.
    weak var channel: SimulatedChannel?
    /// Unacknowledged data older than this aborts the connection (TCP_USER_TIMEOUT); nil or 0: never.
    var userTimeout: Int64?

    // Sending.
    /// Written by the process, not yet sent (at most ``SimulatedNetwork/unsentLimit``).
    private var unsent: [ByteBuffer] = []
    private(set) var unsentBytes = 0
    private var finPending = false
    private var nextOffset: UInt64 = 0
    private var inFlight: [Segment] = []
    private var inFlightBytes: UInt64 { inFlight.reduce(0) { $0 + UInt64($1.bytes.readableBytes) } }
    /// The room the peer last advertised.
    private var peerWindow = UInt64(SimulatedNetwork.receiveBuffer)
    /// When the last segment sent arrives: later ones arrive after it (the path keeps order).
    private var lastArrival: Int64 = 0
    private var retransmissionTimer: UInt64?
    private var backoff = 0

    // Receiving.
    private var received: [ByteBuffer] = []
    private(set) var receivedBytes = 0
    private var expectedOffset: UInt64 = 0
    private var outOfOrder: [UInt64: Segment] = [:]
    private var finished = false
    /// How the connection broke without a FIN: reset by the peer, or given up (user timeout).
    private var broken: SimulatedChannel.Ending?

    // What TCP_INFO would say.
    private var retransmittedSegments: UInt32 = 0
    private var outOfOrderSegments: UInt32 = 0
    private var lastHeard: Int64
    private var lastDataArrival: Int64

    init(network: SimulatedNetwork, machine: SimulatedMachine, local: String, localPort: Int) {
        self.network = network
        self.machine = machine
        self.local = local
        self.localPort = localPort
        lastHeard = network.scheduler.now
        lastDataArrival = network.scheduler.now
        number = machine.nextSocketNumber()
        machine.sockets[number] = self
    }

    /// Connects this (accepted) socket to the dialler's.
    func connect(to dialler: SimulatedSocket, userTimeout: Int64?) {
        peer = dialler
        remote = (dialler.local, dialler.localPort)
        state = .established
        self.userTimeout = self.userTimeout ?? userTimeout
    }

    func dialling(_ address: String, port: Int) {
        remote = (address, port)
    }

    // MARK: Sending

    /// How much more the process may write now.
    var unsentRoom: Int { max(0, SimulatedNetwork.unsentLimit - unsentBytes) }

    /// Takes bytes the process wrote (never more than ``unsentRoom``) and sends what the peer's window allows.
    func write(_ buffer: ByteBuffer) {
        guard state == .established || state == .connecting else { return }
        unsent.append(buffer)
        unsentBytes += buffer.readableBytes
        transmit()
    }

    private func transmit() {
        guard state == .established || state == .closing, let peer else { return }
        let window = min(peerWindow, network.congestionWindow(local, peer.local) ?? .max)
        while true {
            let room = window > inFlightBytes ? window - inFlightBytes : 0
            if unsent.isEmpty {
                guard finPending, !inFlight.contains(where: \.fin) else { return }
                finPending = false
                launch(Segment(offset: nextOffset, bytes: ByteBuffer(), fin: true), to: peer)
                nextOffset += 1
                return
            }
            guard room > 0 else { return }
            var bytes = unsent[0]
            let length = min(bytes.readableBytes, Int(min(room, 64 << 10)))
            let piece = bytes.readSlice(length: length)!
            if bytes.readableBytes == 0 { unsent.removeFirst() } else { unsent[0] = bytes }
            unsentBytes -= length
            let segment = Segment(offset: nextOffset, bytes: piece, fin: false)
            nextOffset += UInt64(length)
            inFlight.append(segment)
            launch(segment, to: peer)
        }
    }

    private func launch(_ segment: Segment, to peer: SimulatedSocket) {
        if segment.fin { inFlight.append(segment) }
        send(segment, to: peer)
        armRetransmission()
    }

    private func send(_ segment: Segment, to peer: SimulatedSocket) {
        let arrival = network.cross(
            from: local,
            to: peer.local,
            length: segment.bytes.readableBytes,
            notBefore: lastArrival
        ) { [self] in peer.arrived(segment, from: self) }
        if let arrival { lastArrival = arrival }
    }

    private var retransmissionTimeout: Int64 {
        let base = max(
            SimulatedNetwork.retransmissionTimeout.lowerBound,
            3 * network.roundTrip(local, remote?.address ?? local)
        )
        return min(base << min(backoff, 6), SimulatedNetwork.retransmissionTimeout.upperBound)
    }

    private func armRetransmission() {
        guard retransmissionTimer == nil, !inFlight.isEmpty else { return }
        retransmissionTimer = network.scheduler.schedule(nil, at: network.scheduler.now + retransmissionTimeout) {
            [self] in
            retransmissionTimer = nil
            retransmit()
        }
    }

    /// The retransmission timer went off: the oldest segment is sent again.
    private func retransmit() {
        guard state == .established || state == .closing, let peer, let oldest = inFlight.first else { return }
        if let userTimeout, userTimeout > 0, network.scheduler.now - firstSent >= userTimeout {
            abort()
            return
        }
        retransmittedSegments += oldest.segments
        backoff += 1
        send(oldest, to: peer)
        armRetransmission()
    }

    /// When the oldest unacknowledged segment was first sent (for the user timeout).
    private var firstSent: Int64 = 0

    private func acknowledged(through offset: UInt64, window: UInt64) {
        lastHeard = network.scheduler.now
        peerWindow = window
        let before = inFlight.count
        inFlight.removeAll { $0.end <= offset }
        if inFlight.count != before {
            backoff = 0
            firstSent = network.scheduler.now
            if let timer = retransmissionTimer {
                network.scheduler.cancel(timer)
                retransmissionTimer = nil
            }
        }
        if inFlight.isEmpty { firstSent = network.scheduler.now }
        if state == .closing, inFlight.isEmpty, unsent.isEmpty, !finPending {
            state = .closed
            return forget()
        }
        transmit()
        armRetransmission()
        if state == .established, unsentRoom > 0 { channel?.writable() }
    }

    // MARK: Receiving

    private func arrived(_ segment: Segment, from sender: SimulatedSocket) {
        guard state == .established else {
            // Data for a socket its process closed: reset. (A FIN alone is acknowledged.)
            if state == .closing, segment.bytes.readableBytes == 0 {
                expectedOffset = max(expectedOffset, segment.end)
                acknowledge(to: sender)
            } else {
                resetPeer(sender)
            }
            return
        }
        if segment.offset > expectedOffset {
            if outOfOrder[segment.offset] == nil { outOfOrderSegments += segment.segments }
            outOfOrder[segment.offset] = segment
        } else if segment.end > expectedOffset {
            accept(segment)
            while let next = outOfOrder.removeValue(forKey: expectedOffset) { accept(next) }
        }
        lastHeard = network.scheduler.now
        acknowledge(to: sender)
        channel?.readable()
    }

    private func accept(_ segment: Segment) {
        var bytes = segment.bytes
        if segment.offset < expectedOffset { bytes.moveReaderIndex(forwardBy: Int(expectedOffset - segment.offset)) }
        if bytes.readableBytes > 0 {
            received.append(bytes)
            receivedBytes += bytes.readableBytes
            lastDataArrival = network.scheduler.now
        }
        expectedOffset = segment.end
        if segment.fin { finished = true }
    }

    /// Tells the sender what arrived in order and the room left.
    private func acknowledge(to sender: SimulatedSocket) {
        let (offset, window) = (expectedOffset, UInt64(max(0, SimulatedNetwork.receiveBuffer - receivedBytes)))
        network.cross(from: local, to: sender.local, length: 0) {
            sender.acknowledged(through: offset, window: window)
        }
    }

    /// Takes what arrived, at most `limit` bytes in one buffer (the process reads); the peer
    /// hears of the room made.
    func read(limit: Int) -> ByteBuffer? {
        guard !received.isEmpty else { return nil }
        let buffer: ByteBuffer
        if received[0].readableBytes <= limit {
            buffer = received.removeFirst()
        } else {
            buffer = received[0].readSlice(length: limit)!
        }
        let wasFull = receivedBytes >= SimulatedNetwork.receiveBuffer / 2
        receivedBytes -= buffer.readableBytes
        if wasFull, receivedBytes < SimulatedNetwork.receiveBuffer / 2, let peer {
            // A window update.
            network.scheduler.enqueue(nil) { [self] in acknowledge(to: peer) }
        }
        return buffer
    }

    /// What the process learns once nothing is left to read: the peer finished, reset, or neither.
    var ending: SimulatedChannel.Ending? {
        guard received.isEmpty else { return nil }
        return broken ?? (finished ? .finished : nil)
    }

    // MARK: Ending

    /// The process closed it: FIN after what was written; a reset at once if what arrived was
    /// left unread, as Linux does.
    func close() {
        switch state {
        case .closing, .closed:
            return
        case .connecting:
            state = .closed
            forget()
        case .established:
            let unread = !received.isEmpty
            received.removeAll()
            receivedBytes = 0
            guard !unread else {
                state = .closed
                if let peer { resetPeer(peer) }
                return forget()
            }
            state = .closing
            finPending = true
            transmit()
        }
    }

    private func resetPeer(_ peer: SimulatedSocket) {
        network.cross(from: local, to: peer.local, length: 0) { peer.reset() }
    }

    private func forget() {
        machine.sockets[number] = nil
        if let timer = retransmissionTimer {
            network.scheduler.cancel(timer)
            retransmissionTimer = nil
        }
    }

    /// The peer reset the connection (one its process had closed just ends).
    private func reset() {
        guard state == .established || state == .connecting else {
            state = .closed
            return forget()
        }
        breakOff(.reset)
    }

    /// The user timeout passed with data unacknowledged: the connection is given up.
    private func abort() {
        breakOff(.timedOut)
    }

    /// Ends the connection without a FIN; what arrived unread is gone, and the process learns how.
    private func breakOff(_ how: SimulatedChannel.Ending) {
        state = .closed
        broken = how
        received.removeAll()
        receivedBytes = 0
        forget()
        channel?.readable()
    }

    /// The process was killed: its kernel closes the socket as close() does.
    func killed() {
        channel = nil
        close()
    }

    func refused() {
        guard state == .connecting else { return }
        state = .closed
        forget()
        channel?.connectFailed(IOError(errnoCode: ECONNREFUSED, reason: "connect"))
    }

    func established(with peer: SimulatedSocket) {
        guard state == .connecting else {
            // Given up (a connect timeout) before the answer came: reset the other end.
            if self.peer == nil { resetPeer(peer) }
            return
        }
        self.peer = peer
        state = .established
        lastHeard = network.scheduler.now
        firstSent = network.scheduler.now
        channel?.connected()
        transmit()
    }

    /// What Linux's TCP_INFO would say of this socket.
    func transportReading() -> (
        outOfOrder: UInt32, retransmitted: UInt32, unacknowledged: UInt32, recovering: Bool, sinceHeard: Int64,
        sinceDataArrived: Int64
    ) {
        // (Ages in the machine's own time, as its kernel's clock is its process's.)
        let (time, now) = (machine.time, network.scheduler.now)
        return (
            outOfOrderSegments, retransmittedSegments, inFlight.reduce(0) { $0 + $1.segments }, backoff > 0,
            time.host(atWorld: now) - time.host(atWorld: lastHeard),
            time.host(atWorld: now) - time.host(atWorld: lastDataArrival)
        )
    }
}
