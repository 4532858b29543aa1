package import MultipeerCore
package import NIOCore
import NIOPosix

/// What carries a session's links: TCP sockets (``SocketTransport``), or a simulated network
/// (the MultipeerSessionTesting product). The seam below the link pipeline: a transport makes
/// channels and hands each to `initialize`, which installs the same pipeline either way
/// (``LinkConfiguration/configure(_:role:offering:expecting:firstBytesTimeout:)``).
package protocol LinkTransport: Sendable {
    /// Opens a connection to `host:port` from `eventLoop`, failing after `timeout` if it is
    /// not accepted; `initialize` runs on the new channel, on its event loop, before it connects.
    func connect<Link: Sendable>(
        host: String,
        port: Int,
        on eventLoop: any EventLoop,
        timeout: Duration,
        options: TransportOptions,
        _ initialize: @escaping @Sendable (any Channel) throws -> Link
    ) async throws -> Link

    /// Listens on `port` (0: one the transport picks) of `host` (nil: every address, both
    /// IPv4 and IPv6 where there are both); `initialize` runs on each accepted channel.
    func listen<Accepted: Sendable>(
        host: String?,
        port: Int,
        on eventLoop: any EventLoop,
        options: TransportOptions,
        _ initialize: @escaping @Sendable (any Channel) throws -> Accepted
    ) async throws -> any ListeningSocket<Accepted>
}

/// How a link's connection is to behave, as far as a transport can say.
package struct TransportOptions: Sendable {
    /// Unacknowledged data older than this fails the connection (TCP_USER_TIMEOUT); nil: the
    /// transport's default.
    package var userTimeout: Duration?

    package init(userTimeout: Duration?) {
        self.userTimeout = userTimeout
    }
}

/// A listening socket: what it accepts, until it is closed.
package protocol ListeningSocket<Accepted>: Sendable {
    associatedtype Accepted: Sendable
    /// The address bound, with the port the transport picked if 0 was asked for.
    var localAddress: SocketAddress { get }
    /// Runs `body` with the accepted connections, then closes the socket; the sequence ends
    /// when the socket is closed.
    func run(_ body: (any AsyncSequence<Accepted, any Error>) async throws -> Void) async throws
    /// Stops accepting.
    func close() async
}

/// What a link's pipeline reads of its transport for the keepalive (``TransportReading``):
/// implemented by channels whose transport knows it (a simulated connection); a socket's is
/// read from TCP_INFO.
package protocol TransportInformation {
    /// What the transport knows of the connection now, on the channel's event loop; nil if nothing.
    func transportReading() -> TransportReading?
}

/// TCP over NIO's sockets: the production transport.
package struct SocketTransport: LinkTransport {
    package init() {}

    package func connect<Link: Sendable>(
        host: String,
        port: Int,
        on eventLoop: any EventLoop,
        timeout: Duration,
        options: TransportOptions,
        _ initialize: @escaping @Sendable (any Channel) throws -> Link
    ) async throws -> Link {
        var bootstrap = ClientBootstrap(group: eventLoop)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelOption(LinkConfiguration.thinLinearTimeouts, value: 1)
            .connectTimeout(TimeAmount(timeout))
        if let userTimeout = options.userTimeout {
            let (option, value) = LinkConfiguration.tcpUserTimeoutOption(userTimeout)
            bootstrap = bootstrap.channelOption(option, value: value)
        }
        return try await bootstrap.connect(host: host, port: port) { channel in
            channel.eventLoop.makeCompletedFuture { try initialize(channel) }
        }
    }

    package func listen<Accepted: Sendable>(
        host: String?,
        port: Int,
        on eventLoop: any EventLoop,
        options: TransportOptions,
        _ initialize: @escaping @Sendable (any Channel) throws -> Accepted
    ) async throws -> any ListeningSocket<Accepted> {
        var bootstrap = ServerBootstrap(group: eventLoop)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(LinkConfiguration.thinLinearTimeouts, value: 1)
        if let userTimeout = options.userTimeout {
            let (option, value) = LinkConfiguration.tcpUserTimeoutOption(userTimeout)
            bootstrap = bootstrap.childChannelOption(option, value: value)
        }
        // "::" accepts IPv4 too (as mapped addresses) on Linux; without IPv6, fall back to IPv4.
        let hosts = host.map { [$0] } ?? ["::", "0.0.0.0"]
        var lastError: (any Error)?
        for candidate in hosts {
            do {
                let channel = try await bootstrap.bind(host: candidate, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture { try initialize(channel) }
                }
                return Listening(channel: channel)
            } catch {
                lastError = error
            }
        }
        throw lastError ?? ChannelError.unknownLocalAddress
    }

    private struct Listening<Accepted: Sendable>: ListeningSocket {
        let channel: NIOAsyncChannel<Accepted, Never>

        var localAddress: SocketAddress { channel.channel.localAddress! }

        func run(_ body: (any AsyncSequence<Accepted, any Error>) async throws -> Void) async throws {
            try await channel.executeThenClose { inbound in try await body(inbound) }
        }

        func close() async {
            try? await channel.channel.close()
        }
    }
}
