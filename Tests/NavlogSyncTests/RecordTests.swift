import Foundation
import MultipeerSession
import MultipeerTestSupport
import Testing

@testable import MultipeerSync
@testable import NavlogSync

/// An entry's record as docs/NAVLOG.md 1 spells it, and what a host shows (section 3).
@Suite struct RecordTests {
    /// The file of docs/PROTOCOL.md's resource vectors (the ten bytes 00 01 ... 09).
    static let chart = try! SyncAttachment(
        sha256: Array(hex: "1f825aa2f0020ef7cf91dfa30da4668d791c5d4824fc8e41354b89ec05795ab3"),
        length: 10
    )

    static let record = NavlogRecord(
        id: UUID(uuidString: "3F2A1B7C-0000-4000-8000-000000000001")!,
        fields: NavlogFields(
            leg: 1,
            waypoint: "TESAT",
            planned: "10:05",
            fuel: 12_400,
            altitude: 37_000,
            remarks: "light chop"
        ),
        author: "captain",
        deleted: false,
        attachments: [NavlogAttachment(name: "tesat-chart.pdf", file: chart)]
    )

    static func vector() throws -> String {
        try #require(try ProtocolVectors.blocks(in: "docs/NAVLOG.md", fence: "json")["navlog-record"])
    }

    /// The vector reads as the record, and the record writes as the vector (JSON, keys
    /// sorted), and reads back from the binary encoding the store keeps it in; an attachment
    /// tells the store encoding it that the record holds its file.
    @Test func theRecordVectorIsTheSpecBothWays() throws {
        let vector = try Self.vector()
        #expect(try MessageEncoding.decode(NavlogRecord.self, from: Array(vector.utf8)) == Self.record)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        let written = String(decoding: try encoder.encode(Self.record), as: UTF8.self)
        #expect(written.filter { !$0.isWhitespace } == vector.filter { !$0.isWhitespace })
        let binary = try MessageEncoding.binary.encode(Self.record)
        #expect(try MessageEncoding.decode(NavlogRecord.self, from: binary) == Self.record)
        let (_, found) = try AttachmentCollector.collecting { try MessageEncoding.binary.encode(Self.record) }
        #expect(found == [Self.chart])
    }

    /// docs/SYNC.md 11's vector of the same entry as navlog-sync 0.9 signed it reads as this
    /// record: the two specs agree.
    @Test func navlogSyncZeroNinesVersionReadsAsTheRecord() throws {
        let hex = try #require(
            try ProtocolVectors.blocks(in: "docs/SYNC.md", fence: "hex")["sync-version-navlog-attachment"]
        )
        let version = try SignedVersion(decoding: Array(hex: hex.filter { !$0.isWhitespace }))
        #expect(version.collection == NavlogRecord.collectionName && version.recordID == Self.record.id)
        guard case .set(let fields) = version.change else {
            Issue.record("not a write: \(version.change)")
            return
        }
        #expect(try RecordFields.record(NavlogRecord.self, id: version.recordID, from: fields) == Self.record)
        #expect(version.attachments == [Self.chart])
    }

    /// The libFuzzer target for records starts from the vector, in JSON and in the binary
    /// encoding (Fuzz/Corpus/NavlogFuzzer).
    @Test func theFuzzersSeedsAreTheVector() throws {
        let corpus = ProtocolVectors.repositoryRoot.appendingPathComponent("Fuzz/Corpus/NavlogFuzzer")
        let json = try Data(contentsOf: corpus.appendingPathComponent("navlog-record"))
        #expect(try MessageEncoding.decode(NavlogRecord.self, from: Array(json)) == Self.record)
        let binary = try Data(contentsOf: corpus.appendingPathComponent("navlog-record-binary"))
        #expect(Array(binary) == (try MessageEncoding.binary.encode(Self.record)))
    }

    /// What a user could have typed is shown; every rule of docs/NAVLOG.md 3 a record breaks
    /// is `badVersion`, naming it.
    @Test func aRecordAUserCouldNotHaveTypedIsRefusedNamingTheRule() throws {
        try Self.record.validate()
        func changed(_ change: (inout NavlogRecord) -> Void) -> NavlogRecord {
            var record = Self.record
            change(&record)
            return record
        }
        let other = NavlogAttachment(name: "b", file: Self.chart)
        let cases: [(String, NavlogRecord)] = [
            ("not a UUID", changed { $0.id = "fuel" }),
            ("not a UUID", changed { $0.id = $0.id.lowercased() }),
            ("author", changed { $0.author = "" }),
            ("author", changed { $0.author = "cap\u{1b}[2Jtain" }),
            ("waypoint", changed { $0.fields.waypoint = String(repeating: "W", count: 33) }),
            ("leg", changed { $0.fields.leg = 1_000 }),
            ("HH:MM", changed { $0.fields.planned = "24:00" }),
            ("fuel", changed { $0.fields.fuel = -5 }),
            ("feet", changed { $0.fields.altitude = 60_001 }),
            ("control characters", changed { $0.fields.remarks = "a\u{0}b" }),
            ("name", changed { $0.attachments = [NavlogAttachment(name: "..", file: Self.chart)] }),
            ("sorted by name", changed { $0.attachments = [other, NavlogAttachment(name: "a", file: Self.chart)] }),
            ("empty list", changed { $0.attachments = [] }),
            (
                "more than 16",
                changed { record in
                    record.attachments = (0..<17).map {
                        NavlogAttachment(name: String(format: "%02d", $0), file: Self.chart)
                    }
                }
            ),
        ]
        for (rule, record) in cases {
            do {
                try record.validate()
                Issue.record("\(rule): shown")
            } catch {
                #expect(error.code == .badVersion && error.message.contains(rule), "\(rule): \(error)")
            }
        }
    }

    /// docs/NAVLOG.md section 4's table of events, which the process tests check every line
    /// against, reads as it says and finds what a line lacks or adds.
    @Test func theEventTableReadsAsWrittenAndCatchesAWrongLine() {
        let table = NavlogEventTable.spec
        #expect(table.events.count == 11)
        #expect(table.events["peer_left"]?.required == ["peer", "peer_id", "peer_key", "reason", "detail"])
        #expect(table.events["error"]?.required == ["code", "message"] && table.events["error"]?.optional == ["input"])
        #expect(
            table.events["attachment_done"]?.required
                == table.events["attachment_progress"].map { $0.required.union(["error"]) }
        )
        #expect(table.problem(with: NavlogLine(#"{"event":"listening","port":7000}"#)) == nil)
        #expect(
            table.problem(with: NavlogLine(#"{"event":"error","code":"badCommand","message":"no","input":"frob"}"#))
                == nil
        )
        #expect(table.problem(with: NavlogLine(#"{"event":"listening"}"#)) != nil, "a field missing")
        #expect(
            table.problem(with: NavlogLine(#"{"event":"listening","port":7000,"extra":1}"#)) != nil,
            "a field not listed"
        )
        #expect(table.problem(with: NavlogLine(#"{"event":"launched"}"#)) != nil, "an event not listed")
        #expect(
            table.problem(with: NavlogLine("navlog-sync: reloaded the key file")) == nil,
            "standard error is not an event"
        )
    }
}

extension Array where Element == UInt8 {
    /// The bytes of `hex` (pairs of hexadecimal digits).
    init(hex: String) {
        let digits = Array(hex.utf8)
        self = stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
        }
    }
}
