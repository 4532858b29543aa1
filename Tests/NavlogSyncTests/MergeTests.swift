import Foundation
import MultipeerCore
import MultipeerSession
import MultipeerSync
import MultipeerTLS
import Testing

@testable import NavlogSync

/// The log is a CRDT: merging is commutative, associative and idempotent, checked on random
/// logs that share ids, authors and even timestamps (so ties are exercised too).
@Suite struct MergeTests {
    /// Seeded, so a failure can be replayed.
    typealias Generator = SplitMix64

    static let ids = (0..<6).map { UUID(uuidString: String(format: "00000000-0000-0000-0000-%012d", $0))! }

    static let origins = (0..<2).map { UUID(uuidString: String(format: "10000000-0000-0000-0000-%012d", $0))! }

    /// A random version; with `unique`, a timestamp no other version has, as correct hosts
    /// guarantee (they never issue one timestamp twice).
    static func randomEntry(_ random: inout Generator, unique: UInt16? = nil) -> NavlogEntry {
        NavlogEntry(
            id: ids.randomElement(using: &random)!,
            fields: NavlogFields(
                leg: Int.random(in: 1...3, using: &random),
                waypoint: ["TESAT", "NIPAS", "ARNEM"].randomElement(using: &random)!,
                fuel: Int.random(in: 0...3, using: &random) * 1000
            ),
            author: ["captain", "first-officer", "relief"].randomElement(using: &random)!,
            origin: origins.randomElement(using: &random)!,
            timestamp: HLCTimestamp(
                milliseconds: UInt64.random(in: 1...4, using: &random),
                counter: unique ?? UInt16.random(in: 0...1, using: &random)
            ),
            deleted: Bool.random(using: &random)
        )
    }

    static func randomLog(_ random: inout Generator, unique: Range<UInt16>? = nil) -> NavlogLog {
        NavlogLog(
            (0..<Int.random(in: 0...12, using: &random)).map { index in
                randomEntry(&random, unique: unique.map { $0.lowerBound + UInt16(index) })
            }
        )
    }

    @Test(arguments: 0..<200)
    func mergeIsCommutativeAssociativeAndIdempotent(seed: UInt64) {
        var random = Generator(seed: seed)
        let (a, b, c) = (Self.randomLog(&random), Self.randomLog(&random), Self.randomLog(&random))
        #expect(a.merging(b) == b.merging(a))
        #expect(a.merging(b).merging(c) == a.merging(b.merging(c)))
        #expect(a.merging(a) == a)
        #expect(a.merging(b).merging(b) == a.merging(b))
    }

    @Test(arguments: 0..<50)
    func theOrderOfArrivalDoesNotMatter(seed: UInt64) {
        var random = Generator(seed: seed)
        let versions = (0..<30).map { _ in Self.randomEntry(&random) }
        let inOrder = NavlogLog(versions)
        #expect(NavlogLog(versions.shuffled(using: &random)) == inOrder)
        #expect(NavlogLog(versions + versions.reversed()) == inOrder)
    }

    @Test func theLaterTimestampWinsThenTheGreaterAuthor() {
        let id = Self.ids[0]
        let (first, second) = (Self.origins[0], Self.origins[1])
        let early = NavlogEntry(
            id: id,
            fields: NavlogFields(waypoint: "A"),
            author: "relief",
            origin: first,
            timestamp: HLCTimestamp(milliseconds: 5, counter: 0)
        )
        let late = NavlogEntry(
            id: id,
            fields: NavlogFields(waypoint: "B"),
            author: "captain",
            origin: first,
            timestamp: HLCTimestamp(milliseconds: 5, counter: 1)
        )
        let sameTimeGreaterAuthor = NavlogEntry(
            id: id,
            fields: NavlogFields(waypoint: "C"),
            author: "relief",
            origin: first,
            timestamp: late.timestamp
        )
        // Two stations both called captain, editing in the same millisecond: the origin decides.
        let twin = NavlogEntry(
            id: id,
            fields: NavlogFields(waypoint: "D"),
            author: "captain",
            origin: second,
            timestamp: late.timestamp
        )
        #expect(twin.wins(over: late))
        #expect(late.wins(over: early))
        #expect(!early.wins(over: late))
        #expect(sameTimeGreaterAuthor.wins(over: late))
        #expect(NavlogLog([early, sameTimeGreaterAuthor, late]).entries[id] == sameTimeGreaterAuthor)
    }

