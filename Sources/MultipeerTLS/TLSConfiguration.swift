internal import CGnuTLS
import MultipeerCore
import NIOConcurrencyHelpers

/// TLS settings of a link. The protocol itself is fixed (docs/PROTOCOL.md): TLS 1.3,
/// ECDHE-PSK, AES-128-GCM first.
package struct TLSConfiguration: Sendable {
    /// The group keys: a listener accepts any, a dialler offers the newest first.
    package var keys: KeyRing
    /// How long the TLS handshake and the HELLO exchange together may take. Default 5 s.
    package var handshakeTimeout: Duration

    /// Creates a configuration.
    package init(keys: KeyRing, handshakeTimeout: Duration = .seconds(5)) {
        self.keys = keys
        self.handshakeTimeout = handshakeTimeout
    }

    /// A configuration with one group key.
    package init(psk: PreSharedKey, handshakeTimeout: Duration = .seconds(5)) {
        self.init(keys: KeyRing(psk), handshakeTimeout: handshakeTimeout)
    }

    /// The GnuTLS priority string: TLS 1.3 only, ECDHE-PSK only, AES-128-GCM preferred. (A
    /// SHA-256 PSK can only pair with SHA-256 suites, so AES-256-GCM would never be chosen.)
    package static let priorities =
        "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1"
        + ":-CIPHER-ALL:+AES-128-GCM:+CHACHA20-POLY1305"
}

/// GnuTLS credentials and priorities built from a ``TLSConfiguration`` and shared by every
/// engine made from it. The key ring can change while links run (``update(_:)``): a server
/// looks keys up at each handshake, and a client's credentials are made per key and kept alive
/// by the engines that use them (GnuTLS requires credentials to outlive their sessions).
///
/// `@unchecked Sendable`: the C objects are created in `init` and freed in `deinit`, and only
/// read in between, which GnuTLS allows from any thread; the ring and the client credentials
/// are behind a lock.
package final class TLSContext: @unchecked Sendable {
    package let configuration: TLSConfiguration
    let serverCredentials: gnutls_psk_server_credentials_t
    let priorities: gnutls_priority_t
    private let state: NIOLockedValueBox<(keys: KeyRing, clients: [String: ClientCredentials])>

    package init(configuration: TLSConfiguration) throws {
        self.configuration = configuration
        var server: gnutls_psk_server_credentials_t?
        var status = gnutls_psk_allocate_server_credentials(&server)
        guard status == 0, let server else {
            throw MultipeerError(gnutls: status, .tlsFailure, "cannot allocate TLS credentials")
        }
        gnutls_psk_set_server_credentials_function2(server, serverPSKCallback)
        var priorities: gnutls_priority_t?
        status = gnutls_priority_init2(&priorities, Self.priorityString, nil, 0)
        guard status == 0, let priorities else {
            gnutls_psk_free_server_credentials(server)
            throw MultipeerError(gnutls: status, .tlsFailure, "cannot set up TLS priorities")
        }
        self.serverCredentials = server
        self.priorities = priorities
        self.state = NIOLockedValueBox((configuration.keys, [:]))
        try update(configuration.keys)
    }

    private static let priorityString = TLSConfiguration.priorities

    deinit {
        gnutls_priority_deinit(priorities)
        gnutls_psk_free_server_credentials(serverCredentials)
    }

    /// The key ring in use now.
    package var keys: KeyRing { state.withLockedValue { $0.keys } }

    /// Uses `keys` from now on: new connections are accepted with any of them and dialled with
    /// the newest first. Links already up are not touched.
    package func update(_ keys: KeyRing) throws {
        try state.withLockedValue { state in
            var clients: [String: ClientCredentials] = [:]
            for key in keys.keys {
                clients[key.identity] =
                    try state.clients[key.identity].flatMap { $0.key == key ? $0 : nil } ?? ClientCredentials(key)
            }
            state = (keys, clients)
        }
    }

    /// The credentials a client offers: the key named `identity`, or the newest.
    func clientCredentials(offering identity: String?) -> ClientCredentials {
        state.withLockedValue { state in
            state.clients[identity ?? state.keys.newest.identity] ?? state.clients[state.keys.newest.identity]!
        }
    }
}

