import Foundation
import Logging
import MultipeerCore
import MultipeerTestSupport
import Testing

@testable import MultipeerDiscovery

/// Set by scripts/sandbox.sh: this process has an avahi-daemon of its own, on loopback only.
let inDiscoverySandbox = ProcessInfo.processInfo.environment["MULTIPEER_SANDBOX"] == "1"

/// Real avahi-daemon, in the sandbox of scripts/sandbox.sh (loopback only, a daemon of its own):
/// serialized, because one test restarts that daemon.
@Suite(.serialized, .enabled(if: inDiscoverySandbox, "needs scripts/sandbox.sh (make test, as root)"))
struct DiscoveryTests {
    /// A service type of this test alone: `_mp` and 8 hex digits.
    static func uniqueServiceType() throws -> ServiceType {
        try ServiceType("_mp\(String(UInt32.random(in: 0...UInt32.max), radix: 16).leftPadded(8))._tcp")
    }

    static func advertise(
        _ type: ServiceType,
        name: String,
        peerID: UUID = UUID(),
        incarnation: UInt64 = 1,
        metadata: [String: String] = [:],
        port: Int = 7000,
        instanceName: String? = nil
    ) throws -> PeerAdvertiser {
        try PeerAdvertiser(
            serviceType: type,
            port: port,
            txt: AdvertTXT(peerID: peerID, incarnation: incarnation, displayName: name, metadata: metadata),
            instanceName: instanceName,
            connection: AvahiConnection.shared()
        )
    }

    /// Waits for the advertisement to be established; returns the instance name.
    static func established(_ advertiser: PeerAdvertiser) async throws -> String {
        let events = try await collect(advertiser.events) { events in
            events.contains { if case .established = $0 { true } else { false } }
        }
        guard case .established(let name)? = events.last else {
            throw MultipeerError(.discoveryFailure, "the advertisement ended before it was established: \(events)")
        }
        return name
    }

    static func foundIDs(_ events: [BrowseEvent]) -> [UUID] {
        events.compactMap { if case .found(let advert) = $0 { advert.peerID } else { nil } }
    }

