import Glibc
package import MultipeerCore
import MultipeerTLS
import NIOConcurrencyHelpers
package import NIOCore
import NIOPosix

import struct Foundation.UUID

/// How what a link brings reaches its owner.
enum LinkTail: Sendable {
    /// A session's link reports to its session (``LinkReporter``).
    case session(LinkReports)
    /// A bare link (tests, benchmarks) is read and written through an async channel, which its
    /// owner claims (``LinkClaim``).
    case bare(NIOAsyncChannel<LinkMessage, LinkMessage>, LinkClaim)
}

/// A connection whose TLS and HELLO exchange are still under way.
struct PendingLink: Sendable {
    var channel: any Channel
    var tail: LinkTail
    var hello: EventLoopFuture<Hello>
    var remoteAddress: SocketAddress?
    var quality: LinkQualityBox
    /// The message types this side's HELLO says it reads.
    var announced: MessageTypesRead

    /// Waits for the handshake and returns the ready link.
    func established() async throws -> PeerConnection {
        if case .bare(_, let claim) = tail { claim.claim() }
        let hello: Hello
        do {
            hello = try await self.hello.get()
        } catch {
            switch tail {
            case .bare(let channel, _):
                // Nobody will use the async channel: finish its writer and close it.
                try? await channel.executeThenClose { _, _ in }
            case .session:
                channel.close(promise: nil)
            }
            guard error is MultipeerError else {
                // A socket error (a reset, say): the connection ended before the handshake did.
                let peer = remoteAddress.map { "the peer at \($0.displayString)" } ?? "the peer"
                throw MultipeerError(
                    .closedDuringHandshake,
                    "the connection with \(peer) ended during the handshake",
                    underlying: socketErrorReason(error)
                )
            }
            throw error
        }
        return PeerConnection(
            remoteHello: hello,
            remoteAddress: remoteAddress,
            nioChannel: channel,
            tail: tail,
            quality: quality,
            announced: announced
        )
    }
}

/// One authenticated, HELLO-complete link to a peer. A session's link reports to its session
/// (``reports``); a bare one (tests, benchmarks) carries typed messages both ways with
/// backpressure through ``channel``.
package struct PeerConnection: Sendable {
    /// The peer's HELLO: its UUID, incarnation, name and keepalive wishes.
    package let remoteHello: Hello
    package let remoteAddress: SocketAddress?
    /// The link's NIO channel.
    package let nioChannel: any Channel
    let tail: LinkTail
    /// Round trips, loss and traffic, kept up to date by the link's keepalive.
    let quality: LinkQualityBox
    /// The message types this side's HELLO said it reads.
    let announced: MessageTypesRead

    /// A bare link's typed messages in and out (NIOAsyncChannel); use it with `executeThenClose`.
    package var channel: NIOAsyncChannel<LinkMessage, LinkMessage> {
        guard case .bare(let channel, _) = tail else {
            preconditionFailure("a session's link reports to its session; it has no async channel")
        }
        return channel
    }

    /// A session's link: where it reports to the session.
    var reports: LinkReports {
        guard case .session(let reports) = tail else { preconditionFailure("a bare link has no session to report to") }
        return reports
    }

    /// Runs tasks on this link's event loop. Tasks that read or write the link should prefer it
    /// (`withTaskExecutorPreference(link.executor)`): each message then stays on one thread,
    /// saving a thread wake-up per message each way (Benchmarks/README.md has the figures).
    package var executor: EventLoopExecutor { EventLoopExecutor(nioChannel.eventLoop) }

    /// Dials `host:port`, runs TLS and the HELLO exchange, and returns the link once both are done.
    ///
    /// - Parameters:
    ///   - keyIdentity: The group key to offer (nil: the newest).
    ///   - expectedPeer: The peer discovery placed at this address: a HELLO proving another is
    ///     refused (`unexpectedPeer`). Nil for an address given without a peer (a static one).
    package static func dial(
        host: String,
        port: Int,
        configuration: LinkConfiguration,
        offering keyIdentity: String? = nil,
        expecting expectedPeer: UUID? = nil,
        group: (any EventLoopGroup)? = nil
    ) async throws -> PeerConnection {
        try await connect(
            host: host,
            port: port,
            configuration: configuration,
            offering: keyIdentity,
            expecting: expectedPeer,
            group: group
        ).established()
    }

    /// How long a TCP connection may take to be accepted: 30 % of the handshake timeout, 1.5 s
    /// by default: long enough for one lost SYN to be sent again (after 1 s), short enough that a
    /// stale address (a host renumbered, its old address answering nobody) does not hold a dial
    /// for the 3 s ARP takes to give up.
    static func connectTimeout(_ configuration: LinkConfiguration) -> Duration {
        configuration.tls.configuration.handshakeTimeout * 3 / 10
    }

    /// Opens the TCP connection to `host:port` and starts TLS and the HELLO exchange on it;
    /// ``PendingLink/established()`` waits for them. With `answerTimeout`, the other end must
    /// answer that soon after accepting the connection.
    static func connect(
        host: String,
        port: Int,
        configuration: LinkConfiguration,
        offering keyIdentity: String?,
        expecting expectedPeer: UUID?,
        answerTimeout: Duration? = nil,
        group: (any EventLoopGroup)? = nil
    ) async throws -> PendingLink {
        do {
            return try await configuration.transport.connect(
                host: host,
                port: port,
                on: (group ?? configuration.eventLoopGroup).next(),
                timeout: Self.connectTimeout(configuration),
                options: configuration.transportOptions
            ) { channel in
                try configuration.configure(
                    channel,
                    role: .client,
                    offering: keyIdentity,
                    expecting: expectedPeer,
                    firstBytesTimeout: answerTimeout
                )
            }
        } catch let error as MultipeerError {
            throw error
        } catch {
            throw MultipeerError(
                .connectionFailed,
                "cannot connect to \(host):\(port)",
                underlying: socketErrorReason(error)
            )
        }
    }
}

/// The system's words for why a socket operation failed ("Connection refused", "Address
/// already in use"), rather than NIO's nested description.
func socketErrorReason(_ error: any Error) -> String {
    if let error = error as? NIOConnectionError {
        if let failure = error.connectionErrors.first { return socketErrorReason(failure.error) }
        if let dns = error.dnsAAAAError ?? error.dnsAError { return "name lookup failed: \(dns)" }
    }
    if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
    return "\(error)"
}

/// A link's async channel, held until its owner claims it. NIO can drop a link that its
/// initializer made before anyone sees it (a listener closed, or a connect cancelled, while the
/// connection was being set up); an async channel dropped that way, unfinished, traps when the
/// connection becomes active. Held here instead, it is finished and closed when the connection
/// closes, unless its owner claimed it.
final class LinkClaim: Sendable {
    private let unclaimed: NIOLockedValueBox<NIOAsyncChannel<LinkMessage, LinkMessage>?>

    init(_ channel: NIOAsyncChannel<LinkMessage, LinkMessage>) {
        unclaimed = NIOLockedValueBox(channel)
    }

    /// The owner has the link now and will close it (executeThenClose).
    func claim() {
        _ = unclaimed.withLockedValue { $0.take() }
    }

    /// The connection closed: finishes the link if nobody claimed it (from then on nobody can).
    func closeIfAbandoned() {
        guard let abandoned = unclaimed.withLockedValue({ $0.take() }) else { return }
        // Async by NIO's design; a closed channel makes it quick, and nothing waits for it.
        Task { try? await abandoned.executeThenClose { _, _ in } }
    }
}
