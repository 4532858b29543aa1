import Foundation
import MultipeerCore
import NIOCore
import NIOFoundationCompat
import Testing

/// The payload allocator: large buffers are kept for the next one, within its bounds; every
/// buffer keeps its bytes through growth. (Serialized: the spares are the process's.)
@Suite(.serialized) struct PayloadMemoryTests {
    /// Where a buffer's storage begins.
    static func address(of buffer: ByteBuffer) -> UInt {
        buffer.withVeryUnsafeBytes { UInt(bitPattern: $0.baseAddress) }
    }

    /// Bytes counting up from `first` (mod 256), `count` of them.
    static func counting(_ count: Int, from first: UInt8 = 0) -> [UInt8] {
        let block = (0..<256).map { UInt8(truncatingIfNeeded: Int(first) + $0) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 256)
        while bytes.count < count { bytes.append(contentsOf: block) }  // (whole blocks: fast in a debug build)
        bytes.removeLast(bytes.count - count)
        return bytes
    }

    /// A buffer of the payload allocator holding `counting(count, from: first)`.
    static func filled(_ count: Int, from first: UInt8 = 0) -> ByteBuffer {
        var buffer = PayloadMemory.allocator.buffer(capacity: 16)
        buffer.writeBytes(counting(count, from: first))
        return buffer
    }

    @Test func bytesSurviveGrowthFromSmallToLargeAndBeyond() {
        var buffer = PayloadMemory.allocator.buffer(capacity: 16)
        var expected: [UInt8] = []
        // Small (malloc) to 1 MiB and more (a mapping), then a mapping grown into a larger one.
        for size in [100, 70_000, 1 << 20, 3 << 20, 9 << 20] {
            let more = Self.counting(size - expected.count, from: UInt8(truncatingIfNeeded: size))
            buffer.writeBytes(more)
            expected += more
        }
        #expect(buffer.readableBytes == expected.count)
        #expect(buffer.getBytes(at: 0, length: buffer.readableBytes) == expected)
    }

    @Test func aReleasedLargeBufferIsUsedForTheNextAndAnOddSizeIsNot() {
        PayloadMemory.releaseSpares()
        var first: ByteBuffer? = Self.filled(6 << 20)
        let address = Self.address(of: first!)
        first = nil
        #expect(PayloadMemory.spares.count == 1, "kept, not unmapped")
        // Far smaller: a buffer an application may keep never holds a mapping four times its size.
        let small = PayloadMemory.allocator.buffer(capacity: 2 << 20)
        #expect(Self.address(of: small) != address)
        #expect(PayloadMemory.spares.count == 1)
        // Of about the same size: the spare, whose old bytes are overwritten as any buffer's are.
        let second = Self.filled(6 << 20 + 100, from: 3)
        #expect(Self.address(of: second) == address)
        #expect(PayloadMemory.spares.count == 0)
        #expect(second.getBytes(at: 0, length: second.readableBytes) == Self.counting(6 << 20 + 100, from: 3))
    }

    @Test func theSparesKeptAreBounded() {
        PayloadMemory.releaseSpares()
        var buffers = (0..<(PayloadMemory.spareLimit + 3)).map { Self.filled((2 << 20) + $0) }
        buffers.removeAll()
        #expect(PayloadMemory.spares.count == PayloadMemory.spareLimit)
        #expect(PayloadMemory.spares.bytes <= PayloadMemory.spareBytesLimit)
        PayloadMemory.releaseSpares()
        #expect(PayloadMemory.spares.count == 0)
    }

    /// A made-up spare (the pool never touches its memory) of `megabytes`, used at `used`.
    static func spare(_ number: Int, megabytes: Int, used: ContinuousClock.Instant) -> PayloadMemory.Spare {
        PayloadMemory.Spare(
            base: UnsafeMutableRawPointer(bitPattern: number << 12)!,
            length: megabytes << 20,
            used: used
        )
    }

    /// A flow that needs a fourth buffer only now and then keeps it: the spares that could have
    /// served a buffer taken count as used then, and only a spare no buffer could use for the
    /// lifetime goes.
    @Test func aSpareThatCouldHaveServedAFlowStaysWithIt() {
        let start = ContinuousClock.now
        let lifetime = PayloadMemory.spareLifetime
        var pool = PayloadMemory.Pool()
        #expect(pool.keep(Self.spare(1, megabytes: 130, used: start)).isEmpty)
        #expect(pool.keep(Self.spare(2, megabytes: 130, used: start)).isEmpty)
        #expect(pool.keep(Self.spare(3, megabytes: 4, used: start)).isEmpty)
        // The flow of 64 MiB messages (130 MiB mappings) takes one and gives it back, again and
        // again; the other 130 MiB spare waits for a peak.
        var now = start
        for _ in 0..<4 {
            now += lifetime * 0.6
            let taken = pool.take(length: 130 << 20, now: now)
            #expect(taken != nil)
            #expect(
                pool.keep(PayloadMemory.Spare(base: taken!.base, length: taken!.length, used: now)).allSatisfy {
                    $0.length == 4 << 20
                }
            )
        }
        #expect(
            pool.spares.map(\.length).sorted() == [130 << 20, 130 << 20],
            "the 4 MiB spare, which no 64 MiB buffer could use, went"
        )
        // The flow stops: after a lifetime, both go.
        #expect(pool.expired(now: now + lifetime * 1.1).count == 2)
        #expect(pool.spares.isEmpty)
    }

    @Test func theOldestSparesGoBeyondTheBounds() {
        let now = ContinuousClock.now
        var pool = PayloadMemory.Pool()
        for number in 1...PayloadMemory.spareLimit {
            #expect(pool.keep(Self.spare(number, megabytes: 8, used: now)).isEmpty)
        }
        #expect(
            pool.keep(Self.spare(99, megabytes: 8, used: now)).map(\.base) == [
                Self.spare(1, megabytes: 8, used: now).base
            ]
        )
        // Bytes: one spare of the whole bound pushes out all the others.
        let unmapped = pool.keep(Self.spare(100, megabytes: PayloadMemory.spareBytesLimit >> 20, used: now))
        #expect(unmapped.count == PayloadMemory.spareLimit)
        #expect(pool.spares.count == 1)
    }

    /// A Data decoded from a payload shares its storage; the mapping is kept only once the Data
    /// is gone too.
    @Test func aDataSharingALargeBufferKeepsItUntilReleased() {
        PayloadMemory.releaseSpares()
        var payload: ByteBuffer? = Self.filled(5 << 20, from: 9)
        var data: Data? = Data(buffer: payload!, byteTransferStrategy: .noCopy)
        payload = nil
        #expect(PayloadMemory.spares.count == 0, "still the Data's")
        #expect(data![5 << 20 - 1] == UInt8(truncatingIfNeeded: 9 + (5 << 20) - 1))
        data = nil
        #expect(PayloadMemory.spares.count == 1)
    }

    /// A fragment of a large payload is a view of its bytes: NIO copies a slice that begins
    /// 16 MiB or more into its storage, so fragments used to be copies from there on.
    @Test func fragmentsOfALargePayloadShareItsBytes() throws {
        let payload = Self.filled(20 << 20)
        let message = try DataMessage(sequence: 1, typeName: "chart", payload: payload)
        let base = payload.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
        let fragments = message.fragments(frameLimit: 1 << 20)
        #expect(fragments.count == 80)
        var joined = ByteBuffer()
        for fragment in fragments {
            #expect(
                fragment.bytes.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) } == base
                    + UInt(fragment.offset)
            )
            joined.writeImmutableBuffer(fragment.bytes)
        }
        #expect(joined == payload)
    }
}
