import MultipeerCore
import NIOCore
import Testing

@testable import MultipeerTLS

/// A client and a server engine wired back to back in memory.
final class EnginePair {
    let client: TLSEngine
    let server: TLSEngine

    init(clientKey: PreSharedKey, serverKey: PreSharedKey) throws {
        client = try TLSEngine(role: .client, context: TLSContext(configuration: TLSConfiguration(psk: clientKey)))
        server = try TLSEngine(role: .server, context: TLSContext(configuration: TLSConfiguration(psk: serverKey)))
        client.peerDescription = "server"
        server.peerDescription = "client"
    }

    /// Moves bytes until neither side has anything more to say; returns both results.
    func handshake() -> (client: TLSEngine.HandshakeResult, server: TLSEngine.HandshakeResult) {
        var results = (client: client.handshake(), server: server.handshake())
        for _ in 0..<20 {
            var moved = false
            if let bytes = client.takeOutbound() {
                server.receive(bytes)
                moved = true
            }
            results.server = server.handshake()
            if let bytes = server.takeOutbound() {
                client.receive(bytes)
                moved = true
            }
            results.client = client.handshake()
            if !moved { break }
        }
        return results
    }

    static func send(_ text: String, from sender: TLSEngine, to receiver: TLSEngine) throws -> String {
        try sender.write(ByteBuffer(string: text))
        var plaintext = ByteBuffer()
        receiver.receive(sender.takeOutbound()!)
        #expect(try receiver.read(into: &plaintext) == .needMoreCiphertext)
        return String(buffer: plaintext)
    }
}

@Suite struct EnginePairTests {
    static let key = try! PreSharedKey(identity: "navlog", key: Array(0..<32))

    @Test func theRightKeyCompletesWithTLS13ECDHEPSKAndAES128GCM() throws {
        let pair = try EnginePair(clientKey: Self.key, serverKey: Self.key)
        let results = pair.handshake()
        #expect(results.client == .complete)
        #expect(results.server == .complete)
        for engine in [pair.client, pair.server] {
            #expect(engine.negotiated.version == "TLS1.3")
            #expect(engine.negotiated.keyExchange == "ECDHE-PSK")
            #expect(engine.negotiated.group == "X25519")
            #expect(engine.negotiated.cipher == "AES-128-GCM")
        }
        #expect(try EnginePair.send("ping", from: pair.client, to: pair.server) == "ping")
        #expect(try EnginePair.send("pong", from: pair.server, to: pair.client) == "pong")
    }

    @Test func largeWritesAreSplitIntoRecordsAndReassembled() throws {
        let pair = try EnginePair(clientKey: Self.key, serverKey: Self.key)
        #expect(pair.handshake().client == .complete)
        let text = String(repeating: "0123456789", count: 100_000)
        #expect(try EnginePair.send(text, from: pair.client, to: pair.server) == text)
    }

    @Test func aWrongKeyFailsOnBothSidesAsAnAuthenticationError() throws {
        let other = try PreSharedKey(identity: "navlog", key: Array(1..<33))
        let pair = try EnginePair(clientKey: other, serverKey: Self.key)
        let results = pair.handshake()
        guard case .failed(let serverError) = results.server, case .failed(let clientError) = results.client else {
            Issue.record("expected both sides to fail, got \(results)")
            return
        }
        #expect(serverError.code == .authenticationFailed)
        #expect(serverError.message == "client failed PSK authentication: keys differ")
        #expect(clientError.code == .authenticationFailed)
        #expect(clientError.message == "server refused PSK authentication: keys differ")
    }

    @Test func anUnknownIdentityLooksLikeAWrongKeyToTheClient() throws {
        let stranger = try PreSharedKey(identity: "intruder", key: Array(0..<32))
        let pair = try EnginePair(clientKey: stranger, serverKey: Self.key)
        let results = pair.handshake()
        let wrongKey = try EnginePair(
            clientKey: PreSharedKey(identity: "navlog", key: Array(1..<33)),
            serverKey: Self.key
        ).handshake()
        #expect(results.client == wrongKey.client, "the client must not learn that the identity is unknown")
        guard case .failed(let serverError) = results.server else {
            Issue.record("expected the server to fail, got \(results.server)")
            return
        }
        #expect(serverError.code == .authenticationFailed)
        #expect(serverError.message.contains("\"intruder\""))
    }

    @Test func aCorruptedRecordFailsToDecrypt() throws {
        let pair = try EnginePair(clientKey: Self.key, serverKey: Self.key)
        #expect(pair.handshake().server == .complete)
        try pair.client.write(ByteBuffer(string: "fuel 12.4 t"))
        var record = pair.client.takeOutbound()!
        let last = record.writerIndex - 1
        record.setInteger(record.getInteger(at: last, as: UInt8.self)! ^ 0x01, at: last)
        pair.server.receive(record)
        var plaintext = ByteBuffer()
        let error = try #require(throws: MultipeerError.self) { try pair.server.read(into: &plaintext) }
        #expect(error.code == .corruptedRecord)
        #expect(plaintext.readableBytes == 0)
    }

    @Test func closeNotifyIsReportedAsClosed() throws {
        let pair = try EnginePair(clientKey: Self.key, serverKey: Self.key)
        #expect(pair.handshake().server == .complete)
        pair.client.shutdown()
        pair.server.receive(pair.client.takeOutbound()!)
        var plaintext = ByteBuffer()
        #expect(try pair.server.read(into: &plaintext) == .closed)
    }

    /// The stream ending without a close_notify is a truncation, whether it ends between records
    /// or in the middle of one; after a close_notify it is an orderly close.
    @Test func anEndWithoutCloseNotifyIsAnUncleanShutdown() throws {
        for cut in [false, true] {
            let pair = try EnginePair(clientKey: Self.key, serverKey: Self.key)
            #expect(pair.handshake().server == .complete)
            try pair.client.write(ByteBuffer(string: "last words"))
            var record = pair.client.takeOutbound()!
            if cut { record = record.getSlice(at: record.readerIndex, length: record.readableBytes / 2)! }
            pair.server.receive(record)
            var plaintext = ByteBuffer()
            #expect(try pair.server.read(into: &plaintext) == .needMoreCiphertext)
            #expect(String(buffer: plaintext) == (cut ? "" : "last words"))
            pair.server.receiveEOF()
            let error = try #require(throws: MultipeerError.self) { try pair.server.read(into: &plaintext) }
            #expect(error.code == .uncleanShutdown, "\(error)")
            #expect(error.message.contains("in the middle of a record") == cut, "\(error)")
        }
        let pair = try EnginePair(clientKey: Self.key, serverKey: Self.key)
        #expect(pair.handshake().server == .complete)
        pair.client.shutdown()
        pair.server.receive(pair.client.takeOutbound()!)
        pair.server.receiveEOF()
        var plaintext = ByteBuffer()
        #expect(try pair.server.read(into: &plaintext) == .closed)
    }

    @Test func plaintextIsRecognisedAsNotTLS() throws {
        let server = try TLSEngine(role: .server, context: TLSContext(configuration: TLSConfiguration(psk: Self.key)))
        server.peerDescription = "peer at 127.0.0.1:50412"
        server.receive(ByteBuffer(string: "GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
        guard case .failed(let error) = server.handshake() else {
            Issue.record("expected failure")
            return
        }
        #expect(error.code == .notTLS)
        #expect(
            error.message.hasPrefix(
                "peer at 127.0.0.1:50412 sent data that is not TLS (it starts with \"GET / HTTP/1.1"
            )
        )
    }
}
