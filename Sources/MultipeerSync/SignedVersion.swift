import Crypto
import Foundation
package import MultipeerSession

/// One write as its origin signed it (docs/SYNC.md, 3): what stations keep, and send on byte for
/// byte, so the signature holds at every hop.
package struct SignedVersion: Hashable, Sendable {
    /// The write: when, by whom, and what it does.
    package let stamp: VersionStamp
    package let collection: String
    package let recordID: String
    package let change: RecordWrite.Change
    /// The files the write's fields hold (docs/SYNC.md 9), in ascending order of their SHA-256,
    /// each once.
    package let attachments: [SyncAttachment]
    /// The bytes as the origin signed them, the signature last.
    package let bytes: [UInt8]
    /// The SHA-256 of ``signedBytes``: the version's name when stations compare what they hold.
    package let id: [UInt8]

    /// The most bytes a version takes.
    package static let maximumLength = 1 << 20
    /// The most fields one write sets.
    package static let maximumFields = 4_096
    /// The most bytes of a record's id.
    package static let maximumIDLength = 1_024
    /// The format of a version without attachments, and of one with them (docs/SYNC.md 3, 9).
    static let format: UInt8 = 1
    static let formatWithAttachments: UInt8 = 2
    /// The format of a version of navlog-sync 0.9's log, carried whole (docs/SYNC.md 11).
    static let formatNavlog: UInt8 = 3
    static let signatureLength = 64
    /// What the store's signatures sign before a version's bytes (after the application context
    /// that `PeerIdentity.signature(for:)` adds).
    static let context = Array("multipeer sync version v1".utf8) + [0]

    /// The write `change` of record `recordID` in `collection` at `timestamp`, holding the
    /// files `attachments`, signed by `identity`, its origin.
    /// - Throws: `invalidWrite` if a name, the id, the size or the attachments are out of
    ///   their bounds.
    package init(
        collection: String,
        recordID: String,
        timestamp: HLCTimestamp,
        change: RecordWrite.Change,
        attachments: Set<SyncAttachment> = [],
        signedBy identity: PeerIdentity
    ) throws(SyncError) {
        let attachments = attachments.sorted { $0.sha256.lexicographicallyPrecedes($1.sha256) }
        var bytes = try Self.signedBytes(
            collection: collection,
            recordID: recordID,
            stamp: VersionStamp(timestamp: timestamp, origin: identity.peerID),
            change: change,
            attachments: attachments
        )
        do {
            bytes += try identity.signature(for: Self.context + bytes)
        } catch {
            throw SyncError(.invalidWrite, "record \(recordID) of \(collection) could not be signed: \(error)")
        }
        self.stamp = VersionStamp(timestamp: timestamp, origin: identity.peerID)
        self.collection = collection
        self.recordID = recordID
        self.change = change
        self.attachments = attachments
        self.bytes = bytes
        id = Self.id(of: bytes)
    }

    /// The bytes a write's origin signs (docs/SYNC.md 3): one encoding per write, the fields in
    /// ascending order of their names.
    /// - Throws: `invalidWrite` if a name, the id or the size is out of its bounds.
    package static func signedBytes(
        collection: String,
        recordID: String,
        stamp: VersionStamp,
        change: RecordWrite.Change,
        attachments: [SyncAttachment] = []
    ) throws(SyncError) -> [UInt8] {
        var bytes: [UInt8] = [attachments.isEmpty ? Self.format : Self.formatWithAttachments]
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.bigEndian) { bytes += $0 } }
        func refuse(_ what: String) -> SyncError {
            SyncError(.invalidWrite, "record \(recordID) of \(collection): \(what)")
        }
        let fields: [(name: [UInt8], value: [UInt8])]
        switch change {
        case .delete:
            bytes.append(1)
            fields = []
        case .set(let values):
            bytes.append(0)
            fields = values.map { (Array($0.key.utf8), $0.value) }.sorted { $0.name.lexicographicallyPrecedes($1.name) }
            guard (1...Self.maximumFields).contains(fields.count) else {
                throw refuse("a write sets 1 to \(Self.maximumFields) fields, not \(fields.count)")
            }
            guard fields.count == 1 || !fields[0].name.isEmpty else {
                throw refuse("the empty field name (a whole record) comes alone")
            }
        }
        append(stamp.timestamp.rawValue)
        withUnsafeBytes(of: stamp.origin.uuid) { bytes += $0 }
        guard (1...255).contains(collection.utf8.count) else { throw refuse("a collection's name is 1 to 255 bytes") }
        bytes.append(UInt8(collection.utf8.count))
        bytes += collection.utf8
        guard (1...Self.maximumIDLength).contains(recordID.utf8.count) else {
            throw refuse("an id is 1 to \(Self.maximumIDLength) bytes")
        }
        append(UInt16(recordID.utf8.count))
        bytes += recordID.utf8
        append(UInt16(fields.count))
        for field in fields {
            guard field.name.count <= 255 else { throw refuse("a field's name is at most 255 bytes") }
            guard
                bytes.count + 1 + field.name.count + 4 + field.value.count + Self.signatureLength <= Self.maximumLength
            else {
                throw refuse("a version is at most \(Self.maximumLength) bytes")
            }
            bytes.append(UInt8(field.name.count))
            bytes += field.name
            append(UInt32(field.value.count))
            bytes += field.value
        }
        if !attachments.isEmpty {
            guard change != .delete else { throw refuse("a delete holds no attachments") }
            guard attachments.count <= SyncAttachment.maximumPerVersion else {
                throw refuse(
                    "a write holds at most \(SyncAttachment.maximumPerVersion) attachments, not \(attachments.count)"
                )
            }
            bytes.append(UInt8(attachments.count))
            for attachment in attachments {
                bytes += attachment.sha256
                append(UInt64(attachment.length))
            }
            guard bytes.count + Self.signatureLength <= Self.maximumLength else {
                throw refuse("a version is at most \(Self.maximumLength) bytes")
            }
        }
        return bytes
    }

    /// Reads a version's bytes, checking all of docs/SYNC.md 3 but the signature, which needs
    /// the origin's key (``verify(with:)``).
    /// - Throws: `malformedVersion`, naming the rule the bytes break.
    package init(decoding bytes: [UInt8]) throws(SyncError) {
        guard bytes.count <= Self.maximumLength else {
            throw SyncError(.malformedVersion, "a version of \(bytes.count) bytes: at most \(Self.maximumLength)")
        }
        if bytes.first == Self.formatNavlog {
            let parts = try NavlogVersion.read(bytes)
            stamp = parts.stamp
            collection = NavlogVersion.collection
            recordID = parts.recordID
            change = .set([RecordRegisters.wholeRecord: parts.payload])
            attachments = parts.attachments
            self.bytes = bytes
            id = Self.id(of: bytes)
            return
        }
        var reader = ByteReader(bytes, refusing: .malformedVersion, as: "a version")
        let format = try reader.byte("format")
        guard format == Self.format || format == Self.formatWithAttachments else {
            throw SyncError(.malformedVersion, "a version of format \(format): this build reads formats 1, 2 and 3")
        }
        let kind = try reader.byte("kind")
        guard kind <= 1 else { throw SyncError(.malformedVersion, "a version of kind \(kind): 0 sets, 1 deletes") }
        let timestamp = HLCTimestamp(rawValue: try reader.integer(UInt64.self, "timestamp"))
        let origin = try reader.bytes(16, "origin").withUnsafeBytes { raw in
            UUID(uuid: raw.loadUnaligned(as: uuid_t.self))
        }
        let collection = try reader.text(length: Int(try reader.byte("collection length")), in: 1...255, "collection")
        let recordID = try reader.text(
            length: Int(try reader.integer(UInt16.self, "id length")),
            in: 1...Self.maximumIDLength,
            "id"
        )
        let count = Int(try reader.integer(UInt16.self, "field count"))
        guard kind == 1 ? count == 0 : (1...Self.maximumFields).contains(count) else {
            throw SyncError(
                .malformedVersion,
                "record \(recordID) of \(collection): \(count) fields in a version of kind \(kind) (a set has 1 to \(Self.maximumFields), a delete none)"
            )
        }
        var values: [String: [UInt8]] = [:]
        var previous: ArraySlice<UInt8>?
        for _ in 0..<count {
            let length = Int(try reader.byte("field name length"))
            let name = try reader.bytes(length, "field name")
            guard previous.map({ $0.lexicographicallyPrecedes(name) }) ?? true else {
                throw SyncError(
                    .malformedVersion,
                    "record \(recordID) of \(collection): its fields are not in ascending order of their names, each once"
                )
            }
            previous = name
            let text = try reader.text(name, "field name")
            let value = try reader.bytes(Int(try reader.integer(UInt32.self, "field value length")), "field value")
            values[text] = Array(value)
        }
        guard count <= 1 || values[""] == nil else {
            throw SyncError(
                .malformedVersion,
                "record \(recordID) of \(collection): the empty field name (a whole record) comes with others"
            )
        }
        var attachments: [SyncAttachment] = []
        if format == Self.formatWithAttachments {
            let count = Int(try reader.byte("attachment count"))
            guard kind == 0, (1...SyncAttachment.maximumPerVersion).contains(count) else {
                throw SyncError(
                    .malformedVersion,
                    "record \(recordID) of \(collection): \(count) attachments in a version of kind \(kind) (a set of format 2 has 1 to \(SyncAttachment.maximumPerVersion), a delete none)"
                )
            }
            for _ in 0..<count {
                let sha256 = Array(try reader.bytes(32, "attachment's SHA-256"))
                let length = try reader.integer(UInt64.self, "attachment's length")
                guard length <= UInt64(Int64.max) else {
                    throw SyncError(
                        .malformedVersion,
                        "record \(recordID) of \(collection): an attachment's length of \(length) bytes, beyond 2^63 - 1"
                    )
                }
                guard attachments.last.map({ $0.sha256.lexicographicallyPrecedes(sha256) }) ?? true else {
                    throw SyncError(
                        .malformedVersion,
                        "record \(recordID) of \(collection): its attachments are not in ascending order of their SHA-256, each once"
                    )
                }
                attachments.append(try SyncAttachment(sha256: sha256, length: Int64(length)))
            }
        }
        _ = try reader.bytes(Self.signatureLength, "signature")
        guard reader.isAtEnd else {
            throw SyncError(.malformedVersion, "record \(recordID) of \(collection): bytes after the signature")
        }
        self.stamp = VersionStamp(timestamp: timestamp, origin: origin)
        self.collection = collection
        self.recordID = recordID
        self.change = kind == 1 ? .delete : .set(values)
        self.attachments = attachments
        self.bytes = bytes
        id = Self.id(of: bytes)
    }

    private static func id(of bytes: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: bytes.dropLast(signatureLength)))
    }

    /// The version as reconciliation orders it (docs/SYNC.md 4).
    package var item: RangeReconciliation.Item {
        RangeReconciliation.Item(timestamp: stamp.timestamp.rawValue, id: id)
    }

    /// What the origin signed: every byte before the signature.
    package var signedBytes: ArraySlice<UInt8> { bytes.dropLast(Self.signatureLength) }

    /// The write, as the merge takes it.
    package var write: RecordWrite { RecordWrite(stamp: stamp, change: change) }

    /// Checks that `key` is the origin's and signed these bytes.
    /// - Throws: `badSignature`, saying which check failed.
    package func verify(with key: PeerKey) throws(SyncError) {
        guard key.peerID == stamp.origin else {
            throw SyncError(
                .badSignature,
                "version \(stamp) of record \(recordID) of \(collection) names origin \(stamp.origin), and the key offered is \(key.peerID)'s"
            )
        }
        let signature = Array(bytes.suffix(Self.signatureLength))
        // (Format 3: the origin signed navlog-sync 0.9's bytes themselves, docs/SYNC.md 11.)
        let isValid =
            bytes.first == Self.formatNavlog
            ? ((try? Curve25519.Signing.PublicKey(rawRepresentation: key.rawRepresentation))?.isValidSignature(
                signature,
                for: signedBytes.dropFirst()
            ) ?? false)
            : key.isValidSignature(signature, for: Self.context + signedBytes)
        guard isValid else {
            throw SyncError(
                .badSignature,
                "the signature of version \(stamp) of record \(recordID) of \(collection) does not verify: it was altered, or not written by \(stamp.origin)"
            )
        }
    }
}
