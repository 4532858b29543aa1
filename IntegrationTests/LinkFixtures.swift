import Foundation
import MultipeerCore
import MultipeerTLS
import MultipeerTestSupport
import NIOCore

@testable import MultipeerSession

/// Builds link configurations and listeners for tests, and collects what the listener reports.
enum LinkFixtures {
    static let identity = "navlog-test"
    static let keyBytes: [UInt8] = (0..<32).map { UInt8($0 &* 7 &+ 3) }
    static var keyHex: String { keyBytes.map { String(format: "%02x", $0) }.joined() }
    static let psk = try! PreSharedKey(identity: identity, key: keyBytes)

    /// A link's configuration, its keepalive and handshake timeout stretched by ``TestTime/scale``.
    static func configuration(
        name: String,
        identity: PeerIdentity = PeerIdentity(),
        psk: PreSharedKey = LinkFixtures.psk,
        maximumFrameLength: Int = Frame.defaultMaximumLength,
        handshakeTimeout: Duration = .seconds(5),
        protocolVersion: UInt16 = Hello.currentProtocolVersion,
        keepalive: KeepaliveParameters = .scaled(KeepaliveParameters())
    ) throws -> LinkConfiguration {
        LinkConfiguration(
            tls: try TLSContext(
                configuration: TLSConfiguration(psk: psk, handshakeTimeout: TestTime.scaled(handshakeTimeout))
            ),
            identity: identity,
            localHello: try Hello(
                protocolVersion: protocolVersion,
                peerID: identity.peerID,
                key: identity.key,
                incarnation: .random(in: 1...UInt64.max),
                displayName: name,
                keepalive: keepalive
            ),
            maximumFrameLength: maximumFrameLength
        )
    }
}

/// A listener on loopback whose links are served by `onLink` and whose handshake failures
/// can be awaited one by one.
final class TestListener: Sendable {
    let listener: PeerListener
    let failures: AsyncStream<(SocketAddress?, any Error)>
    private let task: Task<Void, any Error>

    init(
        host: String?,
        configuration: LinkConfiguration,
        limits: MultipeerSession.Limits = .init(),
        onLink: @escaping @Sendable (PeerConnection) async -> Void
    ) async throws {
        var limits = limits
        limits.firstBytesTimeout = TestTime.scaled(limits.firstBytesTimeout)  // (as handshake timeouts are)
        listener = try await PeerListener.bind(host: host, configuration: configuration, limits: limits)
        let (failures, continuation) = AsyncStream<(SocketAddress?, any Error)>.makeStream()
        self.failures = failures
        task = Task { [listener] in
            try await listener.run(
                onLink: onLink,
                onFailure: { address, error in continuation.yield((address, error)) }
            )
        }
    }

    var port: Int { listener.port }

    /// The next handshake failure the listener reports.
    func nextFailure() async -> MultipeerError? {
        var iterator = failures.makeAsyncIterator()
        return await iterator.next()?.1 as? MultipeerError
    }

    func stop() async {
        task.cancel()
        await listener.close()
        _ = await task.result
    }
}

/// Runs `body` with a listener (on loopback unless `host` says otherwise), stopping it afterwards
/// whether `body` returns or throws.
func withTestListener<T>(
    host: String? = "127.0.0.1",
    configuration: LinkConfiguration,
    limits: MultipeerSession.Limits = .init(),
    onLink: @escaping @Sendable (PeerConnection) async -> Void,
    _ body: (TestListener) async throws -> T
) async throws -> T {
    let server = try await TestListener(host: host, configuration: configuration, limits: limits, onLink: onLink)
    do {
        let result = try await body(server)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}

/// Echoes every DATA message back on the link until the peer closes it.
@Sendable func echo(_ link: PeerConnection) async {
    try? await link.channel.executeThenClose { inbound, outbound in
        for try await message in inbound {
            if case .data = message { try await outbound.write(message) }
        }
    }
}

/// Sends `text` as one DATA message and returns the text of the next DATA message back.
func roundTrip(_ text: String, over link: PeerConnection) async throws -> String? {
    try await link.channel.executeThenClose { inbound, outbound in
        try await outbound.write(.data(DataMessage(sequence: 1, typeName: "Text", payload: ByteBuffer(string: text))))
        for try await message in inbound {
            if case .data(let data) = message { return String(buffer: data.payload) }
        }
        return nil
    }
}
