// swift-tools-version:6.1
// A package that uses MultipeerSession as an application would: by path, through its products,
// with nothing but `import MultipeerSession` (and `import MultipeerSessionTesting` in tests, and
// `import MultipeerSync` for the replicated store).
// `make test` builds it (scripts/consumer.sh): its Samples target compiles every Swift sample of
// the README and the DocC documentation, its tests exercise the public API between sessions in
// one process, real and simulated, and its build must print no warning.
import PackageDescription

let package = Package(
    name: "Consumer",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "MultipeerSession", path: "../.."),
        // (Its MetricsTestKit, a backend whose values a test reads: MetricsTests.)
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        // (A log handler of the application's own, which LoggingTests reads.)
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // (The application's instrument, which TracingTests bootstraps.)
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        .target(
            name: "Samples",
            dependencies: [
                .product(name: "MultipeerSession", package: "MultipeerSession"),
                .product(name: "MultipeerSessionTesting", package: "MultipeerSession"),
                .product(name: "MultipeerSync", package: "MultipeerSession"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
            ],
            // Samples are fragments: a value made to show a call and never used is their nature.
            swiftSettings: [.swiftLanguageMode(.v6), .unsafeFlags(["-suppress-warnings"])]
        ),
        // The second app on the replicated store: a crew checklist (its model, and its command line).
        .target(
            name: "CrewChecklist",
            dependencies: [
                .product(name: "MultipeerSession", package: "MultipeerSession"),
                .product(name: "MultipeerSync", package: "MultipeerSession"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .executableTarget(
            name: "crew-checklist",
            dependencies: [
                "CrewChecklist", .product(name: "MultipeerSession", package: "MultipeerSession"),
                .product(name: "MultipeerSync", package: "MultipeerSession"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // Two programs' message types, each in a module of its own.
        .target(name: "ProgramA", dependencies: [.product(name: "MultipeerSession", package: "MultipeerSession")]),
        .target(name: "ProgramB", dependencies: [.product(name: "MultipeerSession", package: "MultipeerSession")]),
        .testTarget(
            name: "ConsumerTests",
            dependencies: [
                "ProgramA", "ProgramB", "CrewChecklist",
                .product(name: "MultipeerSession", package: "MultipeerSession"),
                .product(name: "MultipeerSessionTesting", package: "MultipeerSession"),
                .product(name: "MultipeerSync", package: "MultipeerSession"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
