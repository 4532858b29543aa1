import Foundation
import Glibc
import MultipeerTestSupport
import Testing

/// navlog-sync as users run it: real processes, real DNS-SD through avahi-daemon, real TLS,
/// commands on standard input, JSON events on standard output, and the logs compared through
/// `navlog-sync list --json` on each host's database.
@Suite(.scaledTimeLimit(minutes: 2), .enabled(if: inDiscoverySandbox, "needs scripts/sandbox.sh (make test, as root)"))
struct NavlogProcessTests {
    /// Waits until every host holds each entry's winning version (of all typed on `hosts` and
    /// on the earlier processes `alsoTypedOn`), then checks that their stored logs are
    /// identical; returns the log.
    @discardableResult
    static func expectConverged(_ hosts: [NavlogHost], alsoTypedOn earlier: [NavlogHost] = []) async throws -> String {
        let winners = NavlogVersion.winners((hosts + earlier).map(\.history))
        for host in hosts {
            // A restarted host announces only what it applies after the restart.
            let held = earlier.filter { $0.data == host.data }.reduce(into: [:]) {
                $0.merge(NavlogVersion.held(by: $1.history)) { $1 }
            }
            try await host.waitUntilHolding(winners, alreadyHeld: held)
        }
        let logs = try await withThrowingTaskGroup(of: String.self) { group in
            for host in hosts { group.addTask { try await host.storedLog() } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(Set(logs).count == 1, "the stored logs differ:\n\(logs.joined(separator: "\n"))")
        let live = winners.filter { !$0.value.deleted }.keys
        for id in live { #expect(logs[0].contains(id)) }
        return logs[0]
    }

    @Test func twoHostsConvergeAfterConcurrentEdits() async throws {
        let workspace = try await NavlogWorkspace()
        let captain = try workspace.host("captain")
        let tesat = try await captain.add("leg=1 waypoint=TESAT planned=10:05 fuel=12400")
        // The officer types offline first, so both entries are stored before the hosts meet
        // and the first exchange of digests brings each over.
        let offline = try workspace.host("first-officer", ["--offline"])
        let nipas = try await offline.add("leg=2 waypoint=NIPAS planned=10:41")
        offline.send("quit")
        #expect(await offline.process.waitForExit() == 0)
        let officer = try workspace.host("first-officer")
        try await captain.waitUntilActive(["first-officer"])
        try await officer.waitUntilActive(["captain"])
        try await Self.expectConverged([captain, officer], alsoTypedOn: [offline])
        let synced = try await captain.wait { $0.contains { $0.event == "synced" } }.first { $0.event == "synced" }!
        #expect(synced["peer"] == "first-officer" && synced["sent"] == "1" && synced["received"] == "1")

        // Both edit the same entry at once, and each edits the other's: one version wins everywhere.
        captain.send("edit \(nipas.prefix(8)) fuel=11200")
        officer.send("edit \(nipas.prefix(8)) fuel=11150 remarks=\"moderate chop\"")
        officer.send("edit \(tesat.prefix(8)) actual=10:07")
        captain.send("add leg=3 waypoint=ARNEM altitude=37000")
        try await captain.wait { $0.filter { $0.event == "entry_applied" && $0["origin"] == "local" }.count == 3 }
        try await officer.wait { $0.filter { $0.event == "entry_applied" && $0["origin"] == "local" }.count == 2 }
        let log = try await Self.expectConverged([captain, officer], alsoTypedOn: [offline])
        #expect(log.contains("ARNEM") && log.contains("10:07"))
    }

    @Test func threeHostsConvergeWithDeletes() async throws {
        let workspace = try await NavlogWorkspace()
        let hosts = try ["captain", "first-officer", "relief"].map { try workspace.host($0) }
        for host in hosts {
            try await host.waitUntilActive(Set(hosts.map(\.name)).subtracting([host.name]))
        }
        var ids: [String] = []
        for (index, host) in hosts.enumerated() {
            for leg in 1...3 { ids.append(try await host.add("leg=\(index * 3 + leg) waypoint=WP\(index)\(leg)")) }
        }
        try await Self.expectConverged(hosts)
        // Relief deletes captain's first entry while captain edits it: the later one wins on all
        // three. (If the delete reaches the captain first, there is nothing left to edit.)
        hosts[2].send("delete \(ids[0].prefix(8))")
        hosts[0].send("edit \(ids[0].prefix(8)) remarks=\"still here?\"")
        _ = try await hosts[2].next { $0.event == "entry_applied" && $0["origin"] == "local" }
        let answer = try await hosts[0].next {
            ($0.event == "entry_applied" && $0["origin"] == "local") || $0.event == "error"
        }
        #expect(answer.event == "entry_applied" || answer["code"] == "unknownEntry", "\(answer)")
        let log = try await Self.expectConverged(hosts)
        let winner = NavlogVersion.winners(hosts.map(\.history))[ids[0]]!
        #expect(log.contains(ids[0]) == !winner.deleted)
    }

    /// An attachment reaches every host, one of them joining after its author left: the file
    /// comes relayed, checked against the hash its author signed, and is saved whole.
    @Test func threeHostsShareAnAttachmentOneJoiningAfterItsAuthorLeft() async throws {
        let workspace = try await NavlogWorkspace()
        let chart = URL(fileURLWithPath: workspace.directory).appendingPathComponent("weather chart.pdf")
        let bytes = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 12) })
        try bytes.write(to: chart)
        let captain = try workspace.host("captain")
        let officer = try workspace.host("first-officer")
        try await captain.waitUntilActive(["first-officer"])
        let id = try await captain.add("leg=1 waypoint=TESAT")
        captain.send("attach \(id.prefix(8)) \"\(chart.path)\"")
        // The author holds the file it attached, as its line says (it said `missing`, 0 bytes).
        let attached = try await captain.next { $0.event == "entry_applied" && $0["origin"] == "local" }
        #expect(attached.raw.contains(#""state":"held","bytes_done":\#(bytes.count)"#), "\(attached)")
        captain.send("edit \(id.prefix(8)) fuel=12400")
        let edited = try await captain.next { $0.event == "entry_applied" && $0["origin"] == "local" }
        #expect(edited.raw.contains(#""state":"held""#), "an edit keeps the attachment, held: \(edited)")
        // The version names who signed it (its key's fingerprint, as the officer saw the captain
        // prove it), beside the author the captain's station typed.
        let joined = try await officer.next { $0.event == "peer_joined" && $0["peer"] == "captain" }
        let applied = try await officer.next {
            $0.event == "entry_applied" && $0["id"] == id && $0["entry.attachments"] == nil
        }
        #expect(applied["entry.origin_key"] == joined["peer_key"] && applied["entry.author"] == "captain", "\(applied)")
        let arrived = try await officer.next { $0.event == "attachment_done" && $0["direction"] == "in" }
        #expect(
            arrived["error"] == nil && arrived["peer"] == "captain" && arrived["name"] == "weather chart.pdf",
            "\(arrived)"
        )
        #expect(arrived["total_bytes"] == "\(bytes.count)" && arrived["entry"] == id)
        #expect(try await officer.storedLog().contains(#""state":"held""#))

