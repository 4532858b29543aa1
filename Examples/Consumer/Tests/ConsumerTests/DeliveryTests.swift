import Foundation
import MultipeerSession
import ProgramA
import ProgramB
import Testing

/// What "reliable" promises, checked where the application reads: its `for await` loop.
@Suite struct DeliveryTests {
    /// A message acknowledged before anything subscribed to its type is held, and the first
    /// subscriber gets it (it used to be acknowledged and then dropped, silently).
    @Test func aMessageSentBeforeTheReceiverSubscribesArrives() async throws {
        try await withPair { listener, dialler in
            try await dialler.send(ProgramA.Note(text: "early"), to: listener.peerID, awaitAcknowledgement: true)
            let notes = listener.messages(of: ProgramA.Note.self)
            let first = try await within(30, "the held message") { () -> ProgramA.Note? in
                for await (peer, note) in notes {
                    #expect(peer.id == dialler.peerID)
                    return note
                }
                return nil
            }
            #expect(first == ProgramA.Note(text: "early"))
        }
    }

    /// Two programs that each define a `Note` (modules ProgramA and ProgramB) talk, and so do two
    /// types of other names that declare the same wire name.
    @Test func typesOfTwoProgramsMeetByWireName() async throws {
        #expect(MultipeerSession.wireName(of: ProgramA.Note.self) == "Note")
        #expect(MultipeerSession.wireName(of: ProgramB.Fix.self) == "consumer.position")
        try await withPair { listener, dialler in
            let notes = listener.messages(of: ProgramB.Note.self)
            let fixes = listener.messages(of: ProgramB.Fix.self)
            try await dialler.send(ProgramA.Note(text: "from A"), to: listener.peerID)
            try await dialler.send(ProgramA.Position(latitude: 51.47, longitude: -0.45), to: listener.peerID)
            let note = try await within(30, "the note") { await notes.first { _ in true }?.message }
            let fix = try await within(30, "the fix") { await fixes.first { _ in true }?.message }
            #expect(note == ProgramB.Note(text: "from A"))
            #expect(fix == ProgramB.Fix(latitude: 51.47, longitude: -0.45))
        }
    }

    /// Requests answered by a task on the session's executor (the links' own thread), as its
    /// documentation suggests: every request gets its answer, in order, while the asking side
    /// reads on its own session's executor too.
    @Test func requestsAnsweredOnTheSessionsExecutorAllGetTheirAnswers() async throws {
        try await withPair { listener, dialler in
            let answering = Task(executorPreference: listener.executor) {
                for await (peer, note) in listener.messages(of: ProgramA.Note.self) {
                    try await listener.send(ProgramA.Note(text: "seen \(note.text)"), to: peer.id)
                }
            }
            defer { answering.cancel() }
            let answers = try await within(60, "the answers") {
                try await withTaskExecutorPreference(dialler.executor) {
                    var replies = dialler.messages(of: ProgramA.Note.self).makeAsyncIterator()
                    var texts: [String] = []
                    for number in 0..<100 {
                        try await dialler.send(ProgramA.Note(text: "\(number)"), to: listener.peerID)
                        guard let (peer, reply) = await replies.next() else { break }
                        #expect(peer.id == listener.peerID)
                        texts.append(reply.text)
                    }
                    return texts
                }
            }
            #expect(answers == (0..<100).map { "seen \($0)" })
        }
    }

    /// A type that asks for the binary encoding, with a `Data` field.
    struct Sample: MultipeerMessage, Equatable {
        static var wireName: String { "consumer.sample" }
        static var wireEncoding: MessageEncoding? { .binary }
        var taken: Date
        var bytes: Data
    }

