import Foundation
import MultipeerCore
import NIOCore
import Testing

@Suite struct ByteStreamTests {
    static let id = UUID(uuidString: "00112233-4455-6677-8899-AABBCCDDEEFF")!

    /// Two ends of a stream joined by a link that carries their frames in order; a link that
    /// breaks loses what it carried and had not delivered.
    struct Pair {
        var opener = ByteStreamStateMachine(id: ByteStreamTests.id, name: "log", opener: true, window: 1_000)
        var acceptor: ByteStreamStateMachine?
        var window: UInt64 = 1_000
        var chunkLimit = 300
        /// Frames on the wire each way, oldest first.
        var toAcceptor: [LinkMessage] = []
        var toOpener: [LinkMessage] = []
        /// The data bytes each way on the wire, resent ones too.
        var bytesOnWire = 0
        var openerRead: [UInt8] = []
        var acceptorRead: [UInt8] = []
        var opens: [StreamOpen] = []

        init(window: UInt64 = 1_000) {
            self.window = window
            opener = ByteStreamStateMachine(id: ByteStreamTests.id, name: "log", opener: true, window: window)
            opener.linkUp()
        }

        /// Each side puts what is due on the wire; each said it had frames due exactly when it
        /// has (a link's writer asks a stream for a turn while it says so).
        mutating func send() {
            toAcceptor += Self.due(&opener, chunkLimit: chunkLimit)
            if acceptor != nil { toOpener += Self.due(&acceptor!, chunkLimit: chunkLimit) }
        }

        static func due(_ side: inout ByteStreamStateMachine, chunkLimit: Int) -> [LinkMessage] {
            let said = side.hasFramesDue
            let frames = side.framesDue(chunkLimit: chunkLimit)
            #expect(said == !frames.isEmpty, "said it had frames due: \(said); had \(frames.count)")
            return frames
        }

        /// Delivers every frame on the wire, and what they make due, until the wire is empty.
        mutating func run() throws {
            send()
            while !toAcceptor.isEmpty || !toOpener.isEmpty {
                for frame in toAcceptor { try deliver(frame, toOpener: false) }
                toAcceptor = []
                for frame in toOpener { try deliver(frame, toOpener: true) }
                toOpener = []
                send()
            }
        }

        mutating func deliver(_ frame: LinkMessage, toOpener: Bool) throws {
            func on(_ body: (inout ByteStreamStateMachine) throws -> Void) rethrows {
                if toOpener { try body(&opener) } else { try body(&acceptor!) }
            }
            switch frame {
            case .streamOpen(let open):
                opens.append(open)
                if acceptor == nil {
                    #expect(!open.resuming)
                    acceptor = ByteStreamStateMachine(id: open.id, name: open.name, opener: false, window: window)
                    acceptor!.linkUp()
                }
            case .streamWant(let want):
                try on {
                    _ = try $0.want(received: want.received, granted: want.granted, endReceived: want.endReceived)
                }
            case .streamData(let data):
                bytesOnWire += data.bytes.readableBytes
                try on { try $0.data(offset: data.offset, bytes: data.bytes, end: data.end) }
            case .streamEnd(let end):
                on { $0.ended(end.reason, text: end.text) }
            default:
                Issue.record("unexpected \(frame)")
            }
        }

        /// The link breaks, losing what was on it; a new one comes up.
        mutating func reset() {
            toAcceptor = []
            toOpener = []
            opener.linkDown()
            acceptor?.linkDown()
            opener.linkUp()
            acceptor?.linkUp()
        }

        /// Each application reads what it can.
        mutating func readAll() -> (openerEnd: ByteStreamStateMachine.Read?, acceptorEnd: ByteStreamStateMachine.Read?)
        {
            func drain(
                _ machine: inout ByteStreamStateMachine,
                into bytes: inout [UInt8]
            ) -> ByteStreamStateMachine.Read? {
                while true {
                    switch machine.read(maximum: 128) {
                    case .bytes(let buffer): bytes += buffer.readableBytesView
                    case .wait: return nil
                    case let other: return other
                    }
                }
            }
            let a = drain(&opener, into: &openerRead)
            let b = acceptor.map { _ in drain(&acceptor!, into: &acceptorRead) } ?? nil
            return (a, b)
        }
    }

