// swift-tools-version:6.1
import PackageDescription

// gRPC Swift 2 between two peers in one process, for SessionBenchmark's comparison (issue 48):
// what a Swift user would pick instead of this package for messages between two processes over
// TLS. A package of its own, so that an application depending on MultipeerSession never
// resolves gRPC; `make bench` builds it (Benchmarks/README.md, "gRPC Swift 2").
let package = Package(
    name: "GRPCBaseline",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: "https://github.com/grpc/grpc-swift-2", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport", from: "2.9.2"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
    ],
    targets: [
        .executableTarget(
            name: "grpc-baseline",
            dependencies: [
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        )
    ]
)
