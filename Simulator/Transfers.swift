import Crypto
import Foundation
import MultipeerSession
import NIOConcurrencyHelpers

/// The files and streams the simulated applications sent, what arrived, and the promises they
/// are checked against (Sources/MultipeerSession/MultipeerSession.docc/ResourcesAndStreams.md).
/// Every byte of a file or stream is drawn from its number and offset, so a byte lost, repeated
/// or out of place shows where it is.
final class Transfers: Sendable {
    enum Outcome: Sendable, CustomStringConvertible {
        case underWay
        case done
        case failed(MultipeerError.Code?, String)

        var description: String {
            switch self {
            case .underWay: "under way"
            case .done: "done"
            case .failed(_, let error): "failed: \(error)"
            }
        }
    }

    /// A file sent as a resource.
    struct File: Sendable {
        var from: String
        var to: String
        /// The incarnation of the sending session: a killed sender's transfer ends with it.
        var sender: UInt64
        var length: Int
        var at: Duration
        /// The sender's `completion()`.
        var outcome: Outcome = .underWay
        /// Its SHA-256, once `sendResource` hashed it.
        var sha256: [UInt8]?
    }

    /// A stream, written one way (the opener's) and ended the other.
    struct Stream: Sendable {
        var from: String
        var to: String
        var sender: UInt64
        var length: Int
        var at: Duration
        /// The opener's writes and `finish()`.
        var writer: Outcome = .underWay
        /// The receiver's reads, to the end.
        var reader: Outcome = .underWay
        /// The receiving host's session when the stream was opened: a stream does not outlive it.
        var receiverAtOpen: UInt64
        /// Whether the stream is owed to that session: the sender ran and was active with it
        /// when it opened the stream. (One opened to a session the sender had not yet learned
        /// had restarted is bound to the one it knew, and lost with it.)
        var owed: Bool
        /// The receiving session's incarnation, once it accepted the stream.
        var receiver: UInt64?
        var read = 0
    }

    /// A receiving application's wait for a file: which file, in which receiver incarnation.
    private struct Wait: Hashable {
        var number: Int
        var receiver: UInt64
    }

    private struct State {
        var files: [Int: File] = [:]
        var streams: [Int: Stream] = [:]
        /// The receivers' `file()` waits not yet returned.
        var waiting: Set<Wait> = []
    }

    private let state = NIOLockedValueBox(State())
    private let ledger: Ledger

    init(ledger: Ledger) { self.ledger = ledger }

    /// The bytes at `range` of file or stream `number`: each drawn from the number and its
    /// offset (written in a loop over raw memory: this is most of the simulator's own work).
    static func bytes(_ number: Int, _ range: Range<Int>) -> [UInt8] {
        let salt = UInt64(number) &* 0xBF58_476D_1CE4_E5B9
        return [UInt8](unsafeUninitializedCapacity: range.count) { buffer, count in
            var offset = UInt64(range.lowerBound)
            for index in 0..<range.count {
                buffer[index] = UInt8(truncatingIfNeeded: (offset &* 0x9E37_79B9_7F4A_7C15 ^ salt) >> 56)
                offset &+= 1
            }
            count = range.count
        }
    }

    // MARK: Files

    func sending(_ number: Int, _ file: File) { state.withLockedValue { $0.files[number] = file } }

    func hashed(_ number: Int, _ sha256: [UInt8]) { state.withLockedValue { $0.files[number]?.sha256 = sha256 } }

    func sent(_ number: Int, _ outcome: Outcome) { state.withLockedValue { $0.files[number]?.outcome = outcome } }

    /// File `number` arrived at `receiver`, at `url`, announced with `sha256`: it must be whole,
    /// with the SHA-256 it was sent with.
    /// A receiving application (of incarnation `receiver`) waits for file `number`.
    func waiting(_ number: Int, in receiver: UInt64) {
        _ = state.withLockedValue { $0.waiting.insert(Wait(number: number, receiver: receiver)) }
    }

    /// That wait returned (with the file, or throwing).
    func waited(_ number: Int, in receiver: UInt64) {
        _ = state.withLockedValue { $0.waiting.remove(Wait(number: number, receiver: receiver)) }
    }

