import Foundation
import MultipeerCore
import MultipeerTLS
import MultipeerTestSupport
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import MultipeerSession

/// Reliable delivery between real sessions, through the fault proxy.
@Suite struct DeliveryTests {
    struct Numbered: Codable, Sendable, Equatable {
        var number: Int
    }

    @Test(.scaledTimeLimit(minutes: 3))
    func tenThousandMessagesThroughResetsAndBlackHolesArriveExactlyOnceInOrder() async throws {
        let limits = MultipeerSession.Limits(outbox: .init(maximumCount: 256, maximumBytes: 1 << 20))
        try await FaultTests.withPair(limits: limits) { pair in
            let inbox = pair.listener.messages(of: Numbered.self)
            let count = 10_000
            let (sent, oneSent) = AsyncStream<Void>.makeStream()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for number in 0..<count {
                        try await pair.dialler.send(Numbered(number: number), to: pair.listener.peerID)
                        oneSent.yield()
                    }
                }
                // Every 100 to 400 messages sent, at random, a reset or a short black hole (bytes
                // lost in the middle of the stream); the outbox bound is checked as it goes.
                // Paced by progress, not by the clock: a send returns only while the outbox has
                // room, so each fault falls on a link that carries messages, however long its
                // handshake took (under a sanitizer, longer than faults timed by the clock allowed).
                group.addTask {
                    var untilFault = Int.random(in: 100...400)
                    for await _ in sent {
                        untilFault -= 1
                        guard untilFault == 0 else { continue }
                        untilFault = Int.random(in: 100...400)
                        if Bool.random() {
                            await pair.proxy.resetConnections()
                        } else {
                            pair.proxy.set(.blackHole)
                            try await Task.sleep(for: TestTime.scaled(.milliseconds(Int.random(in: 50...300))))
                            pair.proxy.set(.passThrough)
                        }
                        #expect(await pair.dialler.outboxCount(for: pair.listener.peerID) <= 256)
                    }
                }
                let received = try await collect(inbox, timeout: .seconds(150)) { $0.count >= count }
                group.cancelAll()
                #expect(received.map(\.message.number) == Array(0..<count), "each exactly once, in order")
            }
        }
    }

    /// Many tasks sending at once, as an application's event handlers do: each send flushes,
    /// and the flushes must still put the messages on the wire in sequence order (when they
    /// did not, the receiver dropped the early arrivals as a gap and the link carried nothing
    /// more from that sender).
    @Test(.scaledTimeLimit(minutes: 1))
    func concurrentSendersAllArriveAndEachInItsOrder() async throws {
        struct Tagged: Codable, Sendable, Equatable {
            var sender: Int
            var number: Int
        }
        try await FaultTests.withPair { pair in
            let inbox = pair.listener.messages(of: Tagged.self)
            let (senders, each) = (16, 200)
            // Read while they send: the inbox holds 1,024 messages, and then pushes back.
            async let arrived = collect(inbox) { $0.count >= senders * each }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for sender in 0..<senders {
                    group.addTask {
                        for number in 0..<each {
                            try await pair.dialler.send(
                                Tagged(sender: sender, number: number),
                                to: pair.listener.peerID
                            )
                        }
                    }
                }
                try await group.waitForAll()
            }
            let received = try await arrived.map(\.message)
            #expect(received.count == senders * each)
            for sender in 0..<senders {
                #expect(received.filter { $0.sender == sender }.map(\.number) == Array(0..<each))
            }
        }
    }

    /// A skipped sequence number closes the link (the sender resends on the next one) instead
    /// of every later message being dropped as a gap while the link stays up.
    @Test func aGapInReliableDataClosesTheLinkWithOutOfSequence() async throws {
        let subscriptions = Subscriptions(limits: .init(), metrics: SessionMetrics(localName: "test"))
        let notes = subscriptions.messages(of: Note.self, named: "Note")
        // The link's part, on this thread (an embedded channel's is the thread that made it).
        do {
            let loop = EmbeddedEventLoop()
            let channel = EmbeddedChannel(
                handler: DeliveryHandler(
                    inbox: Inbox(
                        windows: ReceiveWindows(on: loop),
                        subscriptions: subscriptions,
                        metrics: SessionMetrics(localName: "test")
                    )
                ),
                loop: loop
            )
            // (it and its pipeline hold each other until then)
            defer { _ = try? channel.finish(acceptAlreadyClosed: true) }
            let sender = try Hello(identity: PeerIdentity(), incarnation: 7, displayName: "sender")
            channel.pipeline.fireUserInboundEventTriggered(HelloCompleted(remote: sender))
            #expect(
                try channel.readOutbound(as: LinkMessage.self) == nil,
                "no resume point before the session keeps the link"
            )
            channel.pipeline.triggerUserOutboundEvent(LinkAdopted(link: LinkID(1)), promise: nil)
            // (the session told of the join)
            channel.pipeline.triggerUserOutboundEvent(MessagesAdmitted(), promise: nil)
            #expect(try channel.readOutbound(as: LinkMessage.self) == .ack(0), "the resume point")
            try channel.writeInbound(try noteData(1))
            #expect(try channel.readOutbound(as: LinkMessage.self) == .ack(1), "delivered: the stream has it")
            #expect {
                try channel.writeInbound(try noteData(3))
            } throws: { ($0 as? MultipeerError)?.code == .outOfSequence }
            guard case .goodbye(.protocolError, _)? = try channel.readOutbound(as: LinkMessage.self) else {
                Issue.record("a GOODBYE saying why")
                return
            }
            #expect(!channel.isActive)
        }
        subscriptions.sessionEnded()
        var received = notes.makeAsyncIterator()
        #expect(await received.next()?.message == Note(text: "1"))
        #expect(await received.next() == nil, "nothing after the gap is delivered")
    }

    /// A link's HELLO alone changes nothing of what was delivered from its peer: only a link the
    /// session keeps takes the peer's window and says where to resume. Reliable DATA before that
    /// breaks the protocol; DATA on a link of an incarnation the window no longer follows is
    /// dropped, unacknowledged.
    @Test func onlyAKeptLinkTakesThePeersReceiveWindow() async throws {
        let subscriptions = Subscriptions(limits: .init(), metrics: SessionMetrics(localName: "test"))
        let notes = subscriptions.messages(of: Note.self, named: "Note")
        /// A link on `loop`, delivering through `windows` (all on one loop, as a session's are).
        func link(
            incarnation: UInt64,
            identity: PeerIdentity,
            on loop: EmbeddedEventLoop,
            _ windows: ReceiveWindows
        ) throws -> EmbeddedChannel {
            let channel = EmbeddedChannel(
                handler: DeliveryHandler(
                    inbox: Inbox(
                        windows: windows,
                        subscriptions: subscriptions,
                        metrics: SessionMetrics(localName: "test")
                    )
                ),
                loop: loop
            )
            channel.pipeline.fireUserInboundEventTriggered(
                HelloCompleted(remote: try Hello(identity: identity, incarnation: incarnation, displayName: "sender"))
            )
            return channel
        }
        func written(_ channel: EmbeddedChannel) throws -> [LinkMessage] {
            var messages: [LinkMessage] = []
            while let message = try channel.readOutbound(as: LinkMessage.self) { messages.append(message) }
            return messages
        }
        /// The session keeps `channel` and has told of the join: it says where to resume.
        func adopt(_ channel: EmbeddedChannel) throws {
            channel.pipeline.triggerUserOutboundEvent(LinkAdopted(link: LinkID(1)), promise: nil)
            channel.pipeline.triggerUserOutboundEvent(MessagesAdmitted(), promise: nil)
            #expect(try channel.readOutbound(as: LinkMessage.self) == .ack(0), "the resume point")
        }
        // The links' part, on this thread (an embedded loop's is the thread that made it).
        do {
            let loop = EmbeddedEventLoop()
            let windows = ReceiveWindows(on: loop)
            let sender = PeerIdentity()
            let first = try link(incarnation: 5, identity: sender, on: loop, windows)
            defer { _ = try? first.finish(acceptAlreadyClosed: true) }
            try adopt(first)
            try first.writeInbound(try noteData(1))
            try first.writeInbound(try noteData(2))
            #expect(try written(first) == [.ack(1), .ack(2)])

            // A second link of the same peer, not (yet) kept: its reliable DATA is a protocol error,
            // and the first link's window is untouched.
            let early = try link(incarnation: 5, identity: sender, on: loop, windows)
            defer { _ = try? early.finish(acceptAlreadyClosed: true) }
            #expect(try early.readOutbound(as: LinkMessage.self) == nil, "no resume point before the session keeps it")
            #expect {
                try early.writeInbound(try noteData(3))
            } throws: { ($0 as? MultipeerError)?.code == .outOfSequence }
            try first.writeInbound(try noteData(3))
            #expect(try written(first) == [.ack(3)], "the window went on from 2")

            // A newer incarnation's link is kept: the window follows it, and the old link's DATA is dropped.
            let newer = try link(incarnation: 6, identity: sender, on: loop, windows)
            defer { _ = try? newer.finish(acceptAlreadyClosed: true) }
            try adopt(newer)
            try first.writeInbound(try noteData(4))
            #expect(try written(first).isEmpty, "not acknowledged")
            try newer.writeInbound(try noteData(1))
            #expect(try written(newer) == [.ack(1)])
        }
        subscriptions.sessionEnded()
        var received = notes.makeAsyncIterator()
        var texts: [String] = []
        while let next = await received.next() { texts.append(next.message.text) }
        #expect(texts == ["1", "2", "3", "1"], "each once, the old incarnation's late one not at all")
    }

    /// A flush still writing to a link that has been replaced must not hold up the new link's.
    /// (It did: one flush per peer, not per link, so the new link's was skipped while the old
    /// one waited, and what the outbox held waited too, for as long as the old link stayed open.)
    ///
    /// The old connection stops carrying anything, either way, and stays open on the
    /// listener's side, so the listener's flush waits there (32 MB do not fit the socket
    /// buffers). Then the dialler's side of it is reset: the dialler dials again at once, and
    /// the listener takes the new link in place of the old one, which its GOODBYE cannot close
    /// meanwhile (the GOODBYE waits behind the 32 MB, and the test gives it ten minutes; the
    /// keepalive, too, outlasts the test). Everything arrives on the new link, with no further
    /// send to kick it, while the old link is still open.
    @Test(.scaledTimeLimit(minutes: 1))
    func aFlushWaitingOnAReplacedLinkDoesNotHoldUpTheNewOne() async throws {
        let limits = MultipeerSession.Limits(
            outbox: .init(maximumCount: 1024, maximumBytes: 64 << 20),
            goodbyeTimeout: .seconds(600)
        )
        let patient = KeepaliveParameters(interval: .seconds(60), timeout: .seconds(600))
        try await FaultTests.withPair(limits: limits, keepalive: patient) { pair in
            let inbox = pair.dialler.messages(of: Note.self)
            // First the link is settled (the dialler's resume point has arrived: a flush waits
            // for it), so what follows is written to the link, not held for it.
            let ready = Note(text: "ready")
            try await pair.listener.send(ready, to: pair.dialler.peerID, awaitAcknowledgement: true)
            await pair.proxy.setOpenConnections(.fromTarget, to: .stall)
            await pair.proxy.setOpenConnections(.towardTarget, to: .stall)
            // (12 MB fitted loopback's socket buffers at times: all of it, then the GOODBYE, went
            // into the kernel at once, and the old link closed.)
            let notes = (0..<32).map { Note(text: "\($0) " + String(repeating: "n", count: 1_000_000)) }
            for note in notes { try await pair.listener.send(note, to: pair.dialler.peerID) }
            await pair.proxy.resetConnections(onlyTheDiallingSide: true)
            let left = try await pair.diallerEvents.waitUntilActive([])
            #expect(FaultTests.lastLeaveReason(left).map { if case .linkClosed = $0 { true } else { false } } == true)
            try await pair.diallerEvents.waitUntilActive([pair.listener.peerID])
            let received = try await collect(inbox, timeout: .seconds(30)) { $0.count >= notes.count + 1 }
            #expect(received.map(\.message) == [ready] + notes)
            // The old link is still open, its GOODBYE and flush waiting. (More than two: a
            // duplicate from a second redial, not yet closed.)
            let links = await pair.listener.linkCount
            #expect(links >= 2, "the listener holds \(links) link(s)")
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func awaitingAnAcknowledgementReturnsOnceThePeerHasIt() async throws {
        try await FaultTests.withPair { pair in
            let inbox = pair.listener.messages(of: Numbered.self)
            try await pair.dialler.send(Numbered(number: 1), to: pair.listener.peerID, awaitAcknowledgement: true)
            #expect(
                await pair.dialler.outboxCount(for: pair.listener.peerID) == 0,
                "acknowledged means out of the outbox"
            )
            #expect(try await collect(inbox) { $0.count == 1 }.first?.message == Numbered(number: 1))
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aFullOutboxFailsFastWhenAskedAndOtherwiseWaitsForRoom() async throws {
        let limits = MultipeerSession.Limits(
            outbox: .init(maximumCount: 4, maximumBytes: 1 << 20),
            failWhenOutboxFull: true
        )
        try await FaultTests.withPair(limits: limits) { pair in
            // Nothing is acknowledged through a black hole: the outbox fills.
            pair.proxy.set(.blackHole)
            for number in 0..<4 { try await pair.dialler.send(Numbered(number: number), to: pair.listener.peerID) }
            let error = await #expect(throws: MultipeerError.self) {
                try await pair.dialler.send(Numbered(number: 4), to: pair.listener.peerID)
            }
            #expect(error?.code == .outboxFull)
            #expect(error?.message.contains("4 unacknowledged messages") == true)
        }
        // The link dies in the black hole and the listener is away until the dialler's next
        // redial after it heals: the fifth send waits for room that long (Limits.sendTimeout
        // stretched with the test time: under ThreadSanitizer the absence took 31.5 s).
        try await FaultTests.withPair(
            limits: MultipeerSession.Limits(
                outbox: .init(maximumCount: 4, maximumBytes: 1 << 20),
                sendTimeout: TestTime.scaled(.seconds(30))
            )
        ) { pair in
            let inbox = pair.listener.messages(of: Numbered.self)
            pair.proxy.set(.blackHole)
            for number in 0..<4 { try await pair.dialler.send(Numbered(number: number), to: pair.listener.peerID) }
            // A send waiting for room whose task is cancelled throws at once, queueing nothing.
            // (It looked for room again and again, spinning a thread for good.)
            let cancelled = Task { try await pair.dialler.send(Numbered(number: -1), to: pair.listener.peerID) }
            cancelled.cancel()
            await #expect(throws: CancellationError.self) { try await cancelled.value }
            #expect(await pair.dialler.outboxCount(for: pair.listener.peerID) == 4)
            // The fifth waits for room; healing the path lets it through, after the first four.
            async let fifth: Void = pair.dialler.send(Numbered(number: 4), to: pair.listener.peerID)
            pair.proxy.set(.passThrough)
            try await fifth
            #expect(try await collect(inbox) { $0.count == 5 }.map(\.message.number) == [0, 1, 2, 3, 4])
        }
    }
}

extension DeliveryTests {
    @Test(.scaledTimeLimit(minutes: 1))
    func whatARestartedReceiverNeverAcknowledgedReachesItsNewIncarnation() async throws {
        let receiverIdentity = PeerIdentity()
        let receiverID = receiverIdentity.peerID
        func receiver() -> MultipeerSession {
            MultipeerSession(configuration: .test("receiver", discovery: .staticPeers([])), identity: receiverIdentity)
        }
        let old = receiver()
        let oldEvents = EventLog(old.events)
        let oldInbox = old.messages(of: Numbered.self)
        // The proxy learns the receiver's port once it listens; the restarted receiver listens
        // on another, and the proxy follows it there.
        let proxy = try await FaultProxy(forwardingTo: 1)
        let sender = MultipeerSession(
            configuration: .test("sender", discovery: .staticPeers(["127.0.0.1:\(proxy.port)"])),
            identity: PeerIdentity()
        )
        let senderEvents = EventLog(sender.events)
        try await whileRunning([sender]) {
            try await whileRunning([old]) {
                proxy.retarget(to: try await oldEvents.listeningPort())
                try await oldEvents.waitUntilActive([sender.peerID])
                try await senderEvents.waitUntilActive([receiverID])
                for number in 0..<50 {
                    try await sender.send(Numbered(number: number), to: receiverID, awaitAcknowledgement: true)
                }
                #expect(try await collect(oldInbox) { $0.count == 50 }.map(\.message.number) == Array(0..<50))
                // These never reach the old receiver.
                proxy.set(.blackHole)
                for number in 50..<100 { try await sender.send(Numbered(number: number), to: receiverID) }
            }
            // The receiver restarts: same identity and port, a new incarnation.
            let new = receiver()
            let newEvents = EventLog(new.events)
            let newInbox = new.messages(of: Numbered.self)
            try await whileRunning([new]) {
                proxy.retarget(to: try await newEvents.listeningPort())
                proxy.set(.passThrough)
                let received = try await collect(newInbox) { $0.count == 50 }
                #expect(received.map(\.message.number) == Array(50..<100), "exactly what was never acknowledged")
                // Acknowledgements are cumulative: one more, acknowledged, empties the outbox.
                try await sender.send(Numbered(number: 100), to: receiverID, awaitAcknowledgement: true)
                #expect(await sender.outboxCount(for: receiverID) == 0)
            }
        }
        await proxy.stop()
    }
}

extension DeliveryTests {
    struct Stamped: Codable, Sendable, Equatable {
        var sender: Int
        var number: Int
    }

    /// A station that did not receive everything, with what every station holds.
    struct Shortfall: Error, CustomStringConvertible {
        var description: String
    }

    /// Three sessions, every pair joined through a proxy that is reset at random moments; each
    /// broadcasts 300 messages. Every message reaches every other session exactly once, in order.
    @Test(.scaledTimeLimit(minutes: 2))
    func threeSessionsBroadcastingUnderChurnDeliverEverythingOnce() async throws {
        let count = 300
        // A proxy in front of each session; session i dials the proxies of the sessions after it.
        let proxies = [
            try await FaultProxy(forwardingTo: 1), try await FaultProxy(forwardingTo: 1),
            try await FaultProxy(forwardingTo: 1),
        ]
        let sessions = (0..<3).map { index in
            MultipeerSession(
                configuration: .test(
                    "station \(index)",
                    discovery: .staticPeers(proxies[(index + 1)...].map { "127.0.0.1:\($0.port)" })
                ),
                identity: PeerIdentity()
            )
        }
        let logs = sessions.map { EventLog($0.events) }
        let inboxes = sessions.map { $0.messages(of: Stamped.self) }
        let ids = sessions.map(\.peerID)
        try await whileRunning(sessions) {
            // Each proxy learns its session's port once the session listens.
            for (index, log) in logs.enumerated() {
                let port = try await log.listeningPort()
                proxies[index].retarget(to: port)
            }
            for (index, log) in logs.enumerated() { try await log.waitUntilActive(Set(ids).subtracting([ids[index]])) }
            let handed = NIOLockedValueBox([0, 0, 0])  // messages × peers each broadcast was handed to
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, session) in sessions.enumerated() {
                    group.addTask {
                        for number in 0..<count {
                            let peers = try await session.broadcast(Stamped(sender: index, number: number))
                            handed.withLockedValue { $0[index] += peers }
                        }
                    }
                }
                group.addTask {
                    // Faults timed by the clock on purpose: a broadcast returns once queued, so
                    // the senders' progress says nothing of the deliveries the resets must cut.
                    for _ in 0..<8 {
                        try await Task.sleep(for: .milliseconds(Int.random(in: 50...250)))
                        await proxies.randomElement()!.resetConnections()
                    }
                }
                try await group.waitForAll()
            }
            for (index, inbox) in inboxes.enumerated() {
                let received: [(peer: Peer, message: Stamped)]
                do {
                    received = try await collect(inbox, timeout: .seconds(60)) { $0.count >= 2 * count }
                } catch {
                    // What each station holds for the others, what its broadcasts reached, and
                    // its links' history: where a message stopped.
                    var state: [String] = []
                    for (station, session) in sessions.enumerated() {
                        var outboxes: [Int] = []
                        for id in ids where id != session.peerID { outboxes.append(await session.outboxCount(for: id)) }
                        _ = try? await logs[station].wait(timeout: .seconds(1)) { _ in false }
                        let history = logs[station].history.filter { if case .stats = $0 { false } else { true } }
                        state.append(
                            "station \(station): outboxes \(outboxes), broadcasts handed to \(handed.withLockedValue { $0[station] }) peers, events \(history)"
                        )
                    }
                    let stations = state.joined(separator: "; ")
                    throw Shortfall(description: "station \(index) short; \(stations); \(error)")
                }
                for sender in 0..<3 where sender != index {
                    let numbers = received.filter { $0.message.sender == sender }.map(\.message.number)
                    #expect(numbers == Array(0..<count), "station \(index) from station \(sender): each once, in order")
                }
            }
        }
        for proxy in proxies { await proxy.stop() }
    }
}

