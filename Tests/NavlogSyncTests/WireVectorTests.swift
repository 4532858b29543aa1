import Foundation
import MultipeerSession
import MultipeerTestSupport
@testable import NavlogSync
import Testing

/// The sync messages as docs/NAVLOG.md spells them: each vector decodes to the message built
/// here, and the message encodes to the same JSON.
@Suite struct WireVectorTests {
    static let entry = NavlogEntry(
        id: UUID(uuidString: "3F2A1B7C-0000-4000-8000-000000000001")!,
        fields: NavlogFields(leg: 1, waypoint: "TESAT", planned: "10:05", fuel: 12400, altitude: 37000, remarks: "light chop"),
        author: "captain", origin: UUID(uuidString: "C0000000-0000-4000-8000-00000000000A")!,
        timestamp: HLCTimestamp(milliseconds: 1_795_312_526_980, counter: 2))

    static let messages: [String: NavlogMessage] = [
        "navlog-digest": .digest(versions: NavlogLog([entry]).digest),
        "navlog-entries": .entries(versions: [entry], final: true),
        "navlog-update": .update(entry: entry),
    ]

    static func object(_ data: Data) throws -> NSDictionary {
        try #require(try JSONSerialization.jsonObject(with: data) as? NSDictionary)
    }

    @Test(arguments: ["navlog-digest", "navlog-entries", "navlog-update"])
    func theSpecsVectorsMatchTheCode(name: String) throws {
        let vectors = try ProtocolVectors.blocks(in: "docs/NAVLOG.md", fence: "json")
        let vector = try #require(vectors[name], "docs/NAVLOG.md has no vector \(name)")
        let message = try #require(Self.messages[name])
        #expect(try JSONDecoder().decode(NavlogMessage.self, from: Data(vector.utf8)) == message)
        #expect(try Self.object(JSONEncoder().encode(message)) == Self.object(Data(vector.utf8)))
    }

    @Test func theMessagesTravelUnderOneTypeName() {
        #expect(MultipeerSession.wireName(of: NavlogMessage.self) == "NavlogSync.NavlogMessage")
    }
}
