import Foundation
import Glibc
import MultipeerCore
import NIOCore

/// A file being sent: open, so its bytes are read from the same file throughout, and checked
/// before each chunk against what it was when hashed.
struct SourceFile: Sendable {
    let path: String
    let descriptor: Int32
    let length: UInt64
    let sha256: [UInt8]
    /// The file as it was hashed: device, inode, size, modification time.
    private let identity: [Int]

    /// Opens and hashes `url`, on `queue` (a large file takes seconds).
    static func open(_ url: URL, on queue: any FileQueue) async throws -> SourceFile {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try SourceFile(url) })
            }
        }
    }

    private init(_ url: URL) throws {
        path = url.path
        descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw MultipeerError(
                .invalidArgument,
                "cannot open \(path) to send it: \(String(cString: strerror(errno)))"
            )
        }
        guard let before = Self.identity(of: descriptor, path: path) else {
            Glibc.close(descriptor)
            throw MultipeerError(.invalidArgument, "cannot read what \(path) is")
        }
        length = UInt64(before[2])
        do {
            sha256 = try ResourceStore.sha256(of: url, length: length)
        } catch {
            Glibc.close(descriptor)
            throw MultipeerError(.invalidArgument, "cannot read \(path) to send it: \(error)")
        }
        guard Self.identity(of: descriptor, path: path) == before else {
            Glibc.close(descriptor)
            throw MultipeerError(.resourceChanged, "\(path) changed while it was read to be sent")
        }
        identity = before
    }

    private static func identity(of descriptor: Int32, path: String) -> [Int]? {
        var open = stat()
        var named = stat()
        guard fstat(descriptor, &open) == 0, stat(path, &named) == 0, open.st_dev == named.st_dev,
            open.st_ino == named.st_ino,
            open.st_mode & S_IFMT == S_IFREG
        else { return nil }
        return [Int(open.st_dev), Int(open.st_ino), Int(open.st_size), open.st_mtim.tv_sec, open.st_mtim.tv_nsec]
    }

    /// `count` bytes from `offset`, if the file is still what was hashed (nil otherwise).
    func read(offset: UInt64, count: UInt64, allocator: ByteBufferAllocator) -> ByteBuffer? {
        var buffer = allocator.buffer(capacity: Int(count))
        let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: Int(count)) { bytes in
            var done = 0
            while done < Int(count) {
                let n = pread(descriptor, bytes.baseAddress! + done, Int(count) - done, off_t(offset) + off_t(done))
                guard n > 0 else { return done }
                done += n
            }
            return done
        }
        guard read == Int(count), Self.identity(of: descriptor, path: path) == identity else { return nil }
        return buffer
    }

    func close() {
        Glibc.close(descriptor)
    }
}
