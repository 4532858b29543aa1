// Another program's message types: the same names, or other names with the same wire name.
import MultipeerSession

/// The same bare type name as ProgramA's, in another module.
public struct Note: Codable, Sendable, Equatable {
    public var text: String
    public init(text: String) { self.text = text }
}

/// Another Swift name for what ProgramA calls `Position`.
public struct Fix: MultipeerMessage, Equatable {
    public static var wireName: String { "consumer.position" }
    public var latitude: Double
    public var longitude: Double
    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}
