import NIOConcurrencyHelpers

/// A file that belongs to a record: named by the SHA-256 of its bytes and its length, which the
/// record's version carries and its writer signs (docs/SYNC.md 9). Put one in a record's
/// property (alone, optional, in an array, nested: anywhere in the record); the file's bytes
/// travel apart, as the session's resumable resources, from any station that holds them.
///
/// ```swift
/// struct Chart: SyncRecord {
///     var id: String
///     var title: String
///     var file: SyncAttachment?
/// }
///
/// func attachChart(at url: URL, to store: SyncStore) async throws {
///     let file = try await store.attach(fileAt: url)
///     try await store.collection(Chart.self).put(Chart(id: "tesat", title: "TESAT chart", file: file))
/// }
/// ```
///
/// Get one with ``SyncStore/attach(fileAt:)``; read its file with ``SyncStore/file(of:)``.
public struct SyncAttachment: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The SHA-256 of the file's bytes.
    public let sha256: [UInt8]
    /// The file's length in bytes.
    public let length: Int64

    /// The most attachments one version carries (docs/SYNC.md 9).
    public static let maximumPerVersion = 64

    /// The attachment of a file with this SHA-256 (32 bytes) and length (not negative).
    /// - Throws: `invalidWrite` if either is out of range.
    public init(sha256: [UInt8], length: Int64) throws(SyncError) {
        guard sha256.count == 32, length >= 0 else {
            throw SyncError(.invalidWrite, "an attachment is a SHA-256 of 32 bytes and a length of at least 0")
        }
        self.sha256 = sha256
        self.length = length
    }

    /// The SHA-256 in lowercase hexadecimal: the file's name among a store's files.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in sha256 {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xf)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Its SHA-256 in hexadecimal (all 64 digits) and its length in bytes.
    public var description: String { "\(hex) (\(length) bytes)" }

    private enum CodingKeys: String, CodingKey {
        case sha256, length
    }

    /// Decodes an attachment as ``encode(to:)`` wrote it.
    /// - Throws: `DecodingError.dataCorrupted` if the SHA-256 is not 64 lowercase hexadecimal
    ///   digits or the length is negative.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let hex = try container.decode(String.self, forKey: .sha256)
        guard let bytes = Self.bytes(hex: hex) else {
            throw DecodingError.dataCorruptedError(
                forKey: .sha256,
                in: container,
                debugDescription: "an attachment's SHA-256 is 64 lowercase hexadecimal digits"
            )
        }
        do {
            try self.init(sha256: bytes, length: try container.decode(Int64.self, forKey: .length))
        } catch let error as SyncError {
            throw DecodingError.dataCorruptedError(forKey: .length, in: container, debugDescription: error.message)
        }
    }

    /// Encodes the attachment (its SHA-256 in hexadecimal and its length), and tells the store
    /// encoding a record that the record carries it.
    public func encode(to encoder: any Encoder) throws {
        AttachmentCollector.current?.found.withLockedValue { _ = $0.insert(self) }
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(hex, forKey: .sha256)
        try container.encode(length, forKey: .length)
    }

    /// The bytes of 64 lowercase hexadecimal digits, or nil.
    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count == 64 else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: 64, by: 2) {
            func value(_ digit: UInt8) -> UInt8? {
                switch digit {
                case 0x30...0x39: digit - 0x30
                case 0x61...0x66: digit - 0x57
                default: nil
                }
            }
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }
}

/// When a station fetches the files of a collection's records (``SyncRecord/attachments``).
public enum SyncAttachmentPolicy: Hashable, Sendable {
    /// As soon as it takes a record that has one it lacks, from the peer that sent the record
    /// (or, failing that, at the next exchange with any peer that holds it).
    case atOnce
    /// Only when the application asks for the file (``SyncStore/file(of:)``).
    case onDemand
}

/// The attachments found while encoding a record (or one field of it): set as a task-local
/// value around the encoding, which ``SyncAttachment/encode(to:)`` reads.
final class AttachmentCollector: Sendable {
    @TaskLocal static var current: AttachmentCollector?

    let found = NIOLockedValueBox(Set<SyncAttachment>())

    /// What `encode` encodes, and the attachments found in it. Within a collector bound
    /// already (a batch binds one for all its records), that one serves: what it found before
    /// is set aside meanwhile, and gets what this found too.
    static func collecting<T>(_ encode: () throws -> T) rethrows -> (T, Set<SyncAttachment>) {
        guard let collector = current else {
            let collector = AttachmentCollector()
            let value = try $current.withValue(collector) { try encode() }
            return (value, collector.found.withLockedValue { $0 })
        }
        let outer = collector.found.withLockedValue { found in
            defer { found = [] }
            return found
        }
        let value = try encode()
        let inner = collector.found.withLockedValue { found in
            defer { found = outer.union(found) }
            return found
        }
        return (value, inner)
    }
}
