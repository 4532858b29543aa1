import Foundation
import MultipeerSession
import Testing

/// The public API, used as an application uses it: `import MultipeerSession` and nothing else.
@Suite struct PublicAPITests {
    @Test func everythingAUserNamesComesWithTheOneImport() throws {
        var limits = MultipeerSession.Limits()
        limits.outbox = BufferLimits(maximumCount: 16, maximumBytes: 1 << 20)
        let keepalive = KeepaliveParameters(interval: .milliseconds(200), timeout: .seconds(1))
        let configuration = MultipeerSession.Configuration(
            serviceType: "_consumer._tcp",
            peer: PeerInfo(displayName: "one import"),
            psk: groupKey,
            limits: limits,
            keepalive: keepalive,
            reconnect: .init(initialDelay: .milliseconds(50))
        )
        #expect(configuration.limits.outbox.maximumCount == 16)
        #expect(configuration.reconnect == ReconnectParameters(initialDelay: .milliseconds(50)))
        #expect(MultipeerSession.protocolVersion == 2 && MultipeerSession.version.split(separator: ".").count == 3)
        #expect(PeerLeftReason.goodbye(.shutdown) != .keepaliveTimeout)
        #expect(LinkQuality().loss == 0)
        #expect(configuration.limits.maximumMessageLength == 128 << 20)
        #expect(configuration.messageEncoding == MessageEncoding.binary && "\(MessageEncoding.json)" == "json")
        #expect(MessageDropReason.abandonedBySender.description.contains("gave up the rest"))
        let error = #expect(throws: MultipeerError.self) { try PreSharedKey(identity: "short", key: [1, 2, 3]) }
        #expect(error?.code == .invalidKey)
        // Roster is defined a layer down (MultipeerCore) and re-exported; its file reading is here.
        let member = PeerIdentity()
        let roster = try Roster(parsing: "\(member.key)  # a member\n\(member.peerID)\n")
        #expect(roster.admits(member.key) && roster.keys.count == 1 && roster.peerIDs.count == 1)
        #expect(!Roster().admits(member.key))
        #expect(throws: MultipeerError.self) { try Roster(contentsOfFile: "/nonexistent/crew.roster") }
    }

    /// An application's own handling of peers and events is tested with values it makes.
    @Test func anApplicationMakesPeersEventsAndLinkStatsForItsOwnTests() {
        let identity = PeerIdentity()
        let peer = Peer(id: identity.peerID, key: identity.key, displayName: "Captain", metadata: ["seat": "L"])
        #expect(peer.id == identity.peerID && peer.key.peerID == peer.id && peer.incarnation == 1)
        let stats = LinkStats(reconnects: 2, timeActive: .seconds(30))
        #expect(stats.reconnects == 2 && stats.quality.loss == 0 && stats.description.contains("2 reconnects"))
        let event = SessionEvent.peerJoined(peer)
        guard case .peerJoined(let joined) = event else {
            Issue.record("a peerJoined event")
            return
        }
        #expect(joined == peer)
        // ... and with the errors events carry, under the library's codes.
        let refusal = SessionEvent.authenticationFailed(
            address: "198.18.0.2:7000",
            MultipeerError(.notInRoster, "not in the roster")
        )
        guard case .authenticationFailed(_, let error) = refusal else {
            Issue.record("an authenticationFailed event")
            return
        }
        #expect(error.code == .notInRoster && error.description == "not in the roster")
        #expect(PeerLeftReason.goodbye(.notInRoster).description.contains("notInRoster"))
    }