    /// Binary messages, chosen by the type or by the sender's default configuration, reach a
    /// receiver configured to send JSON itself: it needs no setting to read them.
    @Test func binaryMessagesReachAReceiverThatSendsJSON() async throws {
        try await withPair(listenerEncoding: .json) { listener, dialler in
            let samples = listener.messages(of: Sample.self)
            let notes = listener.messages(of: ProgramA.Note.self)
            let sample = Sample(
                taken: Date(timeIntervalSince1970: 1_795_000_000),
                bytes: Data((0...255).map(UInt8.init))
            )
            try await dialler.send(sample, to: listener.peerID)
            try await dialler.send(ProgramA.Note(text: "binary by default"), to: listener.peerID)
            #expect(try await within(30, "the sample") { await samples.first { _ in true }?.message } == sample)
            #expect(
                try await within(30, "the note") { await notes.first { _ in true }?.message }
                    == ProgramA.Note(text: "binary by default")
            )
            // And JSON back the other way.
            let replies = dialler.messages(of: ProgramA.Note.self)
            try await listener.send(ProgramA.Note(text: "json"), to: dialler.peerID)
            #expect(
                try await within(30, "the reply") { await replies.first { _ in true }?.message }
                    == ProgramA.Note(text: "json")
            )
        }
    }

    /// A 24 MiB sample with a 20 KiB note after it: both arrive, the sample whole, in fragments
    /// (no limit raised). Then the same sample unreliably.
    @Test func aMessageOfManyMegabytesArrivesWholeWithoutRaisingAnyLimit() async throws {
        try await withPair { listener, dialler in
            let samples = listener.messages(of: Sample.self)
            let notes = listener.messages(of: ProgramA.Note.self)
            // Random bytes: a block of 65,537 (a prime, so no fragment boundary lines up with
            // its repeats), repeated to 24 MiB.
            let block = Data((0..<65_537).map { _ in UInt8.random(in: 0...255) })
            var bytes = Data(capacity: 24 << 20)
            while bytes.count < 24 << 20 { bytes.append(block.prefix((24 << 20) - bytes.count)) }
            let sample = Sample(taken: Date(timeIntervalSince1970: 1_795_000_000), bytes: bytes)
            let note = ProgramA.Note(text: String(repeating: "n", count: 20_000))
            try await dialler.send(sample, to: listener.peerID)
            try await dialler.send(note, to: listener.peerID)
            #expect(try await within(60, "the note") { await notes.first { _ in true }?.message } == note)
            #expect(try await within(60, "the sample") { await samples.first { _ in true }?.message } == sample)
            try await dialler.send(sample, to: listener.peerID, delivery: .unreliable)
            #expect(
                try await within(60, "the unreliable sample") { await samples.first { _ in true }?.message } == sample
            )
        }
    }

    /// A note sent while a 96 MiB sample streams waits behind a few of the sample's fragments,
    /// not behind all it has queued: counted in the sample's bytes that reach the listener
    /// between the note's send and its arrival (the listener's stats say when the sample is
    /// under way: 16 MiB of it through): 4.7-6.3 MB here, most of it in the kernels' socket
    /// buffers; 13-67 MB when the outbox was flushed through NIO's async writer, whose buffer
    /// took fragments until the link pushed back.
    @Test func aMessageSentWhileALargeOneStreamsWaitsBehindAFewFragments() async throws {
        try await withPair(listenerStatsInterval: .milliseconds(10)) { listener, dialler in
            let samples = listener.messages(of: Sample.self)
            let notes = listener.messages(of: ProgramA.Note.self)
            let events = listener.events
            let sample = Sample(
                taken: Date(timeIntervalSince1970: 1_795_000_000),
                bytes: Data(repeating: 0x5A, count: 96 << 20)
            )
            try await dialler.send(sample, to: listener.peerID)
            let diallerID = dialler.peerID
            let underWay = try await within(60, "16 MiB of the sample") { () -> Int in
                for await event in events {
                    if case .stats(let peer, let stats) = event, peer.id == diallerID, stats.quality.bytesIn >= 16 << 20
                    {
                        return stats.quality.bytesIn
                    }
                }
                throw TimedOut(what: "16 MiB of the sample (the session stopped)")
            }
            try await dialler.send(ProgramA.Note(text: "urgent"), to: listener.peerID)
            let arrived = try await within(60, "the note") { () -> Int? in
                _ = await notes.first { _ in true }
                return await listener.linkStats(for: diallerID)?.quality.bytesIn
            }
            let passed = try #require(arrived) - underWay
            #expect(passed < 12 << 20, "\(passed) bytes of the sample passed before the note")
            #expect(try await within(60, "the sample") { await samples.first { _ in true }?.message } == sample)
        }
    }

    /// A message of a type nobody here subscribes to is reported, once for its name.
    @Test func aMessageOfATypeNobodyKnowsIsReportedOnce() async throws {
        try await withPair { listener, dialler in
            let events = listener.events
            for number in 0..<3 {
                try await dialler.send(
                    ProgramA.Note(text: "\(number)"),
                    to: listener.peerID,
                    awaitAcknowledgement: true
                )
            }
            try await dialler.send(
                ProgramA.Position(latitude: 0, longitude: 0),
                to: listener.peerID,
                awaitAcknowledgement: true
            )
            let held = try await within(30, "both types reported") { () -> [String] in
                var names: [String] = []
                for await event in events {
                    if case .messageHeld(let name, let peer) = event {
                        #expect(peer.id == dialler.peerID)
                        names.append(name)
                    }
                    if names.contains("consumer.position") { break }
                }
                return names
            }
            #expect(held == ["Note", "consumer.position"], "each name once, in the order they came")
        }
    }

    /// What one program sends as `consumer.reading`: a number.
    struct Reading: MultipeerMessage {
        static var wireName: String { "consumer.reading" }
        var value: Double
    }

    /// What another program takes as `consumer.reading`: text, so a number does not decode.
    struct TextReading: MultipeerMessage {
        static var wireName: String { "consumer.reading" }
        var value: String
    }

    /// Reliable messages the receiver's type cannot decode, two held for a first subscriber and
    /// one sent to it: each was acknowledged, and its sender learns which ones did not decode
    /// (their type name and number, and why); the receiver is told too, and messages after them
    /// arrive. (Only the receiver was told before: the sender had its acknowledgements and
    /// nothing else.)
    @Test func aMessageThePeerCannotDecodeIsReportedToItsSender() async throws {
        try await withPair { listener, dialler in
            let diallerEvents = dialler.events
            let listenerEvents = listener.events
            for value in [1.5, 2.5] {
                try await dialler.send(Reading(value: value), to: listener.peerID, awaitAcknowledgement: true)
            }
            // The reader decodes as it reads: none of these decodes, so it gets nothing.
            let readings = listener.messages(of: TextReading.self)
            let reader = Task { for await (_, reading) in readings { Issue.record("decoded: \(reading)") } }
            defer { reader.cancel() }
            let notes = listener.messages(of: Note.self)
            try await dialler.send(Reading(value: 3.5), to: listener.peerID, awaitAcknowledgement: true)
            try await dialler.send(Note(text: "after"), to: listener.peerID)
            #expect(
                try await within(30, "the note") { await notes.first { _ in true }?.message } == Note(text: "after")
            )
            let rejected = try await within(30, "three rejections") { () -> [(UInt64, String)] in
                var rejected: [(UInt64, String)] = []
                for await event in diallerEvents {
                    guard case .messageRejected(let peer, let name, let sequence, let reason) = event else { continue }
                    #expect(peer.id == listener.peerID && name == "consumer.reading")
                    rejected.append((sequence, reason))
                    if rejected.count == 3 { break }
                }
                return rejected
            }
            #expect(rejected.map(\.0) == [1, 2, 3], "each message named by its number, in order")
            #expect(rejected.allSatisfy { $0.1.contains("String") }, "the receiver's reason: \(rejected.map(\.1))")
            let undecodable = try await within(30, "the receiver's reports") { () -> Int in
                var count = 0
                for await event in listenerEvents {
                    if case .undecodableMessage(let peer, "consumer.reading", _) = event, peer.id == dialler.peerID {
                        count += 1
                    }
                    if count == 3 { break }
                }
                return count
            }
            #expect(undecodable == 3)
        }
    }

    /// More messages of a type the receiver declares it reads, but subscribes to late, than are
    /// held for a first subscriber (1 MiB): the hold fills and the link waits, as for a full
    /// stream, instead of refusing or dropping what was acknowledged. The first subscriber gets
    /// every one, in order, and only then is the last acknowledged: more than one read of the
    /// link brings beyond the hold's bound. (A type not declared is refused beyond the bound:
    /// UnconfiguredTypesTests.)
    @Test func aFullHoldOfADeclaredTypeMakesTheSenderWaitAndLosesNothing() async throws {
        try await withPair(listenerReads: [Note.self]) { listener, dialler in
            let events = listener.events
            let count = 400
            let padding = String(repeating: "x", count: 4 << 10)
            let sending = Task {
                for number in 0..<count {
                    try await dialler.send(
                        Note(text: "\(number) \(padding)"),
                        to: listener.peerID,
                        awaitAcknowledgement: number == count - 1
                    )
                }
                return ContinuousClock.now
            }
            try await within(30, "the hold to fill") {
                for await event in events {
                    if case .heldMessagesFull(let name, let peer) = event, name == "Note", peer.id == dialler.peerID {
                        return
                    }
                    if case .messagesDropped(let name, let dropped, let reason) = event {
                        Issue.record("\(dropped) \(name) dropped: \(reason)")
                    }
                }
                throw TimedOut(what: "the hold to fill (the session stopped)")
            }
            let subscribed = ContinuousClock.now
            let notes = listener.messages(of: Note.self)
            let received = try await within(60, "every message") { () -> [String] in
                var received: [String] = []
                for await (_, note) in notes {
                    received.append(String(note.text.prefix { $0 != " " }))
                    if received.count == count { break }
                }
                return received
            }
            #expect(received == (0..<count).map { "\($0)" }, "every message, once, in order")
            let acknowledged = try await within(30, "the last acknowledgement") { try await sending.value }
            #expect(acknowledged > subscribed, "the last was acknowledged only once a subscriber had room for it")
        }
    }

    /// Messages of three types the receiver declares it reads, before anything subscribes,
    /// where it holds messages of two names at most for a first subscriber: the third name's
    /// message is held all the same (acknowledged, so never dropped) and its hold is full at
    /// once; the application hears so (`heldMessagesFull`, naming the type and the sender) and the
    /// link waits, as for a full stream, until a subscriber takes it. (It was held unreported.)
    @Test func aDeclaredTypeBeyondTheNamesHeldIsFullAtOnceAndSaidSo() async throws {
        typealias Types = UnconfiguredTypesTests
        var limits = MultipeerSession.Limits()
        limits.maximumUnsubscribedTypes = 2
        try await withPair(
            listenerLimits: limits,
            listenerReads: [Types.Unread0.self, Types.Unread1.self, Types.Unread2.self]
        ) {
            listener,
            dialler in
            let events = listener.events
            try await dialler.send(Types.Unread0(), to: listener.peerID)
            try await dialler.send(Types.Unread1(), to: listener.peerID)
            try await dialler.send(Types.Unread2(), to: listener.peerID)
            let full = try await within(30, "the third name's hold to fill") { () -> (String, UUID) in
                for await event in events {
                    if case .heldMessagesFull(let name, let peer) = event { return (name, peer.id) }
                }
                throw TimedOut(what: "the third name's hold to fill (the session stopped)")
            }
            #expect(full == ("Unread2", dialler.peerID))
            let third = listener.messages(of: Types.Unread2.self)
            #expect(try await within(30, "the held message") { await third.first { _ in true }?.message.number } == 2)
        }
    }

    /// A reader that takes 1 ms a message, against a sender of 16 KiB reliable messages flat
    /// out for 10 s: the sender is held back (what it has sent and the reader has not read
    /// stays within the two sessions' documented bounds), the link stays up although it is
    /// paused most of the time, and every message arrives, once, in order.
    @Test(.timeLimit(.minutes(2))) func aSlowReaderHoldsTheSenderBackAndLosesNothing() async throws {
        struct Chunk: Codable, Sendable {
            var number: Int
            var bytes: Data
        }
        let limits = MultipeerSession.Limits()
        try await withPair(listenerLimits: limits, diallerLimits: limits) { listener, dialler in
            let chunks = listener.messages(of: Chunk.self)
            let progress = Progress()
            let payload = Data(repeating: 0x5a, count: 16 << 10)
            let sending = Task {
                var number = 0
                while await !progress.stopping {
                    try await dialler.send(Chunk(number: number, bytes: payload), to: listener.peerID)
                    number += 1
                    await progress.sent(number)
                }
                try await dialler.send(Chunk(number: -1, bytes: Data()), to: listener.peerID)  // the end
                return number
            }
            let slowUntil = ContinuousClock.now + .seconds(10)
            var expected = 0
            for await (_, chunk) in chunks {
                guard chunk.number >= 0 else { break }
                #expect(chunk.number == expected, "in order, once")
                expected += 1
                await progress.read(expected)
                if ContinuousClock.now < slowUntil {
                    try await Task.sleep(for: .milliseconds(1))
                } else {
                    await progress.stop()  // then the rest at full speed, up to the end marker
                }
            }
            let sent = try await sending.value
            #expect(expected == sent, "every message sent arrived")
            // Encoded (binary, the default), a Chunk is its 16 KiB and a few bytes: the outbox
            // holds at most 8 MiB of them, the reader's stream 4 MiB, one read of the link
            // (256 KiB) and the rest of one frame more; and each count here can trail by one.
            let encoded = (16 << 10) + 32
            let bound =
                limits.outbox.maximumBytes / encoded + (limits.receiveBuffer.maximumBytes + (256 << 10)) / encoded + 1
                + 3
            let ahead = await progress.mostAhead
            #expect(ahead <= bound, "the sender got \(ahead) messages ahead of the reader; the limits allow \(bound)")
            #expect(ahead > 0)
            // Neither side ever saw the link go: it is the one the peers joined on.
            #expect(await listener.linkStats(for: dialler.peerID)?.reconnects == 0, "the link stayed up while paused")
            #expect(await dialler.linkStats(for: listener.peerID)?.reconnects == 0, "the link stayed up while paused")
        }
    }

    /// A reliable broadcast finds no room in the outbox of a peer that has stopped reading:
    /// it skips the peer, leaves it out of its count, and says so once
    /// (`broadcastSkipped` with `outboxFull`), however many more it skips, so an application
    /// knows the peer lacks what it broadcast.
    @Test func aBroadcastSkippingAPeerWhoseOutboxIsFullSaysSoOnce() async throws {
        let tiny = BufferLimits(maximumCount: 2, maximumBytes: 1 << 20)
        try await withPair(
            listenerLimits: .init(receiveBuffer: tiny),
            diallerLimits: .init(outbox: tiny)
        ) { listener, dialler in
            let unread = listener.messages(of: Note.self)  // (subscribed, never read: its stream fills)
            let events = dialler.events
            var reached = 0
            for number in 0..<50 { reached += try await dialler.broadcast(Note(text: "\(number)")) }
            #expect(reached < 50, "reached the peer \(reached) times of 50")
            // Another type, skipped too once the outbox is full again (a note acknowledged late,
            // on a busy machine, can make room for a marker or two first): its report comes after
            // every report of the notes' skips.
            try await within(30, "a marker to be skipped") {
                while try await dialler.broadcast(Marker()) > 0 { try Task.checkCancellation() }
            }
            let reports = try await within(30, "the skips to be reported") {
                var reports: [(Peer, String, MultipeerError)] = []
                for await event in events {
                    guard case .broadcastSkipped(let peer, let typeName, let error) = event else { continue }
                    reports.append((peer, typeName, error))
                    if typeName == MultipeerSession.wireName(of: Marker.self) { return reports }
                }
                throw TimedOut(what: "the skips to be reported (the session stopped)")
            }
            #expect(reports.count == 2, "the notes' skips reported once: \(reports)")
            let (peer, typeName, error) = reports[0]
            #expect(peer.id == listener.peerID && typeName == MultipeerSession.wireName(of: Note.self), "\(reports[0])")
            #expect(error.code == .outboxFull, "\(error)")
            #expect(error.message.contains("outbox was full"), "\(error)")
            _ = unread
        }
    }

    /// Unreliable messages sent flat out for 5 s, read as fast as they come: every send
    /// succeeds, the link stays up, and messages arrive throughout, up to the flood's last
    /// second (how many is the machine's speed, not asserted: some 200 on two busy cores, many
    /// thousands on an idle one). (The sender's own keepalive
    /// used to time the link out within seconds: each unreliable message was a task of its own
    /// on the link's event loop, which runs its tasks until none is left before it reads its
    /// sockets again, so it never read the peer's PINGs.) The dialler's unreliable queue holds
    /// 8 messages here (`Limits.unreliableQueue`): its sends wait for room, and go on.
    @Test(.timeLimit(.minutes(2))) func anUnreliableFloodKeepsItsLink() async throws {
        let small = MultipeerSession.Limits(unreliableQueue: BufferLimits(maximumCount: 8, maximumBytes: 64 << 10))
        try await withPair(diallerLimits: small) { listener, dialler in
            let notes = listener.messages(of: Note.self)
            let target = listener.peerID
            let start = ContinuousClock.now
            let sending = Task {
                var sent = 0
                while ContinuousClock.now < start + .seconds(5) {
                    try await dialler.send(Note(text: "\(sent)"), to: target, delivery: .unreliable)
                    sent += 1
                }
                return sent
            }
            let reading = Task {
                var (received, last) = (0, start)
                for await _ in notes { (received, last) = (received + 1, ContinuousClock.now) }
                return (received, last - start)
            }
            let sent = try await sending.value
            try await dialler.send(Marker(), to: target, awaitAcknowledgement: true)
            reading.cancel()
            let (received, lastArrival) = await reading.value
            #expect(sent > 0 && received > 0, "sent \(sent), received \(received)")
            #expect(lastArrival >= .seconds(4), "sent \(sent), received \(received), the last \(lastArrival) in")
            #expect(await dialler.linkStats(for: listener.peerID)?.reconnects == 0, "the link stayed up")
            #expect(await listener.linkStats(for: dialler.peerID)?.reconnects == 0, "the link stayed up")
        }
    }

    /// A message type of its own, which nothing else in these tests sends.
    struct Marker: Codable, Sendable {}

    /// A sender that raised its own message limit cannot send the receiver a message larger
    /// than the receiver announced: the send is refused, naming both limits, and nothing is
    /// queued to wedge the outbox (it used to be sent, refused, redialled and resent for good,
    /// and every later message waited behind it).
    @Test func aMessageTooLargeForThePeerIsRefusedAtSendAndLaterOnesArrive() async throws {
        let raised = MultipeerSession.Limits(maximumMessageLength: 4 << 20)
        try await withPair(listenerLimits: .init(maximumMessageLength: 1 << 20), diallerLimits: raised) {
            listener,
            dialler in
            let notes = listener.messages(of: ProgramA.Note.self)
            let error = await #expect(throws: MultipeerError.self) {
                try await dialler.send(ProgramA.Note(text: String(repeating: "x", count: 2 << 20)), to: listener.peerID)
            }
            #expect(error?.code == .messageTooLarge)
            #expect(
                error?.message.contains("at most 1048576 bytes") == true,
                "the peer's limit: \(String(describing: error))"
            )
            #expect(error?.message.contains("this side's is 4194304") == true, "and this side's")
            #expect(
                try await dialler.broadcast(ProgramA.Note(text: String(repeating: "x", count: 2 << 20))) == 0,
                "skipped"
            )
            try await dialler.send(ProgramA.Note(text: "small"), to: listener.peerID)
            let next = try await within(30, "the small message") { await notes.first { _ in true }?.message }
            #expect(next?.text == "small", "the small one (\(next?.text.count ?? 0) characters)")
        }
    }

    /// An event reader that falls behind never holds up the session: its stream keeps its bound,
    /// sheds `.stats` reports before anything else, and tells the reader how many went.
    @Test func aSlowEventReaderLosesStatsFirstAndIsToldHowMany() async throws {
        var limits = MultipeerSession.Limits()
        limits.eventBuffer = 8
        let other = MultipeerSession(configuration: configuration("other"), identity: PeerIdentity())
        try await whileRunning([other]) {
            var reporting = configuration("reporter", dialling: try await listeningPort(of: other), limits: limits)
            reporting.statsInterval = .milliseconds(10)
            let reporter = MultipeerSession(configuration: reporting, identity: PeerIdentity())
            try await whileRunning([reporter]) {
                try await waitUntilActive(reporter, other.peerID)
                let events = reporter.events  // starts with the state: listening, other joined
                // A reader that does not read while 50 reports come: a second subscriber,
                // reading, counts them.
                let witness = reporter.events
                _ = try await within(30, "50 reports") {
                    var reports = 0
                    for await event in witness {
                        if case .stats = event { reports += 1 }
                        if reports >= 50 { break }
                    }
                    return reports
                }
                var iterator = events.makeAsyncIterator()
                var read: [SessionEvent] = []
                for _ in 0..<8 {
                    guard let event = await iterator.next() else { break }
                    read.append(event)
                }
                guard case .eventsDropped(let count)? = read.first else {
                    Issue.record("first, how many were lost: \(read)")
                    return
                }
                #expect(count > 0)
                #expect(
                    read.contains { if case .listening = $0 { true } else { false } },
                    "the state outlives the reports: \(read)"
                )
                #expect(
                    read.contains { if case .peerJoined = $0 { true } else { false } },
                    "the state outlives the reports: \(read)"
                )
            }
        }
    }

    /// A late subscriber to `events` learns the port and every active peer; so does `listeningPort`.
    @Test func aLateEventSubscriberSeesTheStateFirst() async throws {
        try await withPair { listener, dialler in
            let port = try #require(await listener.listeningPort)
            let first = try await within(30, "the state") { () -> [SessionEvent] in
                var events: [SessionEvent] = []
                for await event in listener.events {
                    events.append(event)
                    if events.count == 2 { break }
                }
                return events
            }
            guard case .listening(let reported)? = first.first, case .peerJoined(let peer)? = first.last else {
                Issue.record("the state first: \(first)")
                return
            }
            #expect(reported == port)
            #expect(peer.id == dialler.peerID)
            #expect(listener.activePeers.map(\.id) == [dialler.peerID])
        }
    }

    /// A loop whose task is cancelled ends at its next turn, with messages still waiting in its
    /// stream (it used to read all of them first, and behind a sender that kept up, never end).
    @Test func aCancelledLoopEndsWithMessagesStillWaiting() async throws {
        try await withPair { listener, dialler in
            let notes = listener.messages(of: ProgramA.Note.self)
            let (firstRead, reading) = AsyncStream<Void>.makeStream()
            // yields nothing: ends when the task is cancelled
            let (cancelled, keepOpen) = AsyncStream<Void>.makeStream()
            let reader = Task { () -> Int in
                var read = 0
                for await _ in notes {
                    read += 1
                    reading.yield()
                    for await _ in cancelled {}
                }
                keepOpen.finish()
                return read
            }
            for number in 0..<100 {
                try await dialler.send(
                    ProgramA.Note(text: "\(number)"),
                    to: listener.peerID,
                    awaitAcknowledgement: number == 99
                )
            }
            // The reader has the first; the other 99 are in its stream (acknowledged).
            for await _ in firstRead { break }
            reader.cancel()
            #expect(try await within(30, "the loop's end") { await reader.value } == 1)
        }
    }
}

/// How far a sender got ahead of its reader.
actor Progress {
    private var sentCount = 0
    private var readCount = 0
    private(set) var mostAhead = 0
    private(set) var stopping = false

    func stop() {
        stopping = true
    }

    func sent(_ count: Int) {
        sentCount = count
        mostAhead = max(mostAhead, sentCount - readCount)
    }

    func read(_ count: Int) {
        readCount = count
    }
}
