import Foundation
import MultipeerCore

/// What a world drawn from a seed is made of (``SimulationExplorer``): how many hosts, how long
/// the application's work and the faults go on, which faults, and how long the healed world
/// stays quiet at the end.
///
/// A seed and a plan draw one world, the same every run on one build: a failure is replayed
/// from the two, and a smaller plan (the explorer's shrinking) draws a smaller world.
public struct ExplorationPlan: Sendable, Hashable, CustomStringConvertible {
    /// The seed every choice of the world is drawn from: the hosts, the faults, their timing,
    /// the order of work ready at one instant, and the application's own draws
    /// (``ExplorationRun/random``).
    public var seed: UInt64
    /// How many hosts the world has, drawn from this range.
    public var hosts: ClosedRange<Int>
    /// How long the application works and faults come, in simulated time, before everything
    /// is healed.
    public var duration: Duration
    /// The mean simulated time between faults (exponentially distributed).
    public var faultEvery: Duration
    /// The kinds of fault drawn; none: a world of the application's work alone.
    public var faults: [SimulatedFault]
    /// How long the healed world runs at the end, every path healthy, where no link may be torn
    /// down (``ExplorationPromise/noFalseTeardown``).
    public var quiet: Duration
    /// How much work the application does, as a factor of what it would (1: all of it): the
    /// application scales its rates by it (``ExplorationRun/plan``), and shrinking halves it.
    public var traffic: Double

    /// A plan; by default 2 to 5 hosts, 60 s of work with a fault every 10 s on average, of
    /// every kind, and 30 s quiet at the end.
    public init(
        seed: UInt64 = 1,
        hosts: ClosedRange<Int> = 2...5,
        duration: Duration = .seconds(60),
        faultEvery: Duration = .seconds(10),
        faults: [SimulatedFault] = SimulatedFault.allCases,
        quiet: Duration = .seconds(30),
        traffic: Double = 1
    ) {
        precondition(hosts.lowerBound >= 2, "a world of at least two hosts")
        self.seed = seed
        self.hosts = hosts
        self.duration = duration
        self.faultEvery = faultEvery
        self.faults = faults
        self.quiet = quiet
        self.traffic = traffic
    }

    /// The plan as Swift, to paste into a test that replays it.
    public var description: String {
        let faults =
            self.faults == SimulatedFault.allCases
            ? "SimulatedFault.allCases" : "[\(self.faults.map { ".\($0.caseName)" }.joined(separator: ", "))]"
        return
            "ExplorationPlan(seed: \(seed), hosts: \(hosts.lowerBound)...\(hosts.upperBound), duration: \(Self.swift(duration)), faultEvery: \(Self.swift(faultEvery)), faults: \(faults), quiet: \(Self.swift(quiet)), traffic: \(traffic))"
    }

    private static func swift(_ duration: Duration) -> String {
        let milliseconds = duration.components.seconds * 1_000 + duration.components.attoseconds / 1_000_000_000_000_000
        return milliseconds % 1_000 == 0 ? ".seconds(\(milliseconds / 1_000))" : ".milliseconds(\(milliseconds))"
    }
}

/// A promise a world is checked against: the package's own (the static ones here), or an
/// application's, named as its documentation makes it.
///
/// ```swift
/// let converges = ExplorationPromise("every station holds the same records once healed")
/// ```
public struct ExplorationPromise: Sendable, Hashable, CustomStringConvertible {
    /// What is promised, in a sentence.
    public let name: String

    /// A promise named `name`.
    public init(_ name: String) {
        self.name = name
    }

    /// Its name.
    public var description: String { name }

    /// Every session becomes active with every other within 10 s of the world's start.
    public static let startsActive = ExplorationPromise("the sessions become active with each other")
    /// A session's `activePeers` is what its `peerJoined` and `peerLeft` events say.
    public static let activePeersAsEvents = ExplorationPromise("activePeers changes as its events say")
    /// A session's `availablePeers` is what its `availablePeerChanged` events say.
    public static let availablePeersAsEvents = ExplorationPromise("availablePeers changes as its events say")
    /// A peer that falls silent (frozen, black-holed, asleep, cut off) is detected within the
    /// keepalive's documented bound.
    public static let silenceDetected = ExplorationPromise("a silent peer is detected within the keepalive's bound")
    /// Every pair is active again within 30 s of everything healing.
    public static let rejoinsAfterHealing = ExplorationPromise("every pair is active again soon after healing")
    /// No link is torn down while every path is healthy (the plan's quiet spell).
    public static let noFalseTeardown = ExplorationPromise("no link is torn down while every path is healthy")
}

/// A promise broken in a world: which, and what happened, with the simulated time.
public struct BrokenPromise: Sendable, CustomStringConvertible {
    /// The promise.
    public var promise: ExplorationPromise
    /// What happened, as the checker saw it.
    public var text: String

    /// `promise`, broken as `text` says.
    public init(promise: ExplorationPromise, text: String) {
        self.promise = promise
        self.text = text
    }

