// swift-tools-version:6.0
// The libFuzzer targets for the agent's configuration loader, the tracking plan and redact table
// parsers, the in-place judgement of events and the plans' regex (FerryQuality). A package of its own (as
// swift-protobuf's FuzzTesting) so that `swift build --sanitize fuzzer` instruments FerryAgent and
// what it links without changing Ferry's own build. scripts/fuzz builds and runs it:
//
//   swift build --package-path Fuzz --build-path .build/fuzz-spm --sanitize fuzzer --product FuzzConfig
import PackageDescription

let package = Package(
    name: "FerryFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "Ferry", path: "..")],
    targets: [
        // LLVMFuzzerTestOneInput over AgentConfiguration.load(json:path:); libFuzzer supplies main.
        .executableTarget(
            name: "FuzzConfig",
            dependencies: [.product(name: "FerryAgent", package: "Ferry"), .product(name: "FerryFileSink", package: "Ferry")],
            path: "FuzzConfig",
            swiftSettings: [.unsafeFlags(["-parse-as-library"])]
        ),
        // LLVMFuzzerTestOneInput over TrackingPlan(json:source:) and judging with what compiles.
        .executableTarget(
            name: "FuzzPlan",
            dependencies: [.product(name: "FerryQuality", package: "Ferry"), .product(name: "FerryProtocol", package: "Ferry")],
            path: "FuzzPlan",
            swiftSettings: [.unsafeFlags(["-parse-as-library"])]
        ),
        // LLVMFuzzerTestOneInput over the in-place judgement of an event's fields against the gate's.
        .executableTarget(
            name: "FuzzJudge",
            dependencies: [.product(name: "FerryQuality", package: "Ferry"), .product(name: "FerryProtocol", package: "Ferry")],
            path: "FuzzJudge",
            swiftSettings: [.unsafeFlags(["-parse-as-library"])]
        ),
        // LLVMFuzzerTestOneInput over the tracking plans' regex against Python's re (a child process).
        .executableTarget(
            name: "FuzzRegex",
            dependencies: [.product(name: "FerryQuality", package: "Ferry")],
            path: "FuzzRegex",
            swiftSettings: [.unsafeFlags(["-parse-as-library"])]
        ),
        // LLVMFuzzerTestOneInput over RedactionConfiguration(json:) and redacting with what compiles.
        .executableTarget(
            name: "FuzzRedact",
            dependencies: [.product(name: "FerryQuality", package: "Ferry"), .product(name: "FerryProtocol", package: "Ferry")],
            path: "FuzzRedact",
            swiftSettings: [.unsafeFlags(["-parse-as-library"])]
        ),
    ],
    swiftLanguageModes: [.v6]
)
