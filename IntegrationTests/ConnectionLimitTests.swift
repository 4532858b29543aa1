import Foundation
import Glibc
import MultipeerCore
import MultipeerTestSupport
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import MultipeerSession

/// Opens plain TCP connections to `port` that send nothing, and holds them until `close()`.
final class SilentConnections: Sendable {
    let channels: [any Channel]

    /// Opens `count` at once from `source` (a loopback address); those the listener's backlog
    /// or limits turn away are left out.
    init(count: Int, port: Int, from source: String = "127.0.0.1") async {
        channels = await withTaskGroup(of: (any Channel)?.self) { group in
            for _ in 0..<count {
                group.addTask { try? await Self.open(port: port, from: source) }
            }
            return await group.reduce(into: []) { if let channel = $1 { $0.append(channel) } }
        }
    }

    /// One connection to 127.0.0.1:`port` from `source`.
    static func open(port: Int, from source: String) async throws -> any Channel {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(20))
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .connect(host: "127.0.0.1", port: port).get()
    }

    func close() async {
        for channel in channels { try? await channel.close() }
    }
}

/// The listener's admission limits: connections beyond them are refused at once with a typed
/// error, the connections already admitted are unhurt, and room made is room given.
@Suite struct ConnectionLimitTests {
    @Test(.scaledTimeLimit(minutes: 1))
    func theOldestHandshakeOfTheBusiestSourceMakesRoomForANewcomer() async throws {
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server", handshakeTimeout: .seconds(60)),
            limits: MultipeerSession.Limits(
                maximumHandshakes: 4,
                maximumInboundLinks: 100,
                maximumHandshakesPerSource: 3,
                firstBytesTimeout: .seconds(60)
            ),
            onLink: echo
        ) { server in
            // A stranger at 127.0.0.1 opens three connections and says nothing: its per-source limit.
            var stranger: [any Channel] = []
            for _ in 0..<3 { stranger.append(try await SilentConnections.open(port: server.port, from: "127.0.0.1")) }
            // A fourth from the same source cuts off its own oldest, nobody else's.
            stranger.append(try await SilentConnections.open(port: server.port, from: "127.0.0.1"))
            let own = try #require(try await withDeadline(.seconds(20)) { await server.nextFailure() })
            #expect(own.code == .connectionLimit)
            #expect(
                own.message
                    == "cut off a handshake from 127.0.0.1: 3 from that source were under way, the limit (Limits.maximumHandshakesPerSource), and another came"
            )
            let evicted = stranger.removeFirst()
            try await withDeadline(.seconds(20)) { try await evicted.waitUntilClosed() }
            #expect(stranger.allSatisfy { $0.isActive })
            // Another host (127.0.0.2) fills the last handshake; a third (127.0.0.3) finds every
            // handshake taken, and the busiest source's oldest makes room for it.
            let other = try await SilentConnections.open(port: server.port, from: "127.0.0.2")
            let third = try await SilentConnections.open(port: server.port, from: "127.0.0.3")
            let busiest = try #require(try await withDeadline(.seconds(20)) { await server.nextFailure() })
            #expect(
                busiest.message
                    == "cut off a handshake from 127.0.0.1: 4 handshakes were under way, the limit (Limits.maximumHandshakes), and 127.0.0.1 held the most"
            )
            // A real peer (from 127.0.0.1, as any loopback dial) gets in the same way.
            let link = try await PeerConnection.dial(
                host: "127.0.0.1",
                port: server.port,
                configuration: LinkFixtures.configuration(name: "crew")
            )
            #expect(try await roundTrip("in", over: link) == "in")
            #expect(other.isActive && third.isActive, "the quiet hosts' handshakes were left alone")
            for channel in stranger + [other, third] { try? await channel.close() }
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aConnectionThatSaysNothingIsClosedAtTheFirstBytesDeadline() async throws {
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server", handshakeTimeout: .seconds(60)),
            // (2 s, not less: the good peer dialled at the end must get its ClientHello read
            // within the same deadline while every other integration test loads the machine.)
            limits: MultipeerSession.Limits(firstBytesTimeout: .seconds(2)),
            onLink: echo
        ) { server in
            let started = ContinuousClock.now
            let silent = try await SilentConnections.open(port: server.port, from: "127.0.0.1")
            let failure = try #require(try await withDeadline(.seconds(20)) { await server.nextFailure() })
            #expect(failure.code == .handshakeTimeout)
            #expect(
                failure.message.hasSuffix(
                    "sent nothing within \(TestTime.scaled(.seconds(2))) (Limits.firstBytesTimeout)"
                ),
                "\(failure)"
            )
            try await withDeadline(.seconds(20)) { try await silent.waitUntilClosed() }
            #expect(
                ContinuousClock.now - started < TestTime.scaled(.seconds(30)),
                "closed long before the handshake timeout (both stretched alike under a sanitizer)"
            )
            _ = silent
            try await BadPeerTests.expectStillServing(server)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aLinkBeyondTheInboundLinkLimitIsRefusedAndTheOthersGoOn() async throws {
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server"),
            limits: MultipeerSession.Limits(maximumHandshakes: 4, maximumInboundLinks: 2),
            onLink: echo
        ) { server in
            let dial: @Sendable () async throws -> PeerConnection = {
                try await PeerConnection.dial(
                    host: "127.0.0.1",
                    port: server.port,
                    configuration: LinkFixtures.configuration(name: "client")
                )
            }
            let first = try await dial()
            let second = try await dial()
            do {
                // Both held open (each served by the echo until it closes); a third is one too many.
                await #expect(throws: MultipeerError.self) {
                    let link = try await dial()
                    try await link.channel.executeThenClose { _, _ in }  // (closed properly, should it be admitted)
                }
                let refusal = try await withDeadline(.seconds(20)) { await server.nextFailure() }
                #expect(refusal?.code == .connectionLimit)
                // (The second link's handshake may still be finishing on the listener's side.)
                #expect(
                    refusal?.message.hasPrefix("refused a connection from 127.0.0.1: ") == true,
                    "\(String(describing: refusal))"
                )
                #expect(
                    refusal?.message.hasSuffix("handshakes reach the limit of 2 (Limits.maximumInboundLinks)") == true,
                    "\(String(describing: refusal))"
                )
                // The two admitted links still carry messages.
                #expect(try await roundTrip("first", over: first) == "first")
                // That closed the first link: once its echo has ended there is room again. No event
                // says when, so each refusal the listener reports is followed by another dial.
                try await withDeadline(.seconds(20)) { () async throws in
                    while true {
                        if let link = try? await dial() {
                            #expect(try await roundTrip("third", over: link) == "third")
                            return
                        }
                        #expect(await server.nextFailure()?.code == .connectionLimit)
                    }
                }
                #expect(try await roundTrip("second", over: second) == "second")
            } catch {
                // A link dropped without being closed traps the whole test process (NIO): close
                // both before the failure goes up.
                for link in [first, second] { try? await link.channel.executeThenClose { _, _ in } }
                throw error
            }
        }
    }
}

