import Foundation
import MultipeerDiscovery
import NIOConcurrencyHelpers

/// DNS-SD in a simulated world: the adverts its hosts publish, and browsers that hear of them.
/// Each advert is a service instance; a browser hears of it after the network's delay, its TXT
/// record decoded as Avahi's browser decodes it (so a malformed advert is refused the same
/// way), and through the production `AdvertDirectory`: a peer found once however many adverts
/// name it, reported again only when what its adverts say changes, lost with its last advert.
final class SimulatedDirectory: Sendable {
    struct Advert: @unchecked Sendable {
        /// The machine it names (its address is the machine's now), and the process that
        /// published it (nil: published by the world, a rogue advert).
        var machine: SimulatedMachine?
        var process: SimulationScheduler.HostID?
        var serviceType: String
        /// For an advert of no machine: where it points.
        var address: String
        var port: Int
        var txt: [[UInt8]]
    }

    private struct Browser {
        var process: SimulationScheduler.HostID
        var serviceType: String
        var continuation: AsyncStream<BrowseEvent>.Continuation
        /// What it has heard, as the Avahi browser keeps it.
        var heard: AdvertDirectory
    }

    private struct State {
        var adverts: [Int: Advert] = [:]
        var browsers: [Int: Browser] = [:]
        var nextID = 0
    }

    private let state = NIOLockedValueBox(State())
    private let network: SimulatedNetwork

    init(network: SimulatedNetwork) {
        self.network = network
    }

    /// The directory as one host's process sees it.
    func view(from machine: SimulatedMachine, process: SimulationScheduler.HostID) -> any ServiceDirectory {
        HostView(directory: self, machine: machine, process: process)
    }

    /// The process was killed: its adverts go (avahi-daemon withdraws a client's when it goes).
    func killed(_ process: SimulationScheduler.HostID) {
        let ids = state.withLockedValue { state in state.adverts.filter { $0.value.process == process }.map(\.key) }
        for id in ids { withdraw(id) }
    }

    /// The machine moved: its adverts are announced again, at its new address.
    func renumbered(_ machine: SimulatedMachine, to address: String) {
        let ids = state.withLockedValue { state in
            state.adverts.filter { $0.value.machine === machine }.map(\.key).sorted()
        }
        for id in ids { resolve(id) { _, _ in true } }
    }

    func publish(_ advert: Advert) -> Int {
        let id = state.withLockedValue { state in
            state.nextID += 1
            state.adverts[state.nextID] = advert
            return state.nextID
        }
        resolve(id) { _, _ in true }
        return id
    }

    func withdraw(_ id: Int) {
        let events = state.withLockedValue { state -> [(Browser, [BrowseEvent])] in
            guard let advert = state.adverts.removeValue(forKey: id) else { return [] }
            return state.browsers.keys.sorted().compactMap { key in
                guard state.browsers[key]!.serviceType == advert.serviceType else { return nil }
                return (state.browsers[key]!, state.browsers[key]!.heard.removed(Self.instance(id)))
            }
        }
        for (browser, events) in events { deliver(to: browser, events) }
    }

    /// Advert `id` resolved (again) at the browsers `which` picks (by their number): each
    /// reports what changed.
    private func resolve(_ id: Int, at which: (Int, Browser) -> Bool) {
        let events = state.withLockedValue { state -> [(Browser, [BrowseEvent])] in
            guard let advert = state.adverts[id], let txt = try? AdvertTXT(entries: advert.txt) else { return [] }
            let resolution = AdvertDirectory.Resolution(
                txt: txt,
                port: advert.port,
                address: advert.machine?.address ?? advert.address,
                isOnThisHost: false
            )
            return state.browsers.keys.sorted().compactMap { key in
                guard state.browsers[key]!.serviceType == advert.serviceType, which(key, state.browsers[key]!) else {
                    return nil
                }
                return (state.browsers[key]!, state.browsers[key]!.heard.resolved(Self.instance(id), resolution))
            }
        }
        for (browser, events) in events { deliver(to: browser, events) }
    }

