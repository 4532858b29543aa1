import MultipeerCore
package import NIOCore
import NIOPosix
import NIOConcurrencyHelpers

/// Counts a listener's inbound handshakes and links against the session's
/// ``MultipeerSession/Limits/maximumHandshakes`` and ``MultipeerSession/Limits/maximumInboundLinks``.
/// Asked on the event loop as each connection is accepted, before a byte of it is read.
final class Admission: Sendable {
    let handshakes: Int
    let links: Int
    private let counts = NIOLockedValueBox<(handshakes: Int, links: Int)>((0, 0))

    init(_ limits: MultipeerSession.Limits) {
        handshakes = limits.maximumHandshakes
        links = limits.maximumInboundLinks
    }

    /// Counts a new connection's handshake in, or says why it is refused.
    func admit() -> MultipeerError? {
        counts.withLockedValue { counts in
            if counts.handshakes >= handshakes {
                return MultipeerError(
                    .connectionLimit,
                    "refused a connection: \(counts.handshakes) handshakes are already under way, the limit (Limits.maximumHandshakes)")
            }
            if counts.handshakes + counts.links >= links {
                return MultipeerError(
                    .connectionLimit,
                    "refused a connection: \(counts.links) inbound links and \(counts.handshakes) handshakes reach the limit of \(links) (Limits.maximumInboundLinks)")
            }
            counts.handshakes += 1
            return nil
        }
    }

    /// An admitted handshake ended: the link is served now, or it failed.
    func handshakeEnded(established: Bool) {
        counts.withLockedValue {
            $0.handshakes -= 1
            if established { $0.links += 1 }
        }
    }

    func linkEnded() {
        counts.withLockedValue { $0.links -= 1 }
    }
}

/// What the listener made of an accepted connection.
enum Accepted: Sendable {
    /// Admitted: TLS and HELLO are under way.
    case pending(PendingLink)
    /// Beyond the limits: no handlers, nothing read; to be closed and reported. The address is
    /// read here, on the channel's event loop.
    case refused(any Channel, SocketAddress?, MultipeerError)
}

/// Accepts links on a TCP port of every interface, IPv4 and IPv6, and hands each one that
/// completes TLS and HELLO to the caller. A connection that fails its handshake is reported
/// and closed; one beyond the admission limits (``MultipeerSession/Limits``) is closed as it is
/// accepted, before any handshake, and reported; the listener keeps serving.
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
                        if let refusal = admission.admit() { return Accepted.refused(channel, channel.remoteAddress, refusal) }
                        do {
                            return .pending(try configuration.configure(channel, role: .server))
                        } catch {
                            admission.handshakeEnded(established: false)
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
    /// returns), `onFailure` if the handshake failed or the connection was refused.
    package func run(
        onLink: @escaping @Sendable (PeerConnection) async -> Void,
        onFailure: @escaping @Sendable (SocketAddress?, any Error) async -> Void
    ) async throws {
        let admission = self.admission
        try await serverChannel.executeThenClose { inbound in
            try await withThrowingDiscardingTaskGroup { group in
                for try await accepted in inbound {
                    let pending: PendingLink
                    switch accepted {
                    case .refused(let channel, let address, let refusal):
                        channel.close(promise: nil)
                        group.addTask { await onFailure(address, refusal) }
                        continue
                    case .pending(let link):
                        pending = link
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
                            admission.handshakeEnded(established: false)
                            await onFailure(pending.remoteAddress, error)
                            return
                        }
                        admission.handshakeEnded(established: true)
                        await onLink(link)
                        try? await link.channel.channel.close()
                        admission.linkEnded()
                    }
                }
            }
        }
    }

    /// Stops accepting; `run` returns once its links have ended.
    package func close() async {
        try? await serverChannel.channel.close()
    }
}
