import Foundation
import Testing

@testable import MultipeerSession

/// The version the library reports is the one the changelog and the README name.
@Suite struct VersionTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// (What has landed since, under `## Unreleased` above it, is not a version yet.)
    @Test func theChangelogsNewestEntryIsThisVersionAndItsProtocol() throws {
        let changelog = try String(contentsOf: Self.root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        let newest = try #require(
            changelog.split(separator: "\n").first { $0.hasPrefix("## ") && $0 != "## Unreleased" }
        )
        #expect(newest.hasPrefix("## \(MultipeerSession.version) ("), "\(newest)")
        #expect(newest.hasSuffix(", protocol \(MultipeerSession.protocolVersion)"), "\(newest)")
    }

    @Test func theReadmeNamesThisVersionAndItsProtocol() throws {
        let readme = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
        #expect(readme.contains("version \(MultipeerSession.version)"))
        #expect(readme.contains("protocol version \(MultipeerSession.protocolVersion)"))
    }
}
