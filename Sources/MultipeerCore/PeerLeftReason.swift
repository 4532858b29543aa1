/// Why a peer left the active set.
public enum PeerLeftReason: Hashable, Sendable, CustomStringConvertible {
    /// The peer said GOODBYE with this reason.
    case goodbye(GoodbyeReason)
    /// Nothing arrived on the link for the keepalive timeout.
    case keepaliveTimeout
    /// The link failed or closed without a GOODBYE; the error, when there was one.
    case linkClosed(MultipeerError?)
    /// The peer restarted: a link from its newer incarnation replaced this one.
    case restarted
    /// This session was suspended or is shutting down.
    case local(GoodbyeReason)

    /// The reason in a few words, for logs.
    public var description: String {
        switch self {
        case .goodbye(let reason): "peer said goodbye (\(reason))"
        case .keepaliveTimeout: "keepalive timeout"
        case .linkClosed(let error?): "link closed: \(error)"
        case .linkClosed(nil): "link closed"
        case .restarted: "peer restarted"
        case .local(let reason): "closed here (\(reason))"
        }
    }
}
