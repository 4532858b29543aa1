import Foundation
import MultipeerSession
import ProgramA
import Testing

/// A peer that leaves for good: sends to it end, with errors that say what is true.
@Suite struct LeavingTests {
    /// A listener that runs until `stop` is called, and a dialler (with `limits`) that met it.
    static func withDeparture(
        limits: MultipeerSession.Limits,
        _ body:
            @escaping @Sendable (_ dialler: MultipeerSession, _ gone: UUID, _ stop: @Sendable () async -> Void)
            async throws -> Void
    ) async throws {
        let listener = MultipeerSession(configuration: configuration("listener"), identity: PeerIdentity())
        let running = Task { try await listener.run() }
        let port = try await listeningPort(of: listener)
        let dialler = MultipeerSession(
            configuration: configuration("dialler", dialling: port, limits: limits),
            identity: PeerIdentity()
        )
        try await whileRunning([dialler]) {
            try await waitUntilActive(dialler, listener.peerID)
            let events = dialler.events
            try await body(dialler, listener.peerID) {
                running.cancel()
                _ = try? await running.value
                // Until the dialler has seen it go.
                for await event in events {
                    if case .peerLeft(let peer, _) = event, peer.id == listener.peerID { break }
                }
            }
        }
        running.cancel()
    }

    /// A session whose `run()` is cancelled says GOODBYE on its links as it stops: its peer
    /// sees it leave for that reason at once, not after a keepalive timeout.
    @Test func aSessionCancelledSaysGoodbye() async throws {
        let listener = MultipeerSession(configuration: configuration("listener"), identity: PeerIdentity())
        let running = Task { try await listener.run() }
        defer { running.cancel() }
        let port = try await listeningPort(of: listener)
        let dialler = MultipeerSession(
            configuration: configuration("dialler", dialling: port),
            identity: PeerIdentity()
        )
        try await whileRunning([dialler]) {
            try await waitUntilActive(dialler, listener.peerID)
            let events = dialler.events
            running.cancel()
            let reason = try await within(30, "the listener to leave") { () -> PeerLeftReason? in
                for await event in events {
                    if case .peerLeft(let peer, let reason) = event, peer.id == listener.peerID { return reason }
                }
                return nil
            }
            #expect(reason == .goodbye(.shutdown))
        }
    }

    /// The outbox of a peer that left takes what fits; the next send waits `sendTimeout` of the
    /// peer's absence and then throws `peerAway` (it used to wait until the session stopped).
    @Test func aSendToAPeerThatLeftGivesUpAfterTheSendTimeout() async throws {
        var limits = MultipeerSession.Limits(sendTimeout: .seconds(1))
        limits.outbox = BufferLimits(maximumCount: 4, maximumBytes: 1 << 20)
        try await Self.withDeparture(limits: limits) { dialler, gone, stop in
            // The timeout counts from the peer's leaving, which comes after this.
            let started = ContinuousClock.now
            await stop()
            for number in 0..<4 { try await dialler.send(Note(text: "\(number)"), to: gone) }  // queued for its return
            try await Self.expectGivesUp("the send", startedAt: started) {
                try await dialler.send(Note(text: "one too many"), to: gone)
            }
        }
    }

    /// Runs `send`, which must throw `peerAway` for the send timeout (1 s) after `started`.
    static func expectGivesUp(
        _ what: String,
        startedAt started: ContinuousClock.Instant,
        _ send: @escaping @Sendable () async throws -> Void
    ) async throws {
        let error = try await within(30, "\(what) to give up") { () -> MultipeerError? in
            do {
                try await send()
                return nil
            } catch let error as MultipeerError {
                return error
            }
        }
        #expect(error?.code == .peerAway)
        #expect(error?.message.contains("Limits.sendTimeout") == true, "\(String(describing: error))")
        #expect(ContinuousClock.now - started >= .milliseconds(900), "it waited for the peer first")
    }

    /// A send that awaits its acknowledgement from a peer that has left gives up after the send
    /// timeout of the peer's absence, as a send waiting for room does; the message stays queued
    /// (it used to wait until the session stopped).
    @Test func anAcknowledgementWaitForAPeerThatLeftGivesUpAfterTheSendTimeout() async throws {
        try await Self.withDeparture(limits: MultipeerSession.Limits(sendTimeout: .seconds(1))) { dialler, gone, stop in
            // The timeout counts from the peer's leaving, which comes after this.
            let started = ContinuousClock.now
            await stop()
            try await Self.expectGivesUp("the acknowledgement wait", startedAt: started) {
                try await dialler.send(Note(text: "are you there?"), to: gone, awaitAcknowledgement: true)
            }
        }
    }