    /// Advert `id` as a service instance (one interface, IPv4).
    private static func instance(_ id: Int) -> AdvertDirectory.InstanceKey {
        AdvertDirectory.InstanceKey(interfaceIndex: 1, protocolFamily: 0, name: "advert \(id)")
    }

    private func browse(
        _ serviceType: String,
        localPeerID: UUID,
        process: SimulationScheduler.HostID
    ) -> AsyncStream<BrowseEvent> {
        let (events, continuation) = AsyncStream<BrowseEvent>.makeStream()
        let browser = Browser(
            process: process,
            serviceType: serviceType,
            continuation: continuation,
            heard: AdvertDirectory(localPeerID: localPeerID)
        )
        let (id, adverts) = state.withLockedValue { state in
            state.nextID += 1
            state.browsers[state.nextID] = browser
            return (state.nextID, state.adverts.filter { $0.value.serviceType == serviceType }.map(\.key).sorted())
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLockedValue { $0.browsers.removeValue(forKey: id) }
        }
        for advert in adverts { resolve(advert) { key, _ in key == id } }
        return events
    }

    /// A dial to every endpoint of `peerID` failed: `process`'s browsers resolve its adverts
    /// again, and report what changed (as Avahi's resolvers, started afresh, do).
    private func refresh(_ peerID: UUID, serviceType: String, process: SimulationScheduler.HostID) {
        let adverts = state.withLockedValue { state in
            state.adverts.filter { $0.value.serviceType == serviceType && Self.peerID($0.value.txt) == peerID }.map(
                \.key
            ).sorted()
        }
        for advert in adverts { resolve(advert) { _, browser in browser.process == process } }
    }

    private func deliver(to browser: Browser, _ events: [BrowseEvent]) {
        guard !events.isEmpty else { return }
        let scheduler = network.scheduler
        scheduler.enqueue(nil) { [network] in
            _ = scheduler.schedule(nil, at: scheduler.now + network.defaultPath.latency) {
                for event in events { browser.continuation.yield(event) }
            }
        }
    }

    private static func peerID(_ txt: [[UInt8]]) -> UUID? {
        try? AdvertTXT(entries: txt).peerID
    }

    private struct HostView: ServiceDirectory, @unchecked Sendable {
        let directory: SimulatedDirectory
        let machine: SimulatedMachine
        let process: SimulationScheduler.HostID

        func browser(for serviceType: ServiceType, localPeerID: UUID) -> any PeerDiscovery {
            Browsing(
                directory: directory,
                process: process,
                serviceType: serviceType.rawValue,
                localPeerID: localPeerID
            )
        }

        func advertise(_ serviceType: ServiceType, port: Int, txt: AdvertTXT) throws -> any Advertisement {
            Advertising(
                directory: directory,
                advert: Advert(
                    machine: machine,
                    process: process,
                    serviceType: serviceType.rawValue,
                    address: machine.address,
                    port: port,
                    txt: txt.entries.map { Array($0.utf8) }
                )
            )
        }
    }

    private struct Browsing: PeerDiscovery {
        let directory: SimulatedDirectory
        let process: SimulationScheduler.HostID
        let serviceType: String
        let localPeerID: UUID

        func browse() -> AsyncStream<BrowseEvent> {
            directory.browse(serviceType, localPeerID: localPeerID, process: process)
        }

        func refresh(_ peerID: UUID) {
            directory.refresh(peerID, serviceType: serviceType, process: process)
        }
    }

    private final class Advertising: Advertisement {
        let events: AsyncStream<AdvertisementEvent>
        private let continuation: AsyncStream<AdvertisementEvent>.Continuation
        private let directory: SimulatedDirectory
        private let id: NIOLockedValueBox<Int?>

        init(directory: SimulatedDirectory, advert: Advert) {
            (events, continuation) = AsyncStream<AdvertisementEvent>.makeStream()
            self.directory = directory
            id = NIOLockedValueBox(directory.publish(advert))
            continuation.yield(
                .established(
                    instanceName: (try? AdvertTXT(entries: advert.txt).peerID.uuidString.lowercased()) ?? "peer"
                )
            )
        }

        func stop() {
            guard let id = id.withLockedValue({ $0.take() }) else { return }
            directory.withdraw(id)
            continuation.finish()
        }
    }
}
