import MultipeerCore
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Admits a listener's inbound connections within the session's ``MultipeerSession/Limits``:
/// handshakes under way in all (``MultipeerSession/Limits/maximumHandshakes``) and per source
/// (``MultipeerSession/Limits/maximumHandshakesPerSource``), and inbound links
/// (``MultipeerSession/Limits/maximumInboundLinks``). Asked on the event loop as each connection
/// is accepted, before a byte of it is read.
///
/// A newcomer is never refused for handshakes: at a limit, the oldest handshake of its own
/// source (per-source limit) or of the source holding the most (overall limit) is cut off for
/// it. Strangers who connect and stall thus only ever displace each other, and an honest peer's
/// handshake, which takes milliseconds, is done long before a flood could come round to it.
final class Admission: Sendable {
    /// One admitted handshake.
    struct Ticket: Hashable, Sendable {
        fileprivate let number: UInt64
    }

    private struct Pending {
        var source: String
        var channel: any Channel
    }

    private struct State {
        var next: UInt64 = 0
        /// Handshakes under way, by ticket number (the oldest first).
        var pending: [UInt64: Pending] = [:]
        var perSource: [String: Int] = [:]
        var links = 0
        /// The listener is stopping: every connection from now on is refused (and closed).
        var stopped = false
    }

    let handshakes: Int
    let handshakesPerSource: Int
    let links: Int
    private let state = NIOLockedValueBox(State())

    init(_ limits: MultipeerSession.Limits) {
        handshakes = max(1, limits.maximumHandshakes)
        handshakesPerSource = max(1, min(limits.maximumHandshakesPerSource, handshakes))
        links = limits.maximumInboundLinks
    }

    /// What became of a new connection.
    enum Decision {
        /// Admitted; the handshakes cut off to make room for it, each with why.
        case admitted(Ticket, evicting: [(any Channel, MultipeerError)])
        case refused(MultipeerError)
    }

    /// Admits a new connection from `address`, or says why not.
    func admit(_ channel: any Channel, from address: SocketAddress?) -> Decision {
        let source = Self.source(of: address)
        return state.withLockedValue { state in
            if state.stopped {
                return .refused(
                    MultipeerError(.sessionState, "refused a connection from \(source): the listener is stopping")
                )
            }
            if state.pending.count + state.links >= links {
                return .refused(
                    MultipeerError(
                        .connectionLimit,
                        "refused a connection from \(source): \(state.links) inbound links and \(state.pending.count) handshakes reach the limit of \(links) (Limits.maximumInboundLinks)"
                    )
                )
            }
            var evicting: [(any Channel, MultipeerError)] = []
            if state.perSource[source, default: 0] >= handshakesPerSource,
                let oldest = Self.oldest(of: source, in: state)
            {
                evicting.append(
                    (
                        state.pending[oldest]!.channel,
                        MultipeerError(
                            .connectionLimit,
                            "cut off a handshake from \(source): \(handshakesPerSource) from that source were under way, the limit (Limits.maximumHandshakesPerSource), and another came"
                        )
                    )
                )
                Self.remove(oldest, from: &state)
            } else if state.pending.count >= handshakes,
                let busiest = state.perSource.max(by: { ($0.value, $1.key) < ($1.value, $0.key) })?.key,
                let oldest = Self.oldest(of: busiest, in: state)
            {
                evicting.append(
                    (
                        state.pending[oldest]!.channel,
                        MultipeerError(
                            .connectionLimit,
                            "cut off a handshake from \(busiest): \(handshakes) handshakes were under way, the limit (Limits.maximumHandshakes), and \(busiest) held the most"
                        )
                    )
                )
                Self.remove(oldest, from: &state)
            }
            let ticket = Ticket(number: state.next)
            state.next += 1
            state.pending[ticket.number] = Pending(source: source, channel: channel)
            state.perSource[source, default: 0] += 1
            return .admitted(ticket, evicting: evicting)
        }
    }

    /// An admitted handshake ended: the link is served now, or it failed (or was cut off).
    func handshakeEnded(_ ticket: Ticket, established: Bool) {
        state.withLockedValue { state in
            Self.remove(ticket.number, from: &state)
            if established { state.links += 1 }
        }
    }

    func linkEnded() {
        state.withLockedValue { $0.links -= 1 }
    }

    /// The listener is stopping: closes every handshake under way, whether or not the listener's
    /// reader has taken it yet, and refuses every connection admitted from now on; returns once
    /// they are closed.
    ///
    /// A connection NIO accepted just before the listener closed may still be in its
    /// initializer: NIO then drops the channel it made (the closed listener cannot register it),
    /// neither closed nor referenced, with its socket and handlers. Refused here, the initializer
    /// closes it instead.
    func stop() async {
        let channels = state.withLockedValue { state in
            state.stopped = true
            return state.pending.values.map(\.channel)
        }
        for channel in channels { try? await channel.close() }
    }

    private static func oldest(of source: String, in state: State) -> UInt64? {
        state.pending.filter { $0.value.source == source }.keys.min()
    }

    private static func remove(_ number: UInt64, from state: inout State) {
        guard let removed = state.pending.removeValue(forKey: number) else { return }
        state.perSource[removed.source]! -= 1
        if state.perSource[removed.source] == 0 { state.perSource[removed.source] = nil }
    }

    /// Who a connection counts against: its IPv4 address (also when mapped into IPv6), or the
    /// /64 prefix of its IPv6 address (one host can use a whole /64).
    static func source(of address: SocketAddress?) -> String {
        guard let address else { return "unknown" }
        switch address {
        case .v4:
            return address.ipAddress ?? "unknown"
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF {
                return bytes[12...].map(String.init).joined(separator: ".")
            }
            let groups = stride(from: 0, to: 8, by: 2).map {
                String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16)
            }
            return groups.joined(separator: ":") + "::/64"
        default:
            return "unknown"
        }
    }
}

/// What the listener made of an accepted connection.
enum Accepted: Sendable {
    /// Admitted: TLS and HELLO are under way.
    case pending(PendingLink, Admission.Ticket)
    /// Beyond the limits, or come as the listener stops: no handlers, nothing read, closed; to
    /// be reported. The address is read on the channel's event loop, as it is accepted.
    case refused(SocketAddress?, MultipeerError)
}
