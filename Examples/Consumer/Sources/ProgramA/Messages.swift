// One program's message types, as its own module defines them (see ProgramB).
import MultipeerSession

/// Named on the wire by its bare type name, `Note`.
public struct Note: Codable, Sendable, Equatable {
    public var text: String
    public init(text: String) { self.text = text }
}

/// Named on the wire by what it declares, whatever Swift calls it.
public struct Position: MultipeerMessage, Equatable {
    public static var wireName: String { "consumer.position" }
    public var latitude: Double
    public var longitude: Double
    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}