/// A client's credentials for one key, freed when the last engine using them is gone.
///
/// `@unchecked Sendable`: set up in `init`, freed in `deinit`, read-only in between.
final class ClientCredentials: @unchecked Sendable {
    let key: PreSharedKey
    let credentials: gnutls_psk_client_credentials_t

    init(_ key: PreSharedKey) throws {
        var client: gnutls_psk_client_credentials_t?
        var status = gnutls_psk_allocate_client_credentials(&client)
        guard status == 0, let client else {
            throw MultipeerError(gnutls: status, .tlsFailure, "cannot allocate TLS credentials")
        }
        status = key.withDatums { identity, key in
            gnutls_psk_set_client_credentials2(client, &identity, &key, GNUTLS_PSK_KEY_RAW)
        }
        guard status == 0 else {
            gnutls_psk_free_client_credentials(client)
            throw MultipeerError(gnutls: status, .tlsFailure, "cannot set up TLS credentials")
        }
        self.key = key
        self.credentials = client
    }

    deinit {
        gnutls_psk_free_client_credentials(credentials)
    }
}

extension PreSharedKey {
    /// Calls `body` with the identity and key as GnuTLS datums, valid only during the call.
    func withDatums<R>(_ body: (inout gnutls_datum_t, inout gnutls_datum_t) -> R) -> R {
        var identityBytes = Array(identity.utf8)
        return identityBytes.withUnsafeMutableBufferPointer { identityPointer in
            key.withUnsafeBytes { keyPointer in
                var identityDatum = gnutls_datum_t(
                    data: identityPointer.baseAddress,
                    size: UInt32(identityPointer.count)
                )
                var keyDatum = gnutls_datum_t(
                    data: UnsafeMutablePointer(mutating: keyPointer.bindMemory(to: UInt8.self).baseAddress),
                    size: UInt32(keyPointer.count)
                )
                return body(&identityDatum, &keyDatum)
            }
        }
    }
}

/// The server's key lookup, by the identity the client offers, in the ring. An identity the ring
/// does not hold is answered with a random key, so the client sees the same failure as for a
/// wrong key and cannot probe for identities; the engine remembers the identity to name it in
/// its own error.
private func serverPSKCallback(
    session: gnutls_session_t?,
    username: UnsafePointer<gnutls_datum_t>?,
    key: UnsafeMutablePointer<gnutls_datum_t>?
) -> Int32 {
    guard let session, let username, let key, let pointer = gnutls_session_get_ptr(session) else { return -1 }
    let engine = Unmanaged<TLSEngine>.fromOpaque(pointer).takeUnretainedValue()
    let offered = UnsafeBufferPointer(start: username.pointee.data, count: Int(username.pointee.size))
    let psk = engine.context.keys.key(identity: offered)
    let length = psk?.key.count ?? 32
    guard let memory = multipeer_gnutls_malloc(length) else { return -1 }
    if let psk {
        psk.key.withUnsafeBytes { memory.copyMemory(from: $0.baseAddress!, byteCount: length) }
    } else {
        engine.offeredUnknownIdentity = String(decoding: offered.prefix(128), as: UTF8.self)
        guard gnutls_rnd(GNUTLS_RND_NONCE, memory, length) == 0 else {
            multipeer_gnutls_free(memory)
            return -1
        }
    }
    key.pointee = gnutls_datum_t(data: memory.assumingMemoryBound(to: UInt8.self), size: UInt32(length))
    return 0
}

extension TLSConfiguration {
    /// The version of the GnuTLS library in use, e.g. `3.7.9`.
    package static var libraryVersion: String {
        gnutls_check_version(nil).map { String(cString: $0) } ?? "unknown"
    }
}
