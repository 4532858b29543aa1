import Foundation
import MultipeerCore
import MultipeerSession
import Testing

@testable import MultipeerSync

/// The messages of docs/SYNC.md 5, as the spec spells them.
@Suite struct SyncMessageTests {
    typealias Range = RangeReconciliation.Range

    static let version = SignedVersionTests.version

    /// An initiator's round: a range that matched nothing up to the vector version's timestamp
    /// (a fingerprint of no items), then the one id it holds from there on.
    static let reconcile = SyncMessage.reconcile(
        exchange: 7,
        fromInitiator: true,
        [
            Range(
                upperBound: .init(timestamp: version.stamp.timestamp.rawValue, idPrefix: [0x6e]),
                payload: .fingerprint(RangeReconciliation.fingerprint(of: [][...]))
            ),
            Range(upperBound: .infinity, payload: .ids([version.id])),
        ]
    )
    static let versions = SyncMessage.versions(keys: [SignedVersionTests.origin.key], [version.bytes])
    static let want = SyncMessage.want([version.id])
    static let lack = SyncMessage.lack([SignedVersionTests.chart.sha256])
    static let schemas = SyncMessage.schemas([.init(collection: "checklist", version: 2)])
    static let keeps = SyncMessage.keeps(.only(["crew", "checklist"]), run: 0x0123_4567_89ab_cdef, heard: 0)

    @Test func theVectorsAreTheSpecsBothWays() throws {
        for (name, message) in [
            ("sync-reconcile", Self.reconcile), ("sync-versions", Self.versions), ("sync-want", Self.want),
            ("sync-lack", Self.lack), ("sync-schemas", Self.schemas), ("sync-keeps", Self.keeps),
            ("sync-keeps-everything", .keeps(.everything, run: 2, heard: 0x0123_4567_89ab_cdef)),
        ] {
            let bytes = try SignedVersionTests.vector(name)
            #expect(message.bytes == bytes, "\(name)")
            #expect(try SyncMessage(decoding: bytes) == message, "\(name) reads back")
        }
    }

    /// Each of `cases` is refused as malformed, its refusal naming what the case says.
    static func expectRefused(_ cases: [(String, [UInt8])]) {
        for (what, bytes) in cases {
            do {
                _ = try SyncMessage(decoding: bytes)
                Issue.record("\(what): read")
            } catch {
                #expect(error.code == .malformedMessage && error.message.contains(what), "\(what): \(error)")
            }
        }
    }

    /// The compressed vector reads as the two versions it carries; a larger message compressed
    /// here (by whatever zlib this machine has) is shorter than the plain one and reads the
    /// same; a small one is sent plain.
    @Test func compressedVersionsReadAsThePlainMessage() throws {
        let bytes = try SignedVersionTests.vector("sync-versions-compressed")
        let message = SyncMessage.versions(
            keys: [SignedVersionTests.origin.key],
            [Self.version.bytes, SignedVersionTests.delete.bytes]
        )
        #expect(try SyncMessage(decoding: bytes) == message)
        #expect(message.compactBytes() == message.bytes, "below \(SyncMessage.compressedAtLeast) bytes: sent plain")
        let larger = SyncMessage.versions(
            keys: [SignedVersionTests.origin.key],
            Array(repeating: [Self.version.bytes, SignedVersionTests.delete.bytes], count: 8).flatMap { $0 }
        )
        let compressor = Zlib.Compressor()
        let compact = larger.compactBytes(using: compressor)
        #expect(compact.first == 7 && compact.count < larger.bytes.count, "\(compact.count) of \(larger.bytes.count)")
        #expect(try SyncMessage(decoding: compact) == larger)
        // (One compressor, reset for each message: the next stream owes nothing to the last.)
        let other = SyncMessage.versions(keys: [], Array(repeating: Self.version.bytes, count: 20))
        #expect(try SyncMessage(decoding: other.compactBytes(using: compressor)) == other)
        #expect(larger.compactBytes(using: compressor) == compact)
        #expect(Self.want.compactBytes() == Self.want.bytes)
    }

