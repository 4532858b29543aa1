import Foundation
import Glibc
@testable import MultipeerSession
import MultipeerCore
import MultipeerTestSupport
import NIOCore
import NIOPosix
import Testing

/// Opens plain TCP connections to `port` that send nothing, and holds them until `close()`.
final class SilentConnections: Sendable {
    let channels: [any Channel]

    /// Opens `count` at once; those the listener's backlog or limits turn away are left out.
    init(count: Int, port: Int) async {
        channels = await withTaskGroup(of: (any Channel)?.self) { group in
            for _ in 0..<count {
                group.addTask {
                    try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                        .connectTimeout(.seconds(20))
                        .connect(host: "127.0.0.1", port: port).get()
                }
            }
            return await group.reduce(into: []) { if let channel = $1 { $0.append(channel) } }
        }
    }

    func close() async {
        for channel in channels { try? await channel.close() }
    }
}

/// The listener's admission limits: connections beyond them are refused at once with a typed
/// error, the connections already admitted are unhurt, and room made is room given.
@Suite struct ConnectionLimitTests {
    @Test(.scaledTimeLimit(minutes: 1))
    func aConnectionBeyondTheHandshakeLimitIsRefusedAtOnce() async throws {
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server", handshakeTimeout: .seconds(60)),
            limits: MultipeerSession.Limits(maximumHandshakes: 4, maximumInboundLinks: 100), onLink: echo
        ) { server in
            // Five strangers connect and say nothing: four hold the four handshakes, and the one
            // that arrives last (whichever it is) is closed at once, long before any timeout.
            var silent: [any Channel] = []
            for _ in 0..<5 {
                silent.append(try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: server.port).get())
            }
            let refusal = try #require(try await withDeadline(.seconds(20)) { await server.nextFailure() })
            #expect(refusal.code == .connectionLimit)
            #expect(refusal.message == "refused a connection: 4 handshakes are already under way, the limit (Limits.maximumHandshakes)")
            let (closed, closing) = AsyncStream<Void>.makeStream()
            for channel in silent { channel.closeFuture.whenComplete { _ in closing.yield() } }
            try await withDeadline(.seconds(20)) { for await _ in closed { break } }
            #expect(silent.filter { !$0.isActive }.count == 1, "the refused one is closed; the four admitted stay open")
            silent.removeAll { !$0.isActive }
            // The strangers leave; their handshakes end, and a good peer is served again.
            for channel in silent { try await channel.close() }
            for _ in 0..<4 {
                let failure = try await withDeadline(.seconds(20)) { await server.nextFailure() }
                #expect(failure?.code == .closedDuringHandshake)
            }
            try await BadPeerTests.expectStillServing(server)
        }
    }

    @Test(.scaledTimeLimit(minutes: 1))
    func aLinkBeyondTheInboundLinkLimitIsRefusedAndTheOthersGoOn() async throws {
        try await withTestListener(
            configuration: LinkFixtures.configuration(name: "server"), limits: MultipeerSession.Limits(maximumHandshakes: 4, maximumInboundLinks: 2), onLink: echo
        ) { server in
            let dial: @Sendable () async throws -> PeerConnection = { try await PeerConnection.dial(host: "127.0.0.1", port: server.port, configuration: LinkFixtures.configuration(name: "client")) }
            let first = try await dial(), second = try await dial()
            // Both held open (each served by the echo until it closes); a third is one too many.
            await #expect(throws: MultipeerError.self) {
                let link = try await dial()
                try await link.channel.executeThenClose { _, _ in }  // (closed properly, should it be admitted)
            }
            let refusal = try await withDeadline(.seconds(20)) { await server.nextFailure() }
            #expect(refusal?.code == .connectionLimit)
            // (The second link's handshake may still be finishing on the listener's side.)
            #expect(refusal?.message.hasSuffix("handshakes reach the limit of 2 (Limits.maximumInboundLinks)") == true, "\(String(describing: refusal))")
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
        }
    }
}

/// A flood of connections: it keeps the process's event loops busy for seconds, enough for the
/// keepalive of any test running beside it to time out, so it runs alone (MULTIPEER_RUN_ALONE,
/// scripts/run-tests.sh).
@Suite(.enabled(if: runningAlone, "floods the process: scripts/run-tests.sh runs it alone"))
struct FloodTests {
    /// A thousand connections opened at once at a session and held open: those beyond 64
    /// handshakes (the default) are refused at once, the rest are cut off at the handshake
    /// timeout, and a real peer that dials meanwhile joins (on a redial, once there is room) and
    /// exchanges messages both ways.
    @Test(.scaledTimeLimit(minutes: 2))
    func aThousandConnectionsAtOnceDoNotKeepARealPeerOut() async throws {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < 4096 {
            limit.rlim_cur = min(limit.rlim_max, 4096)
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        let flood = limit.rlim_cur >= 4096 ? 1_000 : Int(limit.rlim_cur) / 4
        let server = MultipeerSession(configuration: .test("server", discovery: .staticPeers([]),
            limits: .init(handshakeTimeout: .seconds(3))))
        let serverEvents = EventLog(server.events)
        try await whileRunning([server]) {
            let port = try await serverEvents.listeningPort()
            let strangers = await SilentConnections(count: flood, port: port)
            let peer = MultipeerSession(configuration: .test("crew", discovery: .staticPeers(["127.0.0.1:\(port)"])))
            let peerEvents = EventLog(peer.events)
            try await whileRunning([peer]) {
                let inbox = peer.messages(of: Note.self), serverInbox = server.messages(of: Note.self)
                _ = try await serverEvents.waitUntilActive([peer.peerID], timeout: .seconds(90))
                // (Each side learns of the link on its own: the crew's may come a moment later.)
                _ = try await peerEvents.waitUntilActive([server.peerID], timeout: .seconds(90))
                try await server.send(Note(text: "to crew"), to: peer.peerID)
                try await peer.send(Note(text: "to server"), to: server.peerID)
                #expect(try await collect(inbox, timeout: .seconds(30)) { $0.count >= 1 }.first?.message.text == "to crew")
                #expect(try await collect(serverInbox, timeout: .seconds(30)) { $0.count >= 1 }.first?.message.text == "to server")
            }
            // Strangers beyond the limit were refused at once (the exact count depends on how
            // many the kernel's accept queue held back for later; the small-limit tests above
            // count exactly).
            let refusals = serverEvents.history.compactMap { event -> MultipeerError? in
                if case .connectionFailed(_, let error) = event, error.code == .connectionLimit { error } else { nil }
            }
            #expect(strangers.channels.count >= flood / 2, "most of the flood got through the backlog: \(strangers.channels.count)")
            #expect(refusals.count >= flood / 4, "\(refusals.count) refused at once")
            #expect(refusals.allSatisfy { $0.message.hasPrefix("refused a connection: 64 handshakes are already under way") })
            await strangers.close()
        }
    }
}

