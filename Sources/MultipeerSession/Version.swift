import MultipeerCore

extension MultipeerSession {
    /// This library's version, as CHANGELOG.md names it.
    public static let version = "0.9.0"
    /// The protocol version its sessions speak (docs/PROTOCOL.md) and announce in HELLO: a
    /// session of another protocol version is refused (`protocolVersionMismatch`), one of the
    /// same interoperates whatever its library's version.
    public static let protocolVersion = Int(Hello.currentProtocolVersion)
}