    /// A compressed message that breaks a rule is refused naming it; one that would inflate far
    /// beyond what it declares is refused having inflated no more than that.
    @Test func compressedVersionsThatBreakTheSpecAreRefused() throws {
        let vector = try SignedVersionTests.vector("sync-versions-compressed")
        let declared = Int(vector[1..<5].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        func compressed(_ body: [UInt8], declaring length: Int) -> [UInt8] {
            [7] + withUnsafeBytes(of: UInt32(length).bigEndian, Array.init) + Zlib.Compressor().compressed(body)
        }
        let body = Array(SyncMessage.versions(keys: [], []).bytes.dropFirst())
        let bomb = [UInt8](repeating: 0, count: 64 << 20)  // (64 MiB of zeros: about 64 KiB compressed)
        let cases: [(String, [UInt8])] = [
            ("inflated: 4 to 4194303", [7, 0, 0, 0, 3] + Array(vector.dropFirst(5))),
            ("inflated: 4 to 4194303", [7, 0, 0x40, 0, 0] + Array(vector.dropFirst(5))),
            ("without its zlib stream", Array(vector.prefix(5))),
            ("not one whole zlib stream", Array(vector.prefix(5)) + [0x12, 0x34, 0x56]),
            ("not one whole zlib stream", Array(vector.dropLast(8))),  // (the stream ends early)
            ("bytes after the compressed body's zlib stream", vector + [0]),
            (
                "inflates to \(declared) bytes, not the \(declared + 1)",
                [7] + withUnsafeBytes(of: UInt32(declared + 1).bigEndian, Array.init) + Array(vector.dropFirst(5))
            ),
            (
                "inflates beyond the \(declared - 1) bytes",
                [7] + withUnsafeBytes(of: UInt32(declared - 1).bigEndian, Array.init) + Array(vector.dropFirst(5))
            ),
            ("inflates beyond the 1024 bytes", compressed(bomb, declaring: 1_024)),
            ("bytes after the last version", compressed(body + [0], declaring: body.count + 1)),
            ("compressed versions ends inside its version length", compressed([0, 0, 0, 1], declaring: 4)),
            ("16385 versions", compressed([0, 0, 0x40, 0x01], declaring: 4)),
        ]
        Self.expectRefused(cases)
    }

    /// Every rule a message can break is refused as malformed, saying which.
    @Test func bytesThatBreakTheSpecAreRefusedNamingTheRule() throws {
        let reconcile = Self.reconcile.bytes
        let header = 1 + 8 + 1
        func changed(_ bytes: [UInt8], _ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var bytes = bytes
            change(&bytes)
            return bytes
        }
        let runs: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 1] + [UInt8](repeating: 0, count: 8)  // (run 1, heard none)
        let cases: [(String, [UInt8])] = [
            ("a message of kind 9", [9]),
            ("direction 2", changed(reconcile) { $0[9] = 2 }),
            ("protocol version 98", changed(reconcile) { $0[header] = 0x62 }),
            ("begins with a zero digit", Array(reconcile.prefix(header + 1)) + [0x80, 0x01, 0, 0]),
            ("beyond 64 bits", Array(reconcile.prefix(header + 1)) + [UInt8](repeating: 0xff, count: 10) + [0]),
            ("prefix of 33 bytes", Array(reconcile.prefix(header + 1)) + [1, 33] + [UInt8](repeating: 0, count: 33)),
            ("a range of mode 3", Array(reconcile.prefix(header + 1)) + [0, 0, 3]),
            ("a range after infinity", reconcile + [1, 0, 0]),
            ("an infinite bound with an id prefix", Array(reconcile.prefix(header + 1)) + [0, 1, 7, 0]),
            ("bytes after the last id", Self.want.bytes + [0]),
            ("bytes after the last SHA-256", Self.lack.bytes + [0]),
            ("a lack of 0 files", [4, 0, 0]),
            ("bytes after the last schema", Self.schemas.bytes + [0]),
            ("not in ascending order", [5, 0, 2, 1, 0x62, 0, 0, 0, 1, 1, 0x61, 0, 0, 0, 1]),
            ("empty or not in ascending order", [5, 0, 1, 0, 0, 0, 0, 1]),
            ("a run of 0", [6] + [UInt8](repeating: 0, count: 16) + [0]),
            ("run heard", [6] + runs.prefix(12)),
            ("a scope of kind 2", [6] + runs + [2]),
            ("bytes after a scope of every collection", [6] + runs + [0, 0]),
            ("bytes after the scope's last collection", Self.keeps.bytes + [0]),
            ("a scope of 1025 collections", [6] + runs + [1, 0x04, 0x01]),
            ("not in ascending order, each once", [6] + runs + [1, 0, 2, 1, 0x61, 1, 0x61]),
            ("empty or not in ascending order", [6] + runs + [1, 0, 1, 0]),
            ("collection is not UTF-8", [6] + runs + [1, 0, 1, 1, 0xff]),
            ("a lack of 1025 files", [4, 0x04, 0x01] + [UInt8](repeating: 0, count: 1_025 * 32)),
            ("bytes after the last version", Self.versions.bytes + [0]),
            ("16385 keys", [2, 0x40, 0x01]),
            ("a want of 16385 ids", [3, 0x40, 0x01]),
            ("at most 4194304", [UInt8](repeating: 3, count: SyncMessage.maximumLength + 1)),
        ]
        Self.expectRefused(cases)
        // A batch or a want cut short anywhere ends inside something it announced.
        for message in [Self.versions.bytes, Self.want.bytes, Self.lack.bytes, Self.schemas.bytes, Self.keeps.bytes] {
            for length in 0..<message.count {
                #expect(throws: SyncError.self) { try SyncMessage(decoding: Array(message.prefix(length))) }
            }
        }
    }

