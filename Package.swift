// swift-tools-version:6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "MultipeerSession",
    // Linux only: the links use GnuTLS and discovery Avahi's client library, through system
    // library targets (apt packages libgnutls28-dev, libavahi-client-dev), and the code Glibc.
    // The platform below sets the newest Swift APIs' availability for the compiler; it is no
    // promise that the package builds on macOS, which it does not.
    platforms: [.macOS(.v15)],
    products: [
        // One product, one import: the layers below re-export what a user meets (Exports.swift).
        .library(name: "MultipeerSession", targets: ["MultipeerSession"]),
        // Sessions in a simulated network, clock and DNS-SD, for tests (one import beside MultipeerSession).
        .library(name: "MultipeerSessionTesting", targets: ["MultipeerSessionTesting"]),
        // The replicated store above the session (docs/SYNC.md), which uses only its public API.
        .library(name: "MultipeerSync", targets: ["MultipeerSync"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        // A message carries the trace context it was sent in (docs/PROTOCOL.md 2c).
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // Ed25519 device identities and SHA-256 (docs/PROTOCOL.md, 3).
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // For the navlog-sync example only.
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
    ],
    targets: [
        // C libraries from the system.
        .systemLibrary(
            name: "CGnuTLS",
            pkgConfig: "gnutls",
            providers: [.apt(["libgnutls28-dev"])]
        ),
        // Avahi's headers are in /usr/include and its module map links the libraries itself:
        // its pkg-config file adds -D_REENTRANT, which SwiftPM warns about in every build of
        // every package that depends on this one.
        .systemLibrary(
            name: "CAvahi",
            providers: [.apt(["libavahi-client-dev"])]
        ),
        // zlib, for the store's compressed versions (docs/SYNC.md 5, kind 7).
        .systemLibrary(
            name: "CZlib",
            providers: [.apt(["zlib1g-dev"])]
        ),

        // Sans-IO protocol cores: frames, HELLO, errors. No sockets, no C, no tasks.
        .target(
            name: "MultipeerCore",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // GnuTLS as an in-memory engine and the NIO handler around it.
        .target(
            name: "MultipeerTLS",
            dependencies: [
                "CGnuTLS",
                "MultipeerCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // DNS-SD through avahi-daemon: advertiser, browser, static peer lists.
        .target(
            name: "MultipeerDiscovery",
            dependencies: [
                "CAvahi",
                "MultipeerCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The shell: listener, connections, and (later) the session actor.
        .target(
            name: "MultipeerSession",
            dependencies: [
                "MultipeerCore",
                "MultipeerTLS",
                "MultipeerDiscovery",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // The simulated world: the session's transport, DNS-SD and clock replaced, nothing above them.
        .target(
            name: "MultipeerSessionTesting",
            dependencies: [
                "MultipeerSession",
                "MultipeerCore",
                "MultipeerDiscovery",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),

        // make simulate: simulated worlds drawn from seeds, every promise checked (Simulator/README.md).
        .executableTarget(
            name: "multipeer-simulator",
            dependencies: [
                "MultipeerSession", "MultipeerSessionTesting", "MultipeerSync",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Simulator",
            exclude: ["README.md"],
            swiftSettings: swiftSettings
        ),

        // The replicated store: above MultipeerSession's public API, nothing of its insides.
        .target(
            name: "MultipeerSync",
            dependencies: [
                "CZlib",
                "MultipeerSession",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),

        // navlog-sync: a crew navigation log kept in sync over a session (the example).
        .target(
            name: "NavlogSync",
            dependencies: [
                "MultipeerSession",
                "MultipeerSync",
                "MultipeerCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Examples/NavlogSync",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "navlog-sync",
            dependencies: [
                "NavlogSync",
                "MultipeerSession",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Examples/navlog-sync",
            swiftSettings: swiftSettings
        ),

        // libFuzzer targets (Fuzz/README.md). In a normal build they only say how to build them;
        // `make fuzz` (scripts/fuzz.sh) builds them with coverage, AddressSanitizer and libFuzzer.
        .target(name: "CFuzzer", path: "Fuzz/CFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CFuzzer"], path: "Fuzz/FuzzSupport", swiftSettings: swiftSettings),
        .executableTarget(
            name: "FrameFuzzer",
            dependencies: ["FuzzSupport", "MultipeerCore", .product(name: "NIOCore", package: "swift-nio")],
            path: "Fuzz/FrameFuzzer",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "HelloFuzzer",
            dependencies: ["FuzzSupport", "MultipeerCore", .product(name: "NIOCore", package: "swift-nio")],
            path: "Fuzz/HelloFuzzer",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "SyncMessageFuzzer",
            dependencies: ["FuzzSupport", "MultipeerSession", "MultipeerSync"],
            path: "Fuzz/SyncMessageFuzzer",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "SyncVersionFuzzer",
            dependencies: ["FuzzSupport", "MultipeerSession", "MultipeerSync"],
            path: "Fuzz/SyncVersionFuzzer",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "TXTFuzzer",
            dependencies: ["FuzzSupport", "MultipeerDiscovery"],
            path: "Fuzz/TXTFuzzer",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "NavlogFuzzer",
            dependencies: ["FuzzSupport", "MultipeerSession", "NavlogSync"],
            path: "Fuzz/NavlogFuzzer",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "PayloadFuzzer",
            dependencies: ["FuzzSupport", "MultipeerCore", .product(name: "NIOCore", package: "swift-nio")],
            path: "Fuzz/PayloadFuzzer",
            swiftSettings: swiftSettings
        ),

        // Benchmarks: our link against a C GnuTLS program and plain TCP, and the rest.
        .target(
            name: "BenchmarkSupport",
            path: "Benchmarks/BenchmarkSupport",
            swiftSettings: swiftSettings
        ),
        .target(
            name: "CGnuTLSBaseline",
            dependencies: ["CGnuTLS"],
            path: "Benchmarks/CGnuTLSBaseline"
        ),
        // The C baselines, as Swift calls them, and our bare link (LinkBenchmark, SessionBenchmark).
        .target(
            name: "BaselineSupport",
            dependencies: [
                "BenchmarkSupport", "CGnuTLSBaseline", "MultipeerCore", "MultipeerSession", "MultipeerTLS",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/BaselineSupport",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "LinkBenchmark",
            dependencies: [
                "BaselineSupport",
                "BenchmarkSupport",
                "MultipeerTestSupport",
                "MultipeerCore",
                "MultipeerTLS",
                "MultipeerSession",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Benchmarks/LinkBenchmark",
            swiftSettings: swiftSettings
        ),

        // Helpers for the tests; not a product.
        .target(
            name: "MultipeerTestSupport",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Tests/MultipeerTestSupport",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "MeshBenchmark",
            dependencies: [
                "BenchmarkSupport",
                "MultipeerSession", "MultipeerCore", "MultipeerTLS",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/MeshBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "DetectionBenchmark",
            dependencies: [
                "BenchmarkSupport",
                "MultipeerSession", "MultipeerTLS", "MultipeerTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/DetectionBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "SessionBenchmark",
            dependencies: [
                "BaselineSupport", "BenchmarkSupport", "MultipeerCore", "MultipeerSession",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/SessionBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "DeliveryBenchmark",
            dependencies: [
                "BenchmarkSupport", "MultipeerSession", "MultipeerTLS", "MultipeerTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/DeliveryBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "SyncBenchmark",
            dependencies: ["BenchmarkSupport", "MultipeerSync", .product(name: "Crypto", package: "swift-crypto")],
            path: "Benchmarks/SyncBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "StoreBenchmark",
            dependencies: ["BenchmarkSupport", "MultipeerSession", "MultipeerSessionTesting", "MultipeerSync"],
            path: "Benchmarks/StoreBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "NavlogBenchmark",
            dependencies: ["BenchmarkSupport", "MultipeerSession", "MultipeerSync", "NavlogSync"],
            path: "Benchmarks/NavlogBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "SimulationBenchmark",
            dependencies: ["MultipeerSession", "MultipeerSessionTesting"],
            path: "Benchmarks/SimulationBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "BenchReport",
            dependencies: ["BenchmarkSupport", "MultipeerTestSupport"],
            path: "Benchmarks/BenchReport",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "DiscoveryBenchmark",
            dependencies: [
                "BenchmarkSupport", "MultipeerDiscovery", "MultipeerTestSupport",
            ],
            path: "Benchmarks/DiscoveryBenchmark",
            swiftSettings: swiftSettings
        ),

        // A session in a child process, for tests that freeze and kill a peer.
        .executableTarget(
            name: "multipeer-test-peer",
            dependencies: ["MultipeerSession", "MultipeerTLS", "MultipeerCore", "MultipeerTestSupport"],
            path: "Tests/PeerProcess",
            swiftSettings: swiftSettings
        ),
        // One peer of a mixed pair: built against this tree here, and against a release by
        // scripts/mixed-release.sh (make mixed-release), so the same program runs on both.
        .executableTarget(
            name: "mixed-release-peer",
            dependencies: ["MultipeerSession"],
            path: "Tests/MixedReleasePeer",
            swiftSettings: swiftSettings
        ),
        // The multi-host fault suite: namespace hosts running navlog-sync, faults, a report.
        .executableTarget(
            name: "navlog-hosts",
            dependencies: [
                "MultipeerTestSupport", "MultipeerCore", "MultipeerSession", "MultipeerSessionTesting",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Tests/HostSuite",
            exclude: ["README.md"],
            swiftSettings: swiftSettings
        ),
        // Loss and delay on a link, for kernels without netem (C, AF_PACKET).
        .executableTarget(
            name: "net-impair",
            path: "Tests/NetImpair"
        ),
        .testTarget(
            name: "MultipeerCoreTests",
            dependencies: [
                "MultipeerCore",
                .product(name: "Crypto", package: "swift-crypto"),
                "MultipeerTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "NavlogSyncTests",
            dependencies: [
                "NavlogSync", "MultipeerSync", "MultipeerCore", "MultipeerSession", "MultipeerSessionTesting",
                "MultipeerTLS", "MultipeerTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "MultipeerDiscoveryTests",
            dependencies: ["MultipeerDiscovery", "MultipeerCore"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "MultipeerTLSTests",
            dependencies: [
                "MultipeerTestSupport",
                "MultipeerTLS",
                "MultipeerCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The session module's link handlers on an EmbeddedChannel: no sockets, no time but the test's.
        .testTarget(
            name: "MultipeerSessionTests",
            dependencies: [
                "MultipeerSession",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                .product(name: "Crypto", package: "swift-crypto"),
                "MultipeerTLS",
                "MultipeerCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            path: "Tests/MultipeerSessionTests",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "MultipeerSyncTests",
            dependencies: [
                "MultipeerSync", "MultipeerSession", "MultipeerCore", "MultipeerTLS", "MultipeerTestSupport",
                "MultipeerSessionTesting", .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        // Sessions in the simulated world, tested as an application's tests would use it.
        .testTarget(
            name: "MultipeerSimulationTests",
            dependencies: [
                "MultipeerSession", "MultipeerSessionTesting", .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/MultipeerSimulationTests",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "MultipeerIntegrationTests",
            dependencies: [
                "MultipeerTestSupport",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                "MultipeerDiscovery",
                "MultipeerSession",
                "MultipeerTLS",
                "MultipeerCore",
                "NavlogSync",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "IntegrationTests",
            swiftSettings: swiftSettings
        ),
    ]
)
