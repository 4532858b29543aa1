import Crypto
import Foundation
import Glibc

/// The files of a store's attachments (docs/SYNC.md 9), on disk beside its database: each whole
/// file under its SHA-256 in lowercase hexadecimal, in `<database>.attachments/`. A file is only
/// ever there whole: it is written under a temporary name (starting with `.`), synced, then
/// renamed.
struct AttachmentFiles: Sendable {
    let directory: URL

    /// Where the file of `attachment` is kept.
    func path(of attachment: SyncAttachment) -> URL {
        directory.appendingPathComponent(attachment.hex)
    }

    /// Whether the file of `attachment` is here, whole.
    func holds(_ attachment: SyncAttachment) -> Bool {
        var status = stat()
        return stat(path(of: attachment).path, &status) == 0 && Int64(status.st_size) == attachment.length
    }

    /// The names of the files kept (their SHA-256 in hexadecimal).
    func held() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).filter { !$0.hasPrefix(".") }
    }

    /// Copies the file at `source` in, hashing it as it goes, and returns its attachment.
    /// Blocks its thread while it reads and writes.
    /// - Throws: `attachmentFailed`, saying what could not be read or written.
    func take(_ source: URL) throws(SyncError) -> SyncAttachment {
        try makeDirectory()
        let input = open(source.path, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw Self.failure("cannot read \(source.path)") }
        defer { close(input) }
        let temporary = directory.appendingPathComponent(".taking-\(UUID().uuidString)")
        let output = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard output >= 0 else { throw Self.failure("cannot write in \(directory.path)") }
        var hasher = SHA256()
        var length: Int64 = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        do throws(SyncError) {
            defer { close(output) }
            while true {
                let count = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
                guard count >= 0 else { throw Self.failure("cannot read \(source.path)") }
                guard count > 0 else { break }
                hasher.update(data: buffer[..<count])
                guard buffer.withUnsafeBytes({ write(output, $0.baseAddress, count) }) == count else {
                    throw Self.failure("cannot write a copy of \(source.path) in \(directory.path)")
                }
                length += Int64(count)
            }
            guard fsync(output) == 0 else { throw Self.failure("cannot sync the copy of \(source.path)") }
        } catch {
            unlink(temporary.path)
            throw error
        }
        let attachment = try SyncAttachment(sha256: Array(hasher.finalize()), length: length)
        guard rename(temporary.path, path(of: attachment).path) == 0 else {
            unlink(temporary.path)
            throw Self.failure("cannot keep the copy of \(source.path)")
        }
        return attachment
    }

    /// Moves a file that arrived whole, its SHA-256 checked (by the session), into place as
    /// `attachment`'s; copies it if it is on another file system.
    /// - Throws: `attachmentFailed`.
    func keep(_ arrived: URL, as attachment: SyncAttachment) throws(SyncError) {
        try makeDirectory()
        if rename(arrived.path, path(of: attachment).path) == 0 { return }
        guard errno == EXDEV else { throw Self.failure("cannot move \(arrived.path) into \(directory.path)") }
        let copy = try take(arrived)
        unlink(arrived.path)
        guard copy == attachment else {
            try? remove(copy.hex)
            throw SyncError(.attachmentFailed, "\(arrived.path) changed while it was copied in as \(attachment)")
        }
    }

    /// Removes the file named `name` (a SHA-256 in hexadecimal).
    func remove(_ name: String) throws(SyncError) {
        guard unlink(directory.appendingPathComponent(name).path) == 0 || errno == ENOENT else {
            throw Self.failure("cannot remove \(name) from \(directory.path)")
        }
    }

    private func makeDirectory() throws(SyncError) {
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw SyncError(.attachmentFailed, "cannot make the folder \(directory.path) for attachments: \(error)")
        }
    }

    private static func failure(_ what: String) -> SyncError {
        SyncError(.attachmentFailed, "\(what): \(String(cString: strerror(errno)))")
    }
}
