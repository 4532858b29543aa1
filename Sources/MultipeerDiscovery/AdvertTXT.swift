import MultipeerCore

package import struct Foundation.UUID

/// The TXT record of an advertisement (docs/PROTOCOL.md, section 5): `v` (protocol version),
/// `id` (peer UUID), `inc` (incarnation), `name` (display name), then the application's
/// metadata. Each entry is `key=value` of at most 255 bytes.
package struct AdvertTXT: Hashable, Sendable {
    /// Keys the library uses; application metadata may not.
    package static let reservedKeys: Set<String> = ["v", "id", "inc", "name"]

    package var protocolVersion: UInt16
    package var peerID: UUID
    package var incarnation: UInt64
    package var displayName: String
    package var metadata: [String: String]

    /// Creates a record, checking every entry fits (255 bytes) and no metadata key is reserved.
    package init(
        protocolVersion: UInt16 = Hello.currentProtocolVersion,
        peerID: UUID,
        incarnation: UInt64,
        displayName: String,
        metadata: [String: String] = [:]
    ) throws {
        try Hello.validate(displayName: displayName, metadata: metadata)
        if let reserved = metadata.keys.first(where: { Self.reservedKeys.contains($0.lowercased()) }) {
            throw MultipeerError(
                .invalidArgument,
                "metadata key \"\(reserved)\" is reserved for the library (v, id, inc, name)"
            )
        }
        self.protocolVersion = protocolVersion
        self.peerID = peerID
        self.incarnation = incarnation
        self.displayName = displayName
        self.metadata = metadata
    }

    /// The entries, library keys first, then metadata sorted by key.
    package var entries: [String] {
        ["v=\(protocolVersion)", "id=\(peerID.uuidString.lowercased())", "inc=\(incarnation)", "name=\(displayName)"]
            + metadata.keys.sorted().map { "\($0)=\(metadata[$0]!)" }
    }

    /// Why a TXT record was not taken as one of ours.
    package enum Rejection: Error, Hashable, Sendable, CustomStringConvertible {
        case otherProtocolVersion(String)
        case missingPeerID
        case invalidPeerID(String)
        case invalidIncarnation(String)

        package var description: String {
            switch self {
            case .otherProtocolVersion(let version):
                "it is for protocol version \(version), not \(Hello.currentProtocolVersion)"
            case .missingPeerID: "it has no id entry"
            case .invalidPeerID(let text): "its id \"\(text)\" is not a UUID"
            case .invalidIncarnation(let text): "its inc \"\(text)\" is not a number"
            }
        }
    }

    /// Parses raw TXT entries. Keys compare case-insensitively and the first of a repeated key
    /// wins (RFC 6763, 6.4); entries that are not UTF-8 or have no `=` are skipped. A missing
    /// `inc` reads as 0 and a missing `name` as empty, so any DNS-SD tool can advertise a peer.
    package init(entries: [[UInt8]]) throws(Rejection) {
        var values: [String: String] = [:]
        var metadata: [String: String] = [:]
        for entry in entries {
            guard let equals = entry.firstIndex(of: UInt8(ascii: "=")),
                let key = String(validating: entry[..<equals], as: UTF8.self), !key.isEmpty,
                let value = String(validating: entry[(equals + 1)...], as: UTF8.self)
            else { continue }
            let lowered = key.lowercased()
            if Self.reservedKeys.contains(lowered) {
                if values[lowered] == nil { values[lowered] = value }
            } else if metadata[key] == nil {
                metadata[key] = value
            }
        }
        let version = values["v"] ?? "(none)"
        guard version == String(Hello.currentProtocolVersion) else { throw .otherProtocolVersion(version) }
        guard let idText = values["id"] else { throw .missingPeerID }
        guard let peerID = UUID(uuidString: idText) else { throw .invalidPeerID(idText) }
        let incarnationText = values["inc"] ?? "0"
        guard let incarnation = UInt64(incarnationText) else { throw .invalidIncarnation(incarnationText) }
        self.protocolVersion = Hello.currentProtocolVersion
        self.peerID = peerID
        self.incarnation = incarnation
        self.displayName = values["name"] ?? ""
        self.metadata = metadata
    }
}
