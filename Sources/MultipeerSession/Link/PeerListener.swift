import MultipeerCore
import NIOConcurrencyHelpers
package import NIOCore
import NIOPosix

/// Accepts links on a TCP port of every interface, IPv4 and IPv6, and hands each one that
/// completes TLS and HELLO to the caller. A connection that fails its handshake is reported
/// and closed, as is one that sends nothing within ``MultipeerSession/Limits/firstBytesTimeout``;
/// one beyond the inbound link limit is closed as it is accepted, before any handshake, and
/// reported; at the handshake limits the oldest handshake of the busiest source makes room
/// (``Admission``). The listener keeps serving.
package final class PeerListener: Sendable {
    /// The address bound, with the port chosen by the system when 0 was asked for.
    package let localAddress: SocketAddress
    private let socket: any ListeningSocket<Accepted>
    private let admission: Admission

    /// The port bound.
    package var port: Int { localAddress.port! }

    private init(socket: any ListeningSocket<Accepted>, admission: Admission) {
        self.socket = socket
        self.localAddress = socket.localAddress
        self.admission = admission
    }

    /// Binds `port` (0 for an ephemeral port) on `host`; by default on every interface, both
    /// IPv4 and IPv6 where the machine has IPv6.
    package static func bind(
        host: String? = nil,
        port: Int = 0,
        configuration: LinkConfiguration,
        limits: MultipeerSession.Limits = .init(),
        group: (any EventLoopGroup)? = nil
    ) async throws -> PeerListener {
        let admission = Admission(limits)
        do {
            let socket = try await configuration.transport.listen(
                host: host,
                port: port,
                on: (group ?? configuration.eventLoopGroup).next(),
                options: configuration.transportOptions
            ) { channel in
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
                    return .pending(
                        try configuration.configure(
                            channel,
                            role: .server,
                            firstBytesTimeout: limits.firstBytesTimeout
                        ),
                        ticket
                    )
                } catch {
                    // NIO drops a connection whose initializer failed without closing it.
                    admission.handshakeEnded(ticket, established: false)
                    channel.close(promise: nil)
                    throw error
                }
            }
            return PeerListener(socket: socket, admission: admission)
        } catch {
            throw MultipeerError(
                .listenFailed,
                "cannot listen on port \(port) of \(host ?? "every address")",
                underlying: socketErrorReason(error)
            )
        }
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
        try await socket.run { inbound in
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
                                pending.channel.close(promise: nil)
                            }
                        } catch {
                            admission.handshakeEnded(ticket, established: false)
                            await onFailure(pending.remoteAddress, error)
                            return
                        }
                        admission.handshakeEnded(ticket, established: true)
                        await onLink(link)
                        try? await link.nioChannel.close()
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
        await socket.close()
    }
}