/// The receiving side's pause, on one link's pipeline alone. The channel is an async testing
/// one: the application's reader makes room from its own thread, and the handler then resumes
/// the link's reads on the link's loop, as it does on a real link.
@Suite struct DeliveryPauseTests {
    /// Counts the reads asked of the channel, below the handler that withholds them.
    final class ReadCounter: ChannelOutboundHandler, Sendable {
        typealias OutboundIn = Any
        private let count = NIOLockedValueBox(0)
        var reads: Int { count.withLockedValue { $0 } }
        func read(context: ChannelHandlerContext) {
            count.withLockedValue { $0 += 1 }
            context.read()
        }
    }

    /// A link's pipeline with a `DeliveryHandler` delivering into `subscriptions` (below it,
    /// `counter` if given), told of a HELLO and adopted, its messages admitted.
    static func link(
        _ subscriptions: Subscriptions,
        counter: ReadCounter? = nil
    ) async throws -> NIOAsyncTestingChannel {
        let loop = NIOAsyncTestingEventLoop()
        let inbox = Inbox(
            windows: ReceiveWindows(on: loop),
            subscriptions: subscriptions,
            metrics: SessionMetrics(localName: "test")
        )
        let channel = try await NIOAsyncTestingChannel(loop: loop) { channel in
            if let counter { try channel.pipeline.syncOperations.addHandler(counter) }
            try channel.pipeline.syncOperations.addHandler(DeliveryHandler(inbox: inbox))
        }
        let hello = try Hello(identity: PeerIdentity(), incarnation: 1, displayName: "sender")
        try await channel.testingEventLoop.executeInContext {
            channel.pipeline.fireUserInboundEventTriggered(HelloCompleted(remote: hello))
            channel.pipeline.triggerUserOutboundEvent(LinkAdopted(link: LinkID(1)), promise: nil)
            // (the session told of the join)
            channel.pipeline.triggerUserOutboundEvent(MessagesAdmitted(), promise: nil)
        }
        #expect(try await channel.readOutbound(as: LinkMessage.self) == .ack(0))
        return channel
    }

