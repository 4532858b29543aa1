internal import CGnuTLS
import Glibc
package import MultipeerCore
package import NIOCore

/// One GnuTLS session run over memory: ciphertext goes in with ``receive(_:)``, comes out
/// with ``takeOutbound()``; plaintext goes in with ``write(_:)`` and out with ``read(into:)``.
/// No sockets, so a client and a server engine can be tested against each other directly,
/// as swift-nio-ssl does with BoringSSL over a memory BIO.
///
/// Not thread-safe: an engine belongs to one event loop (or one test).
package final class TLSEngine {
    package enum Role: Sendable { case client, server }

    package enum HandshakeResult: Equatable, Sendable {
        /// More bytes from the peer are needed; send what ``takeOutbound()`` gives first.
        case incomplete
        case complete
        /// The handshake failed; an alert for the peer may wait in ``takeOutbound()``.
        case failed(MultipeerError)
    }

    package enum ReadResult: Equatable, Sendable {
        /// Everything decryptable so far was appended; more ciphertext is needed.
        case needMoreCiphertext
        /// The peer closed its side with a TLS close_notify.
        case closed
    }

    /// TLS 1.3 records carry at most 16 KiB of plaintext.
    package static let maximumRecordPlaintext = 16 * 1024

    let context: TLSContext
    /// A client's credentials, kept alive as long as its session.
    private let clientCredentials: ClientCredentials?
    package let role: Role
    /// How the peer is named in errors, e.g. "peer at 127.0.0.1:50412".
    package var peerDescription = "the peer"
    /// Set by the server's key callback when a client offers an identity we do not hold.
    var offeredUnknownIdentity: String?

    private let session: gnutls_session_t
    private let allocator: ByteBufferAllocator
    private var inbound: ByteBuffer
    private var outbound: ByteBuffer
    private var inboundEOF = false
    /// Whether the last pull found no bytes: GnuTLS may report E_AGAIN with ciphertext still
    /// buffered (after a post-handshake message), and then must be called again.
    private var pullFoundNothing = false
    /// The first bytes the peer sent, kept to tell plaintext and garbage from TLS in errors.
    private(set) var firstBytes: [UInt8] = []
    private(set) package var isHandshakeComplete = false
    private var failure: MultipeerError?

    /// - Parameter identity: For a client, the key of the ring it offers (nil: the newest).
    package init(
        role: Role,
        context: TLSContext,
        allocator: ByteBufferAllocator = ByteBufferAllocator(),
        offering identity: String? = nil
    ) throws {
        self.role = role
        self.context = context
        self.clientCredentials = role == .client ? context.clientCredentials(offering: identity) : nil
        self.allocator = allocator
        self.inbound = allocator.buffer(capacity: 0)
        self.outbound = allocator.buffer(capacity: 0)
        var session: gnutls_session_t?
        let flags =
            UInt32(role == .server ? GNUTLS_SERVER : GNUTLS_CLIENT) | UInt32(GNUTLS_NONBLOCK)
            | UInt32(GNUTLS_NO_TICKETS)
        var status = gnutls_init(&session, flags)
        guard status == 0, let session else {
            throw MultipeerError(gnutls: status, .tlsFailure, "cannot create a TLS session")
        }
        self.session = session
        status = gnutls_priority_set(session, context.priorities)
        if status == 0 {
            status =
                role == .server
                ? gnutls_credentials_set(session, GNUTLS_CRD_PSK, UnsafeMutableRawPointer(context.serverCredentials))
                : gnutls_credentials_set(
                    session,
                    GNUTLS_CRD_PSK,
                    UnsafeMutableRawPointer(clientCredentials!.credentials)
                )
        }
        guard status == 0 else {
            gnutls_deinit(session)
            throw MultipeerError(gnutls: status, .tlsFailure, "cannot configure a TLS session")
        }
        // Unretained: the engine owns the session and deinitialises it before going away.
        let me = Unmanaged.passUnretained(self).toOpaque()
        gnutls_session_set_ptr(session, me)
        gnutls_transport_set_ptr(session, me)
        gnutls_transport_set_push_function(session, tlsPush)
        gnutls_transport_set_pull_function(session, tlsPull)
        gnutls_transport_set_pull_timeout_function(session, tlsPullTimeout)
    }

    deinit {
        gnutls_deinit(session)
    }

    // MARK: Ciphertext in and out

    /// Hands the engine ciphertext that arrived from the peer.
    package func receive(_ ciphertext: ByteBuffer) {
        var ciphertext = ciphertext
        if firstBytes.count < 16 {
            firstBytes +=
                ciphertext.getBytes(
                    at: ciphertext.readerIndex,
                    length: min(16 - firstBytes.count, ciphertext.readableBytes)
                ) ?? []
        }
        if inbound.readableBytes == 0 {
            inbound = ciphertext
        } else {
            inbound.writeBuffer(&ciphertext)
        }
    }

    /// Tells the engine that the peer's byte stream ended: a ``read(into:)`` after it returns
    /// ``ReadResult/closed`` if a close_notify came, and throws `uncleanShutdown` if none did.
    package func receiveEOF() {
        inboundEOF = true
    }

    /// The peer's byte stream has ended (``receiveEOF()``).
    var inboundEnded: Bool { inboundEOF }

    /// Ciphertext to send to the peer, if any.
    package func takeOutbound() -> ByteBuffer? {
        guard outbound.readableBytes > 0 else { return nil }
        defer { outbound = allocator.buffer(capacity: 0) }
        return outbound
    }

    // MARK: Handshake

    /// Advances the handshake with what has arrived so far.
    package func handshake() -> HandshakeResult {
        if let failure { return .failed(failure) }
        if isHandshakeComplete { return .complete }
        while true {
            let status = gnutls_handshake(session)
            switch status {
            case 0:
                isHandshakeComplete = true
                return .complete
            case GNUTLS_E_AGAIN, GNUTLS_E_INTERRUPTED:
                return .incomplete
            case _ where gnutls_error_is_fatal(status) == 0:
                continue  // a warning alert or similar: keep going
            default:
                return .failed(fail(status, duringHandshake: true))
            }
        }
    }

    // MARK: Records

    /// Decrypts every complete record received so far, appending the plaintext to `plaintext`.
    package func read(into plaintext: inout ByteBuffer) throws -> ReadResult {
        precondition(isHandshakeComplete, "read before the handshake completed")
        if let failure { throw failure }
        // Plaintext is no longer than the ciphertext it comes from: reserve once, not per record,
        // and let a record that does not fit be read in parts rather than grow the buffer.
        plaintext.reserveCapacity(minimumWritableBytes: max(inbound.readableBytes, 1024))
        while true {
            pullFoundNothing = false
            var status = 0
            plaintext.writeWithUnsafeMutableBytes(minimumWritableBytes: plaintext.writableBytes > 0 ? 1 : 16 * 1024) {
                buffer in
                status = gnutls_record_recv(session, buffer.baseAddress, buffer.count)
                return max(status, 0)
            }
            switch status {
            case 1...:
                continue
            case 0:
                return .closed
            case Int(GNUTLS_E_AGAIN), Int(GNUTLS_E_INTERRUPTED):
                if pullFoundNothing { return .needMoreCiphertext }
            case _ where gnutls_error_is_fatal(Int32(status)) == 0:
                continue
            default:
                throw fail(Int32(status), duringHandshake: false)
            }
        }
    }

    /// Encrypts `plaintext` into records (up to 16 KiB each) ready in ``takeOutbound()``.
    package func write(_ plaintext: ByteBuffer) throws {
        precondition(isHandshakeComplete, "write before the handshake completed")
        if let failure { throw failure }
        var remaining = plaintext
        // Each record adds at most a 5-byte header, the content type and a 16-byte tag.
        let records = plaintext.readableBytes / Self.maximumRecordPlaintext + 1
        outbound.reserveCapacity(minimumWritableBytes: plaintext.readableBytes + records * 32)
        while remaining.readableBytes > 0 {
            let sent = remaining.withUnsafeReadableBytes { gnutls_record_send(session, $0.baseAddress, $0.count) }
            if sent >= 0 {
                remaining.moveReaderIndex(forwardBy: sent)
            } else if sent != Int(GNUTLS_E_AGAIN) && sent != Int(GNUTLS_E_INTERRUPTED) {
                throw fail(Int32(sent), duringHandshake: false)
            }
        }
    }

    /// Keying material exported from this connection (RFC 8446 7.5, RFC 5705) under `label`,
    /// with an empty context: the same on both ends of this connection, different on any other.
    package func exportKeyingMaterial(label: String, length: Int) throws -> [UInt8] {
        precondition(isHandshakeComplete, "export before the handshake completed")
        var output = [UInt8](repeating: 0, count: length)
        let status = label.withCString { labelPointer in
            output.withUnsafeMutableBytes {
                gnutls_prf_rfc5705(session, strlen(labelPointer), labelPointer, 0, nil, length, $0.baseAddress)
            }
        }
        guard status == 0 else {
            throw MultipeerError(gnutls: status, .tlsFailure, "cannot export keying material from the TLS connection")
        }
        return output
    }

    /// Queues a TLS close_notify for the peer.
    package func shutdown() {
        guard isHandshakeComplete, failure == nil else { return }
        _ = gnutls_bye(session, GNUTLS_SHUT_WR)
    }

    /// What was negotiated, e.g. `TLS1.3 ECDHE-PSK X25519 AES-128-GCM`.
    package var negotiatedDescription: String {
        let (version, keyExchange, group, cipher) = negotiated
        return "\(version) \(keyExchange) \(group) \(cipher)"
    }

    /// The negotiated TLS version, key exchange, (EC)DHE group and cipher, by GnuTLS's names.
    package var negotiated: (version: String, keyExchange: String, group: String, cipher: String) {
        func name(_ pointer: UnsafePointer<CChar>?) -> String { pointer.map { String(cString: $0) } ?? "none" }
        return (
            name(gnutls_protocol_get_name(gnutls_protocol_get_version(session))),
            name(gnutls_kx_get_name(gnutls_kx_get(session))),
            name(gnutls_group_get_name(gnutls_group_get(session))),
            name(gnutls_cipher_get_name(gnutls_cipher_get(session)))
        )
    }

    /// Records a fatal error, queues the alert that fits it, and returns the error to report.
    private func fail(_ status: Int32, duringHandshake: Bool) -> MultipeerError {
        let error = describe(status, duringHandshake: duringHandshake)
        failure = error
        if status != GNUTLS_E_FATAL_ALERT_RECEIVED && status != GNUTLS_E_PREMATURE_TERMINATION {
            _ = gnutls_alert_send_appropriate(session, status)
        }
        return error
    }

    var lastAlertName: String {
        gnutls_alert_get_name(gnutls_alert_get(session)).map { String(cString: $0) } ?? "unknown"
    }

    var lastAlert: gnutls_alert_description_t { gnutls_alert_get(session) }

    // MARK: Transport callbacks

    fileprivate func push(_ bytes: UnsafeRawBufferPointer) -> Int {
        outbound.writeBytes(bytes)
        return bytes.count
    }

    fileprivate func pull(into destination: UnsafeMutableRawBufferPointer) -> Int {
        guard inbound.readableBytes > 0 else {
            if inboundEOF { return 0 }
            pullFoundNothing = true
            gnutls_transport_set_errno(session, EAGAIN)
            return -1
        }
        let count = min(destination.count, inbound.readableBytes)
        inbound.withUnsafeReadableBytes {
            destination.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(count)))
        }
        inbound.moveReaderIndex(forwardBy: count)
        return count
    }

    fileprivate var hasInput: Bool { inbound.readableBytes > 0 || inboundEOF }
}

private func tlsPush(_ pointer: gnutls_transport_ptr_t?, _ data: UnsafeRawPointer?, _ length: Int) -> Int {
    let engine = Unmanaged<TLSEngine>.fromOpaque(pointer!).takeUnretainedValue()
    return engine.push(UnsafeRawBufferPointer(start: data, count: length))
}

private func tlsPull(_ pointer: gnutls_transport_ptr_t?, _ data: UnsafeMutableRawPointer?, _ length: Int) -> Int {
    let engine = Unmanaged<TLSEngine>.fromOpaque(pointer!).takeUnretainedValue()
    return engine.pull(into: UnsafeMutableRawBufferPointer(start: data, count: length))
}

private func tlsPullTimeout(_ pointer: gnutls_transport_ptr_t?, _ milliseconds: UInt32) -> Int32 {
    let engine = Unmanaged<TLSEngine>.fromOpaque(pointer!).takeUnretainedValue()
    return engine.hasInput ? 1 : 0
}
