import Foundation
import MultipeerCore
import Testing

@testable import MultipeerSession

/// Which encoding a message travels in: its type's choice, else the session's (the bytes of
/// each are checked against PROTOCOL.md's vectors in ProtocolVectorTests, and a binary exchange
/// between sessions in the consumer's DeliveryTests).
@Suite struct MessageEncodingTests {
    struct Plain: Codable, Sendable {}

    struct Binary: MultipeerMessage {
        static var wireName: String { "binary" }
        static var wireEncoding: MessageEncoding? { .binary }
    }

    struct Named: MultipeerMessage {
        static var wireName: String { "named" }
    }

    struct Textual: MultipeerMessage {
        static var wireName: String { "textual" }
        static var wireEncoding: MessageEncoding? { .json }
    }

    @Test func theTypeChoosesElseTheSession() {
        var configuration = MultipeerSession.Configuration.test("encoding")
        #expect(configuration.messageEncoding == .binary, "the binary encoding unless asked")
        let binary = MultipeerSession(configuration: configuration, identity: PeerIdentity())
        configuration.messageEncoding = .json
        let json = MultipeerSession(configuration: configuration, identity: PeerIdentity())
        #expect(json.wireEncoding(of: Plain.self) == .json)
        #expect(binary.wireEncoding(of: Plain.self) == .binary)
        #expect(binary.wireEncoding(of: Named.self) == .binary)
        #expect(json.wireEncoding(of: Binary.self) == .binary)
        #expect(binary.wireEncoding(of: Textual.self) == .json)
    }
}
