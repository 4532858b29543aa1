import Foundation
import MultipeerCore
import MultipeerSession
import MultipeerTLS
import MultipeerTestSupport
import NIOCore
import Testing

@testable import NavlogSync

/// The sync messages as docs/NAVLOG.md spells them: each vector decodes to the message built
/// here, and the message encodes to the same JSON.
@Suite struct WireVectorTests {
    /// The key pair of RFC 8032's first Ed25519 test vector, as in docs/PROTOCOL.md.
    static let origin = try! PeerIdentity(
        rawPrivateKey: Array(Data(hex: "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
    )

    static let entry = try! NavlogEntry(
        id: UUID(uuidString: "3F2A1B7C-0000-4000-8000-000000000001")!,
        fields: NavlogFields(
            leg: 1,
            waypoint: "TESAT",
            planned: "10:05",
            fuel: 12400,
            altitude: 37000,
            remarks: "light chop"
        ),
        author: "captain",
        origin: origin.peerID,
        timestamp: HLCTimestamp(milliseconds: 1_795_312_526_980, counter: 2)
    ).signed(by: origin)

    @Test func theSignedBytesAndTheContentHashAreTheSpecs() throws {
        let vectors = try ProtocolVectors.blocks(in: "docs/NAVLOG.md", fence: "hex")
        let signed = try #require(vectors["navlog-signed-bytes"]).split(whereSeparator: \.isWhitespace).map {
            UInt8($0, radix: 16)!
        }
        #expect(Self.entry.origin == UUID(uuidString: "21FE31DF-A154-8261-A26B-F854046FD227"))
        #expect(Self.entry.signedBytes == signed)
        #expect(Self.entry.contentHash == "068a83730458f04fd8ebb8d4bcc51633")
        try Self.entry.verify()
    }

    /// The next version of the vector entry: the chart of docs/NAVLOG.md 1a attached, by its origin.
    static let entryWithAttachment: NavlogEntry = {
        var version = WireVectorTests.entry
        version.timestamp = HLCTimestamp(milliseconds: 1_795_312_526_980, counter: 3)
        version.attachments = [NavlogAttachment(name: "tesat-chart.pdf", length: 10, sha256: sha256OfTenBytes)]
        return try! version.signed(by: origin)
    }()

    /// The SHA-256 of the bytes 00 01 ... 09 (docs/PROTOCOL.md's resource vectors).
    static let sha256OfTenBytes = "1f825aa2f0020ef7cf91dfa30da4668d791c5d4824fc8e41354b89ec05795ab3"

    @Test func theSignedBytesOfAVersionWithAnAttachmentAreTheSpecs() throws {
        let vectors = try ProtocolVectors.blocks(in: "docs/NAVLOG.md", fence: "hex")
        let signed = try #require(vectors["navlog-signed-bytes-attachment"]).split(whereSeparator: \.isWhitespace).map {
            UInt8($0, radix: 16)!
        }
        #expect(Self.entryWithAttachment.signedBytes == signed)
        #expect(Self.entryWithAttachment.contentHash == "f2fa3c94967563b8ccae871bd02ad185")
        // The bytes before the attachments are those of the version without them.
        var without = Self.entryWithAttachment
        without.attachments = nil
        #expect(signed.starts(with: without.signedBytes) && signed.count > without.signedBytes.count)
        try Self.entryWithAttachment.verify()
        // An attachment changed after signing breaks the signature.
        var altered = Self.entryWithAttachment
        altered.attachments![0].length = 11
        #expect(throws: NavlogError.self) { try altered.verify() }
    }

    static let messages: [String: NavlogMessage] = {
        var index = NavlogIndex(NavlogLog([entry]))
        return [
            "navlog-ask": index.firstAsk(exchange: 7),
            "navlog-reply": .reply(exchange: 7, expand: [], versions: NavlogLog([entryWithAttachment]).digest),
            "navlog-need": .need(ids: [entry.id], final: true),
            "navlog-digest": .digest(versions: NavlogLog([entry]).digest, final: true),
            "navlog-entries": .entries(versions: [entry], final: true),
            "navlog-update": .update(entry: entry),
            "navlog-update-attachment": .update(entry: entryWithAttachment),
            "navlog-lack": .lack(attachments: [sha256OfTenBytes]),
        ]
    }()

    static func object(_ data: Data) throws -> NSDictionary {
        try #require(try JSONSerialization.jsonObject(with: data) as? NSDictionary)
    }

    @Test(arguments: [
        "navlog-ask", "navlog-reply", "navlog-need", "navlog-digest", "navlog-entries", "navlog-update",
        "navlog-update-attachment", "navlog-lack",
    ])
    func theSpecsVectorsMatchTheCode(name: String) throws {
        let vectors = try ProtocolVectors.blocks(in: "docs/NAVLOG.md", fence: "json")
        let vector = try #require(vectors[name], "docs/NAVLOG.md has no vector \(name)")
        let message = try #require(Self.messages[name])
        #expect(try JSONDecoder().decode(NavlogMessage.self, from: Data(vector.utf8)) == message)
        #expect(try Self.object(JSONEncoder().encode(message)) == Self.object(Data(vector.utf8)))
    }

