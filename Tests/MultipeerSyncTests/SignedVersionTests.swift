import Crypto
import Foundation
import MultipeerSession
import MultipeerTestSupport
import Testing

@testable import MultipeerSync

/// A version's bytes and signature as docs/SYNC.md 3 spells them.
@Suite struct SignedVersionTests {
    /// The key pair of RFC 8032's first Ed25519 test vector, as in docs/PROTOCOL.md.
    static let origin: PeerIdentity = {
        let hex = Array("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
        let key = stride(from: 0, to: hex.count, by: 2).map { UInt8(String(hex[$0...$0 + 1]), radix: 16)! }
        return try! PeerIdentity(rawPrivateKey: key)
    }()

    static let version = try! SignedVersion(
        collection: "checklist",
        recordID: "before-start/fuel",
        timestamp: HLCTimestamp(milliseconds: 1_795_312_526_980, counter: 2),
        change: .set(["item": Array("fuel quantity".utf8), "done": [0xf5]]),
        signedBy: origin
    )

    static let delete = try! SignedVersion(
        collection: "checklist",
        recordID: "before-start/fuel",
        timestamp: HLCTimestamp(milliseconds: 1_795_312_526_980, counter: 3),
        change: .delete,
        signedBy: origin
    )

    /// The file of docs/PROTOCOL.md's resource vectors (the ten bytes 00 01 ... 09).
    static let chart = try! SyncAttachment(
        sha256: Array(SHA256.hash(data: (0..<10).map { UInt8($0) })),
        length: 10
    )

    /// The record of the vectors given a chart, at counter 4: one field, `chart`, holding the
    /// attachment's encoding, and the attachment listed (docs/SYNC.md 9).
    static let attached = try! SignedVersion(
        collection: "checklist",
        recordID: "before-start/fuel",
        timestamp: HLCTimestamp(milliseconds: 1_795_312_526_980, counter: 4),
        change: .set(["chart": try! MessageEncoding.binary.encode(chart)]),
        attachments: [chart],
        signedBy: origin
    )

    /// Each of `cases` (what it breaks, and its bytes) is refused as malformed, the refusal
    /// saying what.
    static func expectRefused(_ cases: [(String, [UInt8])]) {
        for (what, bytes) in cases {
            do {
                _ = try SignedVersion(decoding: bytes)
                Issue.record("\(what): read")
            } catch {
                #expect(error.code == .malformedVersion && error.message.contains(what), "\(what): \(error)")
            }
        }
    }

    static func vector(_ name: String) throws -> [UInt8] {
        let vectors = try ProtocolVectors.blocks(in: "docs/SYNC.md", fence: "hex")
        return try #require(vectors[name]).split(whereSeparator: \.isWhitespace).map { UInt8($0, radix: 16)! }
    }

    @Test func theVectorsAreTheSpecsBothWays() throws {
        #expect(Self.origin.peerID == UUID(uuidString: "21FE31DF-A154-8261-A26B-F854046FD227"))
        for (name, version) in [
            ("sync-version", Self.version), ("sync-version-delete", Self.delete),
            ("sync-version-attachment", Self.attached),
        ] {
            let bytes = try Self.vector(name)
            #expect(version.bytes == bytes, "\(name)")
            let read = try SignedVersion(decoding: bytes)
            #expect(read == version, "\(name) reads back")
            try read.verify(with: Self.origin.key)
        }
        #expect(
            Self.version.id.map { String(format: "%02x", $0) }.joined()
                == "6efc50310c4aa1b8d52ff52754cb4cef827a0bc1b361de94280aff36a7da55e7"
        )
        #expect(Self.chart.hex == "1f825aa2f0020ef7cf91dfa30da4668d791c5d4824fc8e41354b89ec05795ab3")
        #expect(try SignedVersion(decoding: try Self.vector("sync-version-attachment")).attachments == [Self.chart])
    }

    /// The entry navlog-sync's records read a version of format 3 as (docs/SYNC.md 11).
    struct Entry: Decodable, Equatable {
        struct Fields: Decodable, Equatable {
            var leg: Int?
            var waypoint: String
            var planned, actual: String?
            var fuel, altitude: Int?
            var remarks: String?
        }

