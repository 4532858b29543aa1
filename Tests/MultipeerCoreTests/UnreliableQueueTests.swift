import MultipeerCore
import NIOCore
import Testing

/// The unreliable messages waiting for a link: bounded, handed out in batches, one message in
/// fragments at a time with the others passing between its fragments.
@Suite struct UnreliableQueueTests {
    static func message(_ typeName: String, bytes: Int, fill: UInt8 = 1) -> DataMessage {
        try! DataMessage(sequence: 0, typeName: typeName, payload: ByteBuffer(repeating: fill, count: bytes))
    }

    @Test func itHoldsItsBoundOrOneLargerMessage() {
        var queue = UnreliableQueue(limits: BufferLimits(maximumCount: 3, maximumBytes: 100))
        #expect(queue.hasRoom(for: 1_000), "an empty queue takes any message")
        queue.enqueue(Self.message("T", bytes: 1_000))
        #expect(!queue.hasRoom(for: 1), "beyond its bytes")
        _ = queue.nextFrames(frameLimit: 1 << 20, fragments: true)
        #expect(queue.isEmpty && queue.bytes == 0)
        for _ in 0..<3 { queue.enqueue(Self.message("T", bytes: 10)) }
        #expect(!queue.hasRoom(for: 1), "beyond its count")
        #expect(queue.count == 3 && queue.bytes == 30)
    }

    /// A message in fragments goes one fragment a batch; the messages after it go between its
    /// fragments, up to one of its type name or another in fragments, which waits for its end.
    @Test func smallMessagesPassBetweenTheFragmentsOfALargeOne() {
        var queue = UnreliableQueue(limits: BufferLimits(maximumCount: 16, maximumBytes: 16 << 20))
        let large = 2 * DataMessage.fragmentLength + 10
        queue.enqueue(Self.message("Chart", bytes: large))
        queue.enqueue(Self.message("Fix", bytes: 10))
        queue.enqueue(Self.message("Chart", bytes: 10))  // the same type: after the first Chart
        var frames = queue.nextFrames(frameLimit: 1 << 20, fragments: true)
        #expect(frames.map(\.frameType) == [.fragment, .data], "the first fragment, then Fix")
        #expect(queue.count == 2, "the Chart in fragments and the small Chart")
        frames = queue.nextFrames(frameLimit: 1 << 20, fragments: true)
        #expect(frames.map(\.frameType) == [.fragment])
        frames = queue.nextFrames(frameLimit: 1 << 20, fragments: true)
        #expect(frames.map(\.frameType) == [.fragment, .data], "the last fragment, then the Chart that waited")
        guard case .fragment(let last) = frames.first else { return }
        #expect(last.isLast && last.offset == 2 * DataMessage.fragmentLength && last.sequence == 0)
        #expect(queue.isEmpty && queue.bytes == 0)
        #expect(queue.nextFrames(frameLimit: 1 << 20, fragments: true).isEmpty)

        queue.enqueue(Self.message("Chart", bytes: large))
        queue.enqueue(Self.message("Tiles", bytes: large))
        #expect(
            queue.nextFrames(frameLimit: 1 << 20, fragments: true).map(\.frameType) == [.fragment],
            "another in fragments waits"
        )
    }

    @Test func aPeerWithoutFragmentsGetsEveryMessageWhole() {
        var queue = UnreliableQueue(limits: BufferLimits(maximumCount: 16, maximumBytes: 16 << 20))
        queue.enqueue(Self.message("Chart", bytes: 3 * DataMessage.fragmentLength))
        #expect(queue.nextFrames(frameLimit: 1 << 20, fragments: false).map(\.frameType) == [.data])
    }

    /// The receiver puts an unreliable message together per link: on a new link the message in
    /// fragments begins again, whole and in its place; a link that goes drops everything.
    @Test func aReplacedLinkBeginsTheMessageInFragmentsAgain() {
        var queue = UnreliableQueue(limits: BufferLimits(maximumCount: 16, maximumBytes: 16 << 20))
        let chart = Self.message("Chart", bytes: 2 * DataMessage.fragmentLength, fill: 7)
        queue.enqueue(chart)
        queue.enqueue(Self.message("Chart", bytes: 10))
        #expect(queue.nextFrames(frameLimit: 1 << 20, fragments: true).count == 1)
        queue.linkReplaced()
        #expect(queue.count == 2 && queue.bytes == chart.payload.readableBytes + 10)
        var rebuilt = ByteBuffer()
        var typeNames: [String] = []
        while !queue.isEmpty {
            for frame in queue.nextFrames(frameLimit: 1 << 20, fragments: true) {
                switch frame {
                case .fragment(var fragment):
                    #expect(fragment.offset == rebuilt.readableBytes, "from its beginning, in order")
                    if fragment.isLast { typeNames.append(fragment.typeName) }
                    rebuilt.writeBuffer(&fragment.bytes)
                case .data(let message): typeNames.append(message.typeName)
                default: Issue.record("only DATA and FRAGMENT: \(frame)")
                }
            }
        }
        #expect(rebuilt == chart.payload)
        #expect(typeNames == ["Chart", "Chart"])

        queue.enqueue(chart)
        queue.enqueue(Self.message("Fix", bytes: 10))
        _ = queue.nextFrames(frameLimit: 1 << 20, fragments: true)  // the first fragment, and Fix
        queue.enqueue(Self.message("Note", bytes: 10))
        #expect(queue.removeAll() == ["Chart", "Note"], "the one in fragments counts, whatever of it went")
        #expect(queue.isEmpty && queue.bytes == 0)
    }
}
