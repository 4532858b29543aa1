import CrewChecklist
import Foundation
import MultipeerSession
import MultipeerSync
import Testing

/// The second app on the store, crew-checklist, as its two stations use it.
@Suite struct CrewChecklistTests {
    /// The captain ticks an item while the first officer's station, apart and restarted, adds
    /// a remark to it: when the stations meet again both show both, line for line the same.
    @Test func aTickAndARemarkMadeApartAreBothKept() async throws {
        try await withDirectory { directory in
            @Sendable func path(_ name: String) -> String { directory.appendingPathComponent("\(name).sqlite").path }
            let firstOfficer = PeerIdentity()
            let listener = MultipeerSession(configuration: configuration("captain"), identity: PeerIdentity())
            let captainStore = try SyncStore(session: listener, path: path("captain"))
            let captain = Checklist(store: captainStore, member: "captain")
            try await whileRunning([listener]) {
                let port = try await listeningPort(of: listener)
                func station() throws -> (MultipeerSession, SyncStore) {
                    let session = MultipeerSession(
                        configuration: configuration("first officer", dialling: port),
                        identity: firstOfficer
                    )
                    return (session, try SyncStore(session: session, path: path("first-officer")))
                }
                let (first, firstStore) = try station()
                let officer = Checklist(store: firstStore, member: "first officer")
                #expect(try await run("add before-start/fuel Fuel quantity", on: captain, store: captainStore) == "ok")
                #expect(try await run("add before-start/flaps Flaps", on: captain, store: captainStore) == "ok")
                let arriving = officer.items.changes
                try await whileRunning([first]) {
                    try await whileSyncing([captainStore, firstStore]) {
                        _ = try await changes(arriving) { Set($0.map(\.id)).count == 2 }
                    }
                }

                // Apart.
                _ = try await run("check before-start/fuel", on: captain, store: captainStore)
                let (second, secondStore) = try station()
                let rejoined = Checklist(store: secondStore, member: "first officer")
                _ = try await run("remark before-start/fuel 9,400 kg both tanks", on: rejoined, store: secondStore)
                await #expect(throws: ChecklistError.self, "an item nobody added") {
                    try await rejoined.check("before-start/doors")
                }

                let expected = """
                    [ ] before-start/flaps: Flaps
                    [x] captain before-start/fuel: Fuel quantity  (9,400 kg both tanks)
                    """
                let (atCaptain, atOfficer) = (captain.items.changes, rejoined.items.changes)
                try await whileRunning([second]) {
                    try await whileSyncing([captainStore, secondStore]) {
                        _ = try await changes(atCaptain) { $0.last?.record?.remark != nil }
                        _ = try await changes(atOfficer) { $0.last?.record?.checkedBy != nil }
                    }
                }
                #expect(try await captain.render() == expected)
                #expect(try await rejoined.render() == expected)
                #expect(try await run("list", on: rejoined, store: secondStore) == expected)
            }
        }
    }
}
