package import MultipeerSession

/// What stations say to each other (docs/SYNC.md 5), in one binary form: a kind byte, then its
/// body. Every length is checked before anything is kept, against the bounds below.
package enum SyncMessage: Hashable, Sendable {
    /// A round of an exchange of section 4: `exchange` names it (the initiator's choice), and
    /// `fromInitiator` says which way it goes, since both sides may run one at once.
    case reconcile(exchange: UInt64, fromInitiator: Bool, RangeReconciliation.Message)
    /// Versions (each its bytes as signed, read and checked one by one by the receiver, so one
    /// it refuses never stops the rest), with the keys of their origins that it may lack.
    case versions(keys: [PeerKey], [[UInt8]])
    /// The ids of versions the sender lacks (section 4 found them).
    case want([[UInt8]])
    /// The SHA-256 of files the sender lacks, of attachments of records it keeps (section 9):
    /// the receiver offers it those it holds.
    case lack([[UInt8]])
    /// The schema version of each collection the sender reads (section 10), in ascending order
    /// of the collections' names, each once.
    case schemas([Schema])
    /// Which collections the sender keeps, the number of the sender's run, and the receiver's
    /// run as the sender last heard it (0: none), section 6: sent at every join, and to begin
    /// or answer a meeting.
    case keeps(SyncScope, run: UInt64, heard: UInt64)

    /// A collection's name and the schema version its sender reads it as.
    package struct Schema: Hashable, Sendable {
        package var collection: String
        package var version: UInt32

        package init(collection: String, version: UInt32) {
            self.collection = collection
            self.version = version
        }
    }

    /// The most bytes of a message.
    package static let maximumLength = 4 << 20
    /// The most versions, keys, ids or ranges one message carries.
    package static let maximumCount = 16_384
    /// The most files one `lack` names.
    package static let maximumLack = 1_024
    /// The most collections one `schemas` or `keeps` names.
    package static let maximumSchemas = 1_024
    /// The first byte of a reconciliation message: Negentropy's protocol v1.
    static let negentropyVersion: UInt8 = 0x61

    // MARK: Encoding

    /// The message's one plain form (a versions message as kind 2).
    package var bytes: [UInt8] {
        var writer = Writer()
        switch self {
        case .reconcile(let exchange, let fromInitiator, let ranges):
            writer.bytes.append(1)
            writer.integer(exchange)
            writer.bytes.append(fromInitiator ? 0 : 1)
            writer.bytes.append(Self.negentropyVersion)
            var previous: UInt64 = 0
            for range in ranges {  // (ascending, as every message made or read is)
                let bound = range.upperBound
                if bound == .infinity {
                    writer.varint(0)
                } else {
                    writer.varint(1 + bound.timestamp - previous)
                    previous = bound.timestamp
                }
                writer.varint(UInt64(bound.idPrefix.count))
                writer.bytes += bound.idPrefix
                switch range.payload {
                case .skip:
                    writer.varint(0)
                case .fingerprint(let fingerprint):
                    writer.varint(1)
                    writer.bytes += fingerprint
                case .ids(let ids):
                    writer.varint(2)
                    writer.varint(UInt64(ids.count))
                    for id in ids { writer.bytes += id }
                }
            }
        case .versions(let keys, let versions):
            writer.bytes.append(2)
            writer.integer(UInt16(keys.count))
            for key in keys { writer.bytes += key.rawRepresentation }
            writer.integer(UInt16(versions.count))
            for version in versions {
                writer.integer(UInt32(version.count))
                writer.bytes += version
            }
        case .want(let ids):
            writer.bytes.append(3)
            writer.integer(UInt16(ids.count))
            for id in ids { writer.bytes += id }
        case .lack(let files):
            writer.bytes.append(4)
            writer.integer(UInt16(files.count))
            for file in files { writer.bytes += file }
        case .schemas(let schemas):
            writer.bytes.append(5)
            writer.integer(UInt16(schemas.count))
            for schema in schemas {
                writer.bytes.append(UInt8(schema.collection.utf8.count))
                writer.bytes += schema.collection.utf8
                writer.integer(schema.version)
            }
        case .keeps(let scope, let run, let heard):
            writer.bytes.append(6)
            writer.integer(run)
            writer.integer(heard)
            guard let collections = scope.collections else {
                writer.bytes.append(0)
                break
            }
            writer.bytes.append(1)
            let names = collections.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
            writer.integer(UInt16(names.count))
            for name in names {
                writer.bytes.append(UInt8(name.count))
                writer.bytes += name
            }
        }
        return writer.bytes
    }

    /// The fewest bytes of a versions message this build compresses: below, a message holds a
    /// few versions, whose signatures do not compress, and zlib's setting up costs more than
    /// the bytes it would save.
    static let compressedAtLeast = 2_048

    /// The bytes a station sends: a versions message of ``compressedAtLeast`` bytes or more
    /// compressed (kind 7) by `compressor` when that is shorter, any other message as ``bytes``.
    package func compactBytes(using compressor: Zlib.Compressor = Zlib.Compressor()) -> [UInt8] {
        let plain = bytes
        guard case .versions = self, plain.count >= Self.compressedAtLeast else { return plain }
        var writer = Writer()
        writer.bytes.append(7)
        writer.integer(UInt32(plain.count - 1))
        writer.bytes += compressor.compressed(Array(plain.dropFirst()))
        return writer.bytes.count < plain.count ? writer.bytes : plain
    }

    // MARK: Decoding

    /// Reads a message.
    /// - Throws: `malformedMessage`, naming the rule the bytes break.
    package init(decoding bytes: [UInt8]) throws(SyncError) {
        guard bytes.count <= Self.maximumLength else {
            throw Self.malformed("a message of \(bytes.count) bytes: at most \(Self.maximumLength)")
        }
        var reader = ByteReader(bytes, refusing: .malformedMessage, as: "a message")
        switch try reader.byte("kind") {
        case 1:
            let exchange = try reader.integer(UInt64.self, "exchange")
            let direction = try reader.byte("direction")
            guard direction <= 1 else { throw Self.malformed("a reconciliation's direction \(direction): 0 or 1") }
            let version = try reader.byte("protocol version")
            guard version == Self.negentropyVersion else {
                throw Self.malformed("reconciliation of protocol version \(version): this build speaks 0x61")
            }
            var ranges: RangeReconciliation.Message = []
            var previous: UInt64 = 0
            while !reader.isAtEnd {
                guard ranges.count < Self.maximumCount else {
                    throw Self.malformed("more than \(Self.maximumCount) ranges")
                }
                guard ranges.last?.upperBound != .infinity else { throw Self.malformed("a range after infinity") }
                let encoded = try reader.varint("bound's timestamp")
                let timestamp: UInt64
                if encoded == 0 {
                    timestamp = .max
                } else {
                    let (sum, overflow) = previous.addingReportingOverflow(encoded - 1)
                    guard !overflow, sum < .max else {
                        throw Self.malformed("a bound's timestamp beyond the clock's range")
                    }
                    timestamp = sum
                    previous = sum
                }
                let length = try reader.varint("bound's prefix length")
                guard length <= UInt64(RangeReconciliation.idLength) else {
                    throw Self.malformed("a bound's prefix of \(length) bytes: at most 32")
                }
                let bound = RangeReconciliation.Bound(
                    timestamp: timestamp,
                    idPrefix: Array(try reader.bytes(Int(length), "bound's prefix"))
                )
                guard timestamp != .max || bound.idPrefix.isEmpty else {
                    throw Self.malformed("an infinite bound with an id prefix")
                }
                let payload: RangeReconciliation.Range.Payload
                switch try reader.varint("range's mode") {
                case 0:
                    payload = .skip
                case 1:
                    payload = .fingerprint(Array(try reader.bytes(16, "fingerprint")))
                case 2:
                    let count = try reader.varint("id count")
                    guard count <= UInt64(Self.maximumCount) else {
                        throw Self.malformed("an id list of \(count) ids: at most \(Self.maximumCount)")
                    }
                    payload = .ids(
                        try (0..<Int(count)).map { _ throws(SyncError) in Array(try reader.bytes(32, "id")) }
                    )
                case let mode:
                    throw Self.malformed("a range of mode \(mode): 0 skips, 1 fingerprints, 2 lists ids")
                }
                ranges.append(RangeReconciliation.Range(upperBound: bound, payload: payload))
            }
            self = .reconcile(exchange: exchange, fromInitiator: direction == 0, ranges)
        case 2:
            self = try Self.versions(&reader)
        case 7:
            let length = Int(try reader.integer(UInt32.self, "inflated length"))
            guard (4...Self.maximumLength - 1).contains(length) else {
                throw Self.malformed(
                    "compressed versions of \(length) bytes inflated: 4 to \(Self.maximumLength - 1), a versions message's body within the bound"
                )
            }
            var inflated = ByteReader(
                try Zlib.decompressed(reader.rest(), length: length),
                refusing: .malformedMessage,
                as: "compressed versions"
            )
            self = try Self.versions(&inflated)
        case 3:
            let count = Int(try reader.integer(UInt16.self, "id count"))
            guard count <= Self.maximumCount else {
                throw Self.malformed("a want of \(count) ids: at most \(Self.maximumCount)")
            }
            let ids = try (0..<count).map { _ throws(SyncError) in Array(try reader.bytes(32, "id")) }
            guard reader.isAtEnd else { throw Self.malformed("bytes after the last id") }
            self = .want(ids)
        case 4:
            let count = Int(try reader.integer(UInt16.self, "file count"))
            guard (1...Self.maximumLack).contains(count) else {
                throw Self.malformed("a lack of \(count) files: 1 to \(Self.maximumLack)")
            }
            let files = try (0..<count).map { _ throws(SyncError) in Array(try reader.bytes(32, "SHA-256")) }
            guard reader.isAtEnd else { throw Self.malformed("bytes after the last SHA-256") }
            self = .lack(files)
        case 5:
            let count = Int(try reader.integer(UInt16.self, "collection count"))
            guard count <= Self.maximumSchemas else {
                throw Self.malformed("schemas of \(count) collections: at most \(Self.maximumSchemas)")
            }
            var schemas: [Schema] = []
            for _ in 0..<count {
                let name = try reader.bytes(Int(try reader.byte("collection length")), "collection")
                guard !name.isEmpty,
                    schemas.last.map({ Array($0.collection.utf8).lexicographicallyPrecedes(name) }) ?? true
                else {
                    throw Self.malformed("schemas whose collections are empty or not in ascending order, each once")
                }
                let collection = try reader.text(name, "collection")
                schemas.append(
                    Schema(collection: collection, version: try reader.integer(UInt32.self, "schema version"))
                )
            }
            guard reader.isAtEnd else { throw Self.malformed("bytes after the last schema") }
            self = .schemas(schemas)
        case 6:
            let run = try reader.integer(UInt64.self, "run")
            guard run != 0 else { throw Self.malformed("a run of 0: runs are numbered from 1") }
            let heard = try reader.integer(UInt64.self, "run heard")
            switch try reader.byte("scope") {
            case 0:
                guard reader.isAtEnd else { throw Self.malformed("bytes after a scope of every collection") }
                self = .keeps(.everything, run: run, heard: heard)
            case 1:
                let count = Int(try reader.integer(UInt16.self, "collection count"))
                guard count <= Self.maximumSchemas else {
                    throw Self.malformed("a scope of \(count) collections: at most \(Self.maximumSchemas)")
                }
                var names: [ArraySlice<UInt8>] = []
                var collections: Set<String> = []
                for _ in 0..<count {
                    let name = try reader.bytes(Int(try reader.byte("collection length")), "collection")
                    guard !name.isEmpty, names.last.map({ $0.lexicographicallyPrecedes(name) }) ?? true else {
                        throw Self.malformed("a scope whose collections are empty or not in ascending order, each once")
                    }
                    names.append(name)
                    collections.insert(try reader.text(name, "collection"))
                }
                guard reader.isAtEnd else { throw Self.malformed("bytes after the scope's last collection") }
                self = .keeps(.only(collections), run: run, heard: heard)
            case let scope:
                throw Self.malformed("a scope of kind \(scope): 0 keeps every collection, 1 those named")
            }
        case let kind:
            throw Self.malformed(
                "a message of kind \(kind): 1 reconciles, 2 carries versions, 3 wants, 4 lacks files, 5 announces schemas, 6 says which collections the sender keeps, 7 carries versions compressed"
            )
        }
    }

    /// The versions of a kind 2 body, or of a kind 7 body inflated: to its end.
    private static func versions(_ reader: inout ByteReader) throws(SyncError) -> SyncMessage {
        let keyCount = Int(try reader.integer(UInt16.self, "key count"))
        guard keyCount <= Self.maximumCount else {
            throw Self.malformed("\(keyCount) keys: at most \(Self.maximumCount)")
        }
        let keys = try (0..<keyCount).map { _ throws(SyncError) in
            let raw = try reader.bytes(PeerKey.length, "key")
            do {
                return try PeerKey(rawRepresentation: raw)
            } catch {
                throw Self.malformed("a key that is none: \(error)")
            }
        }
        let versionCount = Int(try reader.integer(UInt16.self, "version count"))
        guard versionCount <= Self.maximumCount else {
            throw Self.malformed("\(versionCount) versions: at most \(Self.maximumCount)")
        }
        let versions = try (0..<versionCount).map { _ throws(SyncError) in
            let length = Int(try reader.integer(UInt32.self, "version length"))
            return Array(try reader.bytes(length, "version"))
        }
        guard reader.isAtEnd else { throw Self.malformed("bytes after the last version") }
        return .versions(keys: keys, versions)
    }

    private static func malformed(_ what: String) -> SyncError {
        SyncError(.malformedMessage, what)
    }
}

/// Writes big-endian integers and varints.
private struct Writer {
    var bytes: [UInt8] = []

    mutating func integer<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.bigEndian) { bytes += $0 }
    }

    mutating func varint(_ value: UInt64) {
        bytes += RangeReconciliation.varint(value)
    }
}
