import Foundation
import MultipeerSession

/// The session message that carries one of the store's messages (docs/SYNC.md 5 and 6): type
/// name `multipeer.sync.v1`, binary encoding, its payload one CBOR byte string holding the
/// message's bytes (versions compressed when that is shorter:
/// ``SyncMessage/compactBytes(using:)``).
struct SyncEnvelope: MultipeerMessage {
    static var wireName: String { "multipeer.sync.v1" }
    static var wireEncoding: MessageEncoding? { .binary }

    var bytes: [UInt8]

    init(_ message: SyncMessage, compressor: Zlib.Compressor) {
        bytes = message.compactBytes(using: compressor)
    }

    init(from decoder: any Decoder) throws {
        bytes = Array(try decoder.singleValueContainer().decode(Data.self))
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(Data(bytes))
    }
}
