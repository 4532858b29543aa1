import Foundation
import Testing

@testable import NavlogSync

/// Anti-entropy by prefix summaries (docs/NAVLOG.md, sections 2 and 3), between two logs in
/// memory: the asker ends with every version of the holder's that wins, and what they exchange
/// grows with their differences, not with their logs.
@Suite struct ReconciliationTests {
    /// A host in memory: its log and the index anti-entropy reads.
    struct Host {
        var log: NavlogLog
        var index: NavlogIndex

        init(_ entries: [NavlogEntry]) {
            log = NavlogLog(entries)
            index = NavlogIndex(log)
        }
    }

    /// One exchange as section 3 runs it, each side answering in order: `asker` gets from
    /// `holder` what it lacks. Returns every message, both ways.
    static func pull(_ asker: inout Host, from holder: inout Host) -> [NavlogMessage] {
        var exchange = NavlogPull()
        var toHolder = exchange.start(&asker.index)
        var transcript = toHolder
        var finished = false
        while !toHolder.isEmpty {
            var toAsker: [NavlogMessage] = []
            switch toHolder.removeFirst() {
            case .ask(let number, let ranges):
                let answer = holder.index.answer(ranges)
                if !answer.entries.isEmpty {
                    toAsker.append(.entries(versions: answer.entries.map { holder.log.entries[$0]! }, final: false))
                }
                toAsker.append(.reply(exchange: number, expand: answer.expand, versions: answer.versions))
            case .need(let ids, let final):
                toAsker.append(.entries(versions: ids.compactMap { holder.log.entries[$0] }, final: final))
            case let other:
                Issue.record("the asker sent \(other)")
            }
            for message in toAsker {
                transcript.append(message)
                switch message {
                case .entries(let versions, let final):
                    for version in versions where asker.log.merge(version) { asker.index.update(version) }
                    #expect(!finished, "nothing after the final batch")
                    finished = finished || final
                case .reply(let number, let expand, let versions):
                    let next = exchange.received(exchange: number, expand: expand, versions: versions, &asker.index)
                    #expect(next != nil, "every reply answers an ask")
                    toHolder += next ?? []
                    transcript += next ?? []
                default:
                    Issue.record("the holder sent \(message)")
                }
            }
        }
        #expect(finished, "the exchange ends with a final batch")
        return transcript
    }

    static func bytes(_ messages: [NavlogMessage]) -> Int {
        messages.reduce(0) { $0 + (try! JSONEncoder().encode($1)).count }
    }

    /// Everything but the versions themselves: summaries, names, ids.
    static func overhead(_ messages: [NavlogMessage]) -> Int {
        bytes(messages.filter { if case .entries = $0 { false } else { true } })
    }

    static let origins = (0..<3).map { _ in UUID() }

    static func version(
        _ id: UUID = UUID(),
        at time: UInt64,
        author: String = "captain",
        origin: Int = 0,
        deleted: Bool = false,
        remarks: String? = nil
    ) -> NavlogEntry {
        NavlogEntry(
            id: id,
            fields: NavlogFields(leg: 1, waypoint: "WP", remarks: remarks),
            author: author,
            origin: origins[origin],
            timestamp: HLCTimestamp(milliseconds: 1_795_300_000_000 + time, counter: 0),
            deleted: deleted
        )
    }

    static func log(_ count: Int) -> [NavlogEntry] {
        (0..<count).map { version(at: UInt64($0), deleted: $0 % 10 == 9) }
    }

    @Test func hostsWithTheSameLogExchangeFourSmallMessages() {
        let shared = Self.log(2_000)
        var asker = Host(shared)
        var holder = Host(shared)
        let transcript = Self.pull(&asker, from: &holder)
        #expect(transcript.count == 4, "ask, reply, final need, final entries: \(transcript.count)")
        #expect(Self.bytes(transcript) < 1_500, "\(Self.bytes(transcript)) bytes")
        #expect(asker.log == holder.log)
    }

