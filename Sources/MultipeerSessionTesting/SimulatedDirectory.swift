import Foundation
import MultipeerDiscovery
import NIOConcurrencyHelpers

/// DNS-SD in a simulated world: the adverts its hosts publish, and browsers that hear of them.
/// A browser hears what changed after the network's delay, decoded from the TXT record as
/// Avahi's browser decodes it (so a malformed advert is refused the same way).
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
        var localPeerID: UUID
        var continuation: AsyncStream<BrowseEvent>.Continuation
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
        let (adverts, browsers) = state.withLockedValue { state in
            (state.adverts.values.filter { $0.machine === machine }, Array(state.browsers.values))
        }
        for advert in adverts {
            for browser in browsers where browser.serviceType == advert.serviceType { tell(browser, about: advert.txt, found: advert) }
        }
    }

    func publish(_ advert: Advert) -> Int {
        let (id, browsers) = state.withLockedValue { state in
            state.nextID += 1
            state.adverts[state.nextID] = advert
            return (state.nextID, state.browsers.values.filter { $0.serviceType == advert.serviceType })
        }
        for browser in browsers { tell(browser, about: advert.txt, found: advert) }
        return id
    }

    func withdraw(_ id: Int) {
        let (advert, browsers, remaining) = state.withLockedValue { state -> (Advert?, [Browser], [Advert]) in
            guard let advert = state.adverts.removeValue(forKey: id) else { return (nil, [], []) }
            return (advert, state.browsers.values.filter { $0.serviceType == advert.serviceType }, Array(state.adverts.values))
        }
        guard let advert else { return }
        for browser in browsers {
            // Lost only once no advert of the peer is left.
            guard let peerID = Self.peerID(advert.txt), !remaining.contains(where: { Self.peerID($0.txt) == peerID }) else { continue }
            deliver(to: browser, .lost(peerID))
        }
    }

    private func browse(_ serviceType: String, localPeerID: UUID, process: SimulationScheduler.HostID) -> AsyncStream<BrowseEvent> {
        let (events, continuation) = AsyncStream<BrowseEvent>.makeStream()
        let browser = Browser(process: process, serviceType: serviceType, localPeerID: localPeerID, continuation: continuation)
        let (id, adverts) = state.withLockedValue { state in
            state.nextID += 1
            state.browsers[state.nextID] = browser
            return (state.nextID, state.adverts.values.filter { $0.serviceType == serviceType })
        }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLockedValue { $0.browsers.removeValue(forKey: id) } }
        for advert in adverts { tell(browser, about: advert.txt, found: advert) }
        return events
    }

    private func refresh(_ peerID: UUID, serviceType: String, process: SimulationScheduler.HostID) {
        let (browsers, adverts) = state.withLockedValue { state in
            (
                state.browsers.values.filter { $0.process == process && $0.serviceType == serviceType },
                state.adverts.values.filter { $0.serviceType == serviceType && Self.peerID($0.txt) == peerID }
            )
        }
        for browser in browsers {
            for advert in adverts { tell(browser, about: advert.txt, found: advert) }
        }
    }

    private func tell(_ browser: Browser, about txt: [[UInt8]], found advert: Advert) {
        guard let decoded = try? AdvertTXT(entries: txt), decoded.peerID != browser.localPeerID else { return }
        deliver(to: browser, .found(PeerAdvert(
            peerID: decoded.peerID, incarnation: decoded.incarnation, displayName: decoded.displayName, metadata: decoded.metadata,
            endpoints: [PeerEndpoint(host: advert.machine?.address ?? advert.address, port: advert.port)])))
    }

    private func deliver(to browser: Browser, _ event: BrowseEvent) {
        let scheduler = network.scheduler
        scheduler.enqueue(nil) { [network] in
            _ = scheduler.schedule(nil, at: scheduler.now + network.defaultPath.latency) { browser.continuation.yield(event) }
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
            Browsing(directory: directory, process: process, serviceType: serviceType.rawValue, localPeerID: localPeerID)
        }

        func advertise(_ serviceType: ServiceType, port: Int, txt: AdvertTXT) throws -> any Advertisement {
            Advertising(directory: directory, advert: Advert(
                machine: machine, process: process, serviceType: serviceType.rawValue, address: machine.address, port: port,
                txt: txt.entries.map { Array($0.utf8) }))
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
            continuation.yield(.established(instanceName: (try? AdvertTXT(entries: advert.txt).peerID.uuidString.lowercased()) ?? "peer"))
        }

        func stop() {
            guard let id = id.withLockedValue({ $0.take() }) else { return }
            directory.withdraw(id)
            continuation.finish()
        }
    }
}
