import Crypto
import Foundation
import Glibc
import MultipeerCore
import NIOCore

/// Where a session keeps the resources it receives (docs/PROTOCOL.md 3c): each complete file
/// under its name in the directory the application chose, and each incomplete one as a partial
/// file with a record of what of it is written, so that a transfer broken by a reconnect, or by
/// a restart of either side, resumes from there instead of from zero.
///
/// Its own files are in `.multipeer-resources/` inside the directory:
/// - `<sender peer ID>-<SHA-256>.partial`: the bytes received so far of the file with that hash
///   from that sender; `.json` beside it, the offer; and `.blocks`, the SHA-256 of the file's
///   first block, of its first two blocks, and so on (``blockLength`` bytes each), 32 bytes
///   each, appended as each block is written. They are the whole file's hash taken so far, read
///   at each block's end, so each byte is hashed once for both. On a restart, the partial file
///   is hashed again from its start and checked at each block's end, so the log needs no sync
///   of its own: a block that did not reach the disk (the machine lost power) fails its check,
///   and it and what follows it are received again. A process that was killed loses nothing
///   written.
/// - `<SHA-256>.complete`: the name of a file received whole with that hash, so that an offer of
///   the same file (from any sender) is taken at once from the copy there, once its bytes are
///   checked.
///
/// A partial file nothing was written to for ``MultipeerSession/Configuration/partialResourceLifetime``
/// (its sender never came back to finish it) is removed, with its records, when the store opens.
///
/// Blocking file I/O: call it off the event loops.
struct ResourceStore: Sendable {
    /// The application's directory.
    let directory: URL
    /// Where the store keeps its partial files and records.
    let state: URL
    /// The bytes each recorded hash covers.
    static let blockLength: UInt64 = 1 << 20

    /// A store in `directory`, which is made if it is not there; partial files nothing was
    /// written to for `partialLifetime` are removed. Throws `unwritable` if it cannot be made or
    /// written.
    init(directory: URL, partialLifetime: Duration = .seconds(7 * 86_400)) throws(ResourceStoreFailure) {
        self.directory = directory
        state = directory.appendingPathComponent(".multipeer-resources", isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        } catch {
            throw ResourceStoreFailure(
                .unwritable,
                "cannot make the resource directory \(directory.path): \(error.localizedDescription)"
            )
        }
        guard access(state.path, W_OK) == 0 else {
            throw ResourceStoreFailure(
                .unwritable,
                "cannot write in the resource directory \(directory.path): \(String(cString: strerror(errno)))"
            )
        }
        removePartials(untouchedFor: partialLifetime)
    }

    /// Removes each partial file (and its records) whose file and block log were last written
    /// longer than `lifetime` ago.
    private func removePartials(untouchedFor lifetime: Duration) {
        let oldest = Date(timeIntervalSinceNow: -lifetime.seconds)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: state.path)) ?? []
        for name in names where name.hasSuffix(".partial") {
            let base = state.appendingPathComponent(String(name.dropLast(".partial".count)))
            let written = ["partial", "blocks"].compactMap {
                (try? FileManager.default.attributesOfItem(atPath: base.appendingPathExtension($0).path))?[
                    .modificationDate
                ] as? Date
            }.max()
            guard let written, written < oldest else { continue }
            for suffix in ["partial", "json", "blocks"] {
                try? FileManager.default.removeItem(at: base.appendingPathExtension(suffix))
            }
        }
    }

    /// What the store holds of `offer` from `sender`: a complete identical file (checked), the
    /// verified part of an earlier transfer, or nothing; ready to take the rest.
    func open(_ offer: ResourceOffer, from sender: UUID) throws(ResourceStoreFailure) -> PartialResource {
        let hash = Hex.encode(offer.sha256)
        if let existing = completeCopy(of: offer, hash: hash) {
            return try PartialResource(store: self, offer: offer, sender: sender, complete: existing)
        }
        return try PartialResource(
            store: self,
            offer: offer,
            sender: sender,
            base: state.appendingPathComponent("\(sender.uuidString)-\(hash)")
        )
    }

    /// A file received whole earlier with the offer's hash and length, if it is still there
    /// with those bytes.
    private func completeCopy(of offer: ResourceOffer, hash: String) -> URL? {
        let record = state.appendingPathComponent("\(hash).complete")
        guard let name = try? String(contentsOf: record, encoding: .utf8) else { return nil }
        let file = directory.appendingPathComponent(name)
        guard (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? UInt64) == offer.length,
            let digest = try? Self.sha256(of: file, length: offer.length), digest == offer.sha256
        else {
            try? FileManager.default.removeItem(at: record)  // changed or gone: forgotten
            return nil
        }
        return file
    }

    /// The SHA-256 of the first `length` bytes of `file`.
    static func sha256(of file: URL, length: UInt64) throws -> [UInt8] {
        var hasher = SHA256()
        try read(file, length: length) { hasher.update(bufferPointer: $0) }
        return Array(hasher.finalize())
    }

    /// Reads the first `length` bytes of `file` in blocks of at most ``blockLength``.
    static func read(_ file: URL, length: UInt64, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let descriptor = Glibc.open(file.path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw ResourceStoreFailure.errno("cannot read \(file.path)") }
        defer { close(descriptor) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(blockLength), alignment: 16)
        defer { buffer.deallocate() }
        var done: UInt64 = 0
        while done < length {
            let count = Glibc.read(descriptor, buffer.baseAddress, Int(min(blockLength, length - done)))
            guard count > 0 else { throw ResourceStoreFailure.errno("cannot read \(file.path)", ended: count == 0) }
            try body(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            done += UInt64(count)
        }
    }

    /// Records that `file` holds the resource with `offer`'s hash, for a later offer of it.
    fileprivate func recordComplete(_ offer: ResourceOffer, name: String) {
        try? name.write(
            to: state.appendingPathComponent("\(Hex.encode(offer.sha256)).complete"),
            atomically: true,
            encoding: .utf8
        )
    }

    /// A name in the directory for a file named `name`: `name` itself if it is free, else
    /// `name (2)`, `name (3)`... before its extension.
    fileprivate func freeName(for name: String) -> String {
        let url = URL(fileURLWithPath: name)
        let stem = url.deletingPathExtension().lastPathComponent
        let suffix = url.pathExtension.isEmpty ? "" : ".\(url.pathExtension)"
        var candidate = name
        var number = 2
        while FileManager.default.fileExists(atPath: directory.appendingPathComponent(candidate).path) {
            candidate = "\(stem) (\(number))\(suffix)"
            number += 1
        }
        return candidate
    }
}

