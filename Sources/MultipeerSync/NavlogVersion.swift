import Foundation
import MultipeerSession

/// A version of navlog-sync 0.9's log (docs/SYNC.md 11, docs/NAVLOG.md 1 and 1a of 0.9): its
/// signed bytes and its origin's signature, carried whole as a version of format 3, so that the
/// log of a station upgraded from 0.9 keeps every entry signed by the station that wrote it.
/// Read as a whole-record write of the collection ``collection``: the entry as navlog-sync's
/// record shape says (`id`, `fields`, `author`, `deleted`, `attachments`), in the session's binary
/// encoding.
enum NavlogVersion {
    /// The collection a format 3 version writes.
    static let collection = "navlog.entries"
    /// What navlog-sync 0.9's signed bytes begin with.
    static let magic = Array("navlog version v1".utf8)
    /// The most attachments a navlog-sync 0.9 version carries.
    static let maximumAttachments = 16

    /// A format 3 version's parts, read from its bytes (the format byte first, the signature
    /// last).
    struct Parts {
        var stamp: VersionStamp
        var recordID: String
        var payload: [UInt8]
        var attachments: [SyncAttachment]
    }

    /// Reads the navlog-sync 0.9 version in `bytes` (after the format byte, before the
    /// signature).
    /// - Throws: `malformedVersion`, naming the rule the bytes break.
    static func read(_ bytes: [UInt8]) throws(SyncError) -> Parts {
        var reader = ByteReader(bytes, refusing: .malformedVersion, as: "a navlog-sync 0.9 version")
        _ = try reader.byte("format")
        guard Array(try reader.bytes(magic.count, "header")) == magic else {
            throw reader.refusal("a version of format 3 whose bytes do not begin with \"navlog version v1\"")
        }
        let id = try reader.bytes(16, "entry id").withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
        let timestamp = HLCTimestamp(rawValue: try reader.integer(UInt64.self, "timestamp"))
        let origin = try reader.bytes(16, "origin").withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }
        let deleted = try reader.byte("deleted")
        guard deleted <= 1 else {
            throw reader.refusal("entry \(id): deleted is \(deleted), not 0 or 1")
        }
        func string(_ what: String) throws(SyncError) -> String {
            try reader.text(length: Int(try reader.integer(UInt16.self, "\(what) length")), in: 0...0xffff, what)
        }
        func optional(_ what: String) throws(SyncError) -> Bool {
            let present = try reader.byte("\(what) presence")
            guard present <= 1 else { throw reader.refusal("entry \(id): \(what)'s presence byte is \(present)") }
            return present == 1
        }
        let author = try string("author")
        var fields = Record.Fields(waypoint: try string("waypoint"))
        if try optional("leg") { fields.leg = try reader.integer(Int64.self, "leg") }
        if try optional("planned") { fields.planned = try string("planned") }
        if try optional("actual") { fields.actual = try string("actual") }
        if try optional("fuel") { fields.fuel = try reader.integer(Int64.self, "fuel") }
        if try optional("altitude") { fields.altitude = try reader.integer(Int64.self, "altitude") }
        if try optional("remarks") { fields.remarks = try string("remarks") }
        var attachments: [Record.Attachment]?
        if reader.offset < bytes.count - SignedVersion.signatureLength {
            let count = Int(try reader.byte("attachment count"))
            guard (1...maximumAttachments).contains(count) else {
                throw reader.refusal("entry \(id): \(count) attachments, not 1 to \(maximumAttachments)")
            }
            var list: [Record.Attachment] = []
            for _ in 0..<count {
                let name = try string("attachment's name")
                let length = try reader.integer(UInt64.self, "attachment's length")
                guard length <= UInt64(Int64.max) else {
                    throw reader.refusal("entry \(id): an attachment's length of \(length) bytes, beyond 2^63 - 1")
                }
                let file = try SyncAttachment(
                    sha256: Array(try reader.bytes(32, "attachment's SHA-256")),
                    length: Int64(length)
                )
                guard list.last.map({ Array($0.name.utf8).lexicographicallyPrecedes(Array(name.utf8)) }) ?? true else {
                    throw reader.refusal(
                        "entry \(id): its attachments are not in ascending order of their names, each once"
                    )
                }
                list.append(Record.Attachment(name: name, length: file.length, sha256: file.hex, file: file))
            }
            attachments = list
        }
        _ = try reader.bytes(SignedVersion.signatureLength, "signature")
        guard reader.isAtEnd else { throw reader.refusal("entry \(id): bytes after the signature") }
        let record = Record(
            id: id.uuidString,
            fields: fields,
            author: author,
            deleted: deleted == 1,
            attachments: attachments
        )
        let payload: [UInt8]
        do {
            payload = try MessageEncoding.binary.encode(record)
        } catch {
            throw reader.refusal("entry \(id) does not encode as a record: \(error)")
        }
        let files = Set((attachments ?? []).map(\.file)).sorted { $0.sha256.lexicographicallyPrecedes($1.sha256) }
        return Parts(
            stamp: VersionStamp(timestamp: timestamp, origin: origin),
            recordID: id.uuidString,
            payload: payload,
            attachments: files
        )
    }

    /// The entry as navlog-sync's record shape says: what a format 3 version's whole record
    /// holds.
    struct Record: Encodable {
        struct Fields: Encodable {
            var leg: Int64?
            var waypoint: String
            var planned: String?
            var actual: String?
            var fuel: Int64?
            var altitude: Int64?
            var remarks: String?
        }

        struct Attachment: Encodable {
            var name: String
            var length: Int64
            var sha256: String
            /// (Not encoded: the version's attachments list it.)
            var file: SyncAttachment

            private enum CodingKeys: String, CodingKey {
                case name, length, sha256
            }
        }

        var id: String
        var fields: Fields
        var author: String
        var deleted: Bool
        var attachments: [Attachment]?
    }
}
