internal import CAvahi
package import MultipeerCore

/// What happens to an advertisement.
package enum AdvertisementEvent: Hashable, Sendable {
    /// The service is published under this instance name.
    case established(instanceName: String)
    /// Another service had the name; this one is published under a new one. The peer UUID in
    /// TXT, not the name, identifies the peer.
    case renamed(instanceName: String)
    /// avahi-daemon went away; the advertisement comes back by itself when the daemon does.
    case withdrawn
    /// Avahi refused the advertisement.
    case failed(MultipeerError)
}

/// Publishes this peer as `<peer UUID>.<service type>.local` on every interface and protocol,
/// with the TXT record of ``AdvertTXT``, until ``stop()``. Collisions are resolved by renaming;
/// a restart of avahi-daemon is survived by publishing again.
package final class PeerAdvertiser: Sendable {
    private let connection: AvahiConnection
    private let publisher: AvahiPublisher
    /// What happens to the advertisement, from start to ``stop()``.
    package let events: AsyncStream<AdvertisementEvent>

    /// Starts advertising. Returns at once; ``events`` says when the service is established.
    ///
    /// - Parameter instanceName: The DNS-SD instance name; by default the peer UUID. Peers are
    ///   told apart by the UUID in TXT, never by this name, which Avahi may change on a collision.
    package init(
        serviceType: ServiceType,
        port: Int,
        txt: AdvertTXT,
        instanceName: String? = nil,
        connection: AvahiConnection
    ) throws {
        guard (1...Int(UInt16.max)).contains(port) else {
            throw MultipeerError(.invalidArgument, "cannot advertise port \(port)")
        }
        if let instanceName, instanceName.isEmpty || instanceName.utf8.count > 63 {
            throw MultipeerError(
                .invalidArgument,
                "a DNS-SD instance name must be 1 to 63 bytes; \"\(instanceName)\" is not"
            )
        }
        let (events, continuation) = AsyncStream<AdvertisementEvent>.makeStream()
        self.events = events
        self.connection = connection
        self.publisher = AvahiPublisher(
            name: instanceName ?? txt.peerID.uuidString.lowercased(),
            serviceType: serviceType.rawValue,
            port: UInt16(port),
            txt: txt.entries,
            connection: connection,
            events: continuation
        )
        connection.register(publisher)
    }

    deinit {
        connection.unregister(publisher)
    }

    /// The instance name published now (the peer UUID, unless a collision renamed it).
    package var instanceName: String {
        connection.withPollLock { publisher.name }
    }

    /// Replaces the TXT record in place, without withdrawing the service.
    package func update(_ txt: AdvertTXT) {
        connection.withPollLock { publisher.update(txt.entries) }
    }

    /// Withdraws the advertisement.
    package func stop() {
        connection.unregister(publisher)
    }
}

/// The Avahi side of an advertisement: one entry group.
///
/// `@unchecked Sendable`: used only on the poll thread or under the poll lock.
final class AvahiPublisher: AvahiRegistration, @unchecked Sendable {
    private(set) var name: String
    private let serviceType: String
    private let port: UInt16
    private var txt: [String]
    private var group: OpaquePointer?
    private let connection: AvahiConnection
    private let events: AsyncStream<AdvertisementEvent>.Continuation

    init(
        name: String,
        serviceType: String,
        port: UInt16,
        txt: [String],
        connection: AvahiConnection,
        events: AsyncStream<AdvertisementEvent>.Continuation
    ) {
        self.name = name
        self.serviceType = serviceType
        self.port = port
        self.txt = txt
        self.connection = connection
        self.events = events
    }

    func attach(_ client: OpaquePointer) {
        if let group {
            avahi_entry_group_reset(group)
        } else {
            group = avahi_entry_group_new(client, avahiEntryGroupCallback, Unmanaged.passUnretained(self).toOpaque())
        }
        guard group != nil else {
            fail("cannot create an Avahi entry group")
            return
        }
        publish()
    }

    func withdraw() {
        if let group { avahi_entry_group_reset(group) }
    }

    func detached() {
        group = nil
        events.yield(.withdrawn)
    }

    func remove() {
        if let group { avahi_entry_group_free(group) }
        group = nil
        events.finish()
    }

    func update(_ entries: [String]) {
        txt = entries
        guard let group, avahi_entry_group_is_empty(group) == 0 else { return }
        let status = withAvahiStringList(entries) { list in
            avahi_entry_group_update_service_txt_strlst(
                group,
                avahiAnyInterface,
                avahiAnyProtocol,
                AvahiPublishFlags(0),
                name,
                serviceType,
                nil,
                list
            )
        }
        if status < 0 { fail("cannot update the TXT record of \(name)", status: status) }
    }

    /// Adds the service to the group (renaming on a local collision) and commits it.
    private func publish() {
        guard let group else { return }
        while true {
            let status = withAvahiStringList(txt) { list in
                avahi_entry_group_add_service_strlst(
                    group,
                    avahiAnyInterface,
                    avahiAnyProtocol,
                    AvahiPublishFlags(0),
                    name,
                    serviceType,
                    nil,
                    nil,
                    port,
                    list
                )
            }
            if status == Int32(AVAHI_ERR_COLLISION) {
                rename()
                continue
            }
            guard status >= 0 else {
                fail("cannot publish \(name).\(serviceType)", status: status)
                return
            }
            break
        }
        let status = avahi_entry_group_commit(group)
        if status < 0 { fail("cannot publish \(name).\(serviceType)", status: status) }
    }

    private func rename() {
        let previous = name
        name = takeAvahiString(avahi_alternative_service_name(name)) ?? name + " #2"
        connection.logger.info(
            "DNS-SD name collision",
            metadata: ["multipeer.advert.name": "\(previous)", "multipeer.advert.renamed": "\(name)"]
        )
        events.yield(.renamed(instanceName: name))
    }

    private func fail(_ message: String, status: Int32? = nil) {
        let underlying = status.map { String(cString: avahi_strerror($0)) } ?? connection.lastErrorText()
        let error = MultipeerError(.discoveryFailure, message, underlying: underlying)
        connection.logger.debug("\(error)")  // the session reports it (an event)
        events.yield(.failed(error))
    }

    fileprivate func groupStateChanged(_ changedGroup: OpaquePointer, _ state: AvahiEntryGroupState) {
        switch state {
        case AVAHI_ENTRY_GROUP_ESTABLISHED:
            events.yield(.established(instanceName: name))
        case AVAHI_ENTRY_GROUP_COLLISION:
            // Another host on the network has the name: take the next one and publish again.
            rename()
            avahi_entry_group_reset(changedGroup)
            group = changedGroup
            publish()
        case AVAHI_ENTRY_GROUP_FAILURE:
            fail(
                "Avahi withdrew \(name).\(serviceType)",
                status: avahi_client_errno(avahi_entry_group_get_client(changedGroup))
            )
        default:
            break
        }
    }
}

private func avahiEntryGroupCallback(
    _ group: OpaquePointer?,
    _ state: AvahiEntryGroupState,
    _ userdata: UnsafeMutableRawPointer?
) {
    guard let group, let userdata else { return }
    Unmanaged<AvahiPublisher>.fromOpaque(userdata).takeUnretainedValue().groupStateChanged(group, state)
}
