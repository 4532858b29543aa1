/// A kind of fault the simulator draws, by the name `--faults` gives it.
///
/// Which kind a fault is comes from one number the run's stream draws for it, by rendezvous
/// hashing over the kinds' names: each kind scores the number (a hash of the two), and the
/// highest score wins. So a kind added later takes only the faults it wins and every other
/// fault keeps its kind, and a replay that names the kinds (as a failure's replay command does)
/// draws the same faults whatever kinds are added after it. What a fault chooses (its host, how
/// long, how bad) comes from a stream of its own, seeded by the same number, so it never
/// shifts what the run draws next.
enum FaultKind: String, CaseIterable, Sendable {
    /// A process stopped (SIGSTOP), then let go.
    case freeze
    /// Nothing reaches a host or leaves it.
    case blackHole = "black-hole"
    /// The hosts cut in two groups.
    case partition
    /// Every path of a host slow and lossy.
    case impair
    /// A process killed (SIGKILL), then started again.
    case kill
    /// A host moved to a new address.
    case renumber
    /// A machine asleep: stopped, and cut off.
    case sleep
    /// A session suspended by its application, then resumed.
    case suspend
    /// What a host sends lost, or what is sent to it, and not the other way.
    case oneWayCut = "one-way-cut"
    /// What crosses to and from a host held back, then let through at once.
    case hold
    /// One path between two hosts slow, lossy or narrow, one way or both.
    case pathImpair = "path-impair"
    /// A host's clock running fast or slow.
    case drift

    /// The kind of the fault whose number is `draw`, among `kinds` (nil if none is given).
    static func drawn(_ draw: UInt64, among kinds: [FaultKind]) -> FaultKind? {
        kinds.max { score(draw, $0) < score(draw, $1) }
    }

    private static func score(_ draw: UInt64, _ kind: FaultKind) -> UInt64 {
        // FNV-1a of the name: the same in every process (Swift's Hasher is seeded per process).
        let name = kind.rawValue.utf8.reduce(0xcbf2_9ce4_8422_2325 as UInt64) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
        var random = Random(seed: draw ^ name)
        return random.next()
    }

    /// Parses `--faults`: names separated by commas ("all": every kind; "none": no fault).
    static func parse(_ list: String) -> [FaultKind]? {
        if list == "all" { return allCases }
        if list == "none" { return [] }
        let kinds = list.split(separator: ",").map { FaultKind(rawValue: String($0)) }
        guard !kinds.isEmpty, kinds.allSatisfy({ $0 != nil }) else { return nil }
        return kinds.compactMap { $0 }
    }
}
