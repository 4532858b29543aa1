// crew-checklist: a checklist shared between crew stations over a MultipeerSession, kept by
// MultipeerSync. Commands come on standard input; every change, here or from a peer, is printed.
//
//   crew-checklist NAME [--port PORT] [HOST:PORT ...]
//
// NAME's station keeps NAME.identity and NAME.sqlite in the working directory, and shares
// group.key (made on the first run). Without addresses it finds its peers over DNS-SD
// (avahi-daemon); with them, it dials them. It listens on PORT (by default one the system
// picks, which it prints).
import CrewChecklist
import Foundation
import MultipeerSession
import MultipeerSync

var arguments = Array(CommandLine.arguments.dropFirst())
var port = 0
if let flag = arguments.firstIndex(of: "--port"), flag + 1 < arguments.count, let number = Int(arguments[flag + 1]) {
    port = number
    arguments.removeSubrange(flag...flag + 1)
}
guard let name = arguments.first else {
    print("usage: crew-checklist NAME [--port PORT] [HOST:PORT ...]")
    exit(64)
}
do {
    let key: PreSharedKey
    if FileManager.default.fileExists(atPath: "group.key") {
        key = try PreSharedKey(contentsOfFile: "group.key")
    } else {
        key = try PreSharedKey.generate(identity: "crew-checklist")
        try key.write(toFile: "group.key")
    }
    let peers = Array(arguments.dropFirst())
    let session = MultipeerSession(
        configuration: .init(
            serviceType: "_crewchecklist._tcp",
            peer: PeerInfo(displayName: name),
            psk: key,
            port: port,
            discovery: peers.isEmpty ? .avahi() : .staticPeers(peers)
        ),
        identity: try PeerIdentity(loadingOrCreatingFile: "\(name).identity")
    )
    let store = try SyncStore(session: session, path: "\(name).sqlite")
    let checklist = Checklist(store: store, member: name)

    try await withThrowingDiscardingTaskGroup { group in
        group.addTask { try await session.runUntilSignalled() }
        group.addTask { try await store.run() }
        group.addTask {
            for await event in session.events {
                if case .listening(let port) = event { print("listening on port \(port)") }
            }
        }
        group.addTask {
            for await change in checklist.items.changes {
                // (This reader fell behind, a whole checklist arriving say: what it missed, `list` shows.)
                if change.missed > 0 { print("(\(change.missed) changes not shown: list shows the checklist)") }
                guard change.peer != nil else { continue }
                print(change.record.map { "~ \($0.id) from \(change.origin)" } ?? "~ \(change.id) removed")
            }
        }
        while let line = readLine() {
            do {
                print(try await run(line, on: checklist, store: store))
            } catch {
                print("error: \(error)")
            }
        }
        group.cancelAll()
    }
} catch {
    print("crew-checklist: \(error)")
    exit(1)
}
