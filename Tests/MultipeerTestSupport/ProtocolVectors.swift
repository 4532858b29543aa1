public import Foundation

/// The test vectors of the specs in docs/, read from the files themselves so that the spec and
/// the tests cannot drift apart. A vector is a `<!-- vector: NAME ... -->` line followed by a
/// fenced block (`hex` in PROTOCOL.md, `json` in NAVLOG.md).
public enum ProtocolVectors {
    /// The repository's root directory, found from this source file's path.
    public static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Every hex vector in docs/PROTOCOL.md, by name (the first word after `vector:`).
    public static func load() throws -> [String: [UInt8]] {
        try blocks(in: "docs/PROTOCOL.md", fence: "hex").mapValues {
            try bytes(fromHex: $0.replacingOccurrences(of: "\n", with: " "))
        }
    }

    /// The text of every vector fenced as `fence` in the file at `path` (from the repository
    /// root), by name.
    public static func blocks(in path: String, fence: String) throws -> [String: String] {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent(path), encoding: .utf8)
        var vectors: [String: String] = [:]
        var pendingName: String?
        var block: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("<!-- vector: ") {
                pendingName = line.dropFirst("<!-- vector: ".count).split(separator: " ").first.map(String.init)
            } else if line == "```\(fence)", pendingName != nil {
                block = ""
            } else if line == "```", let name = pendingName, let collected = block {
                vectors[name] = collected
                pendingName = nil
                block = nil
            } else if block != nil {
                block! += line + "\n"
            }
        }
        return vectors
    }

    static func bytes(fromHex text: String) throws -> [UInt8] {
        try text.split(separator: " ").map {
            guard let byte = UInt8($0, radix: 16) else { throw CocoaError(.fileReadCorruptFile) }
            return byte
        }
    }
}
