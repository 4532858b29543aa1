import Foundation
import MultipeerCore
import MultipeerDiscovery
@testable import MultipeerSession
import MultipeerTestSupport
import Testing

/// Suspend, resume and stop, and what they do to work already under way (static peers, no DNS-SD).
@Suite struct LifecycleTests {
    /// A dial the peer table asked for just after a suspend was asked for: it reaches the run
    /// loop once the session is suspended. It used to be dropped there while the table still
    /// counted it as under way, so after `resume()` the peer was never dialled again.
    @Test(.scaledTimeLimit(minutes: 1))
    func aDialQueuedBehindASuspendIsMadeAfterResume() async throws {
        let listener = MultipeerSession(configuration: .test("listener", discovery: .staticPeers([])))
        let listenerEvents = EventLog(listener.events)
        try await whileRunning([listener]) {
            let port = try await listenerEvents.listeningPort()
            let dialler = MultipeerSession(configuration: .test("dialler", discovery: .staticPeers([])))
            let diallerEvents = EventLog(dialler.events)
            try await whileRunning([dialler]) {
                _ = try await diallerEvents.listeningPort()
                try await dialler.suspend(discoveringMeanwhile: "127.0.0.1:\(port)")
                await dialler.resume()
                try await diallerEvents.waitUntilActive([listener.peerID])
                #expect(await dialler.activePeers.map(\.id) == [listener.peerID])
            }
        }
    }
}
