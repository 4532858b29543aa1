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
        let placeholder = MultipeerSession(configuration: configuration("placeholder"), identity: PeerIdentity())
        let port = try await whileRunning([placeholder]) { try await listeningPort(of: placeholder) }
        let dialler = MultipeerSession(
            configuration: configuration("dialler", dialling: port),
            identity: PeerIdentity()
        )
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
            let peer = MultipeerSession(configuration: late, identity: PeerIdentity())
            try await whileRunning([peer]) {
                _ = try await listeningPort(of: peer)
                await dialler.resume()
                try await waitUntilActive(dialler, peer.peerID)
                #expect(dialler.activePeers.map(\.id) == [peer.peerID])
                #expect(await dialler.listeningPort != nil, "listening again")
            }
        }
    }

    /// A session on port 0 comes back from `suspend()` on the same port, so a peer that dials it
    /// by address finds it again and delivers what it queued meanwhile (it came back on a new
    /// port, and the peer never found it: 0 of 10 messages in 20 s).
    @Test func resumeKeepsThePortStaticPeersDial() async throws {
        let listener = MultipeerSession(configuration: configuration("listener"), identity: PeerIdentity())
        try await whileRunning([listener]) {
            let port = try await listeningPort(of: listener)
            let dialler = MultipeerSession(
                configuration: configuration("dialler", dialling: port),
                identity: PeerIdentity()
            )
            let notes = listener.messages(of: Note.self)
            try await whileRunning([dialler]) {
                try await waitUntilActive(listener, dialler.peerID)
                let events = dialler.events
                await listener.suspend()
                try await within(30, "the dialler to see the listener leave") {
                    for await event in events {
                        if case .peerLeft(let peer, _) = event, peer.id == listener.peerID { return }
                    }
                }
                for number in 0..<10 { try await dialler.send(Note(text: "\(number)"), to: listener.peerID) }
                await listener.resume()
                let received = try await within(30, "the queued messages") { () -> [String] in
                    var texts: [String] = []
                    for await (_, note) in notes {
                        texts.append(note.text)
                        if texts.count == 10 { break }
                    }
                    return texts
                }
                #expect(received == (0..<10).map { "\($0)" })
                #expect(await listener.listeningPort == port)
            }
        }
    }

    /// A port taken while the session was suspended: `resume()` says so in an event and listens
    /// on another, which the `listening` event names.
    @Test func aPortTakenMeanwhileIsReportedAndAnotherListenedOn() async throws {
        let session = MultipeerSession(configuration: configuration("session"), identity: PeerIdentity())
        try await whileRunning([session]) {
            let port = try await listeningPort(of: session)
            let events = session.events
            await session.suspend()
            // (No event says a session without peers has suspended: its port is gone then.)
            try await within(30, "the session to suspend") {
                while await session.listeningPort != nil { await Task.yield() }
            }
            var squatting = configuration("squatter")
            squatting.port = port
            let squatter = MultipeerSession(configuration: squatting, identity: PeerIdentity())
            try await whileRunning([squatter]) {
                #expect(try await listeningPort(of: squatter) == port)
                await session.resume()
                let (failed, next) = try await within(30, "the new port") { () -> (MultipeerError?, Int?) in
                    var failed: MultipeerError?
                    for await event in events {
                        if case .listenFailed(let taken, let error) = event {
                            #expect(taken == port)
                            failed = error
                        }
                        if case .listening(let next) = event, failed != nil { return (failed, next) }
                    }
                    return (failed, nil)
                }
                #expect(failed?.code == .listenFailed)
                #expect(next != nil && next != port)
            }
        }
    }
}