        struct Attachment: Decodable, Equatable {
            var name: String
            var length: Int64
            var sha256: String
        }

        var id: String
        var fields: Fields
        var author: String
        var deleted: Bool
        var attachments: [Attachment]?
    }

    /// docs/SYNC.md 11's vectors: navlog-sync 0.9's versions, read as records of
    /// `navlog.entries` in navlog-sync's shape, verified with the origin's key as 0.9 signed
    /// them; one byte changed does not verify.
    @Test func navlogVersionsOfFormatThreeReadAndVerify() throws {
        let fields = Entry.Fields(
            leg: 1,
            waypoint: "TESAT",
            planned: "10:05",
            fuel: 12_400,
            altitude: 37_000,
            remarks: "light chop"
        )
        let id = "3F2A1B7C-0000-4000-8000-000000000001"
        for (name, counter, versionID, attachments) in [
            ("sync-version-navlog", 2, "24c04a0d0c609ac78e3cbbb03455a03dc09421e8e997b4b2496b254a33dec916", nil),
            (
                "sync-version-navlog-attachment", 3,
                "b1369e257bf9e2fe25098cbaf73d6b7068a7a3b727a0d1b7af1e259ed5f06345",
                [Entry.Attachment(name: "tesat-chart.pdf", length: 10, sha256: Self.chart.hex)]
            ),
        ] as [(String, UInt16, String, [Entry.Attachment]?)] {
            let bytes = try Self.vector(name)
            let version = try SignedVersion(decoding: bytes)
            try version.verify(with: Self.origin.key)
            #expect(version.collection == "navlog.entries" && version.recordID == id, "\(name)")
            #expect(version.stamp.origin == Self.origin.peerID)
            #expect(version.stamp.timestamp.rawValue == 117_657_601_768_161_280 + UInt64(counter), "\(name)")
            #expect(version.id.map { String(format: "%02x", $0) }.joined() == versionID, "\(name)")
            #expect(version.attachments == (attachments == nil ? [] : [Self.chart]), "\(name)")
            guard case .set(let values) = version.change, let payload = values[""], values.count == 1 else {
                Issue.record("\(name): not a whole-record write: \(version.change)")
                continue
            }
            let entry = try MessageEncoding.decode(Entry.self, from: payload)
            #expect(
                entry == Entry(id: id, fields: fields, author: "captain", deleted: false, attachments: attachments),
                "\(name)"
            )
            var altered = bytes
            altered[altered.count - 70] ^= 1  // (a byte of the remarks, or of the chart's SHA-256)
            #expect(throws: SyncError.self, "\(name) altered") {
                try SignedVersion(decoding: altered).verify(with: Self.origin.key)
            }
            #expect(throws: SyncError.self, "\(name) by another key") {
                try version.verify(with: PeerIdentity().key)
            }
        }
    }

    /// Every rule of docs/SYNC.md 11 a version of format 3 can break is refused, naming it.
    @Test func navlogVersionsThatBreakTheSpecAreRefusedNamingTheRule() throws {
        let good = try Self.vector("sync-version-navlog-attachment")
        let attachments = good.count - 64 - (1 + 2 + 15 + 8 + 32)
        func changed(_ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var bytes = good
            change(&bytes)
            return bytes
        }
        let twice =
            Array(good[..<attachments]) + [2] + Array(good[attachments + 1..<good.count - 64])
            + Array(good[attachments + 1..<good.count - 64]) + [UInt8](repeating: 0, count: 64)
        Self.expectRefused([
            ("do not begin with \"navlog version v1\"", changed { $0[1] = UInt8(ascii: "N") }),
            ("deleted is 2", changed { $0[1 + 17 + 16 + 8 + 16] = 2 }),
            ("author is not UTF-8", changed { $0[1 + 17 + 16 + 8 + 16 + 1 + 2] = 0xff }),
            ("0 attachments", changed { $0[attachments] = 0 }),
            ("17 attachments", changed { $0[attachments] = 17 }),
            ("ascending order of their names, each once", twice),
            ("bytes after the signature", good + [0]),
        ])
        // Every prefix ends inside a field, or (0.9's attachments are known by bytes remaining
        // before the signature) reads as another version whose signature does not verify.
        for length in 0..<good.count {
            #expect(throws: SyncError.self, "a prefix of \(length) bytes") {
                try SignedVersion(decoding: Array(good.prefix(length))).verify(with: Self.origin.key)
            }
        }
    }

    /// A version's attachments (docs/SYNC.md 9) break their rules only at a refusal naming
    /// which: none listed in format 2, out of order or twice, on a delete, a length beyond
    /// 2^63 - 1, more than 64.
    @Test func attachmentsThatBreakTheSpecAreRefusedNamingTheRule() throws {
        let good = Self.attached.bytes
        let list = good.count - 64 - (1 + 40)  // (the count, then one SHA-256 and length)
        let other = try SyncAttachment(sha256: [UInt8](repeating: 0, count: 32), length: 1)
        func changed(_ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var bytes = good
            change(&bytes)
            return bytes
        }
        let twice =
            Array(good[..<list]) + [2] + Array(good[list + 1..<list + 41]) + Array(good[list + 1..<list + 41])
            + [UInt8](repeating: 0, count: 64)
        let cases: [(String, [UInt8])] = [
            ("0 attachments in a version of kind 0", changed { $0[list] = 0 }),
            ("65 attachments", changed { $0[list] = 65 }),
            ("beyond 2^63 - 1", changed { $0[list + 33] = 0x80 }),
            ("ascending order of their SHA-256, each once", twice),
            ("format 4", changed { $0[0] = 4 }),
        ]
        Self.expectRefused(cases)
        // A delete lists none, written or read.
        #expect(throws: SyncError.self) {
            try SignedVersion.signedBytes(
                collection: "checklist",
                recordID: "a",
                stamp: Self.version.stamp,
                change: .delete,
                attachments: [other]
            )
        }
        var delete = Self.delete.bytes
        delete[0] = 2
        delete.insert(contentsOf: [1] + other.sha256 + [0, 0, 0, 0, 0, 0, 0, 1], at: delete.count - 64)
        #expect(throws: SyncError.self) { try SignedVersion(decoding: delete) }
        // Without attachments, a version is of format 1, as before there were any.
        #expect(Self.version.bytes[0] == 1 && good[0] == 2)
    }

    /// Only the origin's key verifies: another key, or any byte changed, is refused, saying why.
    @Test func anAlteredVersionOrAnotherKeyIsRefused() throws {
        let other = PeerIdentity()
        #expect(throws: SyncError.self) { try Self.version.verify(with: other.key) }
        do {
            try Self.version.verify(with: other.key)
        } catch {
            #expect(error.code == .badSignature)
            #expect(error.message.contains("\(other.peerID)"), "\(error)")
        }
        // The value of `done` (the last byte before the signature) changed after signing.
        var altered = Self.version.bytes
        altered[altered.count - 65] ^= 1
        let read = try SignedVersion(decoding: altered)
        do {
            try read.verify(with: Self.origin.key)
            Issue.record("an altered version verified")
        } catch {
            #expect(error.code == .badSignature)
            #expect(error.message.contains("does not verify"), "\(error)")
        }
        // Signed by another key in the origin's name: the bytes name the origin, the key is not its.
        let forged = try SignedVersion(
            collection: "checklist",
            recordID: "before-start/fuel",
            timestamp: Self.version.stamp.timestamp,
            change: Self.version.change,
            signedBy: other
        )
        var claimed = forged.bytes
        withUnsafeBytes(of: Self.origin.peerID.uuid) { claimed.replaceSubrange(10..<26, with: $0) }
        #expect(throws: SyncError.self) { try SignedVersion(decoding: claimed).verify(with: Self.origin.key) }
    }

    /// Every rule of docs/SYNC.md 3 a version's bytes can break is refused as malformed, with its reason.
    @Test func bytesThatBreakTheSpecAreRefusedNamingTheRule() throws {
        let good = Self.version.bytes
        // The fields begin after format, kind, timestamp, origin, "checklist", "before-start/fuel".
        let fields = 1 + 1 + 8 + 16 + 1 + 9 + 2 + 17
        func changed(_ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var bytes = good
            change(&bytes)
            return bytes
        }
        // What each breaks, and what its refusal says.
        let cases: [(String, [UInt8])] = [
            ("kind 2", changed { $0[1] = 2 }),
            ("2 fields in a version of kind 1", changed { $0[1] = 1 }),
            ("collection of 0 bytes", changed { $0[26] = 0 }),
            ("id of 0 bytes", changed { $0.replaceSubrange(36..<38, with: [0, 0]) }),
            ("0 fields in a version of kind 0", changed { $0.replaceSubrange(fields..<fields + 2, with: [0, 0]) }),
            ("not in ascending order", changed { $0[fields + 3] = UInt8(ascii: "z") }),
            ("field name is not UTF-8", changed { $0[fields + 3] = 0xff }),
            ("bytes after the signature", good + [0]),
            ("at most 1048576", [UInt8](repeating: 1, count: SignedVersion.maximumLength + 1)),
        ]
        Self.expectRefused(cases)
        // Every prefix of a version ends inside a field.
        for length in 0..<good.count {
            #expect(throws: SyncError.self, "a prefix of \(length) bytes") {
                try SignedVersion(decoding: Array(good.prefix(length)))
            }
        }
        /// A version setting `values`, with a signature of zeros (these never get that far).
        func unsigned(_ values: [String: [UInt8]]) throws -> [UInt8] {
            try SignedVersion.signedBytes(
                collection: "checklist",
                recordID: "before-start/fuel",
                stamp: Self.version.stamp,
                change: .set(values)
            ) + [UInt8](repeating: 0, count: 64)
        }
        // The second name made equal to the first: "done" twice.
        var twice = try unsigned(["done": [1], "item": [2]])
        let second = twice.count - 64 - (1 + 4 + 4)  // (before "item": its value, its length, itself)
        twice.replaceSubrange(second..<second + 4, with: Array("done".utf8))
        do {
            _ = try SignedVersion(decoding: twice)
            Issue.record("a name twice: read")
        } catch {
            #expect(error.message.contains("ascending order of their names, each once"), "\(error)")
        }
        // The first name emptied: a whole record's field beside another.
        var beside = try unsigned(["a": [1], "b": [2]])
        beside.replaceSubrange(fields + 2..<fields + 4, with: [0])
        do {
            _ = try SignedVersion(decoding: beside)
            Issue.record("the empty name beside another: read")
        } catch {
            #expect(error.message.contains("comes with others"), "\(error)")
        }
    }

    /// What an application asks to write beyond docs/SYNC.md 3's bounds is refused before
    /// anything is signed.
    @Test func aWriteBeyondTheBoundsIsRefused() {
        let stamp = Self.version.stamp
        let cases: [(String, String, String, RecordWrite.Change)] = [
            ("an empty collection", "", "a", .delete),
            ("a collection of 256 bytes", String(repeating: "c", count: 256), "a", .delete),
            ("an empty id", "checklist", "", .delete),
            ("an id of 1,025 bytes", "checklist", String(repeating: "i", count: 1_025), .delete),
            ("no fields", "checklist", "a", .set([:])),
            ("the empty name beside another", "checklist", "a", .set(["": [1], "done": [1]])),
            ("a name of 256 bytes", "checklist", "a", .set([String(repeating: "n", count: 256): [1]])),
            ("a value of 1 MiB", "checklist", "a", .set(["done": [UInt8](repeating: 0, count: 1 << 20)])),
        ]
        for (what, collection, id, change) in cases {
            do {
                _ = try SignedVersion.signedBytes(collection: collection, recordID: id, stamp: stamp, change: change)
                Issue.record("\(what): written")
            } catch {
                #expect(error.code == .invalidWrite, "\(what): \(error)")
            }
        }
    }
}
