import Foundation
import Glibc
import MultipeerCore
import MultipeerTestSupport
import NIOCore
import Testing

@testable import MultipeerSession

/// Real TCP over loopback, real GnuTLS, several clients on one listener.
@Suite struct LoopbackLinkTests {
    static let clients = 4
    static let framesPerClient = 2_500  // each way: 10,000 frames in all in each direction
    static let typeName = "Blob"
    static let largestPayload = Frame.defaultMaximumLength - 8 - 1 - typeName.utf8.count

    /// Frame `index` of stream `stream`: mostly small, with one in a hundred at the 1 MiB limit.
    static func payload(stream: Int, index: Int) -> ByteBuffer {
        let sizes = [0, 1, 128, 1024, 4096, 9 * 1024, 64 * 1024]
        let size = index % 100 == 99 ? largestPayload : sizes[(index &* 31 &+ stream) % sizes.count]
        var buffer = ByteBuffer()
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { bytes in
            for offset in 0..<size { bytes[offset] = UInt8(truncatingIfNeeded: offset &* 13 &+ index &+ stream) }
            return size
        }
        return buffer
    }

    /// Sends this side's stream and checks the other's, concurrently; returns frames verified.
    ///
    /// Closing drops writes still queued, so neither side closes before it knows the other has
    /// everything: each sends ACK once it has verified the whole stream, and closes when it has
    /// both verified the peer's stream and seen the peer's ACK (or the peer has closed).
    static func exchange(over link: PeerConnection, send stream: Int, expect peerStream: Int) async throws -> Int {
        try await link.channel.executeThenClose { inbound, outbound in
            try await withThrowingTaskGroup(of: Int.self) { group in
                group.addTask {
                    for index in 0..<framesPerClient {
                        let message = try DataMessage(
                            sequence: UInt64(index),
                            typeName: typeName,
                            payload: payload(stream: stream, index: index)
                        )
                        try await outbound.write(.data(message))
                    }
                    return 0
                }
                group.addTask {
                    var verified = 0
                    var peerHasAll = false
                    for try await message in inbound {
                        switch message {
                        case .data(let data):
                            #expect(data.sequence == UInt64(verified))
                            #expect(data.typeName == typeName)
                            #expect(
                                data.payload == payload(stream: peerStream, index: verified),
                                "frame \(verified) of stream \(peerStream)"
                            )
                            verified += 1
                            if verified == framesPerClient { try await outbound.write(.ack(UInt64(verified))) }
                        case .ack:
                            peerHasAll = true
                        default:
                            break
                        }
                        if verified == framesPerClient && peerHasAll { break }
                    }
                    return verified
                }
                return try await group.reduce(0, +)
            }
        }
    }

    @Test(.scaledTimeLimit(minutes: 3))
    func tenThousandMixedFramesEachWayArriveIntact() async throws {
        let (serverCounts, serverCount) = AsyncStream<Int>.makeStream()
        let serve: @Sendable (PeerConnection) async -> Void = { link in
            // The client's stream number travels in its display name.
            let clientStream = Int(link.remoteHello.displayName)!
            serverCount.yield(
                (try? await Self.exchange(over: link, send: 100 + clientStream, expect: clientStream)) ?? 0
            )
        }
        // Keepalives no loaded machine times out (the suite beside this test stalled a link's loop
        // past the default 1.5 s, twice): this test's subject is the frames, not detection.
        let patient = KeepaliveParameters(interval: .milliseconds(500), timeout: .seconds(30))
        let server = try LinkFixtures.configuration(name: "server", keepalive: patient)
        try await withTestListener(configuration: server, onLink: serve) { server in
            let clientCounts = try await withThrowingTaskGroup(of: Int.self) { group in
                for client in 0..<Self.clients {
                    group.addTask {
                        let link = try await PeerConnection.dial(
                            host: "127.0.0.1",
                            port: server.port,
                            configuration: LinkFixtures.configuration(name: "\(client)", keepalive: patient)
                        )
                        return try await Self.exchange(over: link, send: client, expect: 100 + client)
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(clientCounts == Array(repeating: Self.framesPerClient, count: Self.clients))
            let verifiedByServer = try await withDeadline(.seconds(60)) {
                await serverCounts.prefix(Self.clients).reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(verifiedByServer == Array(repeating: Self.framesPerClient, count: Self.clients))
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func bothSidesLearnEachOthersHello() async throws {
        let serverIdentity = PeerIdentity()
        let serverID = serverIdentity.peerID
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "Captain", identity: serverIdentity),
            onLink: echo
        ) { server in
            let configuration = try LinkFixtures.configuration(name: "First Officer")
            let link = try await PeerConnection.dial(host: "127.0.0.1", port: server.port, configuration: configuration)
            #expect(link.remoteHello.peerID == serverID)
            #expect(link.remoteHello.key == serverIdentity.key, "the key that proves it")
            #expect(link.remoteHello.displayName == "Captain")
            #expect(try await roundTrip("waypoint ALPHA", over: link) == "waypoint ALPHA")
        }
    }

    /// TCP_NODELAY, TCP_USER_TIMEOUT, TCP_NOTSENT_LOWAT (a fragment's length) and TCP_RTO_MAX_MS
    /// (1 s, where the kernel has it) on both ends; and the keepalive's reading of TCP_INFO finds
    /// the fields where Linux puts them.
    @Test(.scaledTimeLimit(minutes: 1))
    func linksSetTheirTCPOptions() async throws {
        var serverConfiguration = try LinkFixtures.configuration(name: "server")
        serverConfiguration.tcpUserTimeout = .milliseconds(1500)
        var clientConfiguration = try LinkFixtures.configuration(name: "client")
        clientConfiguration.tcpUserTimeout = .milliseconds(1500)
        let (accepted, acceptedLink) = AsyncStream<(SocketOptionValue, SocketOptionValue, SocketOptionValue)>
            .makeStream()
        let serve: @Sendable (PeerConnection) async -> Void = { link in
            let channel = link.channel.channel
            if let noDelay = try? await channel.getOption(.tcpOption(.tcp_nodelay)).get(),
                let userTimeout = try? await channel.getOption(
                    .tcpOption(NIOBSDSocket.Option(rawValue: TCP_USER_TIMEOUT))
                ).get(),
                let unsent = try? await channel.getOption(LinkConfiguration.unsentBytesLowWater).get()
            {
                acceptedLink.yield((noDelay, userTimeout, unsent))
            }
            await echo(link)
        }
        try await withTestListener(configuration: serverConfiguration, onLink: serve) { server in
            let link = try await PeerConnection.dial(
                host: "127.0.0.1",
                port: server.port,
                configuration: clientConfiguration
            )
            let channel = link.channel.channel
            #expect(try await channel.getOption(.tcpOption(.tcp_nodelay)).get() != 0)
            #expect(
                try await channel.getOption(.tcpOption(NIOBSDSocket.Option(rawValue: TCP_USER_TIMEOUT))).get() == 1500
            )
            #expect(
                try await channel.getOption(LinkConfiguration.unsentBytesLowWater).get()
                    == SocketOptionValue(DataMessage.fragmentLength)
            )
            if let rtoMax = try? await channel.getOption(LinkConfiguration.maximumRetransmissionTimeout).get() {
                #expect(rtoMax == 1_000)
            }
            let reading = try await channel.eventLoop.submit {
                (channel as? any SocketOptionProvider)?.transportReading()
            }.get()
            // Just heard from (the handshake); loopback never reorders (it may retransmit: a
            // tail loss probe on a slow machine).
            #expect(reading?.sinceHeard ?? .seconds(60) < .seconds(5))
            #expect(reading?.sinceDataArrived ?? .seconds(60) < .seconds(5), "the HELLO was data")
            #expect(reading?.outOfOrderSegments == 0)
            var iterator = accepted.makeAsyncIterator()
            let serverSide = await iterator.next()
            #expect(serverSide?.0 != 0)
            #expect(serverSide?.1 == 1500)
            #expect(serverSide?.2 == SocketOptionValue(DataMessage.fragmentLength))
            #expect(try await roundTrip("options", over: link) == "options")
        }
    }

    /// A reader that falls behind for longer than the keepalive timeout keeps its link: its
    /// channel stops reading, and the silence that follows is this side's doing, not the peer's.
    @Test(.scaledTimeLimit(minutes: 2))
    func aReaderBehindForLongerThanTheKeepaliveTimeoutKeepsItsLink() async throws {
        let frames = 256  // 16 MiB: more than the sockets and the channel buffer between them
        // A timeout no loaded machine's stalls reach (the suite beside this test stalled a link's
        // loop past the default 1.5 s, and the writer took the reader's silence for a dead link):
        // this test's subject is the reader's own silence, three timeouts long.
        let keepalive = KeepaliveParameters.scaled(KeepaliveParameters(interval: .seconds(1), timeout: .seconds(4)))
        let behind = keepalive.timeout * 3
        let (counts, count) = AsyncStream<Int>.makeStream()
        let slowReader: @Sendable (PeerConnection) async -> Void = { link in
            let received = try? await link.channel.executeThenClose { inbound, _ in
                // The reader being behind is what is tested: it sleeps.
                try await Task.sleep(for: behind)
                var received = 0
                for try await message in inbound {
                    guard case .data = message else { continue }
                    received += 1
                    if received == frames { break }
                }
                return received
            }
            count.yield(received ?? -1)
        }
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server", keepalive: keepalive),
            onLink: slowReader
        ) { server in
            let link = try await PeerConnection.dial(
                host: "127.0.0.1",
                port: server.port,
                configuration: LinkFixtures.configuration(name: "client", keepalive: keepalive)
            )
            try await link.channel.executeThenClose { _, outbound in
                let payload = ByteBuffer(repeating: 0x5A, count: 64 * 1024)
                for index in 0..<frames {
                    try await outbound.write(
                        .data(DataMessage(sequence: UInt64(index), typeName: Self.typeName, payload: payload))
                    )
                }
                var iterator = counts.makeAsyncIterator()
                #expect(await iterator.next() == frames, "every frame read once the reader caught up, on the same link")
            }
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aListenerOnAllInterfacesAcceptsIPv4AndIPv6() async throws {
        try await withTestListener(host: nil, configuration: LinkFixtures.configuration(name: "any"), onLink: echo) {
            server in
            for host in ["127.0.0.1", "::1"] {
                let link = try await PeerConnection.dial(
                    host: host,
                    port: server.port,
                    configuration: LinkFixtures.configuration(name: host)
                )
                #expect(try await roundTrip(host, over: link) == host)
            }
        }
    }
}
