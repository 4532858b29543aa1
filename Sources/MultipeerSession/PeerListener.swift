import MultipeerCore
package import NIOCore
import NIOPosix
import NIOConcurrencyHelpers

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
                return .refused(MultipeerError(.sessionState, "refused a connection from \(source): the listener is stopping"))
            }
            if state.pending.count + state.links >= links {
                return .refused(MultipeerError(
                    .connectionLimit,
                    "refused a connection from \(source): \(state.links) inbound links and \(state.pending.count) handshakes reach the limit of \(links) (Limits.maximumInboundLinks)"))
            }
            var evicting: [(any Channel, MultipeerError)] = []
            if state.perSource[source, default: 0] >= handshakesPerSource, let oldest = Self.oldest(of: source, in: state) {
                evicting.append((state.pending[oldest]!.channel, MultipeerError(
                    .connectionLimit,
                    "cut off a handshake from \(source): \(handshakesPerSource) from that source were under way, the limit (Limits.maximumHandshakesPerSource), and another came")))
                Self.remove(oldest, from: &state)
            } else if state.pending.count >= handshakes,
                      let busiest = state.perSource.max(by: { ($0.value, $1.key) < ($1.value, $0.key) })?.key,
                      let oldest = Self.oldest(of: busiest, in: state) {
                evicting.append((state.pending[oldest]!.channel, MultipeerError(
                    .connectionLimit,
                    "cut off a handshake from \(busiest): \(handshakes) handshakes were under way, the limit (Limits.maximumHandshakes), and \(busiest) held the most")))
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
            let groups = stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
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

/// Accepts links on a TCP port of every interface, IPv4 and IPv6, and hands each one that
/// completes TLS and HELLO to the caller. A connection that fails its handshake is reported
/// and closed, as is one that sends nothing within ``MultipeerSession/Limits/firstBytesTimeout``;
/// one beyond the inbound link limit is closed as it is accepted, before any handshake, and
/// reported; at the handshake limits the oldest handshake of the busiest source makes room
/// (``Admission``). The listener keeps serving.
package final class PeerListener: Sendable {
    /// The address bound, with the port chosen by the system when 0 was asked for.
    package let localAddress: SocketAddress
    private let serverChannel: NIOAsyncChannel<Accepted, Never>
    private let admission: Admission

    /// The port bound.
    package var port: Int { localAddress.port! }

    private init(serverChannel: NIOAsyncChannel<Accepted, Never>, admission: Admission) {
        self.serverChannel = serverChannel
        self.localAddress = serverChannel.channel.localAddress!
        self.admission = admission
    }

    /// Binds `port` (0 for an ephemeral port) on `host`; by default on every interface, both
    /// IPv4 and IPv6 where the machine has IPv6.
    package static func bind(
        host: String? = nil, port: Int = 0, configuration: LinkConfiguration, limits: MultipeerSession.Limits = .init(),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> PeerListener {
        var bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(LinkConfiguration.thinLinearTimeouts, value: 1)
        if let (option, value) = configuration.tcpUserTimeoutOption {
            bootstrap = bootstrap.childChannelOption(option, value: value)
        }
        let admission = Admission(limits)
        // "::" accepts IPv4 too (as mapped addresses) on Linux; without IPv6, fall back to IPv4.
        let hosts = host.map { [$0] } ?? ["::", "0.0.0.0"]
        var lastError: (any Error)?
        for candidate in hosts {
            do {
                let channel = try await bootstrap.bind(host: candidate, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let ticket: Admission.Ticket
                        switch admission.admit(channel, from: channel.remoteAddress) {
                        case .refused(let refusal):
                            // Closed at once, not when the reader comes to it: a stopping
                            // listener's reader never does.
                            channel.eventLoop.execute { channel.close(promise: nil) }
                            return Accepted.refused(channel.remoteAddress, refusal)
                        case .admitted(let admitted, let evicting):
                            ticket = admitted
                            for (evicted, reason) in evicting { Self.cutOff(evicted, reason) }
                        }
                        do {
                            return .pending(try configuration.configure(channel, role: .server, firstBytesTimeout: limits.firstBytesTimeout), ticket)
                        } catch {
                            // NIO drops a connection whose initializer failed without closing it.
                            admission.handshakeEnded(ticket, established: false)
                            channel.close(promise: nil)
                            throw error
                        }
                    }
                }
                return PeerListener(serverChannel: channel, admission: admission)
            } catch {
                lastError = error
            }
        }
        throw MultipeerError(
            .listenFailed, "cannot listen on port \(port) of \(hosts.joined(separator: " or "))",
            underlying: lastError.map(socketErrorReason))
    }

    /// Accepts connections until the task is cancelled or the listener is closed. Each link runs
    /// in a child task: `onLink` once its handshake is done (the link is closed when `onLink`
    /// returns), `onFailure` if the handshake failed or the connection was refused. When it
    /// stops, every handshake still under way is closed, also those it had not taken yet.
    package func run(
        onLink: @escaping @Sendable (PeerConnection) async -> Void,
        onFailure: @escaping @Sendable (SocketAddress?, any Error) async -> Void
    ) async throws {
        let admission = self.admission
        do {
            try await serve(onLink: onLink, onFailure: onFailure)
        } catch {
            await admission.stop()
            throw error
        }
        await admission.stop()
    }

    private func serve(
        onLink: @escaping @Sendable (PeerConnection) async -> Void,
        onFailure: @escaping @Sendable (SocketAddress?, any Error) async -> Void
    ) async throws {
        let admission = self.admission
        try await serverChannel.executeThenClose { inbound in
            try await withThrowingDiscardingTaskGroup { group in
                for try await accepted in inbound {
                    let pending: PendingLink
                    let ticket: Admission.Ticket
                    switch accepted {
                    case .refused(let address, let refusal):
                        group.addTask { await onFailure(address, refusal) }
                        continue
                    case .pending(let link, let admitted):
                        (pending, ticket) = (link, admitted)
                    }
                    group.addTask {
                        let link: PeerConnection
                        do {
                            // Stopping the listener cuts handshakes short rather than waiting them out.
                            link = try await withTaskCancellationHandler {
                                try await pending.established()
                            } onCancel: {
                                pending.channel.channel.close(promise: nil)
                            }
                        } catch {
                            admission.handshakeEnded(ticket, established: false)
                            await onFailure(pending.remoteAddress, error)
                            return
                        }
                        admission.handshakeEnded(ticket, established: true)
                        await onLink(link)
                        try? await link.channel.channel.close()
                        admission.linkEnded()
                    }
                }
            }
        }
    }

    /// Cuts off a handshake to make room for a newcomer: its link fails with `reason`.
    private static func cutOff(_ channel: any Channel, _ reason: MultipeerError) {
        channel.eventLoop.execute {
            channel.pipeline.fireErrorCaught(reason)
            channel.close(promise: nil)
        }
    }

    /// Stops accepting; `run` returns once its links have ended.
    package func close() async {
        try? await serverChannel.channel.close()
    }
}