    /// Whether `body` throws a `MultipeerError` with `code`.
    static func fails(with code: MultipeerError.Code, _ body: () throws -> Void) -> Bool {
        do {
            try body()
            return false
        } catch let error as MultipeerError {
            return error.code == code
        } catch {
            return false
        }
    }

    static func bytes(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    }

    /// Writes as much of `bytes` as the machine takes; returns how many it took.
    static func write(_ bytes: ArraySlice<UInt8>, to machine: inout ByteStreamStateMachine) -> Int {
        var buffer = ByteBuffer(bytes: bytes)
        machine.write(&buffer)
        return bytes.count - buffer.readableBytes
    }

    @Test func bytesGoBothWaysInOrderAndBothEndsAreAcknowledged() throws {
        var pair = Pair()
        try pair.run()
        #expect(pair.acceptor?.name == "log")
        let one = Self.bytes(2_500, seed: 1)
        let other = Self.bytes(1_700, seed: 2)
        var sentOne = 0
        var sentOther = 0
        while pair.opener.outcome == nil || pair.acceptor?.outcome == nil {
            sentOne += Self.write(one[sentOne...], to: &pair.opener)
            sentOther += Self.write(other[sentOther...], to: &pair.acceptor!)
            if sentOne == one.count, !pair.opener.writingFinished { pair.opener.finishWriting() }
            if sentOther == other.count, !pair.acceptor!.writingFinished { pair.acceptor!.finishWriting() }
            try pair.run()
            _ = pair.readAll()
        }
        #expect(pair.acceptorRead == one)
        #expect(pair.openerRead == other)
        #expect(pair.opener.outcome == .complete)
        #expect(pair.acceptor?.outcome == .complete)
        #expect(pair.readAll().openerEnd == .end)
        #expect(pair.bytesOnWire == one.count + other.count)
    }

    @Test func aReaderThatDoesNotReadHoldsTheWriterToTheWindow() throws {
        var pair = Pair(window: 1_000)
        try pair.run()
        let bytes = Self.bytes(5_000, seed: 3)
        var taken = Self.write(bytes[...], to: &pair.opener)
        #expect(taken == 1_000)
        try pair.run()
        // The reader holds the window, unread; the writer, told it is held, may write no more
        // until the reader's application reads.
        #expect(pair.opener.writeCapacity == 0)
        #expect(pair.acceptor!.received == 1_000)
        taken += Self.write(bytes[taken...], to: &pair.opener)
        #expect(taken == 1_000)
        // Reading half the window grants the next half: the reader then holds a window again,
        // the writer keeps a window (half of it granted), and waits.
        var read = 0
        while read < 500, case .bytes(let chunk) = pair.acceptor!.read(maximum: 100) { read += chunk.readableBytes }
        try pair.run()
        #expect(pair.opener.writeCapacity == 1_000)
        taken += Self.write(bytes[taken...], to: &pair.opener)
        #expect(taken == 2_000)
        try pair.run()
        #expect(pair.acceptor!.received == 1_500)
        #expect(pair.opener.writeCapacity == 0)
    }

    @Test func aResetEveryFewFramesLosesAndRepeatsNothing() throws {
        var pair = Pair(window: 2_000)
        pair.chunkLimit = 200
        let one = Self.bytes(20_000, seed: 4)
        let other = Self.bytes(9_000, seed: 5)
        var sentOne = 0
        var sentOther = 0
        var rounds = 0
        pair.send()
        while pair.opener.outcome == nil || pair.acceptor?.outcome == nil {
            rounds += 1
            #expect(rounds < 10_000)
            sentOne += Self.write(one[sentOne...], to: &pair.opener)
            if pair.acceptor != nil { sentOther += Self.write(other[sentOther...], to: &pair.acceptor!) }
            if sentOne == one.count, !pair.opener.writingFinished { pair.opener.finishWriting() }
            if sentOther == other.count, let acceptor = pair.acceptor, !acceptor.writingFinished {
                pair.acceptor!.finishWriting()
            }
            pair.send()
            // Three frames each way get through, then the link breaks, every fourth round.
            for frame in pair.toAcceptor.prefix(3) { try pair.deliver(frame, toOpener: false) }
            for frame in pair.toOpener.prefix(3) { try pair.deliver(frame, toOpener: true) }
            pair.toAcceptor.removeFirst(min(3, pair.toAcceptor.count))
            pair.toOpener.removeFirst(min(3, pair.toOpener.count))
            if rounds % 4 == 0 { pair.reset() }
            _ = pair.readAll()
        }
        #expect(pair.acceptorRead == one)
        #expect(pair.openerRead == other)
        #expect(pair.opener.outcome == .complete)
        #expect(pair.acceptor?.outcome == .complete)
        // Later opens of the stream say it resumes (the acceptor knows it).
        #expect(pair.opens.count > 1)
        #expect(pair.opens.dropFirst().allSatisfy { $0.resuming })
    }

