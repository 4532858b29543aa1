import Foundation
import MultipeerCore
import NIOCore
import Testing

/// The reasons a receiver gives for a payload that does not decode (REJECT, docs/PROTOCOL.md
/// 3b): the type, the field and what was expected, not the decoder's debug text alone.
@Suite struct DecodingReasonTests {
    struct Fields: Codable {
        var waypoint: String
        var fuel: Int?
    }
    struct Version: Codable {
        var id: Int
        var fields: Fields
    }
    enum Message: Codable {
        case entries(versions: [Version], final: Bool)
        case lack(attachments: [String])
    }

    static func reason(_ json: String) -> String? {
        do {
            _ = try MessageEncoding.decode(Message.self, from: ByteBuffer(string: json))
            return nil
        } catch {
            return MessageEncoding.reason(error, decoding: "Navlog")
        }
    }

    @Test func anUnknownCaseSaysWhatAMessageOfTheTypeIs() {
        #expect(
            Self.reason(#"{"bogus":{"x":1}}"#)
                == "a Navlog whose payload is not an object with exactly one key naming a case of Message"
        )
    }

    @Test func aMissingFieldIsNamedByItsPath() {
        #expect(
            Self.reason(
                #"{"entries":{"final":true,"versions":[{"id":1,"fields":{"waypoint":"A"}},{"id":2,"fields":{}}]}}"#
            )
                == #"a Navlog without its field "entries.versions[1].fields.waypoint""#
        )
    }

    @Test func aFieldOfAnotherTypeSaysWhatWasExpected() throws {
        let reason = try #require(
            Self.reason(#"{"entries":{"final":true,"versions":[{"id":1,"fields":{"waypoint":"A","fuel":"lots"}}]}}"#)
        )
        #expect(
            reason.hasPrefix(#"a Navlog whose field "entries.versions[0].fields.fuel" is not of type Int: "#),
            "\(reason)"
        )
    }

    @Test func theBinaryEncodingSaysTheSame() throws {
        struct Wrong: Codable {
            var id: String
            var fields: [String: Int]
        }
        var payload = ByteBuffer()
        try MessageEncoding.binary.encode(["lack": ["attachments": [Wrong(id: "x", fields: [:])]]], into: &payload)
        let reason = try #require(throws: (any Error).self) { try MessageEncoding.decode(Message.self, from: payload) }
        #expect(
            MessageEncoding.reason(reason, decoding: "Navlog").hasPrefix(
                #"a Navlog whose field "lack.attachments[0]" is not of type String"#
            ),
            "\(MessageEncoding.reason(reason, decoding: "Navlog"))"
        )
    }
}
