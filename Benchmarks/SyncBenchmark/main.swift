// What finding the difference between two replicated stores costs (docs/SYNC.md 4-5): the
// store's reconciliation core, in memory, its every message encoded as it goes on the wire.
// For each case: the round trips until the initiator knows both sides of the difference, the
// metadata bytes both ways (every reconcile message), and the time both sides spent. The
// versions themselves, the network and the store's disk are not in it (the store over sessions
// comes in a later slice of issue 60, with the fresh-join and convergence figures).
//
// Stores hold `n` versions written one a millisecond; a difference is a version one side holds
// and the other lacks: either recent (written since the two last met: the end of the order) or
// scattered (anywhere, both sides: the worst case for range reconciliation).
//
//   .build/release/SyncBenchmark [--trials 5] [--json PATH]
import BenchmarkSupport
import Crypto
import Foundation
import MultipeerSync

let trials = Int(Bench.option("--trials") ?? "5") ?? 5

typealias Item = RangeReconciliation.Item

/// Version number `n`: written at millisecond `n` after a fixed instant, its id the SHA-256 of `n`.
func item(_ n: Int) -> Item {
    Item(
        timestamp: HLCTimestamp(milliseconds: 1_795_300_000_000 + UInt64(n), counter: 0).rawValue,
        id: Array(SHA256.hash(data: withUnsafeBytes(of: UInt64(n).bigEndian) { Array($0) }))
    )
}

/// What an exchange found, as the initiator sees it.
struct Learnt {
    var have: [[UInt8]] = []
    var need: [[UInt8]] = []
}

struct Case: Codable {
    var name: String
    var versions: Int
    var differences: Int
    var roundTrips: Int
    var metadataBytes: Int
    var secondsMedian: Double
    var secondsMin: Double
    var secondsMax: Double
}

/// Runs one exchange, both sides made from scratch: its round trips, metadata bytes (its rounds,
/// and the wants of what each side found it lacks), and what the two sides learnt, as the
/// initiator sees it.
func exchange(_ mine: [Item], _ theirs: [Item]) throws -> (rounds: Int, bytes: Int, learnt: Learnt) {
    let initiator = RangeReconciliation(items: mine)
    let responder = RangeReconciliation(items: theirs)
    var learnt = Learnt()
    var message = try initiator.initiate()
    var (rounds, bytes) = (0, 0)
    while !message.isEmpty {
        rounds += 1
        bytes += SyncMessage.reconcile(exchange: 1, fromInitiator: true, message).bytes.count
        let (answer, found) = try responder.reconcile(message)
        bytes += SyncMessage.reconcile(exchange: 1, fromInitiator: false, answer).bytes.count
        if !found.need.isEmpty { bytes += SyncMessage.want(found.need).bytes.count }
        learnt.have += found.need
        learnt.need += try responder.ids(of: found.have)
        let (next, outcome) = try initiator.reconcile(answer)
        if !outcome.need.isEmpty { bytes += SyncMessage.want(outcome.need).bytes.count }
        learnt.have += try initiator.ids(of: outcome.have)
        learnt.need += outcome.need
        message = next
    }
    return (rounds, bytes, learnt)
}

func run(_ name: String, versions: Int, _ sides: () -> ([Item], [Item])) -> Case {
    let (mine, theirs) = sides()
    var seconds: [Double] = []
    var last = (rounds: 0, bytes: 0, learnt: Learnt())
    for _ in 0..<trials {
        let start = ContinuousClock.now
        last = try! exchange(mine, theirs)
        let elapsed = (ContinuousClock.now - start).components
        seconds.append(Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18)
    }
    let (a, b) = (Set(mine.map(\.id)), Set(theirs.map(\.id)))
    precondition(
        Set(last.learnt.have) == a.subtracting(b) && Set(last.learnt.need) == b.subtracting(a),
        "\(name): the exchange did not find exactly the difference"
    )
    let differences = a.symmetricDifference(b).count
    seconds.sort()
    let result = Case(
        name: name,
        versions: versions,
        differences: differences,
        roundTrips: last.rounds,
        metadataBytes: last.bytes,
        secondsMedian: seconds[seconds.count / 2],
        secondsMin: seconds.first!,
        secondsMax: seconds.last!
    )
    let label = name.padding(toLength: 30, withPad: " ", startingAt: 0)
    print(
        label
            + String(
                format: "%9d versions %6d differences: %d round trips, %7d bytes, %.3f s (%.3f-%.3f)",
                versions,
                differences,
                result.roundTrips,
                result.metadataBytes,
                result.secondsMedian,
                result.secondsMin,
                result.secondsMax
            )
    )
    return result
}

let hundredThousand = (0..<100_000).map(item)
let million = (0..<1_000_000).map(item)
var cases: [Case] = []
cases.append(
    run("10 recent, one side", versions: 100_000) {
        (hundredThousand, hundredThousand + (100_000..<100_010).map(item))
    }
)
cases.append(
    run("10 scattered, both sides", versions: 100_000) {
        let missingHere = Set(stride(from: 7, to: 100_000, by: 20_000))
        let missingThere = Set(stride(from: 13_001, to: 100_000, by: 20_000))
        return (
            hundredThousand.enumerated().filter { !missingHere.contains($0.offset) }.map(\.element),
            hundredThousand.enumerated().filter { !missingThere.contains($0.offset) }.map(\.element)
        )
    }
)
cases.append(run("1 recent, one side", versions: 1_000_000) { (million, million + [item(1_000_000)]) })
cases.append(
    run("1,000 scattered, both sides", versions: 100_000) {
        (
            hundredThousand.enumerated().filter { $0.offset % 200 != 0 }.map(\.element),
            hundredThousand.enumerated().filter { $0.offset % 200 != 100 }.map(\.element)
        )
    }
)
try Bench.writeJSON(cases, defaultPath: "bench-results/sync.json")