    func arrived(_ number: Int, at receiver: String, url: URL, sha256: [UInt8], now: Duration) {
        guard let file = state.withLockedValue({ $0.files[number] }) else {
            return ledger.violation(.filesWhole, "\(now) \(receiver): got file r\(number), never sent")
        }
        if file.to != receiver {
            ledger.violation(.filesWhole, "\(now) \(receiver): got file r\(number), sent to \(file.to)")
        }
        guard let data = try? Data(contentsOf: url) else {
            return ledger.violation(
                .filesWhole,
                "\(now) \(receiver): file r\(number) arrived at \(url.path), which cannot be read"
            )
        }
        let hash = Array(SHA256.hash(data: data))
        if data.count != file.length || hash != file.sha256 || hash != sha256 {
            ledger.violation(
                .filesWhole,
                "\(now) \(receiver): file r\(number) from \(file.from) arrived with \(data.count) of \(file.length) bytes or another SHA-256 (a resource arrives whole, with its SHA-256)"
            )
        }
    }

    // MARK: Streams

    func opening(_ number: Int, _ stream: Stream) { state.withLockedValue { $0.streams[number] = stream } }

    func wrote(_ number: Int, _ outcome: Outcome) { state.withLockedValue { $0.streams[number]?.writer = outcome } }

    func accepted(_ number: Int, by incarnation: UInt64) {
        state.withLockedValue { $0.streams[number]?.receiver = incarnation }
    }

    /// `chunk` arrived on stream `number` at `receiver`: it must be the next bytes written.
    func read(_ number: Int, _ chunk: [UInt8], at receiver: String, now: Duration) -> Bool {
        let offset = state.withLockedValue { state -> Int? in
            guard let read = state.streams[number]?.read else { return nil }
            state.streams[number]?.read += chunk.count
            return read
        }
        guard let offset else {
            ledger.violation(.streamsInOrder, "\(now) \(receiver): got bytes on stream s\(number), never opened")
            return false
        }
        let expected = Self.bytes(number, offset..<offset + chunk.count)
        let same =
            chunk.isEmpty
            || chunk.withUnsafeBytes { got in
                expected.withUnsafeBytes { memcmp(got.baseAddress!, $0.baseAddress!, chunk.count) == 0 }
            }
        if !same, let wrong = chunk.indices.first(where: { chunk[$0] != expected[$0] }) {
            ledger.violation(
                .streamsInOrder,
                "\(now) \(receiver): stream s\(number)'s byte \(offset + wrong) is not the one written there (a stream's bytes arrive in order, each once)"
            )
            return false
        }
        return true
    }

    func ended(_ number: Int, _ outcome: Outcome, at receiver: String, now: Duration) {
        let stream = state.withLockedValue { state -> Stream? in
            state.streams[number]?.reader = outcome
            return state.streams[number]
        }
        if case .done = outcome, let stream, stream.read != stream.length {
            ledger.violation(
                .streamsInOrder,
                "\(now) \(receiver): stream s\(number) from \(stream.from) ended after \(stream.read) of its \(stream.length) bytes (every byte once)"
            )
        }
    }

    // MARK: Checking

    var fileCount: Int { state.withLockedValue { $0.files.count } }
    var streamCount: Int { state.withLockedValue { $0.streams.count } }

    /// Whether every transfer whose ends both still run (`current` says which incarnations
    /// do) has finished, one way or the other.
    func settled(current: Set<UInt64>) -> Bool {
        state.withLockedValue { state in
            state.files.values.allSatisfy { file in
                if case .underWay = file.outcome { !current.contains(file.sender) } else { true }
            }
                && state.streams.values.allSatisfy { stream in
                    guard stream.owed, current.contains(stream.sender), current.contains(stream.receiverAtOpen) else {
                        return true
                    }
                    if case .underWay = stream.writer { return false }
                    if case .underWay = stream.reader { return stream.receiver == nil && !stream.writerFailed }
                    return true
                } && !state.waiting.contains { current.contains($0.receiver) }
        }
    }

