import Foundation
import Logging
import MultipeerSession
import Synchronization
import Testing

/// What a session writes to the application's log, read through a handler of the application's
/// own, as the DocC guide's "Observing a Session" says: the application's logger (its metadata
/// on every line), connection events and decisions at `debug`, nothing above `info` in a life
/// of joins, messages, messages that do not decode and a peer's leaving.
@Suite struct LoggingTests {
    /// A reading as the dialler sends it: a number.
    struct Sent: MultipeerMessage {
        static var wireName: String { "consumer.logging" }
        var value: Double
    }

    /// The same wire name as the listener reads it: a string, which the number does not decode as.
    struct Read: MultipeerMessage {
        static var wireName: String { "consumer.logging" }
        var value: String
    }

    @Test func aSessionLogsThroughTheApplicationsLoggerAndKeepsItsEventsAtDebug() async throws {
        let records = LogRecords()
        var application = Logger(label: "consumer") { _ in RecordingHandler(records) }
        application.logLevel = .trace
        application[metadataKey: "app.component"] = "navlog"
        // Made inside the application's logger scope: the configuration's default is `Logger.current`.
        let (listenerConfiguration, diallerPeer) = withLogger(application) { _ in
            (configuration("logging-listener"), PeerIdentity())
        }
        let listener = MultipeerSession(configuration: listenerConfiguration, identity: PeerIdentity())
        let undecodable = 20
        try await whileRunning([listener]) {
            let port = try await listeningPort(of: listener)
            let listenerEvents = listener.events  // (before the dialler leaves)
            var diallerConfiguration = configuration("logging-dialler", dialling: port)
            diallerConfiguration.logger = application
            let dialler = MultipeerSession(configuration: diallerConfiguration, identity: diallerPeer)
            // (A payload is decoded as its reader takes it: read, the numbers fail to decode.)
            let reading = listener.messages(of: Read.self)
            let reader = Task { for await _ in reading {} }
            defer { reader.cancel() }
            let diallerEvents = dialler.events
            try await whileRunning([dialler]) {
                try await waitUntilActive(dialler, listener.peerID)
                for number in 0..<undecodable {
                    try await dialler.send(Sent(value: Double(number)), to: listener.peerID)
                }
                try await within(30, "the rejections") {
                    var rejected = 0
                    for await case .messageRejected in diallerEvents {
                        rejected += 1
                        if rejected == undecodable { return }
                    }
                }
            }
            try await within(30, "the dialler to leave") {
                for await case .peerLeft(let peer, _) in listenerEvents where peer.id == diallerPeer.peerID { return }
            }
        }
        let lines = records.all
        #expect(lines.contains { $0.level == .debug && $0.message == "peer joined" })
        #expect(lines.contains { $0.level == .debug && $0.message == "peer left" })
        let told = lines.filter { $0.message == "a message sent did not decode in the peer's application" }
        #expect(told.count == undecodable && told.allSatisfy { $0.level == .debug }, "one debug line each")
        #expect(
            lines.allSatisfy { $0.metadata["app.component"] == "navlog" },
            "every line through the application's logger: \(lines.filter { $0.metadata["app.component"] == nil })"
        )
        #expect(
            lines.allSatisfy { $0.metadata["multipeer.local.id"] != nil },
            "every line says whose session it is"
        )
        let loud = lines.filter { $0.level > .info }
        #expect(loud.isEmpty, "nothing above info in a session's ordinary life: \(loud)")
    }
}

/// The lines a ``RecordingHandler`` took.
final class LogRecords: Sendable {
    struct Line: Sendable, CustomStringConvertible {
        var level: Logger.Level
        var message: String
        var metadata: [String: String]
        var description: String { "\(level) \(message) \(metadata)" }
    }

    private let lines = Mutex<[Line]>([])

    func add(_ line: Line) { lines.withLock { $0.append(line) } }
    var all: [Line] { lines.withLock { $0 } }
}

/// A log handler of the application's: keeps every line, with its metadata flattened.
struct RecordingHandler: LogHandler {
    let records: LogRecords
    var logLevel: Logger.Level = .trace
    var metadata: Logger.Metadata = [:]

    init(_ records: LogRecords) { self.records = records }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        records.add(
            .init(
                level: event.level,
                message: "\(event.message)",
                metadata: merged.mapValues { "\($0)" }
            )
        )
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
}
