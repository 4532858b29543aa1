internal import CGnuTLS
import MultipeerCore

// Every GnuTLS failure becomes a MultipeerError here, and only here: what the code means for
// a user of a PSK link, in words, with GnuTLS's own text beside it.
extension TLSEngine {
    func describe(_ status: Int32, duringHandshake: Bool) -> MultipeerError {
        let peer = peerDescription
        func error(_ code: MultipeerError.Code, _ message: String) -> MultipeerError {
            MultipeerError(gnutls: status, code, message)
        }

        if duringHandshake, role == .server, let identity = offeredUnknownIdentity {
            return error(
                .authenticationFailed,
                "\(peer) failed PSK authentication: it offered the identity \"\(identity.printable)\", which none of this session's group keys has (Configuration.keys)"
            )
        }
        switch status {
        case GNUTLS_E_RECEIVED_ILLEGAL_PARAMETER where duringHandshake && role == .server,
            GNUTLS_E_DECRYPTION_FAILED where duringHandshake:
            // The PSK binder (server) or Finished (either side) did not verify: keys differ.
            return error(.authenticationFailed, "\(peer) failed PSK authentication: keys differ")
        case GNUTLS_E_FATAL_ALERT_RECEIVED:
            return describeAlert(duringHandshake: duringHandshake)
        case GNUTLS_E_UNSUPPORTED_VERSION_PACKET where firstBytes.first == 0x16,
            GNUTLS_E_NO_CIPHER_SUITES, GNUTLS_E_UNKNOWN_CIPHER_SUITE, GNUTLS_E_INSUFFICIENT_CREDENTIALS,
            GNUTLS_E_NO_COMMON_KEY_SHARE, GNUTLS_E_MISSING_EXTENSION:
            return error(
                .tlsNegotiationFailed,
                "\(peer) offered no TLS 1.3 ECDHE-PSK handshake (an older TLS version, or certificates only); this group accepts nothing else"
            )
        case GNUTLS_E_UNEXPECTED_PACKET_LENGTH where inboundEnded && !duringHandshake:
            // At the end of the stream: a short record is one cut off, not a malformed one.
            return error(
                .uncleanShutdown,
                "\(peer) closed the connection without a TLS close_notify, in the middle of a record: \(truncation)"
            )
        case GNUTLS_E_UNEXPECTED_PACKET_LENGTH, GNUTLS_E_UNSUPPORTED_VERSION_PACKET, GNUTLS_E_UNEXPECTED_PACKET,
            GNUTLS_E_RECORD_OVERFLOW:
            if duringHandshake && !looksLikeTLS {
                return error(.notTLS, "\(peer) sent data that is not TLS\(firstBytesSummary)")
            }
            return error(.tlsFailure, "\(peer) broke the TLS record protocol")
        case GNUTLS_E_DECRYPTION_FAILED:
            return error(.corruptedRecord, "a TLS record from \(peer) failed to decrypt: it was altered in transit")
        case GNUTLS_E_PREMATURE_TERMINATION where duringHandshake:
            return error(.closedDuringHandshake, "\(peer) closed the connection during the TLS handshake")
        case GNUTLS_E_PREMATURE_TERMINATION:
            return error(.uncleanShutdown, "\(peer) closed the connection without a TLS close_notify: \(truncation)")
        default:
            return error(.tlsFailure, "TLS with \(peer) failed\(duringHandshake ? " during the handshake" : "")")
        }
    }

    private func describeAlert(duringHandshake: Bool) -> MultipeerError {
        let peer = peerDescription
        let alert = "alert \(lastAlertName) (\(lastAlert.rawValue))"
        switch lastAlert {
        case GNUTLS_A_ILLEGAL_PARAMETER where duringHandshake && role == .client,
            GNUTLS_A_DECRYPT_ERROR where duringHandshake,
            GNUTLS_A_BAD_RECORD_MAC where duringHandshake,
            GNUTLS_A_UNKNOWN_PSK_IDENTITY:
            return MultipeerError(
                .authenticationFailed,
                "\(peer) refused PSK authentication: keys differ",
                underlying: alert
            )
        case GNUTLS_A_PROTOCOL_VERSION, GNUTLS_A_HANDSHAKE_FAILURE, GNUTLS_A_INSUFFICIENT_SECURITY:
            return MultipeerError(
                .tlsNegotiationFailed,
                "\(peer) refused the TLS 1.3 ECDHE-PSK handshake",
                underlying: alert
            )
        default:
            return MultipeerError(.alertReceived, "\(peer) ended TLS with a fatal alert", underlying: alert)
        }
    }

    /// What a truncation means, for its error.
    private var truncation: String { "it crashed or was cut off, and what it sent last may be missing" }

    /// Whether the first byte received is a TLS record type (handshake or alert).
    private var looksLikeTLS: Bool {
        firstBytes.first == 0x16 || firstBytes.first == 0x15
    }

    /// ` (it starts with "GET / HTTP/1.1")` for text, ` (it starts with 0x…)` for binary.
    private var firstBytesSummary: String {
        guard !firstBytes.isEmpty else { return "" }
        let text = firstBytes.prefix { $0 >= 0x20 && $0 < 0x7F || $0 == 0x0D || $0 == 0x0A }
        if text.count >= 4 {
            return " (it starts with \"\(String(decoding: text, as: UTF8.self).printable)\", plaintext)"
        }
        return " (it starts with 0x\(firstBytes.prefix(8).map { String($0, radix: 16).leftPadded(to: 2) }.joined()))"
    }
}

extension String {
    /// The string with control characters escaped, safe for one log line.
    var printable: String {
        String(
            unicodeScalars.flatMap {
                $0.properties.generalCategory == .control ? Array($0.escaped(asASCII: true).unicodeScalars) : [$0]
            }.map(Character.init)
        )
    }

    func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