    /// An exchange whose every round crosses as bytes finds what the values find.
    @Test(arguments: 1...10 as ClosedRange<UInt64>)
    func anExchangeOverBytesFindsTheDifference(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let all = RangeReconciliationTests.items(Int.random(in: 0...5_000, using: &random), from: 0, using: &random)
        let mine = all.filter { _ in Int.random(in: 0..<50, using: &random) != 0 }
        let theirs = all.filter { _ in Int.random(in: 0..<50, using: &random) != 0 }
        let (a, b) = (RangeReconciliation(items: mine), RangeReconciliation(items: theirs))
        func crossed(_ ranges: RangeReconciliation.Message, fromInitiator: Bool) throws -> RangeReconciliation.Message {
            let bytes = SyncMessage.reconcile(exchange: seed, fromInitiator: fromInitiator, ranges).bytes
            guard case .reconcile(seed, fromInitiator, let read) = try SyncMessage(decoding: bytes) else {
                Issue.record("seed \(seed): another message read back")
                return []
            }
            return read
        }
        var learnt = RangeReconciliationTests.Learnt()
        var message = try crossed(try a.initiate(), fromInitiator: true)
        while !message.isEmpty {
            let (reply, found) = try b.reconcile(message)
            learnt.have += found.need
            learnt.need += try b.ids(of: found.have)
            let answer = try crossed(reply, fromInitiator: false)
            let (next, outcome) = try a.reconcile(answer)
            learnt.have += try a.ids(of: outcome.have)
            learnt.need += outcome.need
            message = try crossed(next, fromInitiator: true)
        }
        #expect(Set(learnt.have) == Set(mine.map(\.id)).subtracting(theirs.map(\.id)), "seed \(seed)")
        #expect(Set(learnt.need) == Set(theirs.map(\.id)).subtracting(mine.map(\.id)), "seed \(seed)")
    }
}