        // The captain leaves; the relief, new, gets the entry and the file from the officer.
        captain.send("quit")
        #expect(await captain.process.waitForExit() == 0)
        let relief = try workspace.host("relief")
        try await relief.waitUntilActive(["first-officer"])
        let relayed = try await relief.next { $0.event == "attachment_done" && $0["direction"] == "in" }
        #expect(relayed["error"] == nil && relayed["peer"] == "first-officer", "\(relayed)")
        let copy = URL(fileURLWithPath: workspace.directory).appendingPathComponent("saved.pdf")
        relief.send("save \(id.prefix(8)) \"weather chart.pdf\" \(copy.path)")
        _ = try await relief.next { $0.event == "saved" }
        #expect(try Data(contentsOf: copy) == bytes)
        // A name the entry does not have, and a file not here, are told.
        // (Not any error: the relief, new, may have dialled the captain's advert as it lingered.)
        relief.send("save \(id.prefix(8)) other.pdf \(copy.path)")
        let error = try await relief.next { $0.event == "error" && $0["code"] == "badCommand" }
        #expect(error["message"]?.contains("weather chart.pdf") == true, "\(error)")
    }

    @Test func aKilledHostRestartsFromItsDatabaseAndLosesNothing() async throws {
        let workspace = try await NavlogWorkspace()
        let captain = try workspace.host("captain")
        var relief = try workspace.host("relief")
        try await captain.waitUntilActive(["relief"])
        // Acknowledged (stored) and then killed at once, perhaps before it was sent.
        var typed: [String] = []
        for leg in 1...5 { typed.append(try await relief.add("leg=\(leg) waypoint=R\(leg)")) }
        kill(relief.process.pid, SIGKILL)
        #expect(await relief.process.waitForExit() == 128 + SIGKILL)
        try await captain.next { $0.event == "peer_left" && $0["peer"] == "relief" }
        // The captain goes on editing while relief is down.
        typed.append(try await captain.add("leg=6 waypoint=C6"))
        captain.send("edit \(typed[0].prefix(8)) remarks=\"checked by captain\"")
        _ = try await captain.next { $0.event == "entry_applied" && $0["origin"] == "local" }

        let killed = relief
        relief = try workspace.host("relief")
        try await relief.waitUntilActive(["captain"])
        // The restarted host is the same peer (its id is in its database).
        let joins = try await captain.wait { $0.filter { $0.event == "peer_joined" }.count == 2 }
            .filter { $0.event == "peer_joined" }.compactMap { $0["peer_id"] }
        #expect(Set(joins).count == 1)

        let log = try await Self.expectConverged([captain, relief], alsoTypedOn: [killed])
        for id in typed { #expect(log.contains(id)) }
        #expect(log.contains("checked by captain"))
    }

    @Test func badInputLinesAreErrorsAndTheHostGoesOn() async throws {
        let workspace = try await NavlogWorkspace()
        let host = try workspace.host("captain")
        let bad = [
            "frobnicate", "add leg=2", "add waypoint=A fuel=lots", "edit", "edit 0000 fuel=1", "delete 12 34",
            #"add waypoint="open"#, "\u{1}\u{2}garbage",
        ]
        for line in bad { host.send(line) }
        let lines = try await host.wait { $0.filter { $0.event == "error" }.count == bad.count }
        let errors = lines.filter { $0.event == "error" }
        #expect(errors.map { $0["input"] } == bad.map { $0 })
        #expect(errors.allSatisfy { $0["code"] == "badCommand" || $0["code"] == "unknownEntry" })
        #expect(errors[4]["message"]!.contains("no entry has an id starting with 0000"))
        // And it goes on.
        let id = try await host.add("waypoint=AFTER")
        host.send("list")
        let list = try await host.next { $0.event == "entries" }
        #expect(list.raw.contains(id))
        host.send("quit")
        #expect(await host.process.waitForExit() == 0)
    }
}
