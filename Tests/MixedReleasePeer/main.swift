// One peer of a mixed pair: this source is built against this tree (Package.swift) and against
// a release (scripts/mixed-release.sh), so the same application runs on both builds, as on a
// fleet that upgrades one device at a time. It uses only what every release since 0.9.0 offers.
//
//   mixed-release-peer --name NAME (--port N | --dial HOST:PORT) STEP...
//
// STEPs are done in order; the peer exits 0 once the last is done, or 1 naming the step that
// failed (a wait gives up after 60 s):
//   read TYPE                       subscribe to TYPE (Note or Weather) from now on
//   joined                          wait for the peer to join
//   left                            wait for the peer to leave
//   send TYPE COUNT                 send COUNT messages of TYPE to the peer (reliably)
//   received TYPE COUNT             wait until COUNT messages of TYPE have arrived
//   rejected TYPE COUNT             wait until the peer has refused COUNT messages of TYPE (REJECT)
//   held-full TYPE                  wait until the hold for TYPE is full (what 0.9.0 reports)
//   nothing TYPE SECONDS            fail if a message of TYPE arrives within SECONDS
// It prints a line for each message and event it meets.
import Foundation
import MultipeerSession

struct Note: Codable, Sendable {
    var number: Int
}

/// About a kilobyte: 2,000 of them are more than a link reads in one go.
struct Weather: Codable, Sendable {
    var number: Int
    var remarks = String(repeating: "CAVOK ", count: 170)
}

/// What the peer has met so far, read by the steps that wait.
final class Tally: @unchecked Sendable {  // (every field under `lock`)
    private let lock = NSLock()
    private var counts: [String: Int] = [:]
    private var peerID: UUID?
    private var peerLeft = false
    /// Told of every change, for the one step that waits (the newest change is enough).
    let (changes, changed) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))

    func count(_ key: String) -> Int { lock.withLock { counts[key, default: 0] } }
    func add(_ key: String) {
        lock.withLock { counts[key, default: 0] += 1 }
        changed.yield()
    }
    var peer: UUID? {
        get { lock.withLock { peerID } }
        set {
            lock.withLock { peerID = newValue }
            changed.yield()
        }
    }
    var left: Bool {
        get { lock.withLock { peerLeft } }
        set {
            lock.withLock { peerLeft = newValue }
            changed.yield()
        }
    }
}

struct Failure: Error, CustomStringConvertible {
    var description: String
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// The options (`--name value`) and the steps (every other word), in order.
func parse(_ words: [String]) -> (options: [String: String], steps: [String]) {
    var options: [String: String] = [:]
    var steps: [String] = []
    var words = words[...]
    while let word = words.popFirst() {
        if word.hasPrefix("--"), let value = words.popFirst() { options[word] = value } else { steps.append(word) }
    }
    return (options, steps)
}
let (options, steps) = parse(Array(CommandLine.arguments.dropFirst()))
let name = options["--name"] ?? "peer"
let port = options["--port"].flatMap(Int.init) ?? 0
let dial = options["--dial"]

var configuration = MultipeerSession.Configuration(
    serviceType: "_mixed._tcp",
    peer: PeerInfo(displayName: name),
    psk: try PreSharedKey(identity: "mixed-release", key: Array("mixed-release check, not a secret".utf8))
)
configuration.port = port
configuration.discovery = .staticPeers(dial.map { [$0] } ?? [])
let session = MultipeerSession(configuration: configuration, identity: PeerIdentity())
let tally = Tally()

/// Waits until `condition` holds, for at most `seconds`.
func until(_ what: String, within seconds: Double = 60, _ condition: @escaping @Sendable () -> Bool) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask {
            if condition() { return }
            for await _ in tally.changes where condition() { return }
        }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))  // (the deadline)
            throw Failure(description: "\(name): no \(what) within \(seconds) s")
        }
        try await group.next()
        group.cancelAll()
    }
}

func received(_ type: String, _ number: Int) {
    tally.add("received \(type)")
    say("\(name): received \(type) \(number)")
}

func run(_ steps: [String]) async throws {
    var steps = steps[...]
    func next() throws -> String {
        guard let step = steps.popFirst() else { throw Failure(description: "\(name): a step lacks its argument") }
        return step
    }
    while let step = steps.popFirst() {
        switch step {
        case "read":
            // (Subscribed here, before the next step; read on.)
            switch try next() {
            case "Note":
                let notes = session.messages(of: Note.self)
                Task { for await (_, note) in notes { received("Note", note.number) } }
            case "Weather":
                let weather = session.messages(of: Weather.self)
                Task { for await (_, report) in weather { received("Weather", report.number) } }
            case let type:
                throw Failure(description: "\(name): no type \(type)")
            }
        case "joined":
            try await until("peer joined") { tally.peer != nil }
        case "left":
            try await until("peer left") { tally.left }
        case "send":
            let (type, count) = (try next(), Int(try next()) ?? 0)
            guard let peer = tally.peer else { throw Failure(description: "\(name): send before a peer joined") }
            for number in 1...count {
                switch type {
                case "Note": try await session.send(Note(number: number), to: peer)
                case "Weather": try await session.send(Weather(number: number), to: peer)
                default: throw Failure(description: "\(name): no type \(type)")
                }
            }
            say("\(name): sent \(count) \(type)")
        case "received", "rejected":
            let (type, count) = (try next(), Int(try next()) ?? 0)
            try await until("\(count) \(type) \(step)") { tally.count("\(step) \(type)") >= count }
            say("\(name): \(tally.count("\(step) \(type)")) \(type) \(step)")
        case "held-full":
            let type = try next()
            try await until("full hold of \(type)") { tally.count("held-full \(type)") > 0 }
            say("\(name): the hold of \(type) is full")
        case "nothing":
            let (type, seconds) = (try next(), Double(try next()) ?? 0)
            // (Watched for the whole window: `until` fails at its deadline, as it should here.)
            if (try? await until("a \(type)", within: seconds) { tally.count("received \(type)") > 0 }) != nil {
                throw Failure(description: "\(name): \(type) arrived within \(seconds) s")
            }
            say("\(name): no \(type) in \(seconds) s")
        default:
            throw Failure(description: "\(name): no step \(step)")
        }
    }
}

let events = session.events
let outcome: Result<Void, any Error> = await {
    do {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await session.run() }
            group.addTask {
                for await event in events {
                    switch event {
                    case .peerJoined(let peer):
                        tally.peer = peer.id
                    case .peerLeft:
                        tally.left = true
                    case .messageRejected(_, let type, _, _):
                        tally.add("rejected \(type)")
                    case .heldMessagesFull(let type, _):
                        tally.add("held-full \(type)")
                    case .stats:
                        continue
                    default:
                        break
                    }
                    say("\(name): \(event)")
                }
            }
            try await run(steps)
            group.cancelAll()
        }
        return .success(())
    } catch {
        return .failure(error)
    }
}()
switch outcome {
case .success:
    say("\(name): done")
    exit(0)
case .failure(let error):
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(1)
}
