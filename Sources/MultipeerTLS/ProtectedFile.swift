internal import CGnuTLS
import Glibc
package import MultipeerCore

/// Files that hold a secret (a group key, a device key) or decide who may join (a roster):
/// checked before they are trusted, and created so that nobody ever sees half of one.
package enum ProtectedFile {
    /// What a file must be kept from.
    package enum Protection: Sendable {
        /// Only its owner may read or write it (a key): mode 0600 or stricter.
        case secret
        /// Only its owner may write it (a roster): no group or other write bit.
        case ownerWritable
    }

    /// The largest protected file read, in bytes.
    package static let maximumLength = 1 << 20

    /// Reads a file after checking that it is a regular file (not a symbolic link), owned by this
    /// process's user, and protected as `protection` says.
    ///
    /// - Parameters:
    ///   - what: Names the file in errors ("the key file").
    ///   - code: The error code for every failure.
    /// - Throws: `code`, with a sentence that says how to fix the file.
    package static func read(
        _ path: String,
        protection: Protection,
        what: String,
        code: MultipeerError.Code
    ) throws -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let reason = errno
            if reason == ELOOP {
                throw MultipeerError(
                    code,
                    "\(what) \(path) is a symbolic link: name the file itself (its real path), so that nobody can point the link elsewhere"
                )
            }
            throw MultipeerError(code, "cannot open \(what) \(path)", underlying: String(cString: strerror(reason)))
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw MultipeerError(code, "cannot inspect \(what) \(path)", underlying: String(cString: strerror(errno)))
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw MultipeerError(code, "\(what) \(path) is not a regular file")
        }
        guard status.st_uid == geteuid() else {
            throw MultipeerError(
                code,
                "\(what) \(path) belongs to user \(status.st_uid), not to this process's user (\(geteuid())): give it to this user (chown \(geteuid()) \(path)) or run as its owner"
            )
        }
        let mode = status.st_mode & 0o777
        switch protection {
        case .secret where mode & 0o077 != 0:
            throw MultipeerError(
                code,
                "\(what) \(path) can be read or written by others (mode \(String(mode, radix: 8))): make it private with chmod 600 \(path)"
            )
        case .ownerWritable where mode & 0o022 != 0:
            throw MultipeerError(
                code,
                "\(what) \(path) can be written by others (mode \(String(mode, radix: 8))): chmod go-w \(path)"
            )
        default:
            break
        }
        guard Int(status.st_size) <= maximumLength else {
            throw MultipeerError(code, "\(what) \(path) is \(status.st_size) bytes; the limit is \(maximumLength)")
        }
        var contents = [UInt8](repeating: 0, count: Int(status.st_size))
        var filled = 0
        while filled < contents.count {
            let count = contents.withUnsafeMutableBytes {
                Glibc.read(descriptor, $0.baseAddress! + filled, $0.count - filled)
            }
            guard count > 0 else {
                if count < 0, errno == EINTR { continue }
                multipeer_secure_zero(&contents, contents.count)
                throw MultipeerError(
                    code,
                    "cannot read \(what) \(path)",
                    underlying: count < 0 ? String(cString: strerror(errno)) : "it shrank while being read"
                )
            }
            filled += count
        }
        return contents
    }

    /// Creates `path` holding `contents`, readable and writable by its owner only (mode 0600),
    /// atomically: it is written under a temporary name in the same directory, flushed to disk,
    /// then linked (or with `replacing`, renamed) into place, so a crash leaves either the old
    /// file or the whole new one. Without `replacing`, an existing file is never replaced.
    ///
    /// - Throws: `code`; ``FileExists`` if the file exists (someone else may have just made it).
    package static func create(
        _ path: String,
        contents: [UInt8],
        what: String,
        code: MultipeerError.Code,
        replacing: Bool = false
    ) throws {
        let directory = path.lastIndex(of: "/").map { String(path[...$0]) } ?? "./"
        var template = Array("\(directory).multipeer-XXXXXX".utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else {
            throw MultipeerError(code, "cannot create \(what) \(path)", underlying: String(cString: strerror(errno)))
        }
        let temporary = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        defer { unlink(temporary) }
        let written = contents.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        let synced = fsync(descriptor) == 0
        let failure = errno
        close(descriptor)
        guard written == contents.count, synced else {
            throw MultipeerError(code, "cannot write \(what) \(path)", underlying: String(cString: strerror(failure)))
        }
        guard (replacing ? rename(temporary, path) : link(temporary, path)) == 0 else {
            if errno == EEXIST { throw FileExists() }
            throw MultipeerError(code, "cannot create \(what) \(path)", underlying: String(cString: strerror(errno)))
        }
    }

    /// ``create(_:contents:what:code:)`` found the file already there.
    package struct FileExists: Error {}
}
