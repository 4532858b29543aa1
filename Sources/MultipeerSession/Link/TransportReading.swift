import MultipeerCore
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension SocketOptionProvider {
    /// Reads what Linux's TCP knows of the connection (TCP_INFO), on the channel's event loop;
    /// nil where there is none (not a TCP socket). Out-of-order segments are counted from
    /// Linux 5.4 (`tcpi_rcv_ooopack`); an older kernel reports none.
    func transportReading() -> TransportReading? {
        eventLoop.preconditionInEventLoop()
        // struct tcp_info as Linux 6 has it, 232 bytes; an older kernel fills less of it and
        // leaves the rest zero. Its layout only ever grows at the end, so the offsets hold.
        typealias TCPInfo = (
            UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
            UInt64, UInt64,
            UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
            UInt64
        )
        var reading: TransportReading?
        // On the event loop the read completes at once, so its callback runs before this returns.
        unsafeGetSocketOption(level: SocketOptionLevel(IPPROTO_TCP), name: SocketOptionName(TCP_INFO))
            .assumeIsolated()
            .whenSuccess { (info: TCPInfo) in
                withUnsafeBytes(of: info) { bytes in
                    func field(at offset: Int) -> UInt32 {
                        bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
                    }
                    reading = TransportReading(
                        outOfOrderSegments: field(at: 224),  // tcpi_rcv_ooopack
                        retransmittedSegments: field(at: 100),  // tcpi_total_retrans
                        sinceHeard: .milliseconds(field(at: 56)),  // tcpi_last_ack_recv
                        sinceDataArrived: .milliseconds(field(at: 52)),  // tcpi_last_data_recv
                        unacknowledgedSegments: field(at: 24),  // tcpi_unacked
                        // tcpi_ca_state Recovery (3) or Loss (4), or tcpi_retransmits above 0
                        recoveringLoss: bytes[1] >= 3 || bytes[2] > 0
                    )
                }
            }
        return reading
    }
}

/// A socket's ``TransportInformation``: its TCP_INFO.
struct SocketTransportInformation: TransportInformation {
    let socket: any SocketOptionProvider

    func transportReading() -> TransportReading? {
        socket.transportReading()
    }
}
