// A navlog-sync message as a peer sends it (the JSON payload of a DATA frame, docs/NAVLOG.md),
// decoded as the session decodes it and taken in as a host takes it in (NavlogIntake, which
// checks every version's signature, so most fuzzed versions are refused there). Any
// input must be refused with a DecodingError, or decode to a message that encodes to itself and
// that a host takes in without a trap: its clock stays ahead of every version it accepts but
// within a day of its wall clock, and neither the order of arrival nor a repeat changes the
// log it ends with (byte for byte). An `ask` is answered as a holder answers it (only prefixes
// asked about, split only where they differ), a `reply` taken as an asker takes it (only
// versions it names and that win are needed, every prefix to split is asked about).
import Foundation
import FuzzSupport
import MultipeerSync
import NavlogSync

/// The receiving host's wall clock, fixed so that every run is the same: 2026-11-21.
let now: UInt64 = 1_795_300_000_000

/// What the receiving host holds already: an entry the spec's vectors also name, and another.
let held = NavlogLog([
    NavlogEntry(
        id: UUID(uuidString: "3F2A1B7C-0000-4000-8000-000000000001")!,
        fields: NavlogFields(leg: 1, waypoint: "TESAT"),
        author: "captain",
        origin: UUID(uuidString: "C0000000-0000-4000-8000-00000000000A")!,
        timestamp: HLCTimestamp(milliseconds: now - 60_000, counter: 0)
    ),
    NavlogEntry(
        id: UUID(uuidString: "3F2A1B7C-0000-4000-8000-000000000002")!,
        fields: NavlogFields(leg: 2, waypoint: "NIPAS", remarks: "light chop"),
        author: "first officer",
        origin: UUID(uuidString: "C0000000-0000-4000-8000-00000000000B")!,
        timestamp: HLCTimestamp(milliseconds: now - 30_000, counter: 3),
        deleted: true
    ),
])

/// A log as bytes: String equality would call canonically equivalent spellings equal.
func bytes(of log: NavlogLog) -> Data {
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    return try! encoder.encode(log.entries.values.sorted { $0.id.uuidString < $1.id.uuidString })
}

func takeIn(_ versions: [NavlogEntry]) {
    var clock = HybridLogicalClock(latest: held.entries.values.map(\.timestamp).max()!)
    let accepted = NavlogIntake(versions, clock: &clock, now: now).accepted
    let local = clock.tick(now: now)
    precondition(accepted.allSatisfy { $0.timestamp < local }, "a local edit orders after every version taken in")
    precondition(
        local.milliseconds <= now + HybridLogicalClock.maximumLead + 1,
        "no peer drags the clock more than a day ahead"
    )
    let forward = accepted.reduce(into: held) { $0.merge($1) }
    let backward = accepted.reversed().reduce(into: held) { $0.merge($1) }
    precondition(bytes(of: forward) == bytes(of: backward), "the order of arrival does not matter")
    precondition(
        bytes(of: accepted.reduce(into: forward) { $0.merge($1) }) == bytes(of: forward),
        "a repeat changes nothing"
    )
}

let navlogFuzzer: FuzzTarget = { data, size in
    refusalsOnly(DecodingError.self) {
        let message = try JSONDecoder().decode(NavlogMessage.self, from: Data(bytes(data, size)))
        let reread = try JSONDecoder().decode(NavlogMessage.self, from: JSONEncoder().encode(message))
        precondition(reread == message, "a decoded message encodes to itself")
        switch message {
        case .digest(let digest, _):
            for entry in held.newer(than: digest) {
                precondition(
                    digest.versions[entry.id].map {
                        $0.version < entry.version
                            || ($0.version == entry.version && $0.contentHash != entry.contentHash)
                    } ?? true,
                    "only what the digest lacks, or holds with other content, is sent"
                )
            }
        case .ask(_, let ranges):
            var index = NavlogIndex(held)
            let answer = index.answer(ranges)
            let asked = Dictionary(
                ranges.flatMap { range in zip(range.prefix.children, range.children) },
                uniquingKeysWith: { first, _ in first }
            )
            for prefix in answer.expand {
                precondition(
                    asked[prefix].map { $0 != index.summary(of: prefix) && $0.count > 0 } == true,
                    "only an asked prefix that differs is split"
                )
            }
            for id in answer.entries + Array(answer.versions.versions.keys) {
                precondition(
                    asked.keys.contains { prefix in
                        id.uuidString.replacingOccurrences(of: "-", with: "").hasPrefix(prefix.digits)
                    },
                    "only versions under an asked prefix are named or sent"
                )
            }
        case .reply(let exchange, let expand, let versions):
            var index = NavlogIndex(held)
            var pull = NavlogPull()
            _ = pull.start(&index, exchange: exchange)
            let next = pull.received(exchange: exchange, expand: expand, versions: versions, &index) ?? []
            for case .need(let ids, _) in next {
                precondition(
                    Set(ids).isSubset(of: versions.versions.keys),
                    "only versions the reply named are asked for"
                )
                precondition(
                    ids.allSatisfy { id in held.entries[id].map { versions.versions[id]!.version >= $0.version } ?? true
                    },
                    "never an older version"
                )
            }
            let splittable = expand.count { $0.digits.count < 32 }
            precondition(
                next.count { if case .ask = $0 { true } else { false } } == (splittable + NavlogIndex.rangesPerAsk - 1)
                    / NavlogIndex.rangesPerAsk,
                "every prefix to split is asked about"
            )
        case .need, .lack:
            break
        case .entries(let versions, _):
            takeIn(versions)
        case .update(let entry):
            takeIn([entry])
        }
    }
    return 0
}

#if FUZZING
@_cdecl("NavlogFuzzer_main")
func fuzzerMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    runLibFuzzer(argc, argv, navlogFuzzer)
}
#endif
