import Foundation
import MultipeerCore
import MultipeerTestSupport
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// Messages larger than a frame, between real sessions: they go in fragments, other messages
/// pass them, and reliable ones survive broken links (docs/PROTOCOL.md, 2b).
@Suite struct FragmentTests {
    /// A chart: megabytes of raw bytes, in the binary encoding.
    struct Chart: MultipeerMessage, Equatable {
        static var wireName: String { "chart" }
        static var wireEncoding: MessageEncoding? { .binary }
        var number: Int
        var tiles: Data

        /// Tiles of random bytes: a block of 65,537 (a prime, so no fragment boundary lines up
        /// with its repeats), repeated.
        init(number: Int, megabytes: Int) {
            self.number = number
            let block = Data((0..<65_537).map { _ in UInt8.random(in: 0...255) })
            tiles = Data(capacity: megabytes << 20)
            while tiles.count < megabytes << 20 { tiles.append(block.prefix((megabytes << 20) - tiles.count)) }
        }
    }

    /// A small message beside the large ones (not `Fix`: SessionFixtures has a `Fix`, and two
    /// types of one wire name in one process are refused).
    struct Tick: Codable, Sendable, Equatable {
        var number: Int
    }

    /// A 4 MiB chart (16 fragments), then small fixes: all arrive, the chart whole. (That the fixes go between
    /// the chart's fragments is OutboxStateMachine's to test, FragmentedDeliveryTests; how long
    /// they wait, the session benchmark's to measure.)
    @Test(.scaledTimeLimit(minutes: 2))
    func smallMessagesPassALargeOneThatArrivesWhole() async throws {
        try await FaultTests.withPair(keepalive: FaultTests.patient) { pair in
            let charts = pair.listener.messages(of: Chart.self)
            let fixes = pair.listener.messages(of: Tick.self)
            let chart = Chart(number: 1, megabytes: 4)
            try await pair.dialler.send(chart, to: pair.listener.peerID)
            for number in 0..<20 { try await pair.dialler.send(Tick(number: number), to: pair.listener.peerID) }
            let received = try await collect(fixes) { $0.count == 20 }
            #expect(received.map(\.message.number) == Array(0..<20))
            #expect(try await collect(charts) { $0.count == 1 }.first?.message == chart)
        }
    }

    /// Charts of 2 MiB (8 fragments each), through a link throttled to 20 MB/s (100 ms a chart)
    /// and reset after every 0.5 to 1.5 MB it carried until all have arrived, so that resets fall
    /// in the middle of charts (counted in bytes, not time, so that a slow machine or a sanitizer
    /// neither starves the transfer nor spares it the resets): each arrives once, whole, in order.
    @Test(.scaledTimeLimit(minutes: 3))
    func messagesInFragmentsSurviveResetsAndArriveOnceInOrder() async throws {
        try await FaultTests.withPair(proxyMode: .throttle(bytesPerSecond: 20_000_000)) { pair in
            let charts = pair.listener.messages(of: Chart.self)
            let sent = (0..<6).map { Chart(number: $0, megabytes: 2) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for chart in sent { try await pair.dialler.send(chart, to: pair.listener.peerID) }
                }
                group.addTask {
                    while !Task.isCancelled {
                        await pair.proxy.forwarded(Int.random(in: 500_000...1_500_000))
                        if !Task.isCancelled { await pair.proxy.resetConnections() }
                    }
                }
                let received = try await collect(charts, timeout: .seconds(120)) { $0.count >= sent.count }
                group.cancelAll()
                #expect(received.map(\.message.number) == sent.map(\.number), "each once, in order")
                #expect(received.map(\.message) == sent, "each whole")
            }
            // Counted from the events (the link was reset during the transfer, at least three
            // times), not from linkStats: the last reset may have just taken the link down.
            let dialler = pair.dialler.peerID
            try await pair.listenerEvents.wait(timeout: .seconds(10)) { events in
                events.count { if case .peerJoined(let peer) = $0 { peer.id == dialler } else { false } } >= 4
            }
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func unreliableMessagesGoInFragmentsToo() async throws {
        try await FaultTests.withPair(keepalive: FaultTests.patient) { pair in
            let charts = pair.listener.messages(of: Chart.self)
            let chart = Chart(number: 1, megabytes: 3)
            try await pair.dialler.send(chart, to: pair.listener.peerID, delivery: .unreliable)
            try await pair.dialler.send(Chart(number: 2, megabytes: 1), to: pair.listener.peerID, delivery: .unreliable)
            let received = try await collect(charts) { $0.count == 2 }
            #expect(received.first?.message == chart)
            #expect(received.map(\.message.number) == [1, 2])
        }
    }

    /// A large message is decoded off the link's event loop; one that does not decode is
    /// reported, skipped, and the stream goes on, in order, with the next.
    @Test(.scaledTimeLimit(minutes: 1))
    func aLargeMessageThatDoesNotDecodeIsReportedAndSkipped() async throws {
        struct Impostor: Codable, Sendable { var tiles: String }
        try await FaultTests.withPair(keepalive: FaultTests.patient) { pair in
            let charts = pair.listener.messages(of: Chart.self)
            try await pair.dialler.sendRaw(
                Impostor(tiles: String(repeating: "t", count: 1 << 20)),
                as: Chart.wireName,
                to: pair.listener.peerID
            )
            let chart = Chart(number: 2, megabytes: 1)
            try await pair.dialler.send(chart, to: pair.listener.peerID, delivery: .unreliable)
            let events = try await pair.listenerEvents.wait { events in
                events.contains { if case .undecodableMessage(_, "chart", _) = $0 { true } else { false } }
            }
            #expect(!events.isEmpty)
            #expect(try await collect(charts) { $0.count == 1 }.first?.message == chart, "the next one, whole")
        }
    }

    /// The receiver's Limits.maximumMessageLength, announced in its HELLO, is the bound: a
    /// larger message is refused at send, naming it, and nothing is queued.
    @Test(.scaledTimeLimit(minutes: 1))
    func aMessageLargerThanThePeerTakesFailsAtSend() async throws {
        try await FaultTests.withPair(limits: MultipeerSession.Limits(maximumMessageLength: 2 << 20)) { pair in
            let error = await #expect(throws: MultipeerError.self) {
                try await pair.dialler.send(Chart(number: 1, megabytes: 3), to: pair.listener.peerID)
            }
            #expect(error?.code == .messageTooLarge)
            #expect(error?.message.contains("Limits.maximumMessageLength") == true, "\(String(describing: error))")
            #expect(await pair.dialler.outboxCount(for: pair.listener.peerID) == 0)
            let fixes = pair.listener.messages(of: Tick.self)
            try await pair.dialler.send(Tick(number: 1), to: pair.listener.peerID)
            #expect(try await collect(fixes) { $0.count == 1 }.first?.message == Tick(number: 1))
        }
    }
}

