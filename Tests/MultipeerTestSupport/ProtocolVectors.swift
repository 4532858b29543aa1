public import Foundation

/// The hex test vectors of docs/PROTOCOL.md, read from the file itself so that the spec and
/// the tests cannot drift apart. A vector is a `<!-- vector: NAME ... -->` line followed by a
/// fenced `hex` block.
public enum ProtocolVectors {
    /// The repository's root directory, found from this source file's path.
    public static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Every vector in the spec, by name (the first word after `vector:`).
    public static func load() throws -> [String: [UInt8]] {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/PROTOCOL.md"), encoding: .utf8)
        var vectors: [String: [UInt8]] = [:]
        var pendingName: String?
        var hex: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("<!-- vector: ") {
                pendingName = line.dropFirst("<!-- vector: ".count).split(separator: " ").first.map(String.init)
            } else if line == "```hex", pendingName != nil {
                hex = ""
            } else if line == "```", let name = pendingName, let collected = hex {
                vectors[name] = try bytes(fromHex: collected)
                pendingName = nil
                hex = nil
            } else if hex != nil {
                hex! += line + " "
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
