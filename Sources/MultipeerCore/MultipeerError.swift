/// The one error type of the library: a stable ``Code`` to switch on, a sentence that says
/// what happened and what to do, and the text of the C library underneath, when there is one.
///
/// New codes can be added without breaking callers, as with SwiftNIO's error codes:
/// ``Code`` is a struct, not an enum.
public struct MultipeerError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong, in a form a program can compare against.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        /// The code's name, e.g. `outboxFull`.
        public var description: String { name }

        /// A frame announced a length above the configured maximum.
        public static let frameTooLarge = Code("frameTooLarge")
        /// The link ended in the middle of a frame.
        public static let truncatedFrame = Code("truncatedFrame")
        /// A frame's value could not be parsed as the message its type names.
        public static let malformedMessage = Code("malformedMessage")
        /// The peer speaks another version of the wire protocol.
        public static let protocolVersionMismatch = Code("protocolVersionMismatch")
        /// A HELLO's key does not derive the peer ID it claims: the peer is not who it says.
        public static let identityMismatch = Code("identityMismatch")
        /// A signature does not verify: a HELLO forged or relayed from another connection, or
        /// signed data altered or written in another's name.
        public static let badSignature = Code("badSignature")
        /// The peer proved its key, but the session's roster does not list it: the link is refused.
        public static let notInRoster = Code("notInRoster")
        /// A dialled address answered with another peer than the one discovery placed there (an
        /// advert that is stale, mistaken or false): the link is closed and the next address tried.
        public static let unexpectedPeer = Code("unexpectedPeer")
        /// The link reached this very peer (same peer UUID).
        public static let selfConnection = Code("selfConnection")
        /// The first frame on a link was not a HELLO.
        public static let helloExpected = Code("helloExpected")
        /// The TLS pre-shared-key authentication failed: keys or identities differ.
        public static let authenticationFailed = Code("authenticationFailed")
        /// The peer sent bytes that are not TLS (plaintext or garbage).
        public static let notTLS = Code("notTLS")
        /// The peer offered no TLS version, key exchange or cipher this side accepts (TLS 1.3 ECDHE-PSK).
        public static let tlsNegotiationFailed = Code("tlsNegotiationFailed")
        /// A TLS record failed to decrypt or verify: the bytes were altered in transit.
        public static let corruptedRecord = Code("corruptedRecord")
        /// The peer sent a fatal TLS alert.
        public static let alertReceived = Code("alertReceived")
        /// Any other TLS failure; the underlying text says which.
        public static let tlsFailure = Code("tlsFailure")
        /// The peer's byte stream ended (TCP FIN) without a TLS close_notify, perhaps in the
        /// middle of a record: the peer crashed or was killed, or someone on the path cut the
        /// connection. Not an orderly close; what the peer sent last may be missing.
        public static let uncleanShutdown = Code("uncleanShutdown")
        /// The TLS handshake or HELLO exchange did not finish in time.
        public static let handshakeTimeout = Code("handshakeTimeout")
        /// The link closed before the handshake finished.
        public static let closedDuringHandshake = Code("closedDuringHandshake")
        /// A pre-shared key or key file is unusable.
        public static let invalidKey = Code("invalidKey")
        /// A value given by the application is out of range (a name too long, say).
        public static let invalidArgument = Code("invalidArgument")
        /// A TCP connection could not be set up.
        public static let connectionFailed = Code("connectionFailed")
        /// Reliable DATA skipped a sequence number on its link: the sender lost track; the link
        /// is closed so that the sender resends from the gap on the next one.
        public static let outOfSequence = Code("outOfSequence")
        /// The listening socket could not be bound: the port is in use or not allowed.
        public static let listenFailed = Code("listenFailed")
        /// An inbound connection was refused at once: as many handshakes, or links, as the
        /// session's limits allow were already under way (``MultipeerSession/Limits``).
        public static let connectionLimit = Code("connectionLimit")
        /// avahi-daemon (or the D-Bus system bus) is not running, or cannot be reached.
        public static let discoveryUnavailable = Code("discoveryUnavailable")
        /// Avahi refused to advertise or browse; the underlying text says why.
        public static let discoveryFailure = Code("discoveryFailure")
        /// Nothing arrived on a link for the keepalive timeout: the peer or the path is gone.
        public static let keepaliveTimeout = Code("keepaliveTimeout")
        /// A message was sent to a peer that is not active.
        public static let peerNotActive = Code("peerNotActive")
        /// A peer's outbox of unacknowledged messages is full (and the session is set to fail fast).
        public static let outboxFull = Code("outboxFull")
        /// A peer that left stayed away: a reliable send waited for room in its outbox for the
        /// session's `sendTimeout`, or the peer was forgotten (`forget(peer:)`).
        public static let peerAway = Code("peerAway")
        /// An encoded message is larger than a frame may be.
        public static let messageTooLarge = Code("messageTooLarge")
        /// The peer's application does not read messages of this type: its session said which
        /// types it reads (`Configuration.messageTypes`), and this is none of
        /// them. It runs another build of the application, older or newer: send it what it reads.
        public static let messageTypeNotRead = Code("messageTypeNotRead")
        /// A message could not be encoded or decoded with its Codable conformance.
        public static let codingFailed = Code("codingFailed")
        /// The session is not running, or was already run.
        public static let sessionState = Code("sessionState")
        /// A resource's transfer was cancelled, by this side or the peer (the message says which).
        public static let resourceCancelled = Code("resourceCancelled")
        /// A resource's bytes, put together, did not have the offered SHA-256; nothing of them is kept.
        public static let resourceCorrupted = Code("resourceCorrupted")
        /// The receiver's disk filled during a resource's transfer; what was written is kept, to resume.
        public static let resourceDiskFull = Code("resourceDiskFull")
        /// The receiver cannot write in its resource directory.
        public static let resourceUnwritable = Code("resourceUnwritable")
        /// The file being sent changed or went during its transfer: nothing more of it is sent.
        public static let resourceChanged = Code("resourceChanged")
        /// The peer takes no resources (it has no resource directory), or refused this one.
        public static let resourceRefused = Code("resourceRefused")
        /// A stream was cancelled, by this side or by the peer (the message says which).
        public static let streamCancelled = Code("streamCancelled")
        /// The peer does not take a stream: it takes none, or has too many open.
        public static let streamRefused = Code("streamRefused")
        /// A stream is gone at the peer: its session stopped or restarted.
        public static let streamLost = Code("streamLost")
    }

    /// What went wrong.
    public var code: Code
    /// A sentence for people: what happened, and where it helps, what to do.
    public var message: String
    /// The C library's own text (`gnutls_strerror`, `avahi_strerror`), if a C call failed.
    public var underlying: String?

    /// An error as the library makes one. An application makes its own only to test how it
    /// handles those the library throws or reports (in `SessionEvent` values it
    /// feeds its own code, say); the library's codes are the only ones there are.
    public init(_ code: Code, _ message: String, underlying: String? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    /// The message, with the C library's text in parentheses when there is one.
    public var description: String {
        guard let underlying else { return message }
        return "\(message) (\(underlying))"
    }
}