    /// What went wrong with transfers between sessions that still run (incarnations
    /// `current`), which never restarted while their transfers were under way: files not
    /// delivered whole, streams that did not end with every byte, waits that never returned.
    func failures(current: Set<UInt64>, receiverDirectories: [String: URL], now: Duration) -> [Violation] {
        state.withLockedValue { state in
            var failures: [Violation] = []
            for (number, file) in state.files.sorted(by: { $0.key < $1.key }) where current.contains(file.sender) {
                switch file.outcome {
                case .underWay:
                    failures.append(
                        Violation(
                            promise: .callsReturn,
                            text:
                                "\(now) file r\(number) (\(file.length) bytes, sent \(file.at) from \(file.from) to \(file.to)): completion() never returned (every wait returns)"
                        )
                    )
                case .failed(_, let error):
                    failures.append(
                        Violation(
                            promise: .filesWhole,
                            text:
                                "\(now) file r\(number) (\(file.length) bytes, sent \(file.at) from \(file.from) to \(file.to)) failed: \(error) (a transfer resumes across broken links and restarts)"
                        )
                    )
                case .done:
                    // Under its name, or under another's whose bytes it has (a file the
                    // receiver already holds whole is taken from that copy).
                    if let sha256 = file.sha256, !(receiverDirectories[file.to].map { Self.holds($0, sha256) } ?? false)
                    {
                        failures.append(
                            Violation(
                                promise: .filesWhole,
                                text:
                                    "\(now) file r\(number) from \(file.from): completed at the sender, but not whole in \(file.to)'s directory (a resource arrives whole)"
                            )
                        )
                    }
                }
            }
            // A receiver's wait returns, whatever became of the transfer (its sender restarted, say).
            for wait in state.waiting.sorted(by: { ($0.number, $0.receiver) < ($1.number, $1.receiver) })
            where current.contains(wait.receiver) {
                let file = state.files[wait.number]
                failures.append(
                    Violation(
                        promise: .callsReturn,
                        text:
                            "\(now) file r\(wait.number) (sent \(file.map { "\($0.at) from \($0.from) to \($0.to)" } ?? "")): the receiver's file() never returned (every wait returns)"
                    )
                )
            }
            // A stream ends with either session's restart (streamLost): only those whose ends
            // both still run the sessions they were opened between are owed.
            for (number, stream) in state.streams.sorted(by: { $0.key < $1.key })
            where stream.owed && current.contains(stream.sender) && current.contains(stream.receiverAtOpen) {
                let what =
                    "stream s\(number) (\(stream.length) bytes, opened \(stream.at) from \(stream.from) to \(stream.to))"
                switch (stream.writer, stream.reader) {
                case (.done, .done):
                    continue
                case (.underWay, _):
                    failures.append(
                        Violation(
                            promise: .callsReturn,
                            text:
                                "\(now) \(what): write() or finish() never returned, \(stream.read) bytes read (every wait returns)"
                        )
                    )
                case (.failed(_, let error), _), (_, .failed(_, let error)):
                    failures.append(
                        Violation(
                            promise: .streamsInOrder,
                            text:
                                "\(now) \(what) failed: \(error), \(stream.read) bytes read (a stream outlives the links it runs on)"
                        )
                    )
                case (.done, .underWay):
                    failures.append(
                        Violation(
                            promise: .streamsInOrder,
                            text:
                                "\(now) \(what): finished at its writer, but its reader \(stream.receiver == nil ? "never got it" : "never saw its end") (\(stream.read) bytes read)"
                        )
                    )
                }
            }
            return failures
        }
    }
}

extension Transfers {
    /// Whether a file in `directory` has the SHA-256 `sha256`.
    static func holds(_ directory: URL, _ sha256: [UInt8]) -> Bool {
        let files =
            (try? FileManager.default.contentsOfDirectory(
                at: directory,
                includingPropertiesForKeys: [.isRegularFileKey]
            )) ?? []
        return files.sorted { $0.path < $1.path }.contains { url in
            (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true
                && (try? Data(contentsOf: url)).map { Array(SHA256.hash(data: $0)) } == sha256
        }
    }
}

extension Transfers.Stream {
    var writerFailed: Bool { if case .failed = writer { true } else { false } }
}