    static func written(_ channel: NIOAsyncTestingChannel) async throws -> [LinkMessage] {
        await channel.testingEventLoop.run()
        var messages: [LinkMessage] = []
        while let message = try await channel.readOutbound(as: LinkMessage.self) { messages.append(message) }
        return messages
    }

    /// A stream filled by a delivery stops the link's reads and says so to the peer (FLOW); the
    /// reader taking it down to half resumes both.
    @Test func aFullStreamStopsTheLinkReadingUntilItIsHalfEmpty() async throws {
        var limits = MultipeerSession.Limits()
        limits.receiveBuffer = BufferLimits(maximumCount: 4, maximumBytes: 1 << 20)
        let subscriptions = Subscriptions(limits: limits, metrics: SessionMetrics(localName: "test"))
        let notes = subscriptions.messages(of: Note.self, named: "Note")
        let counter = ReadCounter()
        let channel = try await Self.link(subscriptions, counter: counter)
        for sequence in 1...4 { try await channel.writeInbound(try noteData(UInt64(sequence))) }
        // Each delivery is acknowledged (a read batch each here): the stream has it.
        #expect(
            try await Self.written(channel) == [.ack(1), .ack(2), .ack(3), .flow(reading: false), .ack(4)],
            "the fourth filled the stream"
        )
        channel.read()
        await channel.testingEventLoop.run()
        #expect(counter.reads == 0, "no read while the stream is full")