    /// Two versions that differ only in how a remark is spelled in Unicode ("é" as one scalar,
    /// or "e" and a combining accent) are equal as Swift strings; one must still win, whichever
    /// arrives first. (Correct hosts never make two versions with one timestamp and origin.)
    @Test func canonicallyEquivalentContentStillHasAWinner() {
        let composed = NavlogEntry(
            id: Self.ids[3],
            fields: NavlogFields(waypoint: "A", remarks: "d\u{E9}tour"),
            author: "captain",
            origin: Self.origins[0],
            timestamp: HLCTimestamp(milliseconds: 9, counter: 0)
        )
        var decomposed = composed
        decomposed.fields.remarks = "de\u{301}tour"
        #expect(composed == decomposed, "Swift calls them equal")
        #expect(composed.wins(over: decomposed) != decomposed.wins(over: composed))
        let winner = NavlogLog([composed, decomposed]).entries[Self.ids[3]]!
        #expect(
            Array(NavlogLog([decomposed, composed]).entries[Self.ids[3]]!.fields.remarks!.utf8)
                == Array(winner.fields.remarks!.utf8)
        )
    }

    @Test func aDeleteIsATombstoneThatLosesToALaterEdit() {
        let id = Self.ids[1]
        let entry = NavlogEntry(
            id: id,
            fields: NavlogFields(waypoint: "A"),
            author: "a",
            origin: Self.origins[0],
            timestamp: HLCTimestamp(milliseconds: 1, counter: 0)
        )
        var deleted = entry
        deleted.timestamp = HLCTimestamp(milliseconds: 2, counter: 0)
        deleted.deleted = true
        var revived = entry
        revived.timestamp = HLCTimestamp(milliseconds: 3, counter: 0)
        #expect(NavlogLog([entry, deleted]).live.isEmpty)
        #expect(NavlogLog([deleted, entry]).entries[id]?.deleted == true)
        #expect(NavlogLog([deleted, revived, entry]).live == [revived])
    }

    @Test(arguments: 0..<100)
    func exchangingDigestsMakesTwoLogsEqual(seed: UInt64) throws {
        var random = Generator(seed: seed)
        var (a, b) = (Self.randomLog(&random, unique: 0..<100), Self.randomLog(&random, unique: 100..<200))
        // Over the wire and back, as the hosts do it.
        let digestOfB = try JSONDecoder().decode(NavlogDigest.self, from: JSONEncoder().encode(b.digest))
        let digestOfA = try JSONDecoder().decode(NavlogDigest.self, from: JSONEncoder().encode(a.digest))
        #expect(digestOfA == a.digest)
        let forB = a.newer(than: digestOfB)
        let forA = b.newer(than: digestOfA)
        forB.forEach { b.merge($0) }
        forA.forEach { a.merge($0) }
        #expect(a == b)
        // Nothing is sent that the other already has.
        #expect(forB.allSatisfy { entry in digestOfB.versions[entry.id].map { $0.version < entry.version } ?? true })
    }

    /// Two contents under one version stamp (only a faulty or rogue origin signs such): the
    /// digests tell them apart, each side sends its own, and both keep the same one.
    @Test func twoContentsUnderOneVersionAreToldApartAndResolvedAlike() throws {
        let origin = PeerIdentity()
        let stamp = HLCTimestamp(milliseconds: 9, counter: 0)
        let first = try NavlogEntry(
            id: Self.ids[0],
            fields: NavlogFields(waypoint: "TESAT"),
            author: "captain",
            origin: origin.peerID,
            timestamp: stamp
        )
        .signed(by: origin)
        var secondFields = first.fields
        secondFields.remarks = "rewritten"
        let second = try NavlogEntry(
            id: Self.ids[0],
            fields: secondFields,
            author: "captain",
            origin: origin.peerID,
            timestamp: stamp
        )
        .signed(by: origin)
        var a = NavlogLog([first])
        var b = NavlogLog([second])
        #expect(a.digest != b.digest, "the content hashes differ")
        let forB = a.newer(than: b.digest)
        let forA = b.newer(than: a.digest)
        #expect(forB == [first] && forA == [second])
        forB.forEach { b.merge($0) }
        forA.forEach { a.merge($0) }
        #expect(a == b)
    }

    /// A large log's digest goes in parts that each fit a frame and add up to the whole.
    @Test func aLargeDigestGoesInPartsThatFitAFrame() throws {
        let log = NavlogLog(
            (0..<9_001).map { number in
                NavlogEntry(
                    id: UUID(),
                    fields: NavlogFields(waypoint: "W\(number)"),
                    author: "first officer",
                    origin: Self.origins[0],
                    timestamp: HLCTimestamp(milliseconds: 1, counter: UInt16(number))
                )
            }
        )
        let parts = log.digest.batches(of: NavlogMessage.digestBatchSize)
        #expect(parts.map(\.versions.count) == [4_000, 4_000, 1_001])
        var whole = NavlogDigest(versions: [:])
        for part in parts {
            #expect(try JSONEncoder().encode(NavlogMessage.digest(versions: part, final: false)).count < 1 << 20)
            whole.add(part)
        }
        #expect(whole == log.digest)
        #expect(
            NavlogLog().digest.batches(of: 10).map(\.versions.count) == [0],
            "an empty log sends one empty, final part"
        )
    }

    /// A digest names each version and a hash of its content, never the content itself.
    @Test func aDigestNamesVersionsAndAContentHashNotContent() throws {
        let entry = NavlogEntry(
            id: Self.ids[2],
            fields: NavlogFields(waypoint: "TESAT", remarks: "secret remark"),
            author: "first officer",
            origin: Self.origins[1],
            timestamp: HLCTimestamp(milliseconds: 7, counter: 2)
        )
        let json = String(decoding: try JSONEncoder().encode(NavlogLog([entry]).digest), as: UTF8.self)
        #expect(
            json
                == "[\"00000000-0000-0000-0000-000000000002 458754 10000000-0000-0000-0000-000000000001 \(entry.contentHash) first officer\"]"
        )
        #expect(!json.contains("secret"))
        #expect(try JSONDecoder().decode(NavlogDigest.self, from: Data(json.utf8)) == NavlogLog([entry]).digest)
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(NavlogDigest.self, from: Data("[\"nonsense\"]".utf8))
        }
    }
}

