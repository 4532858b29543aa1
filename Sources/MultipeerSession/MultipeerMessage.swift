/// A message type that names itself on the wire.
///
/// Every DATA frame carries the name of its message's type, and a receiver hands the message to
/// the subscribers of that name (``MultipeerSession/messages(of:)``). Any `Codable & Sendable`
/// type can be sent; its name on the wire is then its bare type name (`Note` for
/// `struct Note`, whatever module defines it), so two programs that each define a `Note` talk.
/// Conform to this protocol to choose the name instead: to tell apart two types of the same
/// name, or to keep a name when a type is renamed or moved.
///
/// A conforming type may also choose its encoding, whatever the session's, and keep its bare
/// name (each of the two has a default).
///
/// ```swift
/// struct PositionReport: MultipeerMessage {
///     static var wireName: String { "navlog.position.v1" }
///     static var wireEncoding: MessageEncoding? { .binary }
///     var latitude: Double
///     var longitude: Double
/// }
/// ```
public protocol MultipeerMessage: Codable, Sendable {
    /// The name this type's messages travel under: at most 255 bytes of UTF-8; both sides must
    /// use the same one. By default the bare type name, as for a type that does not conform.
    static var wireName: String { get }
    /// How this type's messages are encoded; nil (the default) for the session's
    /// ``MultipeerSession/Configuration/messageEncoding``. Receivers read either encoding.
    static var wireEncoding: MessageEncoding? { get }
}

extension MultipeerMessage {
    /// The bare type name (`Note`, not `MyApp.Note`): what a type that does not conform travels
    /// under, so a type that conforms only to choose its encoding keeps its name.
    public static var wireName: String { String(describing: Self.self) }

    /// Nil: the type's messages are encoded as the session's
    /// ``MultipeerSession/Configuration/messageEncoding`` says.
    public static var wireEncoding: MessageEncoding? { nil }
}
