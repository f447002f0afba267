// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Ferry",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Ferry", targets: ["Ferry"]),
        .library(name: "FerryAgent", targets: ["FerryAgent"]),
        .library(name: "FerryProtocol", targets: ["FerryProtocol"]),
        .library(name: "ZeroMQ", targets: ["ZeroMQ"]),
        .library(name: "FerryTestKit", targets: ["FerryTestKit"]),
        .executable(name: "ferryd", targets: ["ferryd"]),
        .executable(name: "ferry", targets: ["ferry"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
    ],
    targets: [
        // C module: libzmq from the system (Debian: libzmq3-dev).
        .systemLibrary(
            name: "CZeroMQ",
            pkgConfig: "libzmq",
            providers: [.apt(["libzmq3-dev"]), .brew(["zeromq"])]
        ),
        // Safe Swift wrapper: context, sockets, multipart messages, poll, errors.
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ"]),
        // Hardware CRC-32C (SSE4.2) for FerryProtocol's CRC32C, chosen at run time.
        .target(name: "CFerryCRC32C"),
        // Wire format v1, event model, record codec, CRC32C, UUIDv7.
        .target(name: "FerryProtocol", dependencies: ["CFerryCRC32C"]),
        // Client library linked by applications.
        .target(
            name: "Ferry",
            dependencies: [
                "ZeroMQ", "FerryProtocol",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),
        // Agent core: durable log, dedup, ingest, delivery, sinks.
        .target(
            name: "FerryAgent",
            dependencies: [
                "ZeroMQ", "FerryProtocol",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // Helpers for tests: temp dirs, launching agents, waiting on conditions.
        .target(name: "FerryTestKit", dependencies: ["Ferry", "FerryAgent", "FerryProtocol", "ZeroMQ"]),
        .executableTarget(
            name: "ferryd",
            dependencies: [
                "FerryAgent",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "ferry",
            dependencies: [
                "Ferry", "FerryAgent", "FerryProtocol", "ZeroMQ",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ"]),
        .testTarget(name: "FerryProtocolTests", dependencies: ["FerryProtocol"]),
        .testTarget(name: "FerryAgentTests", dependencies: ["FerryAgent", "FerryTestKit", "Ferry"]),
        .testTarget(name: "FerryTests", dependencies: ["Ferry", "FerryAgent", "FerryTestKit"]),
        .testTarget(name: "FerryIntegrationTests", dependencies: ["FerryTestKit", "Ferry", "FerryProtocol"]),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system && target.name != "CFerryCRC32C" {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    target.swiftSettings = settings
}