    /// The active peers read from a plain function, in step with the events: a peer seen joining
    /// is among them, and one seen leaving is not.
    @Test func theActivePeersAreReadWithoutWaitingAndAgreeWithTheEvents() async throws {
        let listener = MultipeerSession(configuration: configuration("listener"), identity: PeerIdentity())
        /// What a view would do as it draws: no `await`.
        func names(_ session: MultipeerSession) -> [String] { session.activePeers.map(\.displayName) }
        #expect(names(listener).isEmpty)
        try await whileRunning([listener]) {
            let port = try await listeningPort(of: listener)
            var events = listener.events.makeAsyncIterator()
            let dialler = MultipeerSession(
                configuration: configuration("dialler", dialling: port),
                identity: PeerIdentity()
            )
            let run = Task { try await dialler.run() }
            while let event = await events.next() {
                if case .peerJoined(let peer) = event {
                    #expect(peer.displayName == "dialler" && names(listener) == ["dialler"])
                    break
                }
            }
            run.cancel()
            while let event = await events.next() {
                if case .peerLeft = event {
                    #expect(names(listener).isEmpty)
                    break
                }
            }
            _ = try? await run.value
        }
    }
    /// Who is around, beside who is active: a peer is connecting before it is active, active
    /// only once it joined (the event comes first), and, once it stops, known still (under the
    /// name its HELLO proved, no longer proven) and dialled again.
    @Test func theAvailablePeersShowConnectingBeforeActiveAndAPeerThatWentAsNoLongerProven() async throws {
        let listener = MultipeerSession(configuration: configuration("listener"), identity: PeerIdentity())
        let listening = Task { try await listener.run() }
        let port = try await listeningPort(of: listener)
        let dialler = MultipeerSession(
            configuration: configuration("dialler", dialling: port),
            identity: PeerIdentity()
        )
        #expect(dialler.availablePeers.isEmpty, "not running: no one")
        let events = dialler.events
        let (states, gone) = try await whileRunning([dialler]) {
            try await within(60, "the listener to become active, then to go") {
                () -> ([AvailablePeer.State], AvailablePeer?) in
                var states: [AvailablePeer.State] = []
                var joined = false
                for await event in events {
                    switch event {
                    case .peerJoined:
                        joined = true
                    case .availablePeerChanged(let peer):
                        #expect(peer.id == listener.peerID)
                        #expect(peer.state != .active || joined, "active only after it joined")
                        states.append(peer.state)
                        if peer.state == .active {
                            #expect(peer.displayName == "listener" && peer.key == listener.identity.key)
                            // Read without waiting: as new as the events, or newer (this reader may lag).
                            #expect(dialler.availablePeers == [peer], "\(dialler.availablePeers)")
                            listening.cancel()  // the listener goes
                        } else if states.contains(.active) {
                            return (states, peer)
                        }
                    default: break
                    }
                }
                return (states, nil)
            }
        }
        _ = try? await listening.value
        #expect(states.first == .connecting && states.dropLast().last == .active, "\(states)")
        #expect(gone?.displayName == "listener", "named by the HELLO it gave")
        #expect(gone?.key == nil, "no link speaks for it now")
        #expect(dialler.availablePeers.isEmpty, "stopped: no one")
    }

    /// A peer is a value: a copy changed is another peer, the original unchanged; equal peers
    /// hash alike, and a field changed makes them differ.
    @Test func aPeerIsAValue() {
        let identity = PeerIdentity()
        let peer = Peer(id: identity.peerID, key: identity.key, displayName: "Captain", metadata: ["seat": "L"])
        var renamed = peer
        renamed.displayName = "Relief"
        renamed.metadata["seat"] = "R"
        #expect(peer.displayName == "Captain" && peer.metadata == ["seat": "L"], "the original is unchanged")
        #expect(renamed.displayName == "Relief" && renamed.metadata == ["seat": "R"] && renamed.id == peer.id)
        #expect(renamed != peer)
        let same = Peer(id: identity.peerID, key: identity.key, displayName: "Captain", metadata: ["seat": "L"])
        #expect(same == peer && Set([peer, same, renamed]).count == 2)
        var restarted = peer
        restarted.incarnation = 2
        #expect(restarted != peer && restarted.description == peer.description)
    }

    /// An application's own handling of availability is tested with values it makes.
    @Test func anApplicationMakesAvailablePeers() {
        let peer = AvailablePeer(id: UUID(), state: .connecting, displayName: "Captain")
        #expect(peer.key == nil && peer.metadata.isEmpty && peer.description.hasSuffix("connecting"))
        #expect(SessionEvent.availablePeerChanged(peer).description.hasPrefix("Captain ("))
    }
}

/// What an outside package met at the edges of the public API (issue 46, 3).
@Suite struct PublicAPIEdgeTests {
    /// A type that conforms to MultipeerMessage only to choose its encoding keeps its bare name
    /// (it had to declare one), and travels under it to a subscriber of a type of that name.
    struct Readable: MultipeerMessage, Equatable {
        static var wireEncoding: MessageEncoding? { .json }
        var text: String
    }

    @Test func aTypeThatOnlyChoosesItsEncodingKeepsItsBareName() async throws {
        #expect(MultipeerSession.wireName(of: Readable.self) == "Readable")
        try await withPair { listener, dialler in
            let received = listener.messages(of: Readable.self)
            try await dialler.send(Readable(text: "as JSON"), to: listener.peerID)
            #expect(
                try await within(30, "the message") { await received.first { _ in true }?.message }
                    == Readable(text: "as JSON")
            )
        }
    }

    /// A service type that is none is refused with static peers too, as with DNS-SD: the same
    /// configuration would fail only once moved to DNS-SD. (It was taken.)
    @Test func anInvalidServiceTypeIsRefusedWhateverTheDiscovery() async throws {
        var invalid = configuration("static")
        invalid.serviceType = "navlog"
        let session = MultipeerSession(configuration: invalid, identity: PeerIdentity())
        let error = try await #require(throws: MultipeerError.self) { try await session.run() }
        #expect(
            error.code == .invalidArgument && error.message.contains("\"navlog\" is not a DNS-SD service type"),
            "\(error)"
        )
    }
}
