import Foundation
import MultipeerSession
import Testing

/// Two builds of one application side by side, as in a fleet upgrading one device at a time:
/// the newer build reads and sends a type the older one never reads. Each declares what it reads
/// (`Configuration.messageTypes`), so the older one is never sent the newer type: its links keep
/// every other type flowing, and the newer one is told.
@Suite struct MixedVersionTests {
    /// What only the newer build knows.
    struct Weather: Codable, Sendable, Equatable {
        var metar: String
    }

    /// What both builds know, but the older one reads only once it has set up its reader.
    struct Remark: Codable, Sendable, Equatable {
        var text: String
    }

    /// A session of a build that reads `types`, listening, or dialling `port`.
    static func session(
        _ name: String,
        reads types: [any (Decodable & SendableMetatype).Type],
        dialling port: Int? = nil
    ) -> MultipeerSession {
        var configuration = configuration(name, dialling: port)
        configuration.messageTypes = types
        return MultipeerSession(configuration: configuration, identity: PeerIdentity())
    }

    /// An older build (reads Note and Remark) listening, a newer one (reads Weather too) dialling it.
    static func withBuilds<T: Sendable>(
        _ body: @escaping @Sendable (_ older: MultipeerSession, _ newer: MultipeerSession) async throws -> T
    ) async throws -> T {
        let older = session("older", reads: [Note.self, Remark.self])
        return try await whileRunning([older]) {
            let port = try await listeningPort(of: older)
            let newer = session("newer", reads: [Note.self, Remark.self, Weather.self], dialling: port)
            return try await whileRunning([newer]) {
                try await waitUntilActive(newer, older.peerID)
                try await waitUntilActive(older, newer.peerID)
                return try await body(older, newer)
            }
        }
    }

