import Foundation
import MultipeerSession
import Testing

/// Two sessions with the default configuration (no `messageTypes` declared), as a new user
/// writes them: one sends types the other never reads. A type nobody reads never holds up the
/// types that are read; what the receiver holds for a first subscriber stays within its bound;
/// what it refuses, its sender's application hears of.
@Suite struct UnconfiguredTypesTests {
    /// A type of the sender's build only, named at run time (`MultipeerMessage.wireName`).
    struct Unread: MultipeerMessage {
        static let wireName = "Unread"
        var number: Int
    }

    /// Twenty types the receiver never reads, under names of their own.
    struct Unread0: Codable, Sendable { var number = 0 }
    struct Unread1: Codable, Sendable { var number = 1 }
    struct Unread2: Codable, Sendable { var number = 2 }
    struct Unread3: Codable, Sendable { var number = 3 }
    struct Unread4: Codable, Sendable { var number = 4 }
    struct Unread5: Codable, Sendable { var number = 5 }
    struct Unread6: Codable, Sendable { var number = 6 }
    struct Unread7: Codable, Sendable { var number = 7 }
    struct Unread8: Codable, Sendable { var number = 8 }
    struct Unread9: Codable, Sendable { var number = 9 }
    struct Unread10: Codable, Sendable { var number = 10 }
    struct Unread11: Codable, Sendable { var number = 11 }
    struct Unread12: Codable, Sendable { var number = 12 }
    struct Unread13: Codable, Sendable { var number = 13 }
    struct Unread14: Codable, Sendable { var number = 14 }
    struct Unread15: Codable, Sendable { var number = 15 }
    struct Unread16: Codable, Sendable { var number = 16 }
    struct Unread17: Codable, Sendable { var number = 17 }
    struct Unread18: Codable, Sendable { var number = 18 }
    struct Unread19: Codable, Sendable { var number = 19 }

    /// Sends one message of each of the twenty types; returns the names whose `send` threw
    /// `messageTypeNotRead` (the receiver had said it refuses them).
    static func sendTwentyTypes(from sender: MultipeerSession, to receiver: UUID) async throws -> [String] {
        let messages: [any Codable & Sendable] = [
            Unread0(), Unread1(), Unread2(), Unread3(), Unread4(), Unread5(), Unread6(), Unread7(), Unread8(),
            Unread9(), Unread10(), Unread11(), Unread12(), Unread13(), Unread14(), Unread15(), Unread16(),
            Unread17(), Unread18(), Unread19(),
        ]
        var refused: [String] = []
        for message in messages {
            do {
                try await sender.send(message, to: receiver)
            } catch let error as MultipeerError where error.code == .messageTypeNotRead {
                refused.append("\(type(of: message))")
            }
        }
        return refused
    }

    /// The types a session's events say its peer refused (REJECT), until `count` of them.
    static func rejections(_ events: EventStream, count: Int) async throws -> [(typeName: String, reason: String)] {
        try await within(30, "\(count) rejections") {
            var seen: [(String, String)] = []
            for await event in events {
                guard case .messageRejected(_, let typeName, _, let reason) = event else { continue }
                seen.append((typeName, reason))
                if seen.count == count { return seen }
            }
            throw TimedOut(what: "\(count) rejections (the session stopped)")
        }
    }

