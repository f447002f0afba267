// swift-tools-version:6.0
import PackageDescription

// An app linking the Ferry client library from the repository root by path.
let package = Package(
    name: "ferry-example",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Ferry", path: "../.."),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .executableTarget(
            name: "ferry-example",
            dependencies: [
                .product(name: "Ferry", package: "Ferry"),
                .product(name: "Logging", package: "swift-log"),
            ]
        )
    ]
)
