// One program's message types, as its own module defines them (see ProgramB).
import MultipeerSession

/// Named on the wire by its bare type name, `Note`.
public struct Note: Codable, Sendable, Equatable {
    /// What the note says.
    public var text: String
    /// A note saying `text`.
    public init(text: String) { self.text = text }
}

/// Named on the wire by what it declares, whatever Swift calls it.
public struct Position: MultipeerMessage, Equatable {
    /// The name both programs' position types travel under.
    public static var wireName: String { "consumer.position" }
    /// Degrees north.
    public var latitude: Double
    /// Degrees east.
    public var longitude: Double
    /// A position at these coordinates.
    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}