    /// A host that holds nothing gets every version at once, none of them by name first.
    @Test func aFreshHostGetsEveryVersionWithoutNamesOrSplits() {
        var asker = Host([])
        var holder = Host(Self.log(2_000))
        let transcript = Self.pull(&asker, from: &holder)
        #expect(asker.log == holder.log)
        #expect(transcript.count { if case .ask = $0 { true } else { false } } == 1)
        #expect(
            transcript.allSatisfy {
                if case .reply(_, let expand, let versions) = $0 {
                    expand.isEmpty && versions.versions.isEmpty
                } else {
                    true
                }
            }
        )
    }

    /// The old digest named every version of the log (about 130 bytes each); now the
    /// summaries, names and ids exchanged grow with the differences. (8,000 entries: enough
    /// for three levels of prefixes, small enough not to load the machine under a sanitizer.)
    @Test(arguments: [1, 10, 100])
    func whatIsExchangedGrowsWithTheDifferences(differences: Int) {
        let shared = Self.log(8_000)
        let lacking = (0..<differences).map { Self.version(at: 30_000 + UInt64($0), origin: 1) }
        var asker = Host(shared)
        var holder = Host(shared + lacking)
        let transcript = Self.pull(&asker, from: &holder)
        #expect(asker.log == holder.log)
        let overhead = Self.overhead(transcript)
        #expect(overhead < 1_000 + differences * 4_000, "\(overhead) bytes for \(differences) difference(s)")
        if differences <= 10 { #expect(overhead < 8_000 * 130 / 10, "a tenth of a digest at most") }
    }

    /// Random logs that share, lack and differ (edits, deletes, versions with one stamp and
    /// other content, ids sharing long prefixes, down to all 32 digits but one): after an
    /// exchange each way, both hold the same log, the union by the order of section 1. (15 rounds:
    /// more held a thread of the cooperative pool for half a minute under a sanitizer.)
    @Test func randomLogsConvergeAfterAnExchangeEachWay() {
        var generator = SystemRandomNumberGenerator()
        for round in 0..<15 {
            let crowded = UInt8.random(in: 0...255, using: &generator)
            let ids: [UUID] = (0..<Int.random(in: 0...200, using: &generator)).map { number in
                guard number % 3 == 0 else { return UUID() }
                // A third of the ids share 15 of their 16 bytes, so prefixes split down to the last digit.
                return UUID(
                    uuid: (crowded, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, UInt8(truncatingIfNeeded: number))
                )
            }
            var left: [NavlogEntry] = []
            var right: [NavlogEntry] = []
            for (number, id) in Set(ids).enumerated() {
                let time = UInt64.random(in: 0...50, using: &generator)
                let base = Self.version(id, at: time, deleted: Bool.random(using: &generator))
                switch number % 6 {
                case 0:
                    left.append(base)
                    right.append(base)
                case 1: left.append(base)
                case 2: right.append(base)
                case 3:
                    left.append(base)
                    right.append(Self.version(id, at: time + 1, author: "first officer", origin: 1))
                case 4:
                    left.append(base)
                    right.append(Self.version(id, at: time, remarks: "other content"))
                default:
                    left.append(base)
                    right.append(Self.version(id, at: time, author: "navigator", origin: 2, deleted: true))
                }
            }
            var a = Host(left)
            var b = Host(right)
            _ = Self.pull(&a, from: &b)
            _ = Self.pull(&b, from: &a)
            #expect(a.log == b.log, "round \(round)")
            #expect(a.log == NavlogLog(left).merging(NavlogLog(right)), "round \(round): the union")
        }
    }

    /// A reply to no ask is refused (nil: the host reports it); one of an earlier exchange,
    /// begun anew when the link broke, is ignored however late it comes, and the new exchange
    /// goes on.
    @Test func aReplyToNoAskIsRefusedAndOneOfAnEarlierExchangeIgnored() {
        let none = NavlogDigest(versions: [:])
        var index = NavlogIndex(NavlogLog(Self.log(100)))
        var exchange = NavlogPull()
        #expect(exchange.received(exchange: 1, expand: [], versions: none, &index) == nil)
        _ = exchange.start(&index, exchange: 1)
        _ = exchange.start(&index, exchange: 2)
        #expect(
            exchange.received(exchange: 1, expand: [NavlogPrefix("A")!], versions: none, &index) == [],
            "the earlier exchange's"
        )
        #expect(exchange.unanswered == 1)
        #expect(exchange.received(exchange: 2, expand: [], versions: none, &index) == [.need(ids: [], final: true)])
        #expect(exchange.received(exchange: 2, expand: [], versions: none, &index) == nil, "answered once")
    }
}
