import MultipeerCore
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerTLS

/// The handler over two EmbeddedChannels, bytes moved between them by hand.
@Suite struct TLSHandlerTests {
    final class Pair {
        let client = EmbeddedChannel()
        let server = EmbeddedChannel()
        let clientEvents = EventRecorder()
        let serverEvents = EventRecorder()

        init(clientKey: PreSharedKey = EnginePairTests.key, serverKey: PreSharedKey = EnginePairTests.key) throws {
            try client.pipeline.syncOperations.addHandler(
                TLSHandler(
                    engine: TLSEngine(
                        role: .client,
                        context: TLSContext(configuration: TLSConfiguration(psk: clientKey))
                    )
                )
            )
            try server.pipeline.syncOperations.addHandler(
                TLSHandler(
                    engine: TLSEngine(
                        role: .server,
                        context: TLSContext(configuration: TLSConfiguration(psk: serverKey))
                    )
                )
            )
            try client.pipeline.syncOperations.addHandler(clientEvents)
            try server.pipeline.syncOperations.addHandler(serverEvents)
        }

        deinit {
            // An EmbeddedChannel and its pipeline hold each other until it is finished.
            _ = try? client.finish(acceptAlreadyClosed: true)
            _ = try? server.finish(acceptAlreadyClosed: true)
        }

        func activate() throws {
            try server.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            try client.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 2)).wait()
        }

        /// Moves ciphertext both ways, running each loop's pending tasks, until nothing moves.
        /// Returns how many ciphertext buffers the client wrote.
        @discardableResult
        func shuttle() throws -> Int {
            var clientWrites = 0
            for _ in 0..<20 {
                client.embeddedEventLoop.run()
                server.embeddedEventLoop.run()
                var moved = false
                while let bytes = try client.readOutbound(as: ByteBuffer.self) {
                    clientWrites += 1
                    try server.writeInbound(bytes)
                    moved = true
                }
                while let bytes = try server.readOutbound(as: ByteBuffer.self) {
                    try client.writeInbound(bytes)
                    moved = true
                }
                if !moved { break }
            }
            return clientWrites
        }
    }

    /// Records what reaches the end of a pipeline.
    final class EventRecorder: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        var handshakes: [TLSHandshakeCompleted] = []
        var errors: [any Error] = []
        var received = ByteBuffer()

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var bytes = unwrapInboundIn(data)
            received.writeBuffer(&bytes)
        }
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let event = event as? TLSHandshakeCompleted { handshakes.append(event) }
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { errors.append(error) }
    }

    @Test func writesMadeBeforeTheHandshakeArriveAfterIt() throws {
        let pair = try Pair()
        let written = pair.client.write(ByteBuffer(string: "early "))
        pair.client.writeAndFlush(ByteBuffer(string: "bird"), promise: nil)
        try pair.activate()
        try pair.shuttle()
        #expect(pair.clientEvents.handshakes.first?.negotiated == "TLS1.3 ECDHE-PSK X25519 AES-128-GCM")
        #expect(pair.serverEvents.handshakes.count == 1)
        #expect(String(buffer: pair.serverEvents.received) == "early bird")
        try written.wait()
    }

    @Test func smallWritesInOneTickShareOneCiphertextWrite() throws {
        let pair = try Pair()
        try pair.activate()
        try pair.shuttle()
        var promises: [EventLoopFuture<Void>] = []
        for index in 0..<50 {
            promises.append(pair.client.writeAndFlush(ByteBuffer(string: "message \(index);")))
        }
        #expect(try pair.shuttle() == 1, "fifty flushes in one tick are encrypted and written together")
        #expect(String(buffer: pair.serverEvents.received) == (0..<50).map { "message \($0);" }.joined())
        for promise in promises { try promise.wait() }
    }

    @Test func aFullRecordIsEncryptedAtOnceSoBackpressureSeesIt() throws {
        let pair = try Pair()
        try pair.activate()
        try pair.shuttle()
        pair.client.writeAndFlush(ByteBuffer(repeating: 1, count: TLSEngine.maximumRecordPlaintext), promise: nil)
        // No event-loop tick has run, yet the ciphertext is already in the channel.
        #expect(try pair.client.readOutbound(as: ByteBuffer.self) != nil)
    }

    /// A write of a record's worth or more is encrypted as it is, after the small writes before
    /// it and before those after it, and its promise completes.
    @Test func aLargeWriteBetweenSmallOnesKeepsItsPlace() throws {
        let pair = try Pair()
        try pair.activate()
        try pair.shuttle()
        let large = ByteBuffer(repeating: 0x4C, count: 3 * TLSEngine.maximumRecordPlaintext + 7)
        pair.client.write(ByteBuffer(string: "before;"), promise: nil)
        let written = pair.client.write(large)
        pair.client.writeAndFlush(ByteBuffer(string: ";after"), promise: nil)
        try pair.shuttle()
        var expected = ByteBuffer(string: "before;")
        expected.writeImmutableBuffer(large)
        expected.writeString(";after")
        #expect(pair.serverEvents.received == expected)
        try written.wait()
    }

    @Test func aWrongKeyFiresTheErrorAndClosesBothSides() throws {
        let pair = try Pair(clientKey: PreSharedKey(identity: "navlog", key: Array(1..<33)))
        try pair.activate()
        try pair.shuttle()
        #expect((pair.serverEvents.errors.first as? MultipeerError)?.code == .authenticationFailed)
        #expect((pair.clientEvents.errors.first as? MultipeerError)?.code == .authenticationFailed)
        #expect(!pair.server.isActive)
        #expect(!pair.client.isActive)
    }

    @Test func closingSendsCloseNotifyAndThePeerCloses() throws {
        let pair = try Pair()
        try pair.activate()
        try pair.shuttle()
        pair.client.writeAndFlush(ByteBuffer(string: "last words"), promise: nil)
        pair.client.close(promise: nil)
        try pair.shuttle()
        #expect(String(buffer: pair.serverEvents.received) == "last words")
        #expect(!pair.server.isActive, "close_notify closes the server side too")
        #expect(pair.serverEvents.errors.isEmpty, "an orderly close: \(pair.serverEvents.errors)")
        #expect(pair.clientEvents.errors.isEmpty, "\(pair.clientEvents.errors)")
    }

    /// The connection ends (the socket reads EOF) after half a record and no close_notify: the
    /// handler fires `uncleanShutdown` before the channel goes inactive.
    @Test func anEndInTheMiddleOfARecordFiresUncleanShutdown() throws {
        let pair = try Pair()
        try pair.activate()
        try pair.shuttle()
        pair.client.writeAndFlush(ByteBuffer(string: "cut short"), promise: nil)
        pair.client.embeddedEventLoop.run()
        let record = try #require(try pair.client.readOutbound(as: ByteBuffer.self))
        try pair.server.writeInbound(record.getSlice(at: record.readerIndex, length: record.readableBytes / 2)!)
        pair.server.pipeline.fireChannelInactive()
        #expect(pair.serverEvents.received.readableBytes == 0)
        #expect(
            (pair.serverEvents.errors.first as? MultipeerError)?.code == .uncleanShutdown,
            "\(pair.serverEvents.errors)"
        )
    }
}
