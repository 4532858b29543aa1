import MultipeerCore
package import NIOCore
import NIOPosix

/// Accepts links on a TCP port of every interface, IPv4 and IPv6, and hands each one that
/// completes TLS and HELLO to the caller. A connection that fails its handshake is reported
/// and closed; the listener keeps serving.
package final class PeerListener: Sendable {
    /// The address bound, with the port chosen by the system when 0 was asked for.
    package let localAddress: SocketAddress
    private let serverChannel: NIOAsyncChannel<PendingLink, Never>

    /// The port bound.
    package var port: Int { localAddress.port! }

    private init(serverChannel: NIOAsyncChannel<PendingLink, Never>) {
        self.serverChannel = serverChannel
        self.localAddress = serverChannel.channel.localAddress!
    }

    /// Binds `port` (0 for an ephemeral port) on `host`; by default on every interface, both
    /// IPv4 and IPv6 where the machine has IPv6.
    package static func bind(
        host: String? = nil, port: Int = 0, configuration: LinkConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> PeerListener {
        var bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
        if let (option, value) = configuration.tcpUserTimeoutOption {
            bootstrap = bootstrap.childChannelOption(option, value: value)
        }
        // "::" accepts IPv4 too (as mapped addresses) on Linux; without IPv6, fall back to IPv4.
        let hosts = host.map { [$0] } ?? ["::", "0.0.0.0"]
        var lastError: (any Error)?
        for candidate in hosts {
            do {
                let channel = try await bootstrap.bind(host: candidate, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture { try configuration.configure(channel, role: .server) }
                }
                return PeerListener(serverChannel: channel)
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
    /// returns), `onFailure` if the handshake failed.
    package func run(
        onLink: @escaping @Sendable (PeerConnection) async -> Void,
        onFailure: @escaping @Sendable (SocketAddress?, any Error) async -> Void
    ) async throws {
        try await serverChannel.executeThenClose { inbound in
            try await withThrowingDiscardingTaskGroup { group in
                for try await pending in inbound {
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
                            await onFailure(pending.remoteAddress, error)
                            return
                        }
                        await onLink(link)
                        try? await link.channel.channel.close()
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
