import MultipeerSession
import Testing

/// Byte streams between two sessions, through the public API: bytes both ways in order with
/// each side's end, a cancel from either side told to the other after what arrived before it,
/// and the refusals a caller meets at once.
@Suite struct StreamTests {
    /// `count` bytes that differ from one to the next, from `seed`.
    static func bytes(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11 &+ Int(seed)) }
    }

    /// The next stream a peer opens to `session`.
    static func accept(on session: MultipeerSession) async throws -> PeerStream {
        try #require(await within(30, "a stream to arrive") { await session.incomingStreams.first { _ in true } })
    }

    /// The next bytes `stream` brings (its iterators all read the same stream).
    static func next(of stream: PeerStream) async throws -> [UInt8]? {
        var reading = stream.makeAsyncIterator()
        return try await reading.next()
    }

    /// Everything `stream` brings until the peer's end.
    static func readAll(_ stream: PeerStream) async throws -> [UInt8] {
        var all: [UInt8] = []
        for try await bytes in stream { all += bytes }
        return all
    }

    @Test func bytesGoBothWaysInOrderEachWithItsEnd() async throws {
        try await withPair { listener, dialler in
            let log = Self.bytes(3 << 20, seed: 1)
            let reply = Self.bytes(70_000, seed: 2)
            let stream = try dialler.openStream(named: "cockpit log", to: listener.peerID)
            #expect(stream.openedHere && stream.peerID == listener.peerID && stream.name == "cockpit log")
            // 3 MiB is twelve windows: the writer goes on only as the reader reads.
            let writer = Task {
                var offset = 0
                while offset < log.count {
                    let next = min(offset + 100_000, log.count)
                    try await stream.write(log[offset..<next])
                    offset = next
                }
                try await stream.finish()
            }
            let accepted = try await Self.accept(on: listener)
            #expect(
                accepted.id == stream.id && accepted.name == "cockpit log" && accepted.peerID == dialler.peerID
                    && !accepted.openedHere
            )
            try await accepted.write(reply)
            try await accepted.finish()
            let received = try await within(60, "the log") { try await Self.readAll(accepted) }
            try await within(60, "the writer to finish") { try await writer.value }
            #expect(received == log)
            let replied = try await within(60, "the reply") { try await Self.readAll(stream) }
            #expect(replied == reply)
            // Nothing is written after the end.
            let late = try await #require(throws: MultipeerError.self) { try await stream.write([1]) }
            #expect(late.code == .invalidArgument)
        }
    }

    @Test func aCancelReachesThePeerAfterTheBytesSentBeforeIt() async throws {
        try await withPair { listener, dialler in
            let stream = try dialler.openStream(named: "audio", to: listener.peerID)
            try await stream.write(Self.bytes(1_000, seed: 3))
            let accepted = try await Self.accept(on: listener)
            let first = try #require(try await within(30, "the first bytes") { try await Self.next(of: accepted) })
            #expect(first == Self.bytes(1_000, seed: 3))
            accepted.cancel()
            // The opener's writes and reads fail, saying the peer cancelled.
            let error = try await within(30, "the opener to hear of the cancel") {
                try await #require(throws: MultipeerError.self) { for try await _ in stream {} }
            }
            #expect(error.code == .streamCancelled && error.message.contains("the peer cancelled"))
            let writing = try await #require(throws: MultipeerError.self) { try await stream.write([1]) }
            #expect(writing.code == .streamCancelled)
            let reader = try await #require(throws: MultipeerError.self) { _ = try await Self.next(of: accepted) }
            #expect(reader.code == .streamCancelled && reader.message.contains("this side cancelled"))
        }
    }

    @Test func aStreamToAPeerNeverMetOrWithABadNameIsRefusedAtOnce() async throws {
        try await withPair { listener, dialler in
            let stranger = try #require(throws: MultipeerError.self) {
                _ = try dialler.openStream(named: "log", to: PeerIdentity().peerID)
            }
            #expect(stranger.code == .peerNotActive)
            let unnamed = try #require(throws: MultipeerError.self) {
                _ = try dialler.openStream(named: "", to: listener.peerID)
            }
            #expect(unnamed.code == .invalidArgument)
        }
    }

    @Test func aWriterWaitingForRoomIsCancelledWithItsTask() async throws {
        try await withPair { listener, dialler in
            let stream = try dialler.openStream(named: "unread", to: listener.peerID)
            // Nobody reads: 2 MiB cannot all be taken, and the write waits until its task is cancelled.
            let writer = Task { try await stream.write(Self.bytes(2 << 20, seed: 4)) }
            let accepted = try await Self.accept(on: listener)
            writer.cancel()
            await #expect(throws: CancellationError.self) { try await writer.value }
            // The stream goes on: what was taken arrives, and the reader can read it.
            let first = try await within(30, "the first bytes") { try await Self.next(of: accepted) }
            #expect(first?.isEmpty == false)
        }
    }

    @Test func aStreamItsApplicationLetsGoOfIsCancelled() async throws {
        try await withPair { listener, dialler in
            var stream: PeerStream? = try dialler.openStream(named: "forgotten", to: listener.peerID)
            try await stream?.write([1, 2, 3])
            let accepted = try await Self.accept(on: listener)
            stream = nil
            let error = try await within(30, "the cancel") {
                try await #require(throws: MultipeerError.self) { _ = try await Self.readAll(accepted) }
            }
            #expect(error.code == .streamCancelled && error.message.contains("let go"), "\(error.message)")
        }
    }
}
