import Foundation
import MultipeerSession
import Testing

/// Suspend and resume as an application does them, with work under way.
@Suite struct LifecycleTests {
    /// A session keeps dialling a peer that is not there yet; it is suspended with a redial
    /// pending, the peer appears meanwhile, and after `resume()` the two are connected (a dial
    /// queued behind a suspend used to be lost, and the peer never dialled again).
    @Test func suspendedWithDialsUnderWayAndResumedEveryPeerComesBack() async throws {
        // A port nothing listens on yet: a session's, stopped.
        let placeholder = MultipeerSession(configuration: configuration("placeholder"))
        let port = try await whileRunning([placeholder]) { try await listeningPort(of: placeholder) }
        let dialler = MultipeerSession(configuration: configuration("dialler", dialling: port))
        try await whileRunning([dialler]) {
            let events = dialler.events
            // Refused until the peer is there: the dialler redials with backoff meanwhile.
            try await within(30, "a refused dial") {
                for await event in events { if case .connectionFailed = event { return } }
            }
            await dialler.suspend()
            await dialler.resume()
            await dialler.suspend()
            var late = configuration("late")
            late.port = port
            let peer = MultipeerSession(configuration: late)
            try await whileRunning([peer]) {
                _ = try await listeningPort(of: peer)
                await dialler.resume()
                try await waitUntilActive(dialler, peer.peerID)
                #expect(await dialler.activePeers.map(\.id) == [peer.peerID])
                #expect(await dialler.listeningPort != nil, "listening again")
            }
        }
    }
}
