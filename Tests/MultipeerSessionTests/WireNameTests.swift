import Testing

@testable import MultipeerSession

/// Two types of one program under one wire name: said (a warning, once) when one of them did
/// not declare the name, let be when both declared it.
@Suite struct WireNameTests {
    enum Cockpit {
        struct Reading: Codable, Sendable { var value: Int }
    }

    enum Cabin {
        struct Reading: Codable, Sendable { var text: String }
    }

    enum Galley {
        struct Reading: MultipeerMessage {
            static var wireName: String { "galley.reading" }
            var text: String
        }

        struct OldReading: MultipeerMessage {
            static var wireName: String { "galley.reading" }
            var value: Int
        }
    }

    @Test func aSecondTypeUnderATakenBareNameIsToldAndDeclaredSharersAreNot() {
        #expect(MessageTypeTraits.of(Cockpit.Reading.self).takenBy == nil)
        let second = MessageTypeTraits.of(Cabin.Reading.self)
        #expect(second.name == "Reading" && second.takenBy == String(reflecting: Cockpit.Reading.self))
        // Asked again, the same answer (the warning was said once, when the type was first used).
        #expect(MessageTypeTraits.of(Cabin.Reading.self).takenBy == second.takenBy)
        #expect(MessageTypeTraits.of(Galley.Reading.self).takenBy == nil)
        #expect(
            MessageTypeTraits.of(Galley.OldReading.self).takenBy == nil,
            "two shapes of one declared name, on purpose"
        )
    }
}