    /// The vectors tell one exchange: the reply is what a holder of the entry's next version
    /// answers the ask, and the need what the asker then sends.
    @Test func theAskReplyAndNeedVectorsAreOneExchange() throws {
        guard case .ask(let exchange, let ranges)? = Self.messages["navlog-ask"] else {
            Issue.record("navlog-ask is an ask")
            return
        }
        var holder = NavlogIndex(NavlogLog([Self.entryWithAttachment]))
        let answer = holder.answer(ranges)
        #expect(answer.entries.isEmpty)
        #expect(
            Self.messages["navlog-reply"]
                == .reply(exchange: exchange, expand: answer.expand, versions: answer.versions)
        )
        var asker = NavlogIndex(NavlogLog([Self.entry]))
        var pull = NavlogPull()
        _ = pull.start(&asker, exchange: exchange)
        let next = pull.received(exchange: exchange, expand: answer.expand, versions: answer.versions, &asker)
        #expect(next == [Self.messages["navlog-need"]!])
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

    /// navlog-sync sends JSON (docs/NAVLOG.md), and reads its messages in the binary encoding too,
    /// as every receiver reads both (docs/PROTOCOL.md 2a): every vector's message round-trips
    /// through it.
    @Test func theMessagesAlsoDecodeFromTheBinaryEncoding() throws {
        for (name, message) in Self.messages {
            var payload = ByteBuffer()
            try MessageEncoding.binary.encode(message, into: &payload)
            #expect(try MessageEncoding.decode(NavlogMessage.self, from: payload) == message, "\(name)")
        }
    }

    /// A summary's sum is modulo 2^128: the carry out of the top bit is dropped.
    @Test func theSummaryVectorSumsAsTheSpecSays() throws {
        let vectors = try ProtocolVectors.blocks(in: "docs/NAVLOG.md", fence: "json")
        struct Vector: Decodable {
            var hashes: [String]
            var summary: NavlogSummary
        }
        let vector = try JSONDecoder().decode(Vector.self, from: Data(try #require(vectors["navlog-summary"]).utf8))
        let sum = try vector.hashes.reduce(UInt128(0)) { $0 &+ (try #require(NavlogSummary.number($1))) }
        #expect(vector.summary == NavlogSummary(count: vector.hashes.count, sum: sum))
        #expect(vector.summary.description == "2 008a83730458f04fd8ebb8d4bcc51732")
    }

    /// What a malformed ask, reply or need is refused for, at decoding.
    @Test(arguments: [
        #"{"ask":{"exchange":7,"ranges":[{"prefix":"","children":["0"]}]}}"#,
        #"{"ask":{"exchange":7,"ranges":[{"prefix":"3f","children":["0","0","0","0","0","0","0","0","0","0","0","0","0","0","0","0"]}]}}"#,
        #"{"ask":{"exchange":7,"ranges":[{"prefix":"0123456789ABCDEF0123456789ABCDEF","children":["0","0","0","0","0","0","0","0","0","0","0","0","0","0","0","0"]}]}}"#,
        #"{"ask":{"exchange":7,"ranges":[{"prefix":"","children":["0 00000000000000000000000000000000","0","0","0","0","0","0","0","0","0","0","0","0","0","0","0"]}]}}"#,
        #"{"ask":{"exchange":7,"ranges":[{"prefix":"","children":["1 068A83730458F04FD8EBB8D4BCC51633","0","0","0","0","0","0","0","0","0","0","0","0","0","0","0"]}]}}"#,
        #"{"ask":{"exchange":7,"ranges":[{"prefix":"","children":["-1 068a83730458f04fd8ebb8d4bcc51633","0","0","0","0","0","0","0","0","0","0","0","0","0","0","0"]}]}}"#,
        #"{"reply":{"exchange":7,"expand":["3G"],"versions":[]}}"#,
        #"{"reply":{"expand":[],"versions":[]}}"#,
        #"{"need":{"ids":["not a uuid"],"final":true}}"#,
    ])
    func malformedRequestsDoNotDecode(json: String) {
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(NavlogMessage.self, from: Data(json.utf8)) }
    }

    @Test func theMessagesTravelUnderOneTypeName() {
        #expect(MultipeerSession.wireName(of: NavlogMessage.self) == "NavlogSync.NavlogMessage")
    }
}

extension Data {
    /// Bytes from hexadecimal digits.
    init(hex: String) {
        self.init(
            stride(from: 0, to: hex.count, by: 2).map { offset in
                let start = hex.index(hex.startIndex, offsetBy: offset)
                return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
            }
        )
    }
}