    /// What happened.
    public var description: String { text }
}

/// A small, fast generator (SplitMix64) for a world's choices: seeded, so a seed draws the
/// same numbers every run.
public struct SimulationRandom: RandomNumberGenerator, Sendable {
    private var generator: SplitMix64

    /// A generator whose numbers `seed` sets.
    public init(seed: UInt64) { generator = SplitMix64(seed: seed) }

    /// The next number of the seed's stream.
    public mutating func next() -> UInt64 { generator.next() }

    /// True with `probability`.
    public mutating func chance(_ probability: Double) -> Bool {
        Double.random(in: 0..<1, using: &self) < probability
    }

    /// A duration drawn evenly from `range`, in seconds (to the millisecond).
    public mutating func seconds(_ range: ClosedRange<Double>) -> Duration {
        .milliseconds(Int64(Double.random(in: range, using: &self) * 1_000))
    }

    /// A wait whose mean is `mean`, exponentially distributed (as the gaps between events
    /// that come independently at a steady rate).
    public mutating func exponential(mean: Duration) -> Duration {
        let u = Double.random(in: Double.ulpOfOne..<1, using: &self)
        let milliseconds =
            Double(mean.components.seconds * 1_000) + Double(mean.components.attoseconds) / 1e15
        return .milliseconds(Int64(-log(u) * milliseconds))
    }
}

/// A kind of fault a ``SimulationExplorer`` draws, by the name a plan or a command line gives it.
///
/// Which kind a fault is comes from one number the world's stream draws for it, by rendezvous
/// hashing over the kinds' names: each kind scores the number (a hash of the two), and the
/// highest score wins. So a kind added later takes only the faults it wins and every other
/// fault keeps its kind, and a plan that names its kinds draws the same faults whatever kinds
/// are added after it. What a fault chooses (its host, how long, how bad) comes from a stream
/// of its own, seeded by the same number, so it never shifts what the world draws next.
public enum SimulatedFault: String, CaseIterable, Sendable, Hashable {
    /// A process stopped (SIGSTOP) for up to 6 s, then let go.
    case freeze
    /// Nothing reaches a host or leaves it, for up to 10 s.
    case blackHole = "black-hole"
    /// The hosts cut in two groups, for up to 20 s.
    case partition
    /// Every path of a host slow and lossy (up to 30 % lost, 50 ms late), for up to a minute.
    case impair
    /// A process killed (SIGKILL), then started again after up to 5 s (three times in ten with
    /// its wall clock set back by up to two hours: an older incarnation).
    case kill
    /// A host moved to a new address.
    case renumber
    /// A machine asleep (stopped and cut off) for up to 30 s.
    case sleep
    /// A session suspended by its application, then resumed after up to 10 s.
    case suspend
    /// What a host sends lost, or what is sent to it, and not the other way, for up to 10 s.
    case oneWayCut = "one-way-cut"
    /// What crosses to and from a host held back for 50 ms to 2 s, then let through at once.
    case hold
    /// One path between two hosts slow, lossy or narrow (0.5 to 5 MB/s), one way or both, for
    /// up to a minute.
    case pathImpair = "path-impair"
    /// A host's clock running 0.1 to 2 % fast or slow for up to a minute.
    case drift

    /// The kind of the fault whose number is `draw`, among `kinds` (nil if none is given).
    static func drawn(_ draw: UInt64, among kinds: [SimulatedFault]) -> SimulatedFault? {
        kinds.max { score(draw, $0) < score(draw, $1) }
    }

    private static func score(_ draw: UInt64, _ kind: SimulatedFault) -> UInt64 {
        // FNV-1a of the name: the same in every process (Swift's Hasher is seeded per process).
        let name = kind.rawValue.utf8.reduce(0xcbf2_9ce4_8422_2325 as UInt64) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
        var random = SimulationRandom(seed: draw ^ name)
        return random.next()
    }

    /// Kinds named in a list separated by commas ("all": every kind; "none": no fault), as a
    /// command line gives them; nil if a name is not a kind's.
    public static func parse(_ list: String) -> [SimulatedFault]? {
        if list == "all" { return allCases }
        if list == "none" { return [] }
        let kinds = list.split(separator: ",").map { SimulatedFault(rawValue: String($0)) }
        guard !kinds.isEmpty, kinds.allSatisfy({ $0 != nil }) else { return nil }
        return kinds.compactMap { $0 }
    }

    /// `kinds` as ``parse(_:)`` reads them.
    public static func list(_ kinds: [SimulatedFault]) -> String {
        kinds == allCases ? "all" : kinds.isEmpty ? "none" : kinds.map(\.rawValue).joined(separator: ",")
    }

    /// Its name in Swift.
    var caseName: String {
        switch self {
        case .blackHole: "blackHole"
        case .oneWayCut: "oneWayCut"
        case .pathImpair: "pathImpair"
        default: rawValue
        }
    }
}
