internal import CAvahi
import Glibc
import Logging
import MultipeerCore

package import struct Foundation.UUID

/// Finds the peers advertising a service type over DNS-SD, through avahi-daemon.
///
/// Each peer is reported once however many interfaces and protocols announce it, with the
/// endpoints of all its adverts, again whenever they change (a host renumbered, an interface
/// gone), and lost when the last announcement goes. This peer's own advertisement is skipped (by
/// UUID, not by name), and so are adverts of another protocol version or without a valid `id`
/// (logged at debug level; an advert of an earlier version at notice level, saying to upgrade
/// that peer). When avahi-daemon restarts, every peer is reported lost, then found again once the
/// daemon is back. Browsers of one service type on one connection share one Avahi browser and
/// its resolvers, so many sessions in a process stay within the daemon's per-client limits; at
/// most ``AvahiBrowser/maximumInstances`` instances are resolved, so a flood of adverts cannot
/// exhaust them (the excess is ignored, and counted in a warning at most once a second).
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
        connection.subscribe(
            serviceType: serviceType.rawValue,
            token: token,
            localPeerID: localPeerID,
            events: continuation
        )
        return events
    }

    package func refresh(_ peerID: UUID) {
        connection.withPollLock { connection.browsers[serviceType.rawValue]?.refresh(peerID) }
    }
}

