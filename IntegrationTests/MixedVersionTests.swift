import Crypto
import Foundation
import MultipeerCore
import MultipeerTLS
import MultipeerTestSupport
import NIOCore
import Testing

@testable import MultipeerSession

/// A session and peers of other releases (docs/PROTOCOL.md 2, extending the protocol, and 3e).
@Suite struct MixedVersionTests {
    struct Note: Codable, Sendable, Equatable {
        var text: String
    }

    /// A JSON DATA frame of `text` under `typeName`, numbered `sequence`.
    static func data(_ sequence: UInt64, _ typeName: String, _ text: String) throws -> LinkMessage {
        var payload = ByteBuffer()
        payload.writeString(#"{"text":"\#(text)"}"#)
        return .data(try DataMessage(sequence: sequence, typeName: typeName, payload: payload))
    }

    /// Keepalives too patient to time out: the raw peers below ping nobody.
    static let patient = KeepaliveParameters(interval: .seconds(60), timeout: .seconds(600))

    /// A peer of an earlier release, spoken by hand, joined to the session listening on `port`:
    /// its HELLO says nothing of message types (no bit 2 or 3), its resume point says it has
    /// nothing of the session's, and the session's resume point has come. Returns it, its
    /// identity and the session's HELLO.
    static func earlierPeer(
        _ name: String,
        joining port: Int
    ) async throws -> (raw: RawPeer, identity: PeerIdentity, sessionHello: Hello) {
        let raw = try await RawPeer(port: port)
        let sessionHello = try Hello(
            decoding: try #require(try await collect(raw.frames) { !$0.isEmpty }.first).value
        )
        let identity = PeerIdentity()
        try await raw.send(
            try await raw.hello(
                claiming: identity.peerID,
                signedBy: identity,
                incarnation: 1,
                name: name,
                keepalive: patient
            )
        )
        try await raw.send(.ack(0))  // its resume point: it has nothing of the session's
        // The session's resume point comes before anything reliable may be sent to it.
        _ = try await collect(raw.frames) { $0.last?.type == .ack }
        return (raw, identity, sessionHello)
    }

    /// A peer of another release, spoken by hand: an earlier one, which announces nothing of
    /// what it reads and sends a type the session does not read, and a later one, which sends a
    /// frame type this release does not know. The session declares the types it reads: the
    /// unread type is acknowledged and refused at once (REJECT, and an event), never held; the
    /// unknown frame is skipped; the link stays up and the message after both arrives, in order.
    @Test(.scaledTimeLimit(minutes: 1))
    func anUnreadTypeIsRefusedAndAnUnknownFrameSkippedWhileTheRestFlows() async throws {
        var configuration = MultipeerSession.Configuration.test(
            "current",
            discovery: .staticPeers([]),
            keepalive: Self.patient
        )
        configuration.messageTypes = [Note.self]
        let session = MultipeerSession(configuration: configuration, identity: PeerIdentity())
        let events = EventLog(session.events)
        let notes = session.messages(of: Note.self)
        try await whileRunning([session]) {
            let (raw, identity, hello) = try await Self.earlierPeer(
                "earlier",
                joining: try await events.listeningPort()
            )
            // The session's HELLO says what it reads.
            #expect(hello.reads == (try MessageTypeList(["Note"])))
            var unknown = ByteBuffer()
            unknown.writeMultipleIntegers(UInt32(99), UInt32(3), UInt8(1), UInt8(2), UInt8(3))
            try await raw.send(unknown)
            try await raw.send(
                try Self.data(1, "Weather", "KPDX"),
                try Self.data(0, "Weather", "unreliable"),
                try Self.data(2, "Note", "after")
            )

            let received = try await collect(notes) { !$0.isEmpty }
            #expect(received.first?.message == Note(text: "after"))
            #expect(received.first?.peer.id == identity.peerID)
            // The earlier peer hears that its message was refused, and that both were delivered.
            let answers = try await collect(raw.frames) { frames in
                let messages = frames.compactMap { try? LinkMessage(frame: $0) }
                return messages.contains { if case .reject = $0 { true } else { false } }
                    && messages.contains { if case .ack(let sequence, _) = $0 { sequence >= 2 } else { false } }
            }
            let rejection = answers.compactMap {
                if case .reject(let refused)? = try? LinkMessage(frame: $0) { refused } else { nil }
            }.first
            #expect(rejection?.sequence == 1 && rejection?.typeName == "Weather", "\(String(describing: rejection))")
            #expect(
                rejection?.reason.contains("does not read messages of type \"Weather\"") == true,
                "\(String(describing: rejection))"
            )
            let seen = try await events.wait { events in
                events.contains {
                    if case .messageNotRead("Weather", let peer) = $0 { peer.id == identity.peerID } else { false }
                }
            }
            #expect(
                seen.filter { if case .messageNotRead = $0 { true } else { false } }.count == 1,
                "reported once for the name"
            )
            #expect(!seen.contains { if case .messageHeld = $0 { true } else { false } }, "nothing held")
            #expect(!seen.contains { if case .peerLeft = $0 { true } else { false } }, "the link stayed up")
            await raw.close()
        }
    }

    /// A session that declares nothing lists no types in its HELLO, and says it takes TYPES
    /// (bit 3), so that a peer that declares tells it of its subscriptions.
    @Test(.scaledTimeLimit(minutes: 1))
    func aSessionThatDeclaresNothingListsNothingAndTakesTypes() async throws {
        let session = MultipeerSession(
            configuration: .test("current", discovery: .staticPeers([])),
            identity: PeerIdentity()
        )
        let events = EventLog(session.events)
        _ = session.messages(of: Note.self)
        try await whileRunning([session]) {
            let raw = try await RawPeer(port: try await events.listeningPort())
            let hello = try Hello(decoding: try #require(try await collect(raw.frames) { !$0.isEmpty }.first).value)
            #expect(hello.reads == nil)
            #expect(hello.features.contains(.takesTypes))
            await raw.close()
        }
    }

    /// A peer of 0.9.0, spoken by hand as it speaks (no bit 2 or 3: it takes no TYPES), beside a
    /// session that declares nothing: 300 reliable messages of a type the session never reads,
    /// then a `Note` it reads. The session holds 256 for a first subscriber and refuses the other
    /// 44 (each acknowledged, then REJECTed, as 0.9.0 reports them), never stopping the link:
    /// the `Note` arrives. It sends the 0.9.0 peer no TYPES, a frame that peer never asked for.
    @Test(.scaledTimeLimit(minutes: 1))
    func aPeerOf090SendingAnUnreadTypeNeverStallsASessionThatDeclaresNothing() async throws {
        let session = MultipeerSession(
            configuration: .test("current", discovery: .staticPeers([]), keepalive: Self.patient),
            identity: PeerIdentity()
        )
        let events = EventLog(session.events)
        let notes = session.messages(of: Note.self)
        try await whileRunning([session]) {
            let (raw, identity, _) = try await Self.earlierPeer(
                "release 0.9.0",
                joining: try await events.listeningPort()
            )
            for first in stride(from: 1, through: 300, by: 50) {
                try await raw.send(
                    contentsOf: try (first..<first + 50).map { try Self.data(UInt64($0), "Weather", "\($0)") }
                )
            }
            try await raw.send(try Self.data(301, "Note", "after"))

            let received = try await collect(notes) { !$0.isEmpty }
            #expect(received.first?.message == Note(text: "after"))
            let answers = try await collect(raw.frames) { frames in
                let messages = frames.compactMap { try? LinkMessage(frame: $0) }
                return messages.count { if case .reject = $0 { true } else { false } } >= 44
                    && messages.contains { if case .ack(let sequence, _) = $0 { sequence >= 301 } else { false } }
            }
            let messages = answers.compactMap { try? LinkMessage(frame: $0) }
            let rejected = messages.compactMap { if case .reject(let rejection) = $0 { rejection } else { nil } }
            #expect(rejected.map(\.sequence) == Array(257...300), "the 44 beyond the 256 held, in order")
            #expect(
                rejected.allSatisfy { $0.typeName == "Weather" && $0.reason.contains("does not read messages of type") }
            )
            #expect(!answers.contains { $0.type == .types }, "no TYPES to a peer that takes none")
            let seen = try await events.wait { events in
                events.contains {
                    if case .messageNotRead("Weather", let peer) = $0 { peer.id == identity.peerID } else { false }
                }
            }
            #expect(!seen.contains { if case .peerLeft = $0 { true } else { false } }, "the link stayed up")
            #expect(
                !seen.contains { if case .heldMessagesFull = $0 { true } else { false } },
                "no hold stopped the link"
            )
            await raw.close()
        }
    }

    /// A peer whose HELLO does not announce resources offers one anyway: it could not take the
    /// WANTs, so it is refused at once (RESOURCE_END 6, saying why), not left waiting for an
    /// answer that never comes, and the link stays up (docs/PROTOCOL.md 3c).
    @Test(.scaledTimeLimit(minutes: 1))
    func anOfferFromAPeerThatTakesNoResourcesIsRefusedAtOnce() async throws {
        var configuration = MultipeerSession.Configuration.test(
            "current",
            discovery: .staticPeers([]),
            keepalive: Self.patient
        )
        configuration.resourceDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "offers-\(UUID())"
        )
        defer { try? FileManager.default.removeItem(at: configuration.resourceDirectory!) }
        let session = MultipeerSession(configuration: configuration, identity: PeerIdentity())
        let events = EventLog(session.events)
        try await whileRunning([session]) {
            let (raw, _, _) = try await Self.earlierPeer("earlier", joining: try await events.listeningPort())
            let bytes = [UInt8](0..<10)
            let offer = try ResourceOffer(
                id: UUID(),
                name: "chart.pdf",
                length: 10,
                sha256: Array(SHA256.hash(data: bytes)),
                metadata: [:]
            )
            try await raw.send(.resourceOffer(offer))
            let answers = try await collect(raw.frames) {
                $0.contains { $0.type == .resourceEnd || $0.type == .resourceWant }
            }
            guard case .resourceEnd(let end)? = answers.last.flatMap({ try? LinkMessage(frame: $0) }) else {
                Issue.record("answered with END, not WANT: \(answers.map(\.type))")
                return
            }
            #expect(
                end.id == offer.id && end.reason == .refused && end.text.contains("does not announce resources"),
                "\(end)"
            )
            let seen = try await events.wait { _ in true }
            #expect(!seen.contains { if case .peerLeft = $0 { true } else { false } }, "the link stayed up")
            await raw.close()
        }
    }
}