/// What a host refuses from a peer, and why.
@Suite struct NavlogIntakeTests {
    static let now: UInt64 = 1_795_300_000_000

    /// The host that wrote the versions a peer sends in these tests.
    static let origin = PeerIdentity()

    static func version(_ fields: NavlogFields, author: String = "relief", at milliseconds: UInt64 = now) -> NavlogEntry
    {
        try! NavlogEntry(
            id: UUID(),
            fields: fields,
            author: author,
            origin: origin.peerID,
            timestamp: HLCTimestamp(milliseconds: milliseconds, counter: 0)
        )
        .signed(by: origin)
    }

    /// Only its origin can write a version: unsigned, signed with another key, altered after
    /// signing, or claiming the key of another origin, it is refused, and the reason said.
    @Test func aVersionItsOriginDidNotSignIsRefused() throws {
        let good = Self.version(NavlogFields(waypoint: "ARNEM"))
        var unsigned = good
        unsigned.key = nil
        unsigned.signature = nil
        var altered = good
        altered.fields.fuel = 100
        var otherKey = good
        otherKey.key = PeerIdentity().key
        let mallory = PeerIdentity()
        var claimed = try NavlogEntry(
            id: UUID(),
            fields: NavlogFields(waypoint: "EVIL"),
            author: "relief",
            origin: mallory.peerID,
            timestamp: HLCTimestamp(milliseconds: Self.now, counter: 1)
        ).signed(by: mallory)
        claimed.origin = Self.origin.peerID  // written by mallory in the origin's name
        for bad in [unsigned, altered, otherKey, claimed] {
            #expect(throws: NavlogError.self) { try bad.verify() }
        }
        var clock = HybridLogicalClock()
        let intake = NavlogIntake([unsigned, altered, otherKey, claimed, good], clock: &clock, now: Self.now)
        #expect(intake.accepted == [good])
        #expect(intake.refusals.map(\.code) == [.badSignature])
        #expect(
            intake.refusals.first?.message.hasPrefix("4 version(s) were refused, as their origin did not sign them")
                == true
        )
    }

    /// An update is its sender's own new version: one naming another origin is refused, even
    /// signed by that origin (relayed versions travel in `entries`, where they are taken).
    @Test func anUpdateFromAnotherThanItsOriginIsRefused() {
        let relayed = Self.version(NavlogFields(waypoint: "ARNEM"))
        let sender = PeerIdentity().peerID
        var clock = HybridLogicalClock()
        let update = NavlogIntake([relayed], from: sender, clock: &clock, now: Self.now)
        #expect(update.accepted.isEmpty)
        #expect(update.refusals.map(\.code) == [.notFromSender])
        #expect(update.refusals.first?.message.contains("\(sender)") == true)
        let entries = NavlogIntake([relayed], clock: &clock, now: Self.now)
        #expect(entries.accepted == [relayed])
    }

    @Test func whatAUserCouldTypeIsTakenInAndTheRestRefusedWithTheReason() {
        let good = Self.version(
            NavlogFields(
                leg: 4,
                waypoint: "ARNEM",
                planned: "11:02",
                fuel: 9800,
                altitude: 37000,
                remarks: "d\u{E9}tour"
            )
        )
        let refused = [
            Self.version(NavlogFields(waypoint: "TESAT", remarks: "cut\u{0}short")),
            Self.version(NavlogFields(waypoint: "\u{1B}[2J")),
            Self.version(NavlogFields(waypoint: "NIPAS", fuel: -5)),
            Self.version(NavlogFields(waypoint: "NIPAS", remarks: String(repeating: "x", count: 501))),
            Self.version(NavlogFields(waypoint: "")),
            Self.version(NavlogFields(waypoint: "NIPAS"), author: "cap\ntain"),
        ]
        var clock = HybridLogicalClock()
        let intake = NavlogIntake(refused + [good], clock: &clock, now: Self.now)
        #expect(intake.accepted == [good])
        #expect(clock.latest == good.timestamp, "only what is taken in moves the clock")
        #expect(intake.refusals.map(\.code) == [.badVersion])
        #expect(
            intake.refusals.first?.message
                == "6 version(s) were refused, as a user could not have typed them; the first, of entry \(refused[0].id), because remarks=cut\\u{0}short is not valid: expected text without control characters"
        )
    }

    /// A version that breaks several rules is refused for the first, in docs/NAVLOG.md 3's order:
    /// another origin's update, then fields a user could not have typed, then the signature.
    @Test func aVersionBreakingSeveralRulesIsRefusedForTheFirstInTheSpecsOrder() {
        let other = Self.version(NavlogFields(waypoint: "ARNEM"))
        var forgedAndForeign = other
        forgedAndForeign.fields.remarks = "altered after signing"
        var forgedAndUntypable = Self.version(NavlogFields(leg: 1000, waypoint: "NIPAS"))
        forgedAndUntypable.signature = String(repeating: "0", count: 128)
        var clock = HybridLogicalClock()
        let update = NavlogIntake([forgedAndForeign], from: UUID(), clock: &clock, now: Self.now)
        #expect(update.refusals.map(\.code) == [.notFromSender])
        let entries = NavlogIntake([forgedAndUntypable], clock: &clock, now: Self.now)
        #expect(entries.refusals.map(\.code) == [.badVersion])
        #expect(entries.refusals.first?.message.contains("leg=1000") == true)
        // The limits' edges, and DEL and a C1 control among the control characters.
        let edges = [
            Self.version(NavlogFields(leg: 1, waypoint: "A")),
            Self.version(NavlogFields(leg: 999, waypoint: "B", planned: "23:59")),
        ]
        let beyond = [
            Self.version(NavlogFields(leg: 0, waypoint: "C")), Self.version(NavlogFields(waypoint: "D\u{7F}")),
            Self.version(NavlogFields(waypoint: "E", remarks: "\u{85}")),
            Self.version(NavlogFields(waypoint: "F", planned: "24:00")),
        ]
        let limits = NavlogIntake(edges + beyond, clock: &clock, now: Self.now)
        #expect(limits.accepted == edges)
        #expect(limits.refusals.first?.message.hasPrefix("\(beyond.count) version(s)") == true)
    }

    /// Attachments that break docs/NAVLOG.md 1a's rules are refused with the version; the rules'
    /// edge cases are taken.
    @Test func attachmentsThatBreakTheirRulesAreRefused() throws {
        let sha = String(repeating: "ab", count: 32)
        func version(_ attachments: [NavlogAttachment]?) -> NavlogEntry {
            var version = NavlogEntry(
                id: UUID(),
                fields: NavlogFields(waypoint: "TESAT"),
                author: "relief",
                origin: Self.origin.peerID,
                timestamp: HLCTimestamp(milliseconds: Self.now, counter: 0)
            )
            version.attachments = attachments
            return try! version.signed(by: Self.origin)
        }
        let good = [
            version([
                NavlogAttachment(name: "a chart.pdf", length: 0, sha256: sha),
                NavlogAttachment(name: "b", length: Int64.max, sha256: sha),
            ]),
            version(
                (0..<16).map { NavlogAttachment(name: "file \(String(format: "%02d", $0))", length: 1, sha256: sha) }
            ),
        ]
        let refused = [
            version([]),
            version(
                (0..<17).map { NavlogAttachment(name: "file \(String(format: "%02d", $0))", length: 1, sha256: sha) }
            ),
            version([
                NavlogAttachment(name: "b", length: 1, sha256: sha),
                NavlogAttachment(name: "a", length: 1, sha256: sha),
            ]),
            version([
                NavlogAttachment(name: "a", length: 1, sha256: sha),
                NavlogAttachment(name: "a", length: 2, sha256: sha),
            ]),
            version([NavlogAttachment(name: "../etc/passwd", length: 1, sha256: sha)]),
            version([NavlogAttachment(name: "..", length: 1, sha256: sha)]),
            version([NavlogAttachment(name: "bell\u{7}", length: 1, sha256: sha)]),
            version([NavlogAttachment(name: "a", length: -1, sha256: sha)]),
            version([NavlogAttachment(name: "a", length: 1, sha256: String(repeating: "AB", count: 32))]),
            version([NavlogAttachment(name: "a", length: 1, sha256: "abcd")]),
        ]
        var clock = HybridLogicalClock()
        let intake = NavlogIntake(refused + good, clock: &clock, now: Self.now)
        #expect(intake.accepted == good)
        #expect(intake.refusals.map(\.code) == [.badVersion])
        #expect(intake.refusals.first?.message.contains("\(refused.count) version(s) were refused") == true)
    }

    @Test func aVersionMoreThanADayAheadIsRefusedAndTheClockStays() {
        let ahead = Self.version(NavlogFields(waypoint: "LATER"), at: Self.now + HybridLogicalClock.maximumLead + 1)
        var clock = HybridLogicalClock()
        let intake = NavlogIntake([ahead], clock: &clock, now: Self.now)
        #expect(intake.accepted.isEmpty)
        #expect(clock.latest == HLCTimestamp(rawValue: 0))
        #expect(intake.refusals.map(\.code) == [.clockAhead])
    }
}