    /// Awaiting the acknowledgement of an unreliable message, which never comes, is refused.
    @Test func awaitingTheAcknowledgementOfAnUnreliableMessageIsRefused() async throws {
        try await withPair { listener, dialler in
            let error = await #expect(throws: MultipeerError.self) {
                try await dialler.send(
                    Note(text: "fire and forget"),
                    to: listener.peerID,
                    delivery: .unreliable,
                    awaitAcknowledgement: true
                )
            }
            #expect(error?.code == .invalidArgument)
        }
    }

    /// A peer that was active and has left, never sent to before: its messages are queued for
    /// its return (the error used to say it had never been active).
    @Test func aPeerThatLeftBeforeAnythingWasSentToItStillGetsAnOutbox() async throws {
        try await Self.withDeparture(limits: .init()) { dialler, gone, stop in
            await stop()
            try await dialler.send(Note(text: "for when you are back"), to: gone)
        }
    }

    /// `forget(peer:)` drops what was queued: a send waiting for room ends (with `peerAway` if
    /// it was waiting by then, or `peerNotActive` if it came after), and a later send says the
    /// peer was forgotten. An active peer cannot be forgotten.
    @Test func forgettingAPeerDropsItsOutboxAndEndsItsSends() async throws {
        var limits = MultipeerSession.Limits(sendTimeout: .seconds(600))
        limits.outbox = BufferLimits(maximumCount: 2, maximumBytes: 1 << 20)
        try await Self.withDeparture(limits: limits) { dialler, gone, stop in
            let active = await #expect(throws: MultipeerError.self) { try await dialler.forget(peer: gone) }
            #expect(active?.code == .sessionState)
            await stop()
            for number in 0..<2 { try await dialler.send(Note(text: "\(number)"), to: gone) }
            let waiting = Task { () -> MultipeerError? in
                do {
                    try await dialler.send(Note(text: "waits for room"), to: gone)
                    return nil
                } catch {
                    return error as? MultipeerError
                }
            }
            try await dialler.forget(peer: gone)
            let error = try await within(30, "the waiting send to end") { await waiting.value }
            #expect(
                error.map { [.peerAway, .peerNotActive].contains($0.code) } == true,
                "\(String(describing: error))"
            )
            #expect(error?.message.contains("forgotten") == true)
            let later = await #expect(throws: MultipeerError.self) {
                try await dialler.send(Note(text: "later"), to: gone)
            }
            #expect(later?.code == .peerNotActive)
            #expect(later?.message.contains("forgotten") == true)
        }
    }
}

/// A peer that comes back (the same peer ID, on the same port) taking smaller messages than
/// one queued for it.
@Suite struct ShrunkPeerTests {
    /// The message is taken out of the outbox and reported, and what was queued after it
    /// arrives (it used to be sent, refused and resent after every redial: the outbox stuck).
    @Test func aQueuedMessageThePeerNoLongerTakesIsDroppedAndReportedAndTheRestArrives() async throws {
        let identity = PeerIdentity()
        let peerID = identity.peerID
        var roomy = configuration("roomy", limits: MultipeerSession.Limits(maximumMessageLength: 4 << 20))
        let first = MultipeerSession(configuration: roomy, identity: identity)
        let firstRun = Task { try await first.run() }
        let port = try await listeningPort(of: first)
        let dialler = MultipeerSession(
            configuration: configuration("dialler", dialling: port),
            identity: PeerIdentity()
        )
        try await whileRunning([dialler]) {
            let events = dialler.events
            try await waitUntilActive(dialler, peerID)
            firstRun.cancel()
            _ = try? await firstRun.value
            try await within(30, "the peer to leave") {
                for await event in events { if case .peerLeft(let peer, _) = event, peer.id == peerID { return } }
            }
            // Queued while it is away, under the limit it had.
            try await dialler.send(ProgramA.Note(text: String(repeating: "x", count: 2 << 20)), to: peerID)
            try await dialler.send(ProgramA.Note(text: "small"), to: peerID)

            roomy.port = port
            roomy.limits.maximumMessageLength = 1 << 20  // back, taking less
            let second = MultipeerSession(configuration: roomy, identity: identity)
            let notes = second.messages(of: ProgramA.Note.self)
            try await whileRunning([second]) {
                let note = try await within(30, "the small message") { await notes.first { _ in true }?.message }
                #expect(
                    note?.text == "small",
                    "the small one, not the dropped one (\(note?.text.count ?? 0) characters)"
                )
                let dropped = try await within(30, "the drop reported") { () -> (String, Int, MessageDropReason)? in
                    for await event in events {
                        if case .messagesDropped(let type, let count, let reason) = event {
                            return (type, count, reason)
                        }
                    }
                    return nil
                }
                #expect(dropped?.0 == "Note")
                #expect(dropped?.1 == 1)
                #expect(dropped?.2 == .tooLargeForPeer)
            }
        }
    }
}
