import MultipeerCore
import NIOCore
import Testing

@testable import MultipeerSession

/// A stream's bound counts the memory its waiting messages keep alive: each message is a slice
/// of the buffer its link read it into, and keeps all of it.
@Suite struct StreamBufferTests {
    /// A 64-byte slice of a fresh 16 KiB buffer: a small message that came in a read of its own.
    static func sliceOfItsOwnRead() -> ByteBuffer {
        var read = ByteBuffer(repeating: 0x42, count: 16 << 10)
        return read.readSlice(length: 64)!
    }

    static func buffer() -> StreamBuffer<ByteBuffer> {
        StreamBuffer(limits: BufferLimits(maximumCount: 1_024, maximumBytes: 64 << 10), onTermination: {})
    }

    static func offer(
        _ payload: ByteBuffer,
        to buffer: StreamBuffer<ByteBuffer>,
        whenRoom: @escaping @Sendable () -> Void = {}
    ) -> StreamOffer {
        buffer.offer(payload, cost: payload.readableBytes, storage: PayloadStorage(of: payload), whenRoom: whenRoom)
    }

    /// 64-byte messages from reads of their own fill a 64 KiB bound at four (four 16 KiB reads
    /// kept alive), not at a thousand (it counted 64 bytes each, and 1,024 of them kept 16 MiB).
    @Test func smallMessagesOfSeparateReadsFillTheBoundByTheirReads() async {
        let buffer = Self.buffer()
        let offers = (0..<4).map { _ in Self.offer(Self.sliceOfItsOwnRead(), to: buffer) }
        #expect(offers == [.taken, .taken, .taken, .full])
        // Taking them down to half (the first, then a batch of the rest) makes room again.
        _ = await buffer.next()
        _ = await buffer.next()
        _ = await buffer.next()
        _ = await buffer.next()
        #expect(Self.offer(Self.sliceOfItsOwnRead(), to: buffer) == .taken, "what was handed out no longer counts")
    }

    /// Many messages of one read count that read once.
    @Test func messagesOfOneReadCountItOnce() {
        let buffer = Self.buffer()
        var read = ByteBuffer(repeating: 0x42, count: 16 << 10)
        let offers = (0..<200).map { _ in Self.offer(read.readSlice(length: 64)!, to: buffer) }
        #expect(offers.allSatisfy { $0 == .taken }, "16 KiB kept alive, under the 64 KiB bound")
    }
}