/// Floods of connections: they keep the process's event loops busy for seconds, enough for the
/// keepalive of any test running beside them to time out, so they run alone (MULTIPEER_RUN_ALONE,
/// scripts/run-tests.sh), one after the other.
@Suite(.serialized, .enabled(if: runningAlone, "floods the process: scripts/run-tests.sh runs it alone"))
struct FloodTests {
    /// Connections keep arriving while the listener stops: every one it accepted is closed (the
    /// other end sees it end), also one NIO was still setting up as the listener closed, which
    /// NIO itself then drops without closing. Deadlines are far off, so only the stop closes them.
    /// (Twelve hundred connections in a few seconds: alone, as a flood.)
    @Test(.scaledTimeLimit(minutes: 2))
    func aListenerStoppedWhileConnectionsArriveLeavesNoneOfThemOpen() async throws {
        let configuration = try LinkFixtures.configuration(name: "server", handshakeTimeout: .seconds(600))
        let limits = MultipeerSession.Limits(
            maximumHandshakes: 1_000,
            maximumInboundLinks: 1_000,
            maximumHandshakesPerSource: 1_000,
            firstBytesTimeout: .seconds(600)
        )
        for _ in 0..<4 {
            let server = try await TestListener(
                host: "127.0.0.1",
                configuration: configuration,
                limits: limits,
                onLink: echo
            )
            let made = NIOLockedValueBox(0)
            let connections = await withTaskGroup(of: (any Channel)?.self) { group in
                for index in 0..<300 {
                    group.addTask {
                        let channel = try? await SilentConnections.open(
                            port: server.port,
                            from: "127.0.0.\(index % 8 + 1)"
                        )
                        // The first byte of a ClientHello, no more: a connection the listener's
                        // full backlog never took is reset by this, not left to look open.
                        try? await channel?.writeAndFlush(ByteBuffer(bytes: [0x16]))
                        // The listener stops once a third are in, with the rest still arriving.
                        if channel != nil,
                            made.withLockedValue({
                                $0 += 1
                                return $0
                            }) == 100
                        {
                            await server.stop()
                        }
                        return channel
                    }
                }
                return await group.reduce(into: [any Channel]()) { if let channel = $1 { $0.append(channel) } }
            }
            await server.stop()
            #expect(connections.count >= 100)
            let allClosed: Void? = try? await withDeadline(.seconds(30)) {
                for channel in connections { try await channel.waitUntilClosed() }
            }
            #expect(
                allClosed != nil,
                "\(connections.filter(\.isActive).count) of \(connections.count) connections still open"
            )
        }
    }

    /// One host (127.0.0.2) keeps 200 connections open at a session without a key, opening a
    /// new one as each is closed: a real peer (127.0.0.1) that dials meanwhile joins and
    /// exchanges messages both ways, and the session reports the flood in a few events a
    /// second, not one per connection.
    @Test(.scaledTimeLimit(minutes: 2))
    func aHostFloodingConnectionsDoesNotKeepARealPeerOut() async throws {
        let server = MultipeerSession(
            configuration: .test(
                "server",
                discovery: .staticPeers([]),
                limits: .init(handshakeTimeout: .seconds(3))
            ),
            identity: PeerIdentity()
        )
        let serverEvents = EventLog(server.events)
        try await whileRunning([server]) {
            let port = try await serverEvents.listeningPort()
            let opened = SharedCounter()
            let floodStarted = ContinuousClock.now
            let flood = Task {
                await withTaskGroup(of: Void.self) { group in
                    for _ in 0..<200 {
                        group.addTask {
                            while !Task.isCancelled {
                                guard let channel = try? await SilentConnections.open(port: port, from: "127.0.0.2")
                                else { continue }
                                opened.increment()
                                await withTaskCancellationHandler {
                                    try? await channel.closeFuture.get()
                                } onCancel: {
                                    channel.close(promise: nil)
                                }
                            }
                        }
                    }
                }
            }
            defer { flood.cancel() }
            // The flood is under way (a thousand connections in) before the peer dials.
            try await withDeadline(.seconds(60)) { await opened.reached(1_000) }
            let peer = MultipeerSession(
                configuration: .test("crew", discovery: .staticPeers(["127.0.0.1:\(port)"])),
                identity: PeerIdentity()
            )
            let peerEvents = EventLog(peer.events)
            try await whileRunning([peer]) {
                let inbox = peer.messages(of: Note.self)
                let serverInbox = server.messages(of: Note.self)
                _ = try await serverEvents.waitUntilActive([peer.peerID], timeout: .seconds(60))
                _ = try await peerEvents.waitUntilActive([server.peerID], timeout: .seconds(60))
                try await server.send(Note(text: "to crew"), to: peer.peerID)
                try await peer.send(Note(text: "to server"), to: server.peerID)
                #expect(
                    try await collect(inbox, timeout: .seconds(30)) { $0.count >= 1 }.first?.message.text == "to crew"
                )
                #expect(
                    try await collect(serverInbox, timeout: .seconds(30)) { $0.count >= 1 }.first?.message.text
                        == "to server"
                )
            }
            flood.cancel()
            // Every connection of the flood failed (cut off for a newer one, or silent until
            // the first-bytes deadline); each code was reported one by one ten times at most,
            // then once a second, with the count of the rest.
            // (The last held back are reported a second after the flood.)
            let history = try await serverEvents.wait(timeout: .seconds(30)) { events in
                events.reduce(0) { total, event in
                    switch event {
                    case .connectionFailed, .authenticationFailed: total + 1
                    case .connectionsFailed(let count, _): total + count
                    default: total
                    }
                } >= 500
            }
            let elapsed = (ContinuousClock.now - floodStarted).seconds
            let oneByOne = history.compactMap { event -> MultipeerError.Code? in
                switch event {
                case .connectionFailed(_, let error), .authenticationFailed(_, let error): error.code
                default: nil
                }
            }
            let counted = history.reduce(0) { if case .connectionsFailed(let count, _) = $1 { $0 + count } else { $0 } }
            let bound = Set(oneByOne).count * (10 + Int(elapsed.rounded(.up)) + 1)
            #expect(oneByOne.count <= bound, "\(oneByOne.count) failures reported one by one in \(elapsed) s")
            #expect(
                oneByOne.count + counted >= 500,
                "the flood's failures were counted: \(oneByOne.count) + \(counted) of \(opened.value) connections"
            )
            #expect(counted > 0)
        }
    }
}

/// A counter several tasks increment, and others wait on.
final class SharedCounter: Sendable {
    private struct State {
        var count = 0
        var waiters: [(Int, CheckedContinuation<Void, Never>)] = []
    }
    private let state = NIOLockedValueBox(State())

    func increment() {
        let ready = state.withLockedValue { state in
            state.count += 1
            let count = state.count
            defer { state.waiters.removeAll { $0.0 <= count } }
            return state.waiters.filter { $0.0 <= count }.map(\.1)
        }
        for waiter in ready { waiter.resume() }
    }

    var value: Int { state.withLockedValue { $0.count } }

    /// Returns once the count is at least `target`.
    func reached(_ target: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLockedValue { state in
                guard state.count < target else { return true }
                state.waiters.append((target, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }
}
