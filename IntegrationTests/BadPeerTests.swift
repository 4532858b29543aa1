import Foundation
import MultipeerCore
import MultipeerTestSupport
import NIOCore
import NIOEmbedded
import NIOPosix
import Testing

@testable import MultipeerSession

/// Bad input at the listener: each case ends in a typed error for that connection only, and
/// the listener goes on serving good peers.
@Suite struct BadPeerTests {
    /// Connects over plain TCP, sends `bytes`, and returns everything received until the server closes.
    static func rawExchange(port: Int, send bytes: [UInt8]) async throws -> [UInt8] {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            if !bytes.isEmpty { try await outbound.write(ByteBuffer(bytes: bytes)) }
            var received: [UInt8] = []
            for try await chunk in inbound { received += chunk.readableBytesView }
            return received
        }
    }

    /// For a listener whose test is not about the first-bytes deadline
    /// (``MultipeerSession/Limits/firstBytesTimeout``, 1 s): under `make test`'s load a raw
    /// client's first write can come later than that after the accept, and the listener would
    /// cut it off before it sent what the test is about (it failed so once, both raw clients at
    /// once, writing on a connection already closed).
    static let patient = MultipeerSession.Limits(firstBytesTimeout: .seconds(60))

    /// After a bad client, a good one still completes a round trip.
    static func expectStillServing(_ server: TestListener) async throws {
        let link = try await PeerConnection.dial(
            host: "127.0.0.1",
            port: server.port,
            configuration: LinkFixtures.configuration(name: "good")
        )
        #expect(try await roundTrip("still here", over: link) == "still here")
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aPlaintextHTTPRequestIsClosedWithAnAlertAndATypedError() async throws {
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server"),
            limits: Self.patient,
            onLink: echo
        ) { server in
            let reply = try await withDeadline(.seconds(20)) {
                try await Self.rawExchange(
                    port: server.port,
                    send: Array("GET / HTTP/1.1\r\nHost: navlog\r\n\r\n".utf8)
                )
            }
            #expect(reply.first == 0x15, "a TLS alert record comes back before the close: \(reply)")
            let failure = try await withDeadline(.seconds(20)) { await server.nextFailure() }
            #expect(failure?.code == .notTLS)
            #expect(
                failure?.message.contains("sent data that is not TLS (it starts with \"GET / HTTP/1.1") == true,
                "\(String(describing: failure))"
            )
            try await Self.expectStillServing(server)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func randomBytesAreClosedWithATypedError() async throws {
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server", handshakeTimeout: .seconds(5)),
            limits: Self.patient,
            onLink: echo
        ) { server in
            // GnuTLS may read random bytes as the start of a long record and wait for the rest:
            // then the handshake timeout ends it. (5 s, not 1: the good client after it needs
            // its whole handshake within that timeout, and under make test's load one took
            // longer than a second, and was reset.)
            var generator = SystemRandomNumberGenerator()
            let garbage = (0..<4096).map { _ in UInt8.random(in: 0...255, using: &generator) }
            // The server may reset the connection while the garbage is still arriving: no matter.
            _ = try? await withDeadline(.seconds(20)) { try await Self.rawExchange(port: server.port, send: garbage) }
            let failure = try #require(try await withDeadline(.seconds(20)) { await server.nextFailure() })
            #expect(
                [.notTLS, .tlsFailure, .tlsNegotiationFailed, .handshakeTimeout].contains(failure.code),
                "\(failure)"
            )
            try await Self.expectStillServing(server)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aClientThatStallsMidHandshakeIsCutOffAtTheHandshakeTimeout() async throws {
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server", handshakeTimeout: .seconds(2)),
            limits: Self.patient,
            onLink: echo
        ) { server in
            // The first bytes of a TLS record header, then nothing: only the server's handshake
            // timer can end this connection (one that sends nothing at all meets the first-bytes
            // deadline, ConnectionLimitTests). The timer runs from the accept: it leaves the
            // client time to write even on a machine slowed by a sanitizer and other tests.
            let reply = try await withDeadline(.seconds(20)) {
                try await Self.rawExchange(port: server.port, send: [0x16, 0x03, 0x01])
            }
            #expect(reply.isEmpty)
            let failure = try await withDeadline(.seconds(20)) { await server.nextFailure() }
            #expect(failure?.code == .handshakeTimeout)
            #expect(
                failure?.message.contains("did not complete the TLS handshake within \(TestTime.scaled(.seconds(2)))")
                    == true,
                "\(String(describing: failure))"
            )
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aLinkToItselfIsRefusedOnBothSides() async throws {
        let identity = PeerIdentity()
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "me", identity: identity),
            onLink: echo
        ) { server in
            let error = try await #require(throws: MultipeerError.self) {
                _ = try await PeerConnection.dial(
                    host: "127.0.0.1",
                    port: server.port,
                    configuration: LinkFixtures.configuration(name: "me", identity: identity)
                )
            }
            #expect(error.code == .selfConnection)
            let failure = try await withDeadline(.seconds(20)) { await server.nextFailure() }
            #expect(failure?.code == .selfConnection)
        }
    }

    /// A peer of version 1 (which cannot prove who it is) or of a later version is refused, and
    /// told what to do.
    @Test(.scaledTimeLimit(minutes: 1))
    func anotherProtocolVersionIsRefusedWithWhatToDo() async throws {
        try await withTestListener(configuration: LinkFixtures.configuration(name: "v2"), onLink: echo) { server in
            for (version, advice) in [(UInt16(1), "upgrade that peer"), (3, "upgrade this peer")] {
                let other = try LinkFixtures.configuration(name: "v\(version)", protocolVersion: version)
                // (This dialler speaks version 2 under its label: it takes the listener's HELLO.)
                if let link = try? await PeerConnection.dial(host: "127.0.0.1", port: server.port, configuration: other)
                {
                    try await link.channel.executeThenClose { _, _ in }
                }
                let failure = try await withDeadline(.seconds(20)) { await server.nextFailure() }
                #expect(failure?.code == .protocolVersionMismatch)
                #expect(
                    failure?.message.contains("the peer speaks protocol version \(version); this side speaks 2") == true
                )
                #expect(failure?.message.contains(advice) == true, "\(String(describing: failure))")
            }
            try await Self.expectStillServing(server)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func anOversizeFrameClosesTheLinkWithAGoodbyeThatSaysWhy() async throws {
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "small", maximumFrameLength: 1024),
            onLink: echo
        ) { server in
            let link = try await PeerConnection.dial(
                host: "127.0.0.1",
                port: server.port,
                configuration: LinkFixtures.configuration(name: "big")
            )
            let goodbye = try await link.channel.executeThenClose { inbound, outbound -> (GoodbyeReason, String)? in
                try await outbound.write(
                    .data(DataMessage(sequence: 0, typeName: "Blob", payload: ByteBuffer(repeating: 7, count: 2048)))
                )
                for try await message in inbound {
                    if case .goodbye(let reason, let text) = message { return (reason, text) }
                }
                return nil
            }
            #expect(goodbye?.0 == .protocolError)
            #expect(
                goodbye?.1.contains("a DATA frame announced 2061 bytes, more than the limit of 1024") == true,
                "\(String(describing: goodbye))"
            )
            try await Self.expectStillServing(server)
        }
    }
}

/// A link that NIO's bootstrap made and then dropped before anyone claimed it (the listener was
/// closed, or the connect cancelled, while the connection was being set up).
@Suite struct UnclaimedLinkTests {
    /// (On an async testing channel: the abandoned link is closed from a task of its own, off
    /// the channel's loop, as on a real link.)
    @Test func aLinkDroppedBeforeItBecomesActiveIsClosedWithoutATrap() async throws {
        let channel = NIOAsyncTestingChannel()
        let configuration = try LinkFixtures.configuration(name: "server")
        try await channel.testingEventLoop.executeInContext {
            // Made and dropped at once, as NIO drops an initializer's output nobody takes.
            _ = try configuration.configure(channel, role: .server)
        }
        // Without the claim, the async channel's writer was released here, unfinished: a trap.
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        #expect(channel.isActive)
        try await channel.close()
        #expect(!channel.isActive)
        // (it and its pipeline hold each other until then)
        _ = try await channel.finish(acceptAlreadyClosed: true)
    }
}
