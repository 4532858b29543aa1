import Crypto
public import Foundation
import Glibc

/// The files attached to a host's entries, on disk beside its database: each whole file under
/// its SHA-256 in `<database>.attachments/`, and what peers send on its way in the `incoming`
/// folder there (the session's resource directory: a file is moved out of it only once whole
/// with its hash checked).
public struct NavlogFiles: Sendable {
    /// The folder of the files, by hash.
    public let directory: URL
    /// Where the session receives files (its ``MultipeerSession/Configuration/resourceDirectory``).
    public var incoming: URL { directory.appendingPathComponent("incoming") }

    /// The files of the database at `databasePath`.
    public init(databasePath: String) {
        directory = URL(fileURLWithPath: databasePath + ".attachments")
    }

    /// Where the file with this SHA-256 is kept.
    public func path(of sha256: String) -> URL {
        directory.appendingPathComponent(sha256)
    }

    /// Whether this host holds the file with this SHA-256.
    public func holds(_ sha256: String) -> Bool {
        FileManager.default.fileExists(atPath: path(of: sha256).path)
    }

    /// Copies the file at `source` in, under its hash; returns it as an attachment named
    /// `name` (by default the file's own name). Reads the file once, off the caller's executor.
    func take(_ source: String, named name: String? = nil) async throws(NavlogError) -> NavlogAttachment {
        let name = name ?? URL(fileURLWithPath: source).lastPathComponent
        guard NavlogAttachment.isName(name) else {
            throw NavlogError(.badCommand, "an attachment's name must be \(NavlogAttachment.nameRule)")
        }
        let directory = directory
        let result = await Task.detached { () -> Result<NavlogAttachment, NavlogError> in
            Result { () throws(NavlogError) in try Self.copy(source, named: name, into: directory) }
        }.value
        return try result.get()
    }

    /// Hashes `source` while copying it to a temporary file in `directory`, synced, then moves
    /// the copy into place under its hash (a copy already there is kept).
    private static func copy(
        _ source: String,
        named name: String,
        into directory: URL
    ) throws(NavlogError) -> NavlogAttachment {
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw NavlogError(
                .attachmentFailure,
                "cannot make the folder \(directory.path) for attachments: \(error.localizedDescription)"
            )
        }
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else {
            throw NavlogError(.badCommand, "cannot read \(source) to attach it: \(String(cString: strerror(errno)))")
        }
        defer { close(input) }
        let temporary = directory.appendingPathComponent(".taking-\(UUID().uuidString)")
        let output = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard output >= 0 else {
            throw NavlogError(
                .attachmentFailure,
                "cannot write in \(directory.path): \(String(cString: strerror(errno)))"
            )
        }
        var hasher = SHA256()
        var length: Int64 = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        do throws(NavlogError) {
            defer { close(output) }
            while true {
                let count = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
                guard count >= 0 else {
                    throw NavlogError(.badCommand, "cannot read \(source): \(String(cString: strerror(errno)))")
                }
                guard count > 0 else { break }
                hasher.update(data: buffer[..<count])
                let written = buffer.withUnsafeBytes { write(output, $0.baseAddress, count) }
                guard written == count else {
                    throw NavlogError(
                        .attachmentFailure,
                        "cannot write a copy of \(source) in \(directory.path): \(String(cString: strerror(errno)))"
                    )
                }
                length += Int64(count)
            }
            guard fsync(output) == 0 else {
                throw NavlogError(
                    .attachmentFailure,
                    "cannot sync the copy of \(source): \(String(cString: strerror(errno)))"
                )
            }
        } catch {
            unlink(temporary.path)
            throw error
        }
        let sha256 = hasher.finalize().map { String(format: "%02x", $0) }.joined()
        guard rename(temporary.path, directory.appendingPathComponent(sha256).path) == 0 else {
            unlink(temporary.path)
            throw NavlogError(
                .attachmentFailure,
                "cannot keep the copy of \(source): \(String(cString: strerror(errno)))"
            )
        }
        return NavlogAttachment(name: name, length: length, sha256: sha256)
    }

    /// Moves a file that arrived whole (its hash checked by the session) into place.
    func keep(_ arrived: URL, as sha256: String) throws(NavlogError) {
        guard rename(arrived.path, path(of: sha256).path) == 0 else {
            throw NavlogError(
                .attachmentFailure,
                "cannot move \(arrived.path) into \(directory.path): \(String(cString: strerror(errno)))"
            )
        }
    }

    /// Copies the held file with this SHA-256 to `destination`, through a temporary file beside
    /// it, so that `destination` is whole or absent.
    func save(_ sha256: String, to destination: String) throws(NavlogError) {
        let target = URL(fileURLWithPath: destination)
        let temporary = target.deletingLastPathComponent().appendingPathComponent(
            ".\(target.lastPathComponent).saving-\(UUID().uuidString)"
        )
        do {
            try FileManager.default.copyItem(at: path(of: sha256), to: temporary)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw NavlogError(.attachmentFailure, "cannot write \(destination): \(error.localizedDescription)")
        }
        guard rename(temporary.path, target.path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary.path)
            throw NavlogError(.attachmentFailure, "cannot write \(destination): \(reason)")
        }
    }
}