    static func lostIDs(_ events: [BrowseEvent]) -> [UUID] {
        events.compactMap { if case .lost(let id) = $0 { id } else { nil } }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func avahiBrowseSeesOurAdvertisementWithItsTXT() async throws {
        let type = try Self.uniqueServiceType()
        let peerID = UUID()
        let advertiser = try Self.advertise(
            type,
            name: "Captain",
            peerID: peerID,
            incarnation: 7,
            metadata: ["seat": "L"],
            port: 7123
        )
        let name = try await DiscoveryTests.established(advertiser)
        #expect(name == peerID.uuidString.lowercased())

        let result = try await runProcess("/usr/bin/avahi-browse", ["-rpt", type.rawValue])
        let resolved = result.output.split(separator: "\n").filter { $0.hasPrefix("=;") && $0.contains(name) }
        let line = try #require(resolved.first, "avahi-browse output: \(result.output)")
        let fields = line.split(separator: ";", omittingEmptySubsequences: false)
        #expect(fields[8] == "7123")
        for entry in [
            "\"v=2\"", "\"id=\(peerID.uuidString.lowercased())\"", "\"inc=7\"", "\"name=Captain\"", "\"seat=L\"",
        ] {
            #expect(fields[9].contains(entry), "\(entry) in \(fields[9])")
        }
        advertiser.stop()
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aServicePublishedByAvahiPublishIsFoundThenLost() async throws {
        let type = try Self.uniqueServiceType()
        let peerID = UUID()
        let events = PeerBrowser(serviceType: type, localPeerID: UUID(), connection: try .shared()).browse()
        // Two adverts that are not ours (another version; no id) and one in our format.
        let others = [
            try BackgroundProcess(
                "/usr/bin/avahi-publish",
                ["-s", "earlier", type.rawValue, "7001", "v=1", "id=\(UUID())"]
            ),
            try BackgroundProcess("/usr/bin/avahi-publish", ["-s", "anonymous", type.rawValue, "7002", "v=2"]),
        ]
        let tower = try BackgroundProcess(
            "/usr/bin/avahi-publish",
            ["-s", "tower", type.rawValue, "7003", "v=2", "id=\(peerID)", "inc=3", "name=Tower", "freq=118.1"]
        )

        let found = try await collect(events) { !Self.foundIDs($0).isEmpty }
        guard case .found(let advert) = found.last else {
            Issue.record("no peer found: \(found)")
            return
        }
        #expect(advert.peerID == peerID)
        #expect(advert.endpoints.allSatisfy { $0.port == 7003 })
        #expect(advert.incarnation == 3)
        #expect(advert.displayName == "Tower")
        #expect(advert.metadata == ["freq": "118.1"])
        #expect(advert.endpoints.first?.host == "127.0.0.1")

        tower.stop()
        let lost = try await collect(events) { !Self.lostIDs($0).isEmpty }
        #expect(Self.lostIDs(lost) == [peerID])
        #expect(
            Set(Self.foundIDs(found + lost)) == [peerID],
            "the adverts of another version and without an id are never reported"
        )
        others.forEach { $0.stop() }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func ourOwnAdvertisementIsSkipped() async throws {
        let type = try Self.uniqueServiceType()
        let me = UUID()
        let other = UUID()
        let mine = try Self.advertise(type, name: "me", peerID: me)
        let theirs = try Self.advertise(type, name: "other", peerID: other)
        let events = PeerBrowser(serviceType: type, localPeerID: me, connection: try .shared()).browse()
        let found = try await collect(events) { Self.foundIDs($0).contains(other) }
        #expect(!Self.foundIDs(found).contains(me))
        _ = try await DiscoveryTests.established(mine)
        theirs.stop()
        let lost = try await collect(events) { Self.lostIDs($0).contains(other) }
        #expect(!Self.foundIDs(lost).contains(me))
        mine.stop()
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func twoAdvertisersWithOneInstanceNameBothStayVisible() async throws {
        let type = try Self.uniqueServiceType()
        let first = UUID()
        let second = UUID()
        let events = PeerBrowser(serviceType: type, localPeerID: UUID(), connection: try .shared()).browse()
        let a = try Self.advertise(type, name: "A", peerID: first, instanceName: "Captain")
        let b = try Self.advertise(type, name: "B", peerID: second, instanceName: "Captain")
        let names = [try await DiscoveryTests.established(a), try await Self.established(b)]
        #expect(Set(names).count == 2, "distinct names: \(names)")
        #expect(names.contains("Captain"))
        let found = try await collect(events) { Set(Self.foundIDs($0)) == [first, second] }
        #expect(Self.foundIDs(found).count == 2)
        a.stop()
        b.stop()
    }

    @Test(.scaledTimeLimit(minutes: 2))
    func twentyAdvertisersAreEachFoundOnceAndAllLost() async throws {
        let type = try Self.uniqueServiceType()
        let ids = (0..<20).map { _ in UUID() }
        let events = PeerBrowser(serviceType: type, localPeerID: UUID(), connection: try .shared()).browse()
        let advertisers = try ids.enumerated().map {
            try Self.advertise(type, name: "peer \($0.offset)", peerID: $0.element, port: 7100 + $0.offset)
        }
        let found = try await collect(events, timeout: .seconds(60)) { Set(Self.foundIDs($0)).count == 20 }
        advertisers.forEach { $0.stop() }
        let lost = try await collect(events, timeout: .seconds(60)) { Set(Self.lostIDs($0)).count == 20 }
        let all = found + lost
        #expect(
            Self.foundIDs(all).sorted { $0.uuidString < $1.uuidString } == ids.sorted { $0.uuidString < $1.uuidString },
            "each found exactly once"
        )
        #expect(Self.lostIDs(all).count == 20, "each lost exactly once")
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func theTXTRecordIsUpdatedInPlace() async throws {
        let type = try Self.uniqueServiceType()
        let peerID = UUID()
        let advertiser = try Self.advertise(type, name: "Captain", peerID: peerID, metadata: ["seat": "L"])
        let events = PeerBrowser(serviceType: type, localPeerID: UUID(), connection: try .shared()).browse()
        _ = try await collect(events) { Self.foundIDs($0).contains(peerID) }
        advertiser.update(
            try AdvertTXT(peerID: peerID, incarnation: 1, displayName: "Skipper", metadata: ["seat": "R"])
        )
        let updated = try await collect(events) { events in
            events.contains { if case .found(let advert) = $0 { advert.displayName == "Skipper" } else { false } }
        }
        #expect(Self.lostIDs(updated).isEmpty, "the service is not withdrawn to change its TXT")
        if case .found(let advert)? = updated.last { #expect(advert.metadata == ["seat": "R"]) }
        advertiser.stop()
    }
}

/// A flood of adverts keeps avahi-daemon and this process's Avahi thread busy for seconds: alone
/// (MULTIPEER_RUN_ALONE, scripts/run-tests.sh), so no other test's discovery waits behind it.
@Suite(
    .enabled(
        if: inDiscoverySandbox && runningAlone,
        "floods avahi-daemon: scripts/run-tests.sh runs it alone, in the sandbox"
    )
)
struct RogueAdvertTests {
    /// Anyone on the network can publish adverts. A flood of them (here from another Avahi
    /// client, as from another host) is resolved only up to ``AvahiBrowser/maximumInstances``
    /// at once: the one beyond is ignored and logged, and an instance withdrawn makes room for
    /// the next newcomer.
    @Test(.scaledTimeLimit(minutes: 3))
    func aFloodOfAdvertsIsResolvedOnlyUpToTheInstanceLimit() async throws {
        let type = try DiscoveryTests.uniqueServiceType()
        let (warnings, warning) = AsyncStream<String>.makeStream()
        let browsing = try AvahiConnection(logger: Logger(label: "test") { _ in RecordingLogHandler(warning) })
        let browse = PeerBrowser(serviceType: type, localPeerID: UUID(), connection: browsing).browse()
        // A client of its own: the daemon allows each client 1,024 objects, the browser 512
        // resolvers and the flood one entry group per advert.
        let flooding = try AvahiConnection()
        let peers = (0...AvahiBrowser.maximumInstances).map { _ in UUID() }
        let flood = try peers.map { peer in
            try PeerAdvertiser(
                serviceType: type,
                port: 7000,
                txt: AdvertTXT(peerID: peer, incarnation: 1, displayName: "rogue"),
                connection: flooding
            )
        }
        defer { flood.forEach { $0.stop() } }
        let names = Set(
            try await withThrowingTaskGroup(of: String.self) { group in
                for advertiser in flood { group.addTask { try await DiscoveryTests.established(advertiser) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        )

        // Every instance but one is resolved, and the one left out is named in a warning.
        var events = try await collect(browse, timeout: .seconds(60)) {
            Set(DiscoveryTests.foundIDs($0)).count == AvahiBrowser.maximumInstances
        }
        let logged = try #require(try await collect(warnings, timeout: .seconds(60)) { !$0.isEmpty }.first)
        let ignored = try #require(
            names.first {
                logged.hasSuffix(
                    "ignored 1 DNS-SD instance(s) of \(type.rawValue), the last \($0): \(AvahiBrowser.maximumInstances) are resolved already (is someone flooding the network with adverts?)"
                )
            },
            "\(logged)"
        )
        let ignoredID = try #require(UUID(uuidString: ignored))  // (an instance is named by its peer)
        #expect(!DiscoveryTests.foundIDs(events).contains(ignoredID))

        // An instance withdrawn makes room: a newcomer is resolved, the ignored one still is not.
        let withdrawn = try #require(DiscoveryTests.foundIDs(events).first)
        flood[peers.firstIndex(of: withdrawn)!].stop()
        events = try await collect(browse, timeout: .seconds(60)) { DiscoveryTests.lostIDs($0).contains(withdrawn) }
        let newcomerID = UUID()
        let newcomer = try PeerAdvertiser(
            serviceType: type,
            port: 7001,
            txt: AdvertTXT(peerID: newcomerID, incarnation: 1, displayName: "newcomer"),
            connection: flooding
        )
        defer { newcomer.stop() }
        events = try await collect(browse, timeout: .seconds(60)) { DiscoveryTests.foundIDs($0).contains(newcomerID) }
        #expect(!DiscoveryTests.foundIDs(events).contains(ignoredID))
    }
}

/// Tests that stop and start the sandbox's avahi-daemon: only alone with it (``runningAlone``),
/// never beside tests that need it (a navlog-sync restarted meanwhile found no daemon and exited).
@Suite(.enabled(if: inDiscoverySandbox && runningAlone, "restarts avahi-daemon: scripts/run-tests.sh runs it alone"))
struct DaemonRestartTests {
    @Test(.scaledTimeLimit(minutes: 2))
    func advertiserAndBrowserRecoverWhenAvahiDaemonRestarts() async throws {
        let type = try DiscoveryTests.uniqueServiceType()
        let peerID = UUID()
        let advertiser = try DiscoveryTests.advertise(type, name: "survivor", peerID: peerID)
        _ = try await DiscoveryTests.established(advertiser)
        let events = PeerBrowser(serviceType: type, localPeerID: UUID(), connection: try .shared()).browse()
        _ = try await collect(events) { DiscoveryTests.foundIDs($0).contains(peerID) }

        // The sandbox's own daemon (its pid file is in the sandbox's private /run).
        #expect(try await runProcess("/usr/sbin/avahi-daemon", ["-k"]).status == 0)
        let lost = try await collect(events) { DiscoveryTests.lostIDs($0).contains(peerID) }
        #expect(DiscoveryTests.lostIDs(lost) == [peerID])

        // While the daemon is down: a new connection says so and how to start it, unless asked to wait.
        let refused = try #require(throws: MultipeerError.self) { try AvahiConnection(waitForDaemon: false) }
        #expect(refused.code == .discoveryUnavailable)
        #expect(refused.message.hasPrefix("avahi-daemon is not running"), "\(refused)")
        #expect(refused.message.contains("avahi-daemon -D"))
        let patient = try AvahiConnection(waitForDaemon: true)
        let lateID = UUID()
        let lateAdvertiser = try PeerAdvertiser(
            serviceType: type,
            port: 7001,
            txt: AdvertTXT(peerID: lateID, incarnation: 1, displayName: "late"),
            connection: patient
        )

        #expect(try await runProcess("/usr/sbin/avahi-daemon", ["-D", "--no-chroot"]).status == 0)
        _ = try await DiscoveryTests.established(lateAdvertiser)

        let again = try await collect(events, timeout: .seconds(60)) {
            Set(DiscoveryTests.foundIDs($0)) == [peerID, lateID]
        }
        #expect(DiscoveryTests.foundIDs(again).count == 2, "each found once again: \(again)")
        let advertiserEvents = try await collect(advertiser.events, timeout: .seconds(60)) { events in
            events.contains { if case .established = $0 { true } else { false } }
        }
        #expect(advertiserEvents.first == .withdrawn)
        advertiser.stop()
        lateAdvertiser.stop()
    }
}

/// A process whose first D-Bus connection finds no system bus (libdbus reads the bus's address
/// once per process): only alone in a process of its own (``runningAlone``).
@Suite(
    .enabled(
        if: inDiscoverySandbox && runningAlone,
        "points D-Bus at a bus that is not there yet: scripts/run-tests.sh runs it alone"
    )
)
struct SystemBusWaitTests {
    /// A connection asked to wait for the daemon waits for the D-Bus system bus too (a machine
    /// still booting): it tries again every second until the bus is there. (It failed at once
    /// with "Daemon not running" before, although the error's own text says it would wait.)
    @Test(.scaledTimeLimit(minutes: 2))
    func aConnectionAskedToWaitWaitsForTheSystemBusToo() async throws {
        let type = try DiscoveryTests.uniqueServiceType()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bus-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let bus = directory.appendingPathComponent("system_bus_socket").path
        // (Alone in its process: no other test makes an Avahi client meanwhile.)
        setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=\(bus)", 1)
        defer { unsetenv("DBUS_SYSTEM_BUS_ADDRESS") }
        let refused = try #require(throws: MultipeerError.self) { try AvahiConnection(waitForDaemon: false) }
        #expect(refused.code == .discoveryUnavailable)
        let patient = try AvahiConnection(waitForDaemon: true)
        let peerID = UUID()
        let advertiser = try PeerAdvertiser(
            serviceType: type,
            port: 7002,
            txt: AdvertTXT(peerID: peerID, incarnation: 1, displayName: "booting"),
            connection: patient
        )
        defer { advertiser.stop() }
        // The bus comes up: the sandbox's, at the address the connection was told.
        try FileManager.default.createSymbolicLink(atPath: bus, withDestinationPath: "/run/dbus/system_bus_socket")
        _ = try await DiscoveryTests.established(advertiser)
        let events = PeerBrowser(serviceType: type, localPeerID: UUID(), connection: patient).browse()
        _ = try await collect(events, timeout: .seconds(60)) { DiscoveryTests.foundIDs($0).contains(peerID) }
    }
}

extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

/// Passes every message logged at warning level or above to a stream.
struct RecordingLogHandler: LogHandler {
    let messages: AsyncStream<String>.Continuation
    var logLevel: Logger.Level = .warning
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(_ messages: AsyncStream<String>.Continuation) {
        self.messages = messages
    }

    func log(event: LogEvent) {
        messages.yield("\(event.message)")
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
}