    /// Twenty types the receiver never reads, one message each, then a `Note` it reads: the
    /// `Note` arrives, twelve times out of twelve. The receiver holds the first sixteen types
    /// for a first subscriber (`Limits.maximumUnsubscribedTypes`) and refuses the other four:
    /// their sender hears of each (`messageRejected`), and of the types (TYPES): a later `send`
    /// of one throws `messageTypeNotRead`. (Before, the seventeenth type stopped the link, and
    /// the `Note` never arrived in 4 of 6 runs, with no `send` throwing.)
    @Test(arguments: 1...12)
    func twentyUnreadTypesThenANoteTheNoteArrives(run: Int) async throws {
        try await withPair { receiver, sender in
            let notes = receiver.messages(of: Note.self)
            let senderEvents = sender.events
            let receiverEvents = receiver.events
            let refusedAtSend = try await Self.sendTwentyTypes(from: sender, to: receiver.peerID)
            #expect(
                refusedAtSend.isEmpty,
                "the receiver said nothing of what it refuses before it refused: \(refusedAtSend)"
            )
            try await sender.send(Note(text: "after twenty \(run)"), to: receiver.peerID)
            #expect(
                try await within(30, "the note") { await notes.first { _ in true }?.message }
                    == Note(text: "after twenty \(run)")
            )
            // The four types beyond the sixteen held are refused, and their sender told.
            let refused = try await Self.rejections(senderEvents, count: 4)
            #expect(refused.map(\.typeName) == ["Unread16", "Unread17", "Unread18", "Unread19"])
            #expect(refused.allSatisfy { $0.reason.contains("does not read messages of type") }, "\(refused)")
            // The receiver's application hears of each, naming the peer.
            let notRead = try await within(30, "the receiver's reports") { () -> Set<String> in
                var names: Set<String> = []
                for await event in receiverEvents {
                    if case .messageNotRead(let typeName, let peer) = event, peer.id == sender.peerID {
                        names.insert(typeName)
                        if names.count == 4 { return names }
                    }
                }
                throw TimedOut(what: "the receiver's reports (the session stopped)")
            }
            #expect(notRead == ["Unread16", "Unread17", "Unread18", "Unread19"])
            // And the sender learns the types (TYPES): it refuses them at `send` from then on.
            try await untilReads(sender, Unread19.self, peer: receiver.peerID, false)
            do {
                try await sender.send(Unread19(), to: receiver.peerID)
                Issue.record("a type the peer refused was sent")
            } catch let error as MultipeerError {
                #expect(error.code == .messageTypeNotRead, "\(error)")
                #expect(
                    error.message.contains("\"Unread19\"") && error.message.contains("\(receiver.peerID)"),
                    "\(error)"
                )
            }
        }
    }

    /// 300 messages of one type the receiver does not read yet, then a `Note`: the `Note`
    /// arrives, twelve times out of twelve. The receiver holds the first 256 for a first
    /// subscriber (`Limits.unsubscribedMessages`) and refuses the other 44: each is told to the
    /// sender, by REJECT or, once the sender has heard the type is refused, by `send` throwing.
    /// When the receiver subscribes after all (a program that starts slowly), it gets the 256
    /// held, in order, and the type flows again.
    @Test(arguments: 1...12)
    func threeHundredOfOneUnreadTypeThenANoteTheNoteArrives(run: Int) async throws {
        try await withPair { receiver, sender in
            let notes = receiver.messages(of: Note.self)
            let senderEvents = sender.events
            var refusedAtSend = 0
            for number in 0..<300 {
                do {
                    try await sender.send(Unread(number: number), to: receiver.peerID)
                } catch let error as MultipeerError where error.code == .messageTypeNotRead {
                    refusedAtSend += 1
                }
            }
            try await sender.send(Note(text: "after 300 \(run)"), to: receiver.peerID)
            #expect(
                try await within(30, "the note") { await notes.first { _ in true }?.message }
                    == Note(text: "after 300 \(run)")
            )
            let rejected = try await Self.rejections(senderEvents, count: 44 - refusedAtSend)
            #expect(rejected.allSatisfy { $0.typeName == "Unread" })

            // Subscribed to at last: the 256 held, in order; then the type goes again.
            let unread = receiver.messages(of: Unread.self)
            let held = try await within(30, "the held messages") { () -> [Int] in
                var numbers: [Int] = []
                for await (_, message) in unread {
                    numbers.append(message.number)
                    if numbers.count == 256 { return numbers }
                }
                throw TimedOut(what: "the held messages (the session stopped)")
            }
            #expect(held == Array(0..<256))
            try await sendOnceRead(Unread(number: 1_000), from: sender, to: receiver.peerID)
            #expect(
                try await within(30, "the type read again") { await unread.first { _ in true }?.message.number }
                    == 1_000
            )
        }
    }
}
