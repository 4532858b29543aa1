internal import CAvahi
import Glibc
package import Logging
import MultipeerCore
import NIOConcurrencyHelpers

/// A connection to the system's avahi-daemon over D-Bus, through the Avahi client library on
/// its own thread (Avahi's threaded poll). Advertisements and browsers are registered on it;
/// when the daemon restarts, the connection makes a new client and registers them all again,
/// so the application does nothing.
///
/// One connection serves any number of advertisers and browsers: ``shared(waitForDaemon:logger:)``
/// gives the process-wide one.
///
/// `@unchecked Sendable`: every mutable property, and every Avahi object, is touched only on the
/// poll thread (inside Avahi's callbacks, which hold the poll lock) or under the poll lock.
package final class AvahiConnection: @unchecked Sendable {
    private let poll: OpaquePointer
    let logger: Logger
    // Guarded by the poll lock.
    private var client: OpaquePointer?
    private var isRunning = false
    private var registrations: [ObjectIdentifier: any AvahiRegistration] = [:]
    /// The timer that tries again to make a client, while the D-Bus system bus is not there
    /// (``scheduleRetry()``).
    private var retry: OpaquePointer?
    /// The browser of each service type, shared by its subscribers.
    var browsers: [String: AvahiBrowser] = [:]

    private static let sharedConnection = NIOLockedValueBox<AvahiConnection?>(nil)

    /// The process-wide connection, made on first use.
    ///
    /// - Parameter waitForDaemon: If avahi-daemon is not running, wait for it instead of throwing.
    package static func shared(
        waitForDaemon: Bool = false,
        logger: Logger = .current
    ) throws -> AvahiConnection {
        try sharedConnection.withLockedValue { shared in
            if let shared { return shared }
            let connection = try AvahiConnection(waitForDaemon: waitForDaemon, logger: logger)
            shared = connection
            return connection
        }
    }

    /// Connects to avahi-daemon.
    ///
    /// - Parameter waitForDaemon: If the daemon is not running, wait for it to appear rather than
    ///   throw an error that says how to start it.
    package init(waitForDaemon: Bool = false, logger: Logger = .current) throws {
        guard let poll = avahi_threaded_poll_new() else {
            throw MultipeerError(.discoveryUnavailable, "cannot start Avahi's event thread")
        }
        self.poll = poll
        self.logger = logger
        // The first state callback fires inside avahi_client_new, before the poll thread runs:
        // nothing else can touch this object yet, so no lock is needed.
        var error: Int32 = 0
        let flags = waitForDaemon ? AVAHI_CLIENT_NO_FAIL : AvahiClientFlags(rawValue: 0)
        client = avahi_client_new(
            avahi_threaded_poll_get(poll),
            flags,
            avahiClientCallback,
            Unmanaged.passUnretained(self).toOpaque(),
            &error
        )
        if client == nil {
            // NO_FAIL waits for the daemon on the bus, not for the bus itself (a machine still
            // booting): a session told to wait tries again every second.
            // (deinit frees the poll)
            guard waitForDaemon, Self.isAbsence(error) else { throw Self.connectError(error) }
            logger.info(
                "waiting for the D-Bus system bus and avahi-daemon",
                metadata: ["multipeer.error": "\(String(cString: avahi_strerror(error)))"]
            )
            scheduleRetry()
        }
        guard avahi_threaded_poll_start(poll) == 0 else {
            throw MultipeerError(.discoveryUnavailable, "cannot start Avahi's event thread")
        }
    }

    // Also runs when init throws after the poll was made.
    deinit {
        avahi_threaded_poll_stop(poll)  // harmless if the thread never started
        if let retry { avahi_threaded_poll_get(poll).pointee.timeout_free(retry) }
        if let client { avahi_client_free(client) }
        avahi_threaded_poll_free(poll)
    }

    /// Whether `error` says the daemon or the D-Bus system bus is not there (yet).
    private static func isAbsence(_ error: Int32) -> Bool {
        error == Int32(AVAHI_ERR_NO_DAEMON) || error == Int32(AVAHI_ERR_DBUS_ERROR)
    }

    static func connectError(_ error: Int32) -> MultipeerError {
        let text = String(cString: avahi_strerror(error))
        guard isAbsence(error) else {
            return MultipeerError(.discoveryUnavailable, "cannot connect to avahi-daemon", underlying: text)
        }
        return MultipeerError(
            .discoveryUnavailable,
            "avahi-daemon is not running (or the D-Bus system bus is not), so peers cannot be discovered over DNS-SD. "
                + "Start it (systemctl start avahi-daemon; or as root: mkdir -p /run/dbus; dbus-daemon --system --fork; "
                + "avahi-daemon -D --no-chroot), let the session wait for it, or configure static peers",
            underlying: text
        )
    }

    // MARK: Registrations

    /// Starts `registration`: now if the daemon is running, otherwise as soon as it is.
    func register(_ registration: any AvahiRegistration) {
        withPollLock { registerLocked(registration) }
    }

    /// Stops `registration` and frees its Avahi objects; no callback reaches it afterwards.
    func unregister(_ registration: any AvahiRegistration) {
        withPollLock { unregisterLocked(registration) }
    }

    /// ``register(_:)`` for a caller holding the poll lock.
    func registerLocked(_ registration: any AvahiRegistration) {
        registrations[ObjectIdentifier(registration)] = registration
        if isRunning, let client { registration.attach(client) }
    }

    /// ``unregister(_:)`` for a caller holding the poll lock.
    func unregisterLocked(_ registration: any AvahiRegistration) {
        guard registrations.removeValue(forKey: ObjectIdentifier(registration)) != nil else { return }
        registration.remove()
    }

    /// Runs `body` holding the poll lock. Never call from an Avahi callback: it holds the lock already.
    func withPollLock<T>(_ body: () throws -> T) rethrows -> T {
        avahi_threaded_poll_lock(poll)
        defer { avahi_threaded_poll_unlock(poll) }
        return try body()
    }

    /// The text of the client's last error. Poll thread or poll lock only.
    func lastErrorText() -> String {
        client.map { String(cString: avahi_strerror(avahi_client_errno($0))) } ?? "no client"
    }

    // MARK: Client state (poll thread)

    fileprivate func clientStateChanged(_ changedClient: OpaquePointer, _ state: AvahiClientState) {
        switch state {
        case AVAHI_CLIENT_S_RUNNING:
            client = changedClient
            guard !isRunning else { return }
            isRunning = true
            logger.debug("avahi-daemon is running")
            for registration in registrations.values { registration.attach(changedClient) }
        case AVAHI_CLIENT_S_COLLISION, AVAHI_CLIENT_S_REGISTERING:
            // The host name is being (re)registered: services must be withdrawn and added again
            // once the client is running.
            isRunning = false
            for registration in registrations.values { registration.withdraw() }
        case AVAHI_CLIENT_FAILURE:
            isRunning = false
            let error = avahi_client_errno(changedClient)
            if error == Int32(AVAHI_ERR_DISCONNECTED) {
                logger.info("avahi-daemon went away; reconnecting when it is back")
                // Freeing the client frees every group, browser and resolver made on it.
                for registration in registrations.values { registration.detached() }
                avahi_client_free(changedClient)
                client = nil
                reconnect()
            } else {
                logger.info("Avahi client failed: \(String(cString: avahi_strerror(error)))")
            }
        case AVAHI_CLIENT_CONNECTING:
            logger.info("waiting for avahi-daemon to start")
        default:
            break
        }
    }

    /// Makes a client again (the daemon went away); while the D-Bus system bus is not there
    /// either, tries every second (``scheduleRetry()``). Poll thread.
    fileprivate func reconnect() {
        var error: Int32 = 0
        client = avahi_client_new(
            avahi_threaded_poll_get(poll),
            AVAHI_CLIENT_NO_FAIL,
            avahiClientCallback,
            Unmanaged.passUnretained(self).toOpaque(),
            &error
        )
        if client == nil {
            logger.debug(
                "cannot connect to avahi-daemon yet; trying again in a second",
                metadata: ["multipeer.error": "\(String(cString: avahi_strerror(error)))"]
            )
            scheduleRetry()
        }
    }

    /// Calls ``reconnect()`` in a second, on the poll thread. Before the thread starts, or on it.
    private func scheduleRetry() {
        let api = avahi_threaded_poll_get(poll)!
        var when = timeval()
        avahi_elapse_time(&when, 1_000, 0)
        if let retry {
            api.pointee.timeout_update(retry, &when)
        } else {
            retry = api.pointee.timeout_new(api, &when, avahiRetryCallback, Unmanaged.passUnretained(self).toOpaque())
        }
    }
}

/// Something kept registered with avahi-daemon: an advertisement or a browser. Every method is
/// called on the poll thread or under the poll lock.
protocol AvahiRegistration: AnyObject {
    /// Creates the Avahi objects on `client`, which is running.
    func attach(_ client: OpaquePointer)
    /// The client stopped running for a moment (host name registration): withdraw what is published.
    func withdraw()
    /// The client and every Avahi object made on it are gone; forget them.
    func detached()
    /// Free the Avahi objects for good.
    func remove()
}

private func avahiRetryCallback(_ timeout: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?) {
    guard let userdata else { return }
    Unmanaged<AvahiConnection>.fromOpaque(userdata).takeUnretainedValue().reconnect()
}

private func avahiClientCallback(
    _ client: OpaquePointer?,
    _ state: AvahiClientState,
    _ userdata: UnsafeMutableRawPointer?
) {
    guard let client, let userdata else { return }
    Unmanaged<AvahiConnection>.fromOpaque(userdata).takeUnretainedValue().clientStateChanged(client, state)
}
