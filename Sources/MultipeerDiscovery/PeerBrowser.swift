internal import CAvahi
package import struct Foundation.UUID
import Glibc
import Logging
import MultipeerCore

/// Finds the peers advertising a service type over DNS-SD, through avahi-daemon.
///
/// Each peer is reported once however many interfaces and protocols announce it, and lost when
/// the last announcement goes. This peer's own advertisement is skipped (by UUID, not by name),
/// and so are adverts of another protocol version or without a valid `id` (logged at debug
/// level; an advert of an earlier version at notice level, saying to upgrade that peer). When avahi-daemon restarts, every peer is reported lost, then found again once the
/// daemon is back. Browsers of one service type on one connection share one Avahi browser and
/// its resolvers, so many sessions in a process stay within the daemon's per-client limits.
package struct PeerBrowser: PeerDiscovery {
    package let serviceType: ServiceType
    package let localPeerID: UUID
    package let connection: AvahiConnection

    package init(serviceType: ServiceType, localPeerID: UUID, connection: AvahiConnection) {
        self.serviceType = serviceType
        self.localPeerID = localPeerID
        self.connection = connection
    }

    package func browse() -> AsyncStream<BrowseEvent> {
        let (events, continuation) = AsyncStream<BrowseEvent>.makeStream()
        let token = UUID()
        continuation.onTermination = { [connection, serviceType] _ in
            connection.unsubscribe(serviceType: serviceType.rawValue, token: token)
        }
        connection.subscribe(serviceType: serviceType.rawValue, token: token, localPeerID: localPeerID, events: continuation)
        return events
    }
}

extension AvahiConnection {
    /// Adds a subscriber to the browser of `serviceType`, starting the browser if it is the first.
    func subscribe(serviceType: String, token: UUID, localPeerID: UUID, events: AsyncStream<BrowseEvent>.Continuation) {
        withPollLock {
            let browser = browsers[serviceType] ?? {
                let browser = AvahiBrowser(serviceType: serviceType, connection: self)
                browsers[serviceType] = browser
                registerLocked(browser)
                return browser
            }()
            browser.subscribe(token, localPeerID: localPeerID, events: events)
        }
    }

    /// Removes a subscriber; the last one stops the browser and frees its resolvers.
    func unsubscribe(serviceType: String, token: UUID) {
        withPollLock {
            guard let browser = browsers[serviceType] else { return }
            browser.unsubscribe(token)
            if browser.isUnused {
                browsers[serviceType] = nil
                unregisterLocked(browser)
            }
        }
    }
}

/// The Avahi side of browsing one service type: one service browser, a resolver per service
/// instance, and the subscribers' views of what they found.
///
/// `@unchecked Sendable`: used only on the poll thread or under the poll lock.
final class AvahiBrowser: AvahiRegistration, @unchecked Sendable {
    /// Keeps a resolver's context alive as long as the resolver, and names its instance.
    final class Resolution {
        unowned let browser: AvahiBrowser
        let key: AdvertDirectory.InstanceKey
        let isOnThisHost: Bool
        var resolver: OpaquePointer?

        init(browser: AvahiBrowser, key: AdvertDirectory.InstanceKey, isOnThisHost: Bool) {
            self.browser = browser
            self.key = key
            self.isOnThisHost = isOnThisHost
        }
    }

    private struct Subscriber {
        var directory: AdvertDirectory
        var events: AsyncStream<BrowseEvent>.Continuation
    }

    private let serviceType: String
    private let connection: AvahiConnection
    private var browser: OpaquePointer?
    private var resolutions: [AdvertDirectory.InstanceKey: Resolution] = [:]
    /// The latest resolution of every instance, for subscribers that arrive later.
    private var resolved: [AdvertDirectory.InstanceKey: AdvertDirectory.Resolution] = [:]
    private var subscribers: [UUID: Subscriber] = [:]

    init(serviceType: String, connection: AvahiConnection) {
        self.serviceType = serviceType
        self.connection = connection
    }

    var isUnused: Bool { subscribers.isEmpty }

    func subscribe(_ token: UUID, localPeerID: UUID, events: AsyncStream<BrowseEvent>.Continuation) {
        var subscriber = Subscriber(directory: AdvertDirectory(localPeerID: localPeerID), events: events)
        for (key, resolution) in resolved {
            subscriber.directory.resolved(key, resolution).forEach { events.yield($0) }
        }
        subscribers[token] = subscriber
    }

    func unsubscribe(_ token: UUID) {
        subscribers[token] = nil
    }

    /// Applies `change` to every subscriber's directory and reports what it says.
    private func report(_ change: (inout AdvertDirectory) -> [BrowseEvent]) {
        for token in subscribers.keys {
            let events = change(&subscribers[token]!.directory)
            events.forEach { subscribers[token]!.events.yield($0) }
        }
    }

    func attach(_ client: OpaquePointer) {
        guard browser == nil else { return }
        browser = avahi_service_browser_new(
            client, avahiAnyInterface, avahiAnyProtocol, serviceType, nil, AVAHI_LOOKUP_USE_MULTICAST,
            avahiServiceBrowserCallback, Unmanaged.passUnretained(self).toOpaque())
        if browser == nil {
            connection.logger.error("cannot browse for \(serviceType): \(connection.lastErrorText())")
        }
    }

    func withdraw() {}

    func detached() {
        browser = nil
        resolutions.removeAll()
        resolved.removeAll()
        report { $0.removeAll() }
    }

    func remove() {
        for resolution in resolutions.values {
            if let resolver = resolution.resolver { avahi_service_resolver_free(resolver) }
        }
        resolutions.removeAll()
        if let browser { avahi_service_browser_free(browser) }
        browser = nil
    }