extension AvahiConnection {
    /// Adds a subscriber to the browser of `serviceType`, starting the browser if it is the first.
    func subscribe(serviceType: String, token: UUID, localPeerID: UUID, events: AsyncStream<BrowseEvent>.Continuation) {
        withPollLock {
            let browser =
                browsers[serviceType]
                ?? {
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
    /// The most instances resolved at once (each holds an Avahi resolver, and the daemon allows
    /// a client 1,024 objects): far above any group's size, far below what a flood can publish.
    static let maximumInstances = 512

    /// Keeps a resolver's context alive as long as the resolver, and names its instance.
    final class Resolution {
        unowned let browser: AvahiBrowser
        let key: AdvertDirectory.InstanceKey
        let type: String
        let domain: String
        let isOnThisHost: Bool
        var resolver: OpaquePointer?
        var startedAt = ContinuousClock.now

        init(browser: AvahiBrowser, key: AdvertDirectory.InstanceKey, type: String, domain: String, isOnThisHost: Bool)
        {
            self.browser = browser
            self.key = key
            self.type = type
            self.domain = domain
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
    /// Instances ignored because ``maximumInstances`` were resolved already.
    private var overflow = ReportThrottle()
    /// Instances of an earlier protocol version whose user was told (once while each is advertised).
    private var toldEarlierVersion: Set<AdvertDirectory.InstanceKey> = []

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
            client,
            avahiAnyInterface,
            avahiAnyProtocol,
            serviceType,
            nil,
            AVAHI_LOOKUP_USE_MULTICAST,
            avahiServiceBrowserCallback,
            Unmanaged.passUnretained(self).toOpaque()
        )
        if browser == nil {
            // (No event says it: what only a log can say is info. The next daemon connection browses again.)
            connection.logger.info("cannot browse for \(serviceType): \(connection.lastErrorText())")
        }
    }

    func withdraw() {}

    func detached() {
        browser = nil
        resolutions.removeAll()
        resolved.removeAll()
        toldEarlierVersion.removeAll()
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
        _ interface: AvahiIfIndex,
        _ protocolFamily: AvahiProtocol,
        _ event: AvahiBrowserEvent,
        _ name: String,
        _ type: UnsafePointer<CChar>?,
        _ domain: UnsafePointer<CChar>?,
        _ flags: AvahiLookupResultFlags
    ) {
        let key = AdvertDirectory.InstanceKey(interfaceIndex: interface, protocolFamily: protocolFamily, name: name)
        switch event {
        case AVAHI_BROWSER_NEW:
            guard resolutions[key] == nil else { return }
            guard resolutions.count < Self.maximumInstances else {
                if let ignored = overflow.count() {
                    connection.logger.warning(
                        "ignored \(ignored) DNS-SD instance(s) of \(serviceType), the last \(name): \(Self.maximumInstances) are resolved already (is someone flooding the network with adverts?)"
                    )
                }
                return
            }
            let isLocal = flags.rawValue & AVAHI_LOOKUP_RESULT_LOCAL.rawValue != 0
            let resolution = Resolution(
                browser: self,
                key: key,
                type: type.map { String(cString: $0) } ?? serviceType,
                domain: domain.map { String(cString: $0) } ?? "local",
                isOnThisHost: isLocal
            )
            guard startResolver(resolution) else { return }
            resolutions[key] = resolution
        case AVAHI_BROWSER_REMOVE:
            if let resolver = resolutions.removeValue(forKey: key)?.resolver { avahi_service_resolver_free(resolver) }
            resolved[key] = nil
            toldEarlierVersion.remove(key)
            report { $0.removed(key) }
        case AVAHI_BROWSER_FAILURE:
            connection.logger.info("browsing for \(serviceType) failed: \(connection.lastErrorText())")
        default:
            break  // ALL_FOR_NOW and CACHE_EXHAUSTED: nothing to do.
        }
    }

    /// Starts resolving an instance. The resolver stays until the instance is removed (or
    /// refreshed): it reports TXT and address changes too. It looks up the address of the
    /// instance's own protocol, so an IPv4 and an IPv6 instance of a peer give an endpoint each.
    private func startResolver(_ resolution: Resolution) -> Bool {
        guard let browser else { return false }
        let key = resolution.key
        resolution.startedAt = .now
        resolution.resolver = avahi_service_resolver_new(
            avahi_service_browser_get_client(browser),
            key.interfaceIndex,
            key.protocolFamily,
            key.name,
            resolution.type,
            resolution.domain,
            key.protocolFamily,
            AvahiLookupFlags(0),
            avahiServiceResolverCallback,
            Unmanaged.passUnretained(resolution).toOpaque()
        )
        guard resolution.resolver != nil else {
            connection.logger.debug("cannot resolve \(key.name): \(connection.lastErrorText())")
            return false
        }
        return true
    }

    /// Resolves every instance naming `peerID` afresh (at most once a second each): a dial to
    /// every endpoint discovery gave failed, and the records may be stale.
    func refresh(_ peerID: UUID) {
        for (key, resolution) in resolutions
        where resolved[key]?.txt.peerID == peerID && ContinuousClock.now - resolution.startedAt >= .seconds(1) {
            if let resolver = resolution.resolver { avahi_service_resolver_free(resolver) }
            resolution.resolver = nil
            if !startResolver(resolution) { resolutions[key] = nil }
        }
    }

    fileprivate func resolverEvent(
        _ resolution: Resolution,
        _ event: AvahiResolverEvent,
        _ address: UnsafePointer<AvahiAddress>?,
        _ port: UInt16,
        _ txt: UnsafeMutablePointer<AvahiStringList>?
    ) {
        let key = resolution.key
        guard event == AVAHI_RESOLVER_FOUND else {
            // The instance's address record was withdrawn and none replaced it in time (or the
            // instance never resolved): its endpoint goes, its TXT stays until the instance does.
            connection.logger.debug("cannot resolve \(key.name): \(connection.lastErrorText())")
            if var stale = resolved[key], stale.address != nil {
                stale.address = nil
                resolved[key] = stale
                report { $0.resolved(key, stale) }
            }
            return
        }
        let record: AdvertTXT
        do {
            record = try AdvertTXT(entries: avahiStringListEntries(txt))
        } catch AdvertTXT.Rejection.otherProtocolVersion(let version)
            where UInt16(version).map({ $0 < Hello.currentProtocolVersion }) ?? false
        {
            // A peer of an earlier release: never met, so its user is told what to do (once while
            // it is advertised: its resolver reports every change of its records).
            guard toldEarlierVersion.insert(key).inserted else { return }
            connection.logger.info(
                "ignoring DNS-SD instance \(key.name): it speaks protocol version \(version), which this peer (version \(Hello.currentProtocolVersion)) refuses; upgrade it to meet it"
            )
            return
        } catch {
            connection.logger.debug("ignoring DNS-SD instance \(key.name): \(error)")
            return
        }
        let update = AdvertDirectory.Resolution(
            txt: record,
            port: Int(port),
            address: address.flatMap { Self.format($0, interface: key.interfaceIndex) },
            interfaceIndex: key.interfaceIndex,
            isOnThisHost: resolution.isOnThisHost
        )
        resolved[key] = update
        report { $0.resolved(key, update) }
    }

    /// `192.0.2.1`, `2001:db8::1`, or `fe80::1%eth0` for a link-local IPv6 address.
    static func format(_ address: UnsafePointer<AvahiAddress>, interface: AvahiIfIndex) -> String? {
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
        return host
    }
}

private func avahiServiceBrowserCallback(
    _ browser: OpaquePointer?,
    _ interface: AvahiIfIndex,
    _ protocolFamily: AvahiProtocol,
    _ event: AvahiBrowserEvent,
    _ name: UnsafePointer<CChar>?,
    _ type: UnsafePointer<CChar>?,
    _ domain: UnsafePointer<CChar>?,
    _ flags: AvahiLookupResultFlags,
    _ userdata: UnsafeMutableRawPointer?
) {
    guard let userdata else { return }
    Unmanaged<AvahiBrowser>.fromOpaque(userdata).takeUnretainedValue()
        .browserEvent(interface, protocolFamily, event, name.map { String(cString: $0) } ?? "", type, domain, flags)
}

private func avahiServiceResolverCallback(
    _ resolver: OpaquePointer?,
    _ interface: AvahiIfIndex,
    _ protocolFamily: AvahiProtocol,
    _ event: AvahiResolverEvent,
    _ name: UnsafePointer<CChar>?,
    _ type: UnsafePointer<CChar>?,
    _ domain: UnsafePointer<CChar>?,
    _ hostName: UnsafePointer<CChar>?,
    _ address: UnsafePointer<AvahiAddress>?,
    _ port: UInt16,
    _ txt: UnsafeMutablePointer<AvahiStringList>?,
    _ flags: AvahiLookupResultFlags,
    _ userdata: UnsafeMutableRawPointer?
) {
    guard let userdata else { return }
    let resolution = Unmanaged<AvahiBrowser.Resolution>.fromOpaque(userdata).takeUnretainedValue()
    resolution.browser.resolverEvent(resolution, event, address, port, txt)
}