/// What all incomplete messages hold together is bounded, whatever the number of senders.
@Suite struct IncompleteMessageBudgetTests {
    static let limit = 100_000

    static func begin(_ windows: ReceiveWindows, _ peerID: UUID, length: Int) -> ReceiveWindow.Verdict? {
        let fragment = try! Fragment(
            sequence: 1,
            offset: 0,
            length: length,
            typeName: "Chart",
            bytes: ByteBuffer(repeating: 1, count: 10)
        )
        return windows.receive(.fragment(fragment), from: peerID, incarnation: 1, limit: limit)?.verdict
    }

    /// Senders whose links are gone give their memory up to a sender sending now; when only
    /// senders sending now hold it, a new message is refused (its link closes, the sender
    /// tries again later) rather than held beyond the budget.
    @Test func incompleteMessagesOfSendersWithoutALinkMakeRoomAndTheBudgetHolds() {
        let windows = ReceiveWindows(on: EmbeddedEventLoop())
        let (gone, sending, newcomer) = (UUID(), UUID(), UUID())
        for (peer, link) in [(gone, 1), (sending, 2), (newcomer, 3)] {
            _ = windows.adopt(peer, incarnation: 1, on: LinkID(UInt64(link)))
        }
        #expect(Self.begin(windows, gone, length: 90_000) == .pending)
        #expect(Self.begin(windows, sending, length: 90_000) == .pending)
        #expect(windows.reserved == 180_000)
        windows.linkClosed(gone, link: LinkID(1))
        #expect(Self.begin(windows, newcomer, length: 90_000) == .pending, "room made from the sender that left")
        #expect(windows.reserved == 180_000, "at most twice the largest message: \(windows.reserved)")
        // The one that left keeps its place: it is told to send the message from its beginning.
        guard case .ack(1, let partial)? = Optional(windows.adopt(gone, incarnation: 1, on: LinkID(4))) else {
            Issue.record("a resume point")
            return
        }
        #expect(partial == PartialMessage(sequence: 1, received: 0))
        // Every holder is sending now: a message that does not fit is refused.
        guard case .invalid(let error)? = Self.begin(windows, gone, length: 90_000) else {
            Issue.record("refused")
            return
        }
        #expect(error.code == .messageTooLarge)
        #expect(error.message.contains("twice Limits.maximumMessageLength"))
        #expect(windows.reserved == 180_000)
    }

    /// A sender's window follows the link the session kept for it last: the link it replaced,
    /// closing after, does not make the sender one without a link (whose memory is taken).
    @Test func aReplacedLinkClosingAfterItsSuccessorLeavesItsSenderSending() {
        let windows = ReceiveWindows(on: EmbeddedEventLoop())
        let (replaced, sending, newcomer) = (UUID(), UUID(), UUID())
        _ = windows.adopt(replaced, incarnation: 1, on: LinkID(1))
        _ = windows.adopt(replaced, incarnation: 1, on: LinkID(4))  // its successor, kept before the first closed
        _ = windows.adopt(sending, incarnation: 1, on: LinkID(2))
        _ = windows.adopt(newcomer, incarnation: 1, on: LinkID(3))
        #expect(Self.begin(windows, replaced, length: 90_000) == .pending)
        #expect(Self.begin(windows, sending, length: 90_000) == .pending)
        windows.linkClosed(replaced, link: LinkID(1))
        guard case .invalid(let error)? = Self.begin(windows, newcomer, length: 90_000) else {
            Issue.record("a third message fitted beside two senders sending")
            return
        }
        #expect(error.code == .messageTooLarge)
        #expect(windows.reserved == 180_000, "neither sender's bytes were given up")
        // Its successor closing does.
        windows.linkClosed(replaced, link: LinkID(4))
        #expect(Self.begin(windows, newcomer, length: 90_000) == .pending)
    }
}