/// Why the store failed: the transfer's end reason (``ResourceEndReason``), and what happened.
struct ResourceStoreFailure: Error, Hashable {
    var reason: ResourceEndReason
    var message: String

    init(_ reason: ResourceEndReason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    /// The failure of a system call that set `errno`: a full disk (or quota) is `diskFull`,
    /// anything else `unwritable`.
    static func errno(_ what: String, ended: Bool = false) -> ResourceStoreFailure {
        let code = Glibc.errno
        if ended { return ResourceStoreFailure(.unwritable, "\(what): the file ended early") }
        let reason: ResourceEndReason = code == ENOSPC || code == EDQUOT ? .diskFull : .unwritable
        return ResourceStoreFailure(reason, "\(what): \(String(cString: strerror(code)))")
    }
}

/// One resource being received into the store: its partial file, open for the bytes that come
/// next, with the hash of everything written so far.
final class PartialResource {
    let offer: ResourceOffer
    /// The bytes of the file the store holds, written and hashed: where the transfer goes on from.
    private(set) var held: UInt64 = 0
    /// A complete identical file found in the directory: the transfer has nothing to receive.
    let existing: URL?

    /// The offer a partial file is of (`.json`), so that one of another offer is not taken for it.
    private struct Record: Codable, Equatable {
        var name: String
        var length: UInt64
        var sha256: String
        var metadata: [String: String]
    }

    private let store: ResourceStore
    private let partial: URL?
    private let recordFile: URL?
    private let blocksFile: URL?
    private var descriptor: Int32 = -1
    /// The block log, open for appending.
    private var blockLog: Int32 = -1
    /// The hash of everything written; read at each block's end for the block log.
    private var hasher = SHA256()

    init(store: ResourceStore, offer: ResourceOffer, sender: UUID, complete: URL) throws(ResourceStoreFailure) {
        self.store = store
        self.offer = offer
        existing = complete
        partial = nil
        recordFile = nil
        blocksFile = nil
        held = offer.length
    }

