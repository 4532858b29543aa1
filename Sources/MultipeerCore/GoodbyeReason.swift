/// Why a link is being closed, sent in GOODBYE.
///
/// The session chooses the reasons it sends; an application reads them (``PeerLeftReason``).
public struct GoodbyeReason: Hashable, Sendable, CustomStringConvertible {
    /// The reason's number on the wire (docs/PROTOCOL.md, GOODBYE).
    public let rawValue: UInt16
    /// The reason numbered `rawValue`, as a GOODBYE read from the wire names it (one this
    /// version does not name is kept as a number).
    package init(rawValue: UInt16) { self.rawValue = rawValue }

    /// The session is shutting down.
    public static let shutdown = GoodbyeReason(rawValue: 0)
    /// No traffic arrived within the keepalive timeout.
    public static let keepaliveTimeout = GoodbyeReason(rawValue: 1)
    /// Another link to the same peer is kept instead of this one.
    public static let duplicateLink = GoodbyeReason(rawValue: 2)
    /// The peer broke the protocol.
    public static let protocolError = GoodbyeReason(rawValue: 3)
    /// The application went to the background.
    public static let suspended = GoodbyeReason(rawValue: 4)
    /// The peer is not (or no longer) in this side's roster of members.
    public static let notInRoster = GoodbyeReason(rawValue: 5)

    /// The reason's name, or its number for one this version does not name.
    public var description: String {
        switch self {
        case .shutdown: "shutdown"
        case .keepaliveTimeout: "keepaliveTimeout"
        case .duplicateLink: "duplicateLink"
        case .protocolError: "protocolError"
        case .suspended: "suspended"
        case .notInRoster: "notInRoster"
        default: "reason \(rawValue)"
        }
    }
}