    /// 300 reliable messages of a type the older build does not read, then one it reads: each
    /// of the 300 is refused at the newer build's `send`, naming the peer and the type, and the
    /// message after them arrives. (Before types were announced the older build held them for a
    /// subscriber that never comes; past its hold's bound its link stopped reading, and the
    /// message after them never arrived in 2 of 6 runs.)
    @Test func aTypeTheOlderBuildDoesNotReadIsRefusedAtTheSenderAndTheRestFlows() async throws {
        try await Self.withBuilds { older, newer in
            let notes = older.messages(of: Note.self)
            var refused = 0
            for number in 0..<300 {
                do {
                    try await newer.send(Weather(metar: "KPDX \(number)"), to: older.peerID)
                    Issue.record("Weather \(number) was taken for a peer that does not read it")
                } catch let error as MultipeerError where error.code == .messageTypeNotRead {
                    if refused == 0 {
                        #expect(
                            error.message.contains("\(older.peerID)") && error.message.contains("\"Weather\""),
                            "\(error)"
                        )
                    }
                    refused += 1
                }
            }
            #expect(refused == 300)
            try await newer.send(Note(text: "after"), to: older.peerID, awaitAcknowledgement: true)
            #expect(
                try await within(30, "the note") { await notes.first { _ in true }?.message } == Note(text: "after")
            )
        }
    }

    /// Sent last: its skip marks the end of what is counted.
    struct Marker: Codable, Sendable {}

    /// A broadcast of a type a peer does not read skips it, and says so once per type and link
    /// (not once per message); the peers that read it get it.
    @Test func aBroadcastSkipsAPeerThatDoesNotReadItsTypeAndSaysSoOnce() async throws {
        try await Self.withBuilds { older, newer in
            let events = newer.events
            #expect(try await newer.broadcast(Weather(metar: "one")) == 0)
            #expect(try await newer.broadcast(Weather(metar: "two"), delivery: .unreliable) == 0)
            #expect(try await newer.broadcast(Note(text: "read")) == 1, "a type the peer reads still goes")
            #expect(try await newer.broadcast(Weather(metar: "three")) == 0)
            #expect(try await newer.broadcast(Marker()) == 0)
            let skips = try await within(30, "the skips' events") { () -> [(Peer, String, MultipeerError)] in
                var skips: [(Peer, String, MultipeerError)] = []
                for await event in events {
                    guard case .broadcastSkipped(let peer, let type, let error) = event else { continue }
                    if type == "Marker" { return skips }
                    skips.append((peer, type, error))
                }
                throw TimedOut(what: "the skips' events (the session stopped)")
            }
            #expect(skips.count == 1, "one report for three skipped broadcasts of the type: \(skips.map(\.1))")
            #expect(
                skips.first?.0.id == older.peerID && skips.first?.1 == "Weather"
                    && skips.first?.2.code == .messageTypeNotRead
            )
        }
    }

    /// The older build subscribes to a type it did not declare: its peer hears of it (TYPES)
    /// and sends it from then on.
    @Test func aTypeSubscribedToLaterIsAnnouncedAndThenSent() async throws {
        try await Self.withBuilds { older, newer in
            await #expect(throws: MultipeerError.self) {
                try await newer.send(Weather(metar: "before"), to: older.peerID)
            }
            let weather = older.messages(of: Weather.self)
            try await untilReads(newer, Weather.self, peer: older.peerID, true)
            try await newer.send(Weather(metar: "after"), to: older.peerID)
            #expect(
                try await within(30, "the weather") { await weather.first { _ in true }?.message }
                    == Weather(metar: "after")
            )
        }
    }

    /// A type the older build declares but has no reader for yet (a program starting) is held
    /// for its first subscriber, not refused.
    @Test func aDeclaredTypeIsHeldForItsFirstSubscriber() async throws {
        try await Self.withBuilds { older, newer in
            let events = older.events
            try await newer.send(Remark(text: "early"), to: older.peerID, awaitAcknowledgement: true)
            try await within(30, "the remark to be held") {
                for await event in events {
                    if case .messageHeld("Remark", let peer) = event, peer.id == newer.peerID { return }
                }
                throw TimedOut(what: "the remark to be held (the session stopped)")
            }
            let remarks = older.messages(of: Remark.self)
            #expect(
                try await within(30, "the remark") { await remarks.first { _ in true }?.message }
                    == Remark(text: "early")
            )
        }
    }

    /// One session declares `[Note]`, the other keeps the default: once joined, the declaring
    /// side subscribes to `Remark`, and the default side hears of it (TYPES: it takes them
    /// without declaring anything; its application gets `peerReadsChanged`) and sends it
    /// `Remark` from then on. (Before, TYPES went only
    /// to peers that declared, and the default side's `send(Remark)` was refused for the rest
    /// of the link: 248 times over 5 s.)
    @Test func aSessionThatDeclaresNothingHearsWhatADeclaringPeerSubscribesTo() async throws {
        let declaring = Self.session("declaring", reads: [Note.self])
        try await whileRunning([declaring]) {
            let port = try await listeningPort(of: declaring)
            let unconfigured = MultipeerSession(
                configuration: configuration("unconfigured", dialling: port),
                identity: PeerIdentity()
            )
            try await whileRunning([unconfigured]) {
                try await waitUntilActive(unconfigured, declaring.peerID)
                try await waitUntilActive(declaring, unconfigured.peerID)
                await #expect(throws: MultipeerError.self, "the declaring side does not read Remark yet") {
                    try await unconfigured.send(Remark(text: "before"), to: declaring.peerID)
                }
                let events = unconfigured.events
                let remarks = declaring.messages(of: Remark.self)
                let told = try await within(30, "peerReadsChanged") {
                    for await event in events {
                        if case .peerReadsChanged(let peer) = event { return peer.id }
                    }
                    throw TimedOut(what: "peerReadsChanged (the session stopped)")
                }
                #expect(told == declaring.peerID, "the declaring side reads more")
                try await sendOnceRead(Remark(text: "after"), from: unconfigured, to: declaring.peerID)
                #expect(
                    try await within(30, "the remark") { await remarks.first { _ in true }?.message }
                        == Remark(text: "after")
                )
            }
        }
    }
}