    /// Opens the partial file at `base` (`.partial`, `.json` and `.blocks`), keeping the blocks
    /// of it that still have their logged hashes and cutting off the rest.
    init(store: ResourceStore, offer: ResourceOffer, sender: UUID, base: URL) throws(ResourceStoreFailure) {
        self.store = store
        self.offer = offer
        existing = nil
        let partial = base.appendingPathExtension("partial")
        let recordFile = base.appendingPathExtension("json")
        let blocksFile = base.appendingPathExtension("blocks")
        self.partial = partial
        self.recordFile = recordFile
        self.blocksFile = blocksFile
        descriptor = Glibc.open(partial.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        blockLog = Glibc.open(blocksFile.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0, blockLog >= 0 else { throw ResourceStoreFailure.errno("cannot open \(partial.path)") }
        let record = Record(
            name: offer.name,
            length: offer.length,
            sha256: Hex.encode(offer.sha256),
            metadata: offer.metadata
        )
        let recorded = (try? Data(contentsOf: recordFile)).flatMap { try? JSONDecoder().decode(Record.self, from: $0) }
        if recorded == record {
            verify(logged: (try? Data(contentsOf: blocksFile)) ?? Data())
        } else {
            do {
                try JSONEncoder().encode(record).write(to: recordFile, options: .atomic)
            } catch {
                throw ResourceStoreFailure(
                    .unwritable,
                    "cannot write \(recordFile.path): \(error.localizedDescription)"
                )
            }
        }
        let blocks = held / ResourceStore.blockLength
        guard ftruncate(descriptor, off_t(held)) == 0, ftruncate(blockLog, off_t(blocks * 32)) == 0,
            lseek(blockLog, 0, SEEK_END) >= 0
        else { throw ResourceStoreFailure.errno("cannot cut \(partial.path) to its verified part") }
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
        if blockLog >= 0 { close(blockLog) }
    }

    /// Reads the partial file block by block while the hash of everything up to each block's
    /// end is the one logged for it: those bytes are held (and hashed); the first block that
    /// does not match, and all after it, are not.
    private func verify(logged: Data) {
        guard let partial else { return }
        let count = logged.count / 32
        var verified = 0
        struct Mismatch: Error {}
        try? ResourceStore.read(partial, length: UInt64(count) * ResourceStore.blockLength) { block in
            var through = hasher
            through.update(bufferPointer: block)
            let expected = logged[logged.startIndex + verified * 32..<logged.startIndex + verified * 32 + 32]
            guard through.finalize().elementsEqual(expected) else { throw Mismatch() }
            hasher = through
            verified += 1
        }
        held = UInt64(verified) * ResourceStore.blockLength
    }

    /// Writes `bytes`, the next of the file (at `offset`, which is ``held``), and logs the hash
    /// of each block it completes.
    func write(_ bytes: ByteBuffer, at offset: UInt64) throws(ResourceStoreFailure) {
        precondition(existing == nil && descriptor >= 0, "only a partial file is written")
        precondition(offset == held, "a resource is written in order: \(offset) where \(held) is next")
        precondition(held + UInt64(bytes.readableBytes) <= offer.length, "a resource is written within its length")
        let failure: ResourceStoreFailure? = bytes.withUnsafeReadableBytes { raw in
            var done = 0
            while done < raw.count {
                let count = pwrite(descriptor, raw.baseAddress! + done, raw.count - done, off_t(held) + off_t(done))
                guard count > 0 else { return ResourceStoreFailure.errno("cannot write \(partial!.path)") }
                done += count
            }
            // The hash so far, logged at each block's end.
            var rest = UnsafeRawBufferPointer(raw)
            var position = held
            while !rest.isEmpty {
                let room = Int(ResourceStore.blockLength - position % ResourceStore.blockLength)
                let piece = UnsafeRawBufferPointer(rebasing: rest.prefix(room))
                hasher.update(bufferPointer: piece)
                position += UInt64(piece.count)
                if position % ResourceStore.blockLength == 0 {
                    let written = hasher.finalize().withUnsafeBytes { Glibc.write(blockLog, $0.baseAddress, 32) }
                    guard written == 32 else { return ResourceStoreFailure.errno("cannot write \(blocksFile!.path)") }
                    // The block goes to the disk now, so that the sync at the end finds little
                    // left to write and a large file never has much unwritten: on Linux this
                    // advice starts the block's writeback (and lets go of its pages once written).
                    _ = posix_fadvise(
                        descriptor,
                        off_t(position - ResourceStore.blockLength),
                        off_t(ResourceStore.blockLength),
                        POSIX_FADV_DONTNEED
                    )
                }
                rest = UnsafeRawBufferPointer(rebasing: rest.dropFirst(piece.count))
            }
            return nil
        }
        if let failure { throw failure }
        held += UInt64(bytes.readableBytes)
    }

    /// The whole file is written: checks it has the offered hash and moves it into the
    /// directory under its name (another, if that is taken). Throws `hashMismatch` (the partial
    /// file is then gone) if it has another.
    func finish() throws(ResourceStoreFailure) -> URL {
        if let existing { return existing }
        precondition(held == offer.length, "a resource is finished once written whole")
        guard hasher.finalize().elementsEqual(offer.sha256) else {
            discard()
            throw ResourceStoreFailure(
                .hashMismatch,
                "the \(offer.length) bytes received of \(offer.name) do not have the offered SHA-256"
            )
        }
        guard fsync(descriptor) == 0 else { throw ResourceStoreFailure.errno("cannot sync \(partial!.path)") }
        let name = store.freeName(for: offer.name)
        let final = store.directory.appendingPathComponent(name)
        guard rename(partial!.path, final.path) == 0 else {
            throw ResourceStoreFailure.errno("cannot move \(offer.name) into \(store.directory.path)")
        }
        let directory = Glibc.open(store.directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directory >= 0 {
            fsync(directory)  // the rename is durable too
            close(directory)
        }
        try? FileManager.default.removeItem(at: recordFile!)
        try? FileManager.default.removeItem(at: blocksFile!)
        store.recordComplete(offer, name: name)
        return final
    }

    /// Forgets the transfer: its partial file and record go.
    func discard() {
        guard let partial, let recordFile, let blocksFile else { return }
        try? FileManager.default.removeItem(at: partial)
        try? FileManager.default.removeItem(at: recordFile)
        try? FileManager.default.removeItem(at: blocksFile)
    }
}
