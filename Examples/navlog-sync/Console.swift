import Foundation
import Glibc
import MultipeerCore
import NavlogSync

/// What the user sees: JSON lines (`--json`), a redrawn screen on a terminal, or plain lines
/// when the output is a file or a pipe.
actor Console {
    private let node: NavlogNode
    private let json: Bool
    /// Whether the output is a terminal, which gets the redrawn view.
    nonisolated let terminal: Bool
    /// The latest event lines, under the tables of the terminal view.
    private var recent: [String] = []
    /// Attached files on their way, by hash and peer, shown with a progress bar in the terminal view.
    private var transfers: [String: AttachmentTransfer] = [:]

    init(node: NavlogNode, json: Bool) {
        self.node = node
        self.json = json
        self.terminal = !json && isatty(STDOUT_FILENO) == 1
    }

    /// Redraws the terminal view every 2 s (the peer table's RTT and jitter change) until cancelled.
    func refreshWhileRunning() async {
        while !Task.isCancelled {
            await redraw()
            try? await Task.sleep(for: .seconds(2))
        }
    }

    func show(_ event: NavlogEvent) async {
        if json {
            // An entry's attachments as they stand here now (a local attach's file is held).
            let states =
                if case .entryApplied(let entry, _) = event { await states([entry]) } else {
                    [String: AttachmentState]()
                }
            emit(Self.json(event, states: states))
            return
        }
        switch event {
        case .attachmentProgress(let transfer):
            // A bar in the terminal view; lines only when a transfer begins and ends otherwise.
            let key = Self.key(transfer)
            let began = transfers.updateValue(transfer, forKey: key) == nil
            if terminal {
                await redraw()
            } else if began {
                await say(Self.text(event))
            }
        case .attachmentDone(let transfer, _):
            transfers[Self.key(transfer)] = nil
            await say(Self.text(event))
        default:
            await say(Self.text(event))
        }
    }

    private static func key(_ transfer: AttachmentTransfer) -> String {
        "\(transfer.sha256) \(transfer.peer.id) \(transfer.outgoing)"
    }

    /// Where each attachment of `entries` stands here, by hash.
    private func states(_ entries: [NavlogEntry]) async -> [String: AttachmentState] {
        var states: [String: AttachmentState] = [:]
        for attachment in entries.flatMap({ $0.attachments ?? [] }) {
            states[attachment.sha256] = await node.state(of: attachment)
        }
        return states
    }

    /// Runs one line of input; returns false for `quit`.
    func perform(_ line: String) async -> Bool {
        do {
            guard let command = try NavlogCommand(line: line) else { return true }
            switch command {
            case .add(let fields): try await node.add(fields)
            case .edit(let id, let fields): try await node.edit(id, fields)
            case .delete(let id): try await node.delete(id)
            case .attach(let id, let path): try await node.attach(id, file: path)
            case .save(let id, let name, let path):
                try await node.save(id, name: name, to: path)
                if json {
                    emit(.object([("event", .string("saved")), ("name", .string(name)), ("path", .string(path))]))
                } else {
                    await say("saved \(name) to \(path)")
                }
            case .list:
                let entries = try await node.entries()
                let states = await states(entries)
                if json {
                    emit(
                        .object([
                            ("event", .string("entries")),
                            ("entries", .array(entries.map { Render.entry($0, states: states) })),
                        ])
                    )
                } else if !terminal {
                    write(Render.logTable(entries, states: states))
                }
            case .peers:
                let peers = await node.peers()
                if json {
                    emit(.object([("event", .string("peers")), ("peers", .array(peers.map(Render.peer)))]))
                } else if !terminal {
                    write(Render.peerTable(peers))
                }
            case .quit:
                return false
            }
        } catch {
            if json {
                emit(
                    .object([
                        ("event", .string("error")), ("code", .string(error.code.description)),
                        ("message", .string(error.message)), ("input", .string(line)),
                    ])
                )
            } else {
                await say("error: \(error.message)")
            }
        }
        if terminal { await redraw() }
        return true
    }

    // MARK: Output

    private func emit(_ value: JSON) {
        write(Render.json(value) + "\n")
    }

    private func say(_ line: String) async {
        let stamped = "\(Self.clock.string(from: Date()))  \(Render.printable(line))"
        if terminal {
            recent = Array((recent + [stamped]).suffix(8))
            await redraw()
        } else {
            write(stamped + "\n")
        }
    }

    private func write(_ text: String) {
        FileHandle.standardOutput.write(Data(text.utf8))
    }

    /// Clears the screen and draws the log, the peers and the latest events. What the user is
    /// typing stays in the terminal's line buffer and is still read when they press return.
    private func redraw() async {
        let entries = (try? await node.entries()) ?? []
        let states = await states(entries)
        let peers = await node.peers()
        var screen = "\u{1B}[H\u{1B}[2J"
        screen +=
            "navlog-sync: \(node.author)\n\n" + Render.logTable(entries, states: states) + "\n"
            + Render.peerTable(peers) + "\n"
        let bars = transfers.values.sorted { ($0.name, $0.peer.name) < ($1.name, $1.peer.name) }.map {
            Render.printable(Render.progressBar($0))
        }
        if !bars.isEmpty { screen += bars.joined(separator: "\n") + "\n\n" }
        screen += recent.joined(separator: "\n") + "\n\n" + NavlogCommand.usage + "\n> "
        write(screen)
    }

    private static let clock: DateFormatter = {
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm:ss'Z'"
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter
    }()

    // MARK: Events

    /// `event` for `--json`; `states` says where the attachments of an applied entry stand.
    static func json(_ event: NavlogEvent, states: [String: AttachmentState] = [:]) -> JSON {
        switch event {
        case .listening(let port):
            return .object([("event", .string("listening")), ("port", .int(port))])
        case .peerJoined(let peer):
            return .object([("event", .string("peer_joined"))] + peerFields(peer))
        case .peerLeft(let peer, let reason):
            return .object(
                [("event", .string("peer_left"))] + peerFields(peer) + [
                    ("reason", .string(reasonCode(reason))), ("detail", .string(reason.description)),
                ]
            )
        case .entryApplied(let entry, let origin):
            return .object([
                ("event", .string("entry_applied")), ("id", .string(Render.id(entry.id))),
                ("origin", .string(origin?.name ?? "local")), ("deleted", .bool(entry.deleted)),
                ("entry", Render.entry(entry, states: states)),
            ])
        case .synced(let peer, let sent, let received):
            return .object(
                [("event", .string("synced"))] + peerFields(peer) + [
                    ("sent", .int(sent)), ("received", .int(received)),
                ]
            )
        case .attachmentProgress(let transfer):
            return .object([("event", .string("attachment_progress"))] + Render.transfer(transfer))
        case .attachmentDone(let transfer, let error):
            return .object(
                [("event", .string("attachment_done"))] + Render.transfer(transfer) + [("error", .optional(error))]
            )
        case .error(let code, let message):
            return .object([("event", .string("error")), ("code", .string(code)), ("message", .string(message))])
        }
    }

    private static func peerFields(_ peer: PeerRef) -> [(String, JSON)] {
        [
            ("peer", .string(peer.name)), ("peer_id", .string(Render.id(peer.id))),
            ("peer_key", .string(peer.fingerprint)),
        ]
    }

    /// A stable word per reason, for scripts: keepalive_timeout, goodbye, link_closed, restarted, local.
    static func reasonCode(_ reason: PeerLeftReason) -> String {
        switch reason {
        case .goodbye: "goodbye"
        case .keepaliveTimeout: "keepalive_timeout"
        case .linkClosed: "link_closed"
        case .restarted: "restarted"
        case .local: "local"
        }
    }

    static func text(_ event: NavlogEvent) -> String {
        switch event {
        case .listening(let port): "listening on port \(port)"
        case .peerJoined(let peer): "\(peer.name) joined"
        case .peerLeft(let peer, let reason): "\(peer.name) left: \(reason)"
        case .entryApplied(let entry, let origin):
            "\(entry.deleted ? "deleted" : "stored") \(Render.id(entry.id).prefix(8)) \(entry.fields.waypoint)"
                + (origin.map { " from \($0.name)" } ?? "")
        case .synced(let peer, let sent, let received):
            "synced with \(peer.name): sent \(sent), received \(received) entries"
        case .attachmentProgress(let transfer):
            "\(transfer.outgoing ? "sending" : "receiving") \(transfer.name) (\(Render.size(transfer.totalBytes))) \(transfer.outgoing ? "to" : "from") \(transfer.peer.name)"
        case .attachmentDone(let transfer, nil):
            "\(transfer.outgoing ? "sent" : "received") \(transfer.name) \(transfer.outgoing ? "to" : "from") \(transfer.peer.name)"
        case .attachmentDone(let transfer, let error?):
            "\(transfer.name) \(transfer.outgoing ? "to" : "from") \(transfer.peer.name) failed: \(error)"
        case .error(_, let message): "error: \(message)"
        }
    }
}
