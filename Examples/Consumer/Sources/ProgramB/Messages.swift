// Another program's message types: the same names, or other names with the same wire name.
import MultipeerSession

/// The same bare type name as ProgramA's, in another module.
public struct Note: Codable, Sendable, Equatable {
    /// What the note says.
    public var text: String
    /// A note saying `text`.
    public init(text: String) { self.text = text }
}

/// Another Swift name for what ProgramA calls `Position`.
public struct Fix: MultipeerMessage, Equatable {
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
