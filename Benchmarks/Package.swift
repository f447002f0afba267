// swift-tools-version:6.1
import PackageDescription

// Ferry's benchmarks, in their own package so that the benchmark tooling (GRDB for the SQLite
// baseline, HdrHistogram, ordo-one/benchmark) never lengthens the root package's
// `swift build --build-tests`. Run everything with `scripts/bench` from the repository root.
let package = Package(
    name: "ferry-benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Ferry", path: ".."),
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", exact: "0.2.0"),
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        // The harness: ingest (Ferry, the JetStream peer and baselines), latency, recovery, memory,
        // delivery, and the issue-13 target rows.
        .executableTarget(
            name: "ferry-bench",
            dependencies: [
                .product(name: "Ferry", package: "Ferry"),
                .product(name: "FerryAgent", package: "Ferry"),
                .product(name: "FerryFileSink", package: "Ferry"),
                .product(name: "FerryStorage", package: "Ferry"),
                .product(name: "FerryProtocol", package: "Ferry"),
                .product(name: "ZeroMQ", package: "Ferry"),
                .product(name: "NATS", package: "Ferry"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "Logging", package: "swift-log"),
                "CBenchSupport",
            ],
            path: "Sources/ferry-bench"
        ),
        // What the harness needs from C that Swift cannot call directly (variadic prctl).
        .target(name: "CBenchSupport", path: "Sources/CBenchSupport"),
        // Client cost under callgrind/memcheck: N track() calls (scripts/callgrind-track).
        .executableTarget(
            name: "track-cost",
            dependencies: [
                .product(name: "Ferry", package: "Ferry"),
                .product(name: "FerryProtocol", package: "Ferry"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/track-cost"
        ),
        // The quality gate's cost under callgrind: N judgements of a 256-byte event against a
        // 20-event plan with all five detectors (scripts/callgrind-gate).
        .executableTarget(
            name: "gate-cost",
            dependencies: [
                .product(name: "FerryQuality", package: "Ferry"),
                .product(name: "FerryProtocol", package: "Ferry"),
            ],
            path: "Sources/gate-cost"
        ),
        // Client cost: ns and allocations per FerryClient.track() (ordo-one/benchmark).
        .executableTarget(
            name: "ClientCost",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "Ferry", package: "Ferry"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/ClientCost",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
