import ArgumentParser
import Foundation
import Glibc
import Logging
import MultipeerCore
import MultipeerSession
import MultipeerTLS
import NavlogSync
import ServiceLifecycle

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Join the group and read commands from standard input, one per line.",
        discussion: """
            Commands: add KEY=VALUE ..., edit ID KEY=VALUE ..., delete ID, \
            attach ID FILE (the file reaches every host), save ID NAME PATH (writes an attachment out), \
            list, peers, quit; ID is an entry id or its first characters, as `list` shows them. \
            Keys: leg, waypoint, planned, actual (HH:MM UTC), fuel (kg), altitude (ft), remarks. \
            Quote values with spaces: remarks="light chop". End of input, SIGINT and SIGTERM quit too, \
            saying goodbye to every peer.
            """
    )

    @Option(help: "This station's name, shown to the others (e.g. captain).")
    var name: String

    @Option(help: "The SQLite database holding this host's log; made if missing.")
    var data: String

    @Option(name: .customLong("psk-file"), help: "The group key (navlog-sync keygen writes one).")
    var pskFile: String

    @Option(
        help:
            "This host's identity (its key pair; its peer ID derives from it), made on first run. Default: the --data path with .identity appended."
    )
    var identity: String?

    @Option(
        help:
            "A roster: the peers admitted, one public key (64 hex digits) or peer ID per line, # comments. Without one, any holder of the group key is admitted. `navlog-sync whoami` prints this host's key."
    )
    var roster: String?

    @Option(help: "The DNS-SD service type of the group.")
    var service = "_navlog._tcp"

    @Option(help: "The TCP port to listen on; 0 lets the system choose.")
    var port = 0

    @Option(
        name: .customLong("peer"),
        help: "A peer's HOST:PORT; with any, peers are dialled directly and DNS-SD is not used."
    )
    var peers: [String] = []

    @Flag(help: "Work alone: no DNS-SD and no peers. Edits are stored, and synced when the host next runs connected.")
    var offline = false

    @Flag(help: "Print one JSON object per line for every event instead of the terminal view.")
    var json = false

    @Option(
        help:
            "Seconds a peer may be silent before its link is dropped and redialled; an idle link is pinged every third of that. Raise it for hosts that answer slowly (both sides use the shorter)."
    )
    var keepaliveTimeout = 1.5

    func validate() throws {
        if offline && !peers.isEmpty { throw ValidationError("--offline and --peer exclude each other") }
        // The name is the author of this station's edits: other hosts refuse versions whose
        // author is not a display name (docs/NAVLOG.md, section 3).
        guard NavlogEntry.isAuthor(name) else { throw ValidationError("--name must be \(NavlogEntry.authorRule)") }
        if !(0.1...3_600).contains(keepaliveTimeout) {
            throw ValidationError("--keepalive-timeout must be between 0.1 and 3600 seconds, not \(keepaliveTimeout)")
        }
    }

    func run() async throws {
        let keys = loadKeys()
        let members: Roster?
        do {
            members = try roster.map { try Roster(contentsOfFile: $0) }
        } catch {
            Failure("\(error)", status: Failure.keyFile).exit()
        }
        let store: NavlogStore
        let node: NavlogNode
        do {
            store = try NavlogStore(path: data, identityFile: identity)
            var configuration = MultipeerSession.Configuration(
                serviceType: service,
                peer: PeerInfo(displayName: name),
                psk: keys.newest,
                roster: members,
                port: port,
                discovery: offline || !peers.isEmpty ? .staticPeers(peers) : .avahi(),
                keepalive: KeepaliveParameters(
                    interval: .seconds(keepaliveTimeout / 3),
                    timeout: .seconds(keepaliveTimeout)
                ),
                logger: Logger(label: "navlog-sync")
            )
            configuration.keys = keys
            node = try await NavlogNode(store: store, configuration: configuration)
        } catch {
            Failure(error).exit()
        }
        let console = Console(node: node, json: json)
        let commands = CommandLines.standardInput()

        // Commands wait until the host listens, so a failure to start (port, avahi-daemon) is
        // reported even when standard input ends at once.
        let (started, markStarted) = AsyncStream<Void>.makeStream()

        // SIGINT and SIGTERM shut the host down gracefully, as `quit` and the end of input do.
        let services = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: node)],
                gracefulShutdownSignals: [.sigint, .sigterm],
                logger: Logger(label: "navlog-sync")
            )
        )

        let failure: (any Error)? = await withTaskGroup(of: Void.self) { outer in
            // Shows every event until the host has stopped, the last peer_left included.
            outer.addTask {
                for await event in node.events {
                    if case .listening = event { markStarted.finish() }
                    await console.show(event)
                }
            }
            let failure: (any Error)? = await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await _ in started {}
                    guard !Task.isCancelled else { return }
                    for await line in commands {
                        if await !console.perform(line) { break }
                    }
                    await services.triggerGracefulShutdown()
                }
                if console.terminal {
                    group.addTask { await console.refreshWhileRunning() }
                }
                // SIGHUP reloads the key file and the roster (a key rotation, a member removed).
                group.addTask {
                    for await _ in Self.hangups() { await reload(node.session) }
                }
                defer { group.cancelAll() }
                do {
                    try await services.run()
                    return nil
                } catch {
                    return error
                }
            }
            await outer.waitForAll()
            return failure
        }
        if let failure { Self.failure(failure, peers: peers, port: port).exit() }
    }

    /// Reads the key file and the roster again and gives them to the session; a file that
    /// cannot be read is reported and the session keeps what it had.
    private func reload(_ session: MultipeerSession) async {
        do {
            try await session.updateKeys(KeyRing(contentsOfFile: pskFile))
            if let roster { await session.updateRoster(try Roster(contentsOfFile: roster)) }
            FileHandle.standardError.write(
                Data("navlog-sync: reloaded the key file\(roster == nil ? "" : " and the roster")\n".utf8)
            )
        } catch {
            FileHandle.standardError.write(Data("navlog-sync: not reloaded: \(error)\n".utf8))
        }
    }

    /// Each SIGHUP the process receives, until the task reading them is cancelled.
    static func hangups() -> AsyncStream<Void> {
        signal(SIGHUP, SIG_IGN)
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        // (Dispatch sources may be cancelled from any thread.)
        nonisolated(unsafe) let source = DispatchSource.makeSignalSource(signal: SIGHUP)
        source.setEventHandler { continuation.yield() }
        continuation.onTermination = { _ in source.cancel() }
        source.resume()
        return stream
    }

    private func loadKeys() -> KeyRing {
        guard FileManager.default.fileExists(atPath: pskFile) else {
            Failure(
                "there is no key file at \(pskFile); make one with `navlog-sync keygen --out \(pskFile)` and copy it to every host",
                status: Failure.keyFile
            ).exit()
        }
        do {
            return try KeyRing(contentsOfFile: pskFile)
        } catch {
            Failure("\(error)", status: Failure.keyFile).exit()
        }
    }

    /// What to tell the user when the session could not run.
    static func failure(_ error: any Error, peers: [String], port: Int) -> Failure {
        guard let error = error as? MultipeerError else { return Failure("\(error)") }
        switch error.code {
        case .discoveryUnavailable:
            return Failure(
                "\(error)\nWithout DNS-SD, name the other hosts with --peer HOST:PORT.",
                status: Failure.discoveryUnavailable
            )
        case .listenFailed:
            return Failure(
                "\(error)\nChoose another --port, or 0 to let the system pick one.",
                status: Failure.portInUse
            )
        default:
            return Failure("\(error)")
        }
    }
}

/// Lines from standard input; ends at end of input.
enum CommandLines {
    static func standardInput() -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream<String>.makeStream()
        // readLine blocks, so it gets a thread of its own; the process exits without joining it.
        Thread {
            while let line = readLine(strippingNewline: true) { continuation.yield(line) }
            continuation.finish()
        }.start()
        return stream
    }
}