@Suite struct SyncProgressTests {
    @Test func doneWhenBothSidesHaveAnswered() {
        var progress = SyncProgress()
        #expect(progress.received(500, final: false) == nil)
        #expect(progress.answered(sending: 3) == nil)
        #expect(progress.received(20, final: true).map { [$0.sent, $0.received] } == [3, 520])
        // And ready for the next exchange.
        #expect(progress.received(0, final: true) == nil)
        #expect(progress.answered(sending: 0).map { [$0.sent, $0.received] } == [0, 0])
    }
}

extension NavlogIntakeTests {
    /// A batch of versions in which one attachment's length is 2^63 (docs/NAVLOG.md 1a: below
    /// 2^63): the message decodes, that version is refused (`badVersion`), and the rest of the
    /// batch is taken. (The whole message did not decode before, and every version in it was
    /// dropped.)
    @Test func anAttachmentLengthBeyondInt64RefusesItsVersionAloneNotTheBatch() throws {
        let sha = String(repeating: "ab", count: 32)
        func version(_ waypoint: String, length: Int64) throws -> NavlogEntry {
            var version = NavlogEntry(
                id: UUID(),
                fields: NavlogFields(waypoint: waypoint),
                author: "relief",
                origin: Self.origin.peerID,
                timestamp: HLCTimestamp(milliseconds: Self.now, counter: 0)
            )
            version.attachments = [NavlogAttachment(name: "chart.pdf", length: length, sha256: sha)]
            return try version.signed(by: Self.origin)
        }
        let good = try version("GOOD", length: 10)
        let bad = try version("HUGE", length: 11)
        var json = String(
            decoding: try JSONEncoder().encode(NavlogMessage.entries(versions: [bad, good], final: true)),
            as: UTF8.self
        )
        json = json.replacingOccurrences(of: #""length":11"#, with: #""length":9223372036854775808"#)
        #expect(json.contains("9223372036854775808"))
        for huge in ["9223372036854775808", "18446744073709551616", "1e30", "10.5"] {
            let message = try JSONDecoder().decode(
                NavlogMessage.self,
                from: Data(json.replacingOccurrences(of: "9223372036854775808", with: huge).utf8)
            )
            guard case .entries(let versions, true) = message else {
                Issue.record("\(message)")
                continue
            }
            var clock = HybridLogicalClock()
            let intake = NavlogIntake(versions, clock: &clock, now: Self.now)
            #expect(intake.accepted == [good], "\(huge)")
            #expect(intake.refusals.map(\.code) == [.badVersion])
            #expect(intake.refusals.first?.message.contains("above 2^63 - 1") == true, "\(intake.refusals)")
        }
        // Not a number at all is still a message that does not decode.
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(
                NavlogMessage.self,
                from: Data(json.replacingOccurrences(of: "9223372036854775808", with: #""ten""#).utf8)
            )
        }
    }
}
