import Crypto
import Foundation
import Glibc
import MultipeerCore
import NIOCore
import Testing

@testable import MultipeerSession

/// The receiver's store of resources, on real files in a directory of its own per test: files
/// put in place only whole and with the offered hash, and partial files resumed after a restart
/// from the blocks that still have their logged hashes.
@Suite struct ResourceStoreTests {
    let directory: URL
    let sender = UUID()

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("resource-store-\(UUID().uuidString)")
    }

    /// `length` bytes of a pattern that differs from block to block.
    static func bytes(_ length: Int) -> [UInt8] {
        (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 20) }
    }

    static func offer(_ bytes: [UInt8], name: String = "chart.pdf") throws -> ResourceOffer {
        try ResourceOffer(id: UUID(), name: name, length: UInt64(bytes.count), sha256: Array(SHA256.hash(data: bytes)))
    }

    /// Writes `bytes[range]` in chunks of 256 KiB.
    static func write(_ bytes: [UInt8], _ range: Range<Int>, to resource: PartialResource) throws {
        for start in stride(from: range.lowerBound, to: range.upperBound, by: 256 << 10) {
            try resource.write(
                ByteBuffer(bytes: bytes[start..<min(start + (256 << 10), range.upperBound)]),
                at: UInt64(start)
            )
        }
    }

    func clean() { try? FileManager.default.removeItem(at: directory) }

    @Test func aWholeFileWithItsHashIsPutInPlaceUnderItsNameAndAnotherBesideIt() throws {
        defer { clean() }
        let store = try ResourceStore(directory: directory)
        for (length, expected) in [(3_000_000, "chart.pdf"), (3_000_001, "chart (2).pdf")] {
            let bytes = Self.bytes(length)
            let resource = try store.open(try Self.offer(bytes), from: sender)
            #expect(resource.held == 0 && resource.existing == nil)
            try Self.write(bytes, 0..<bytes.count, to: resource)
            let file = try resource.finish()
            #expect(file.lastPathComponent == expected)
            #expect(try Data(contentsOf: file) == Data(bytes))
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: store.state.path).filter {
            $0.hasSuffix(".partial") || $0.hasSuffix(".json") || $0.hasSuffix(".blocks")
        }
        #expect(left.isEmpty, "no partial file or record is left of a finished transfer: \(left)")
    }

    @Test func bytesWithAnotherHashAreRefusedAndForgotten() throws {
        defer { clean() }
        let store = try ResourceStore(directory: directory)
        let bytes = Self.bytes(100_000)
        let resource = try store.open(try Self.offer(bytes), from: sender)
        var altered = bytes
        altered[500] ^= 1
        try Self.write(altered, 0..<altered.count, to: resource)
        let failure = try #require(throws: ResourceStoreFailure.self) { try resource.finish() }
        #expect(failure.reason == .hashMismatch)
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("chart.pdf").path))
        #expect(try store.open(try Self.offer(bytes), from: sender).held == 0, "nothing of it is kept to resume from")
    }

    @Test func aRestartResumesFromEveryWholeBlockWritten() throws {
        defer { clean() }
        let bytes = Self.bytes(20 << 20)
        let offer = try Self.offer(bytes)
        do {
            // The first run writes 10.5 MiB and ends without a word (killed).
            let resource = try ResourceStore(directory: directory).open(offer, from: sender)
            try Self.write(bytes, 0..<(21 << 19), to: resource)
        }
        let store = try ResourceStore(directory: directory)
        let resumed = try store.open(offer, from: sender)
        #expect(resumed.held == 10 << 20, "the whole blocks, checked; the half block after them is received again")
        try Self.write(bytes, Int(resumed.held)..<bytes.count, to: resumed)
        #expect(try Data(contentsOf: try resumed.finish()) == Data(bytes))
    }

    @Test func aPartialFileLeftLongerThanItsLifetimeIsRemovedWhenTheStoreOpens() throws {
        defer { clean() }
        let abandoned = Self.bytes(3 << 20)
        let recent = Self.bytes(2 << 20)
        do {
            let store = try ResourceStore(directory: directory)
            try Self.write(abandoned, 0..<(2 << 20), to: try store.open(try Self.offer(abandoned), from: sender))
            try Self.write(recent, 0..<(1 << 20), to: try store.open(try Self.offer(recent), from: sender))
        }
        // The abandoned one was last written eight days ago.
        let state = directory.appendingPathComponent(".multipeer-resources")
        let stale = Date(timeIntervalSinceNow: -8 * 86_400)
        for name in try FileManager.default.contentsOfDirectory(atPath: state.path)
        where name.contains(Hex.encode(try Self.offer(abandoned).sha256)) {
            try FileManager.default.setAttributes(
                [.modificationDate: stale],
                ofItemAtPath: state.appendingPathComponent(name).path
            )
        }
        let store = try ResourceStore(directory: directory, partialLifetime: .seconds(7 * 86_400))
        #expect(
            try store.open(try Self.offer(abandoned), from: sender).held == 0,
            "removed with its records: begun afresh"
        )
        #expect(try store.open(try Self.offer(recent), from: sender).held == 1 << 20, "kept")
    }

    @Test func aBlockAlteredOnDiskIsReceivedAgainWithEverythingAfterIt() throws {
        defer { clean() }
        let bytes = Self.bytes(9 << 20)
        let offer = try Self.offer(bytes)
        do {
            let resource = try ResourceStore(directory: directory).open(offer, from: sender)
            try Self.write(bytes, 0..<(8 << 20), to: resource)  // 8 blocks logged
        }
        let store = try ResourceStore(directory: directory)
        let partial = try #require(
            try FileManager.default.contentsOfDirectory(atPath: store.state.path).first { $0.hasSuffix(".partial") }
        )
        let handle = try FileHandle(forUpdating: store.state.appendingPathComponent(partial))
        try handle.seek(toOffset: (3 << 20) + 17)
        handle.write(Data([0xFF]))
        try handle.close()
        let resumed = try store.open(offer, from: sender)
        #expect(resumed.held == 3 << 20, "blocks 0 to 2 are kept; from the altered one on, received again")
        try Self.write(bytes, Int(resumed.held)..<bytes.count, to: resumed)
        #expect(try Data(contentsOf: try resumed.finish()) == Data(bytes))
    }

    @Test func aCompleteIdenticalCopyIsTakenAtOnceAndAChangedOneIsNot() throws {
        defer { clean() }
        let store = try ResourceStore(directory: directory)
        let bytes = Self.bytes(2_000_000)
        let offer = try Self.offer(bytes)
        let first = try store.open(offer, from: sender)
        try Self.write(bytes, 0..<bytes.count, to: first)
        let file = try first.finish()

        let again = try store.open(offer, from: UUID())  // the same file, from another sender
        #expect(again.existing == file && again.held == offer.length)
        #expect(try again.finish() == file)

        try Data("edited".utf8).write(to: file)
        let changed = try store.open(offer, from: sender)
        #expect(changed.existing == nil && changed.held == 0, "a copy whose bytes changed is not taken")
    }

    @Test func aDirectoryThatCannotBeWrittenIsUnwritable() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent(
            "resource-store-file-\(UUID().uuidString)"
        )
        try Data().write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let failure = try #require(throws: ResourceStoreFailure.self) {
            try ResourceStore(directory: file.appendingPathComponent("inside"))
        }
        #expect(failure.reason == .unwritable)
    }

    @Test(
        .enabled(
            if: ProcessInfo.processInfo.environment["MULTIPEER_SANDBOX"] == "1",
            "mounts a tmpfs: needs scripts/sandbox.sh (make test, as root)"
        )
    )
    func aFullDiskIsDiskFullAndKeepsWhatWasWritten() throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { clean() }
        // A 4 MiB file system, in the sandbox's own mount namespace.
        guard mount("tmpfs", directory.path, "tmpfs", 0, "size=4m") == 0 else {
            Issue.record("cannot mount a tmpfs on \(directory.path): \(String(cString: strerror(errno)))")
            return
        }
        defer { umount(directory.path) }
        let store = try ResourceStore(directory: directory)
        let bytes = Self.bytes(6 << 20)
        let resource = try store.open(try Self.offer(bytes), from: sender)
        let failure = try #require(throws: ResourceStoreFailure.self) {
            try Self.write(bytes, 0..<bytes.count, to: resource)
        }
        #expect(failure.reason == .diskFull, "\(failure.message)")
        #expect(resource.held > 0 && resource.held < UInt64(bytes.count))
    }
}
