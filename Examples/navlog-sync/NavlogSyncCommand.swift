import ArgumentParser
import Foundation
import Logging
import MultipeerSession
import MultipeerTLS
import NavlogSync

/// `navlog-sync`: a crew navigation log kept in sync between hosts on a local network.
@main
struct NavlogSyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "navlog-sync",
        abstract: "A navigation log shared between crew stations, kept in sync over MultipeerSession.",
        discussion: """
            Exit status: 0 done; 64 bad arguments; 65 database corrupt; 66 key, identity or roster file missing, \
            unreadable or invalid; 69 avahi-daemon not running; 71 port in use; 75 database in use by another run; 1 anything else.
            """,
        version:
            "navlog-sync \(MultipeerSession.version), MultipeerSession protocol \(MultipeerSession.protocolVersion)",
        subcommands: [Keygen.self, Whoami.self, Run.self, List.self]
    )

    static func main() async {
        // Logs go to standard error, so standard output carries only the view or the JSON events.
        let level =
            ProcessInfo.processInfo.environment["NAVLOG_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        do {
            var command = try parseAsRoot()
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// A failure that ends the program with a message and a status from the list in `--help`.
struct Failure: Error, CustomStringConvertible {
    var message: String
    var status: Int32

    static let keyFile: Int32 = 66
    static let databaseCorrupt: Int32 = 65
    static let databaseLocked: Int32 = 75
    static let discoveryUnavailable: Int32 = 69
    static let portInUse: Int32 = 71

    var description: String { message }

    init(_ message: String, status: Int32 = 1) {
        self.message = message
        self.status = status
    }

    init(_ error: NavlogError) {
        switch error.code {
        case .databaseCorrupt: self.init(error.message, status: Self.databaseCorrupt)
        case .databaseLocked: self.init(error.message, status: Self.databaseLocked)
        case .identityFile: self.init(error.message, status: Self.keyFile)
        default: self.init(error.message)
        }
    }

    /// Prints the message to standard error and exits with the status.
    func exit() -> Never {
        FileHandle.standardError.write(Data("navlog-sync: \(message)\n".utf8))
        Foundation.exit(status)
    }
}

struct Keygen: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Write a new random group key in psktool's IDENTITY:HEXKEY format (mode 0600), or rotate the keys of a key file.",
        discussion: """
            Rotating the group key without downtime: `keygen --add-to FILE --identity NEW` on one host, copy FILE to \
            every host (each accepts both keys and dials with the newest, falling back to the old one), restart or \
            signal each (SIGHUP reloads the keys); once every host has it, `keygen --retire OLD --in FILE`, copy and \
            reload again.
            """
    )

    @Option(help: "The file to create; an existing file is never overwritten.")
    var out: String?

    @Option(name: .customLong("add-to"), help: "A key file to add a new key to, as its newest.")
    var addTo: String?

    @Option(help: "A key to remove (by identity) from the key file given with --in.")
    var retire: String?

    @Option(name: .customLong("in"), help: "The key file --retire edits.")
    var inFile: String?

    @Option(help: "The new key's identity, sent in clear during the handshake; each key of a file needs its own.")
    var identity = "navlog"

    func validate() throws {
        let modes = [out != nil, addTo != nil, retire != nil].filter { $0 }.count
        guard modes == 1 else {
            throw ValidationError("give exactly one of --out FILE, --add-to FILE, --retire IDENTITY --in FILE")
        }
        if retire != nil && inFile == nil { throw ValidationError("--retire needs --in FILE") }
    }

    func run() throws {
        do {
            if let out {
                try PreSharedKey.generate(identity: identity).write(toFile: out)
                print("wrote a new group key to \(out); copy it to every host of the group over a trusted channel")
            } else if let addTo {
                let ring = try KeyRing(contentsOfFile: addTo).adding(PreSharedKey.generate(identity: identity))
                try ring.write(toFile: addTo, replacing: true)
                print(
                    "added the key \(identity) to \(addTo), which now holds \(ring.keys.map(\.identity).joined(separator: ", ")); copy it to every host and reload each"
                )
            } else if let retire, let inFile {
                let ring = try KeyRing(contentsOfFile: inFile).removing(identity: retire)
                try ring.write(toFile: inFile, replacing: true)
                print(
                    "removed the key \(retire) from \(inFile), which now holds \(ring.keys.map(\.identity).joined(separator: ", ")); copy it to every host and reload each"
                )
            }
        } catch {
            Failure("\(error)", status: Failure.keyFile).exit()
        }
    }
}

struct Whoami: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Print this host's peer ID and public key (for the other hosts' rosters), making its identity if it has none."
    )

    @Option(help: "The SQLite database of the host; its identity file is beside it.")
    var data: String

    @Option(help: "The host's identity file, if not the --data path with .identity appended.")
    var identity: String?

    func run() throws {
        let file = identity ?? data + ".identity"
        do {
            let identity = try PeerIdentity(loadingOrCreatingFile: file)
            print(
                """
                peer ID      \(identity.peerID.uuidString.lowercased())
                key          \(identity.key)
                fingerprint  \(identity.key.fingerprint)
                """
            )
        } catch {
            Failure("\(error)", status: Failure.keyFile).exit()
        }
    }
}

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the stored log; works while `run` uses the same database."
    )

    @Option(help: "The SQLite database of a host.")
    var data: String

    @Flag(help: "Print one JSON array of the live entries.")
    var json = false

    func run() async throws {
        let entries: [NavlogEntry]
        let states: [String: AttachmentState]
        do {
            // (Beside a running host a file may be on its way; read alone, it is here or not.)
            (entries, states) = try await NavlogStore(readingAt: data).entries()
        } catch {
            Failure(error).exit()
        }
        print(
            json
                ? Render.json(.array(entries.map { Render.entry($0, states: states) }))
                : Render.logTable(entries, states: states),
            terminator: json ? "\n" : ""
        )
    }
}