    // MARK: Callbacks (poll thread)

    fileprivate func browserEvent(
        _ interface: AvahiIfIndex, _ protocolFamily: AvahiProtocol, _ event: AvahiBrowserEvent,
        _ name: String, _ type: UnsafePointer<CChar>?, _ domain: UnsafePointer<CChar>?, _ flags: AvahiLookupResultFlags
    ) {
        let key = AdvertDirectory.InstanceKey(interfaceIndex: interface, protocolFamily: protocolFamily, name: name)
        switch event {
        case AVAHI_BROWSER_NEW:
            guard resolutions[key] == nil, let browser else { return }
            let isLocal = flags.rawValue & AVAHI_LOOKUP_RESULT_LOCAL.rawValue != 0
            let resolution = Resolution(browser: self, key: key, isOnThisHost: isLocal)
            // The resolver stays until the instance is removed: it reports TXT and address changes too.
            resolution.resolver = avahi_service_resolver_new(
                avahi_service_browser_get_client(browser), interface, protocolFamily, name, type, domain,
                avahiAnyProtocol, AvahiLookupFlags(0), avahiServiceResolverCallback, Unmanaged.passUnretained(resolution).toOpaque())
            guard resolution.resolver != nil else {
                connection.logger.debug("cannot resolve \(name): \(connection.lastErrorText())")
                return
            }
            resolutions[key] = resolution
        case AVAHI_BROWSER_REMOVE:
            if let resolver = resolutions.removeValue(forKey: key)?.resolver { avahi_service_resolver_free(resolver) }
            resolved[key] = nil
            report { $0.removed(key) }
        case AVAHI_BROWSER_FAILURE:
            connection.logger.error("browsing for \(serviceType) failed: \(connection.lastErrorText())")
        default:
            break  // ALL_FOR_NOW and CACHE_EXHAUSTED: nothing to do.
        }
    }

    fileprivate func resolverEvent(
        _ resolution: Resolution, _ event: AvahiResolverEvent, _ address: UnsafePointer<AvahiAddress>?,
        _ port: UInt16, _ txt: UnsafeMutablePointer<AvahiStringList>?
    ) {
        let key = resolution.key
        guard event == AVAHI_RESOLVER_FOUND else {
            connection.logger.debug("cannot resolve \(key.name): \(connection.lastErrorText())")
            return
        }
        let record: AdvertTXT
        do {
            record = try AdvertTXT(entries: avahiStringListEntries(txt))
        } catch AdvertTXT.Rejection.otherProtocolVersion(let version) where UInt16(version).map({ $0 < Hello.currentProtocolVersion }) ?? false {
            // A peer of an earlier release: never met, so its user is told what to do.
            connection.logger.notice(
                "ignoring DNS-SD instance \(key.name): it speaks protocol version \(version), which this peer (version \(Hello.currentProtocolVersion)) refuses; upgrade it to meet it")
            return
        } catch {
            connection.logger.debug("ignoring DNS-SD instance \(key.name): \(error)")
            return
        }
        let peerAddress = address.flatMap { Self.format($0, interface: key.interfaceIndex) }
        let update = AdvertDirectory.Resolution(txt: record, port: Int(port), address: peerAddress, isOnThisHost: resolution.isOnThisHost)
        resolved[key] = update
        report { $0.resolved(key, update) }
    }

    /// `192.0.2.1`, `2001:db8::1`, or `fe80::1%eth0` for a link-local IPv6 address.
    static func format(_ address: UnsafePointer<AvahiAddress>, interface: AvahiIfIndex) -> PeerAddress? {
        var buffer = [CChar](repeating: 0, count: Int(AVAHI_ADDRESS_STR_MAX) + 1)
        guard avahi_address_snprint(&buffer, buffer.count, address) != nil else { return nil }
        var host = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if host.lowercased().hasPrefix("fe80:"), interface > 0 {
            var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
            if if_indextoname(UInt32(interface), &name) != nil {
                host += "%" + String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            } else {
                host += "%\(interface)"
            }
        }
        return PeerAddress(host: host, interfaceIndex: interface)
    }
}

private func avahiServiceBrowserCallback(
    _ browser: OpaquePointer?, _ interface: AvahiIfIndex, _ protocolFamily: AvahiProtocol, _ event: AvahiBrowserEvent,
    _ name: UnsafePointer<CChar>?, _ type: UnsafePointer<CChar>?, _ domain: UnsafePointer<CChar>?,
    _ flags: AvahiLookupResultFlags, _ userdata: UnsafeMutableRawPointer?
) {
    guard let userdata else { return }
    Unmanaged<AvahiBrowser>.fromOpaque(userdata).takeUnretainedValue()
        .browserEvent(interface, protocolFamily, event, name.map { String(cString: $0) } ?? "", type, domain, flags)
}

private func avahiServiceResolverCallback(
    _ resolver: OpaquePointer?, _ interface: AvahiIfIndex, _ protocolFamily: AvahiProtocol, _ event: AvahiResolverEvent,
    _ name: UnsafePointer<CChar>?, _ type: UnsafePointer<CChar>?, _ domain: UnsafePointer<CChar>?,
    _ hostName: UnsafePointer<CChar>?, _ address: UnsafePointer<AvahiAddress>?, _ port: UInt16,
    _ txt: UnsafeMutablePointer<AvahiStringList>?, _ flags: AvahiLookupResultFlags, _ userdata: UnsafeMutableRawPointer?
) {
    guard let userdata else { return }
    let resolution = Unmanaged<AvahiBrowser.Resolution>.fromOpaque(userdata).takeUnretainedValue()
    resolution.browser.resolverEvent(resolution, event, address, port, txt)
}