        var reader = notes.makeAsyncIterator()
        #expect(await reader.next()?.message.text == "1")
        #expect(try await Self.written(channel) == [], "three left: more than half")
        #expect(counter.reads == 0, "three left: more than half")
        #expect(await reader.next()?.message.text == "2")
        #expect(try await Self.written(channel) == [.flow(reading: true)])
        #expect(counter.reads == 1, "the read withheld is made")
        _ = try await channel.finish(acceptAlreadyClosed: true)
    }

    /// One message larger than the stream's bytes, alone in it, does not stop the link: its
    /// reader takes it next, and the messages of other types behind it on the link go on (a
    /// position report beside a chart used to wait for the chart's reader). A second message
    /// behind it does.
    @Test func aLargeMessageAloneInItsStreamDoesNotStopTheLink() async throws {
        var limits = MultipeerSession.Limits()
        limits.receiveBuffer = BufferLimits(maximumCount: 16, maximumBytes: 1_024)
        let subscriptions = Subscriptions(limits: limits, metrics: SessionMetrics(localName: "test"))
        let notes = subscriptions.messages(of: Note.self, named: "Note")
        let channel = try await Self.link(subscriptions)
        let large = String(repeating: "x", count: 4_096)
        try await channel.writeInbound(try noteData(1, large))
        try await channel.writeInbound(try noteData(2, "small"))
        #expect(
            try await Self.written(channel) == [.ack(1), .flow(reading: false), .ack(2)],
            "4 KiB alone in a 1 KiB stream: no FLOW; a second behind it stops the link"
        )
        var reader = notes.makeAsyncIterator()
        #expect(await reader.next()?.message.text == large)
        #expect(try await Self.written(channel) == [.flow(reading: true)], "one small message left: reading again")
        _ = try await channel.finish(acceptAlreadyClosed: true)
    }
}

/// Reliable DATA carrying a `Note` whose text is `text` (the sequence number if none).
private func noteData(_ sequence: UInt64, _ text: String? = nil) throws -> LinkMessage {
    .data(
        try DataMessage(
            sequence: sequence,
            typeName: "Note",
            payload: ByteBuffer(string: #"{"text":"\#(text ?? "\(sequence)")"}"#)
        )
    )
}