    @Test func theEndLostWithTheLinkIsSentAgain() throws {
        var pair = Pair()
        try pair.run()
        _ = Self.write(Self.bytes(100, seed: 6)[...], to: &pair.opener)
        pair.opener.finishWriting()
        pair.send()
        #expect(pair.toAcceptor.contains { if case .streamData(let data) = $0 { data.end } else { false } })
        pair.reset()
        try pair.run()
        #expect(pair.acceptor!.endReceived)
        #expect(pair.opener.endAcknowledged)
        #expect(pair.bytesOnWire == 100)
    }

    @Test func aCancelReachesThePeerAfterWhatItSentBefore() throws {
        var pair = Pair()
        try pair.run()
        _ = Self.write(Self.bytes(300, seed: 7)[...], to: &pair.opener)
        try pair.run()
        pair.opener.end(.cancelled, text: "enough")
        #expect(pair.opener.writeCapacity == 0)
        try pair.run()
        #expect(pair.acceptor?.outcome == .failed(.cancelled, byPeer: true, text: "enough"))
        // What arrived first is read, then the failure.
        #expect(pair.readAll().acceptorEnd == .failed(.cancelled, byPeer: true, text: "enough"))
        #expect(pair.acceptorRead.count == 300)
        // Frames of a failed stream are ignored.
        try pair.acceptor!.data(offset: 300, bytes: ByteBuffer(bytes: [1]), end: false)
        #expect(pair.acceptor!.received == 300)
    }

    @Test func framesThatBreakTheRulesAreErrors() throws {
        var pair = Pair(window: 1_000)
        try pair.run()
        var acceptor = pair.acceptor!
        #expect(
            Self.fails(with: .outOfSequence) {
                try acceptor.data(offset: 10, bytes: ByteBuffer(bytes: [1]), end: false)
            }
        )
        #expect(
            Self.fails(with: .malformedMessage) {
                try acceptor.data(offset: 0, bytes: ByteBuffer(repeating: 0, count: 1_001), end: false)
            }
        )
        #expect(
            Self.fails(with: .malformedMessage) {
                try acceptor.data(offset: 0, bytes: ByteBuffer(), end: false)
            }
        )
        try acceptor.data(offset: 0, bytes: ByteBuffer(bytes: [1, 2]), end: true)
        #expect(
            Self.fails(with: .malformedMessage) {
                try acceptor.data(offset: 2, bytes: ByteBuffer(bytes: [3]), end: false)
            }
        )
        var opener = pair.opener
        _ = Self.write([1, 2, 3][...], to: &opener)
        _ = opener.framesDue(chunkLimit: 100)
        #expect(
            Self.fails(with: .malformedMessage) {
                _ = try opener.want(received: 4, granted: 10, endReceived: false)  // (beyond what was written)
            }
        )
        _ = try opener.want(received: 2, granted: 10, endReceived: false)
        #expect(
            Self.fails(with: .malformedMessage) {
                _ = try opener.want(received: 1, granted: 10, endReceived: false)  // (goes back)
            }
        )
        #expect(
            Self.fails(with: .malformedMessage) {
                _ = try opener.want(received: 3, granted: 10, endReceived: true)  // (no end was written)
            }
        )
    }
}
