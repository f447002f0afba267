// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Ferry",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Ferry", targets: ["Ferry"]),
        .library(name: "FerryAgent", targets: ["FerryAgent"]),
        .library(name: "FerryFileSink", targets: ["FerryFileSink"]),
        .library(name: "FerryHTTPSink", targets: ["FerryHTTPSink"]),
        .library(name: "FerryJetStreamSink", targets: ["FerryJetStreamSink"]),
        .library(name: "FerryDaemon", targets: ["FerryDaemon"]),
        .library(name: "FerryMetrics", targets: ["FerryMetrics"]),
        .library(name: "FerryMetricsHTTP", targets: ["FerryMetricsHTTP"]),
        .library(name: "FerryStorage", targets: ["FerryStorage"]),
        .library(name: "FerryProtocol", targets: ["FerryProtocol"]),
        .library(name: "FerryQuality", targets: ["FerryQuality"]),
        .library(name: "FerryMetricSamples", targets: ["FerryMetricSamples"]),
        .library(name: "ZeroMQ", targets: ["ZeroMQ"]),
        .library(name: "NATS", targets: ["NATS"]),
        .executable(name: "ferryd", targets: ["ferryd"]),
        .executable(name: "ferry", targets: ["ferry"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.81.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.29.0"),
        // `swift package generate-documentation --target Ferry` (the DocC catalog); a command
        // plugin only, nothing of it is linked.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // SHA-256 and HMAC-SHA-256 (the redaction key, the HTTP API's write keys, the audit chain,
        // once-keys). Already in the graph through async-http-client (swift-certificates).
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
    ],
    targets: [
        // C module: libzmq from the system (Debian: libzmq3-dev).
        .systemLibrary(
            name: "CZeroMQ",
            pkgConfig: "libzmq",
            providers: [.apt(["libzmq3-dev"]), .brew(["zeromq"])]
        ),
        // C module: zlib from the system (Debian: zlib1g-dev), for gzip request bodies.
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]
        ),
        // Who is at the other end of a local connection (the kernel's credentials): one type
        // shared by ZeroMQ, the agent core and the HTTP API, so none depends on another for it.
        .target(name: "FerryPeer"),
        // Safe Swift wrapper: context, sockets, multipart messages, poll, errors.
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ", "FerryPeer"]),
        // C module: nats.c from the system (Debian: libnats-dev).
        .systemLibrary(
            name: "CNATS",
            pkgConfig: "libnats",
            providers: [.apt(["libnats-dev"])]
        ),
        // Safe Swift wrapper: connection, JetStream context, streams, async publish with PubAcks.
        .target(name: "NATS", dependencies: ["CNATS"]),
        // Hardware CRC-32C (SSE4.2) for FerryProtocol's CRC32C, chosen at run time.
        .target(name: "CFerryCRC32C"),
        // Wire format v1, event model, record codec, CRC32C, UUIDv7.
        .target(name: "FerryProtocol", dependencies: ["CFerryCRC32C"]),
        // Data quality at the edge: tracking plans (a JSON Schema subset compiled once), PII
        // redaction (paths, detectors, HMAC), the gate that judges one event. Pure: no I/O but
        // loading its files, no threads. HMAC-SHA-256 is swift-crypto's (constant-time in the key).
        .target(name: "FerryQuality", dependencies: ["FerryProtocol", .product(name: "Crypto", package: "swift-crypto")]),
        // The thread runtime our targets share (package access; two types public so that their
        // users specialise them, ThreadInbox says why): dedicated threads, the inbox between
        // threads, a socket thread's queues and wake-up, the executor for blocking file I/O, the
        // wake pipe, the async signal.
        .target(name: "FerryThreads"),
        // A reader of the Prometheus text exposition (`ferry metrics`, `GET /metrics`) for tools
        // such as `ferry top`; not part of the wire format.
        .target(name: "FerryMetricSamples", dependencies: ["FerryProtocol"]),
        // Client library linked by applications.
        .target(
            name: "Ferry",
            dependencies: [
                "ZeroMQ", "FerryProtocol", "FerryThreads",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),
        // The durable log and the other files the agent keeps: segments, records, scanner,
        // recovery, cursors, dead letters, dedup snapshot. The only code that changes log state.
        .target(
            name: "FerryStorage",
            dependencies: [
                "FerryProtocol",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),
        // Agent core: ingest, commit, consent, delivery, configuration and the sink registry.
        // It names no sink: the file, HTTP and JetStream sinks live in modules of their own.
        // It records metrics through the swift-metrics API (CoreMetrics) with the factory it is
        // given; the Prometheus backend is FerryMetrics'.
        .target(
            name: "FerryAgent",
            dependencies: [
                "ZeroMQ", "FerryPeer", "FerryProtocol", "FerryQuality", "FerryStorage", "FerryThreads",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The file sink (JSON Lines files), registered as sink type "file" and, by ferryd, as the
        // default sink of a configuration that names none.
        .target(
            name: "FerryFileSink",
            dependencies: ["FerryAgent", "FerryProtocol", "FerryStorage", "FerryThreads"]
        ),
        // The HTTP sink (AsyncHTTPClient, NIO, NIOSSL, zlib), registered as sink type "http".
        .target(
            name: "FerryHTTPSink",
            dependencies: [
                "FerryAgent", "FerryProtocol", "FerryStorage", "FerryThreads", "CZlib",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // The NATS JetStream sink (nats.c), registered as sink type "jetstream".
        .target(
            name: "FerryJetStreamSink",
            dependencies: [
                "FerryAgent", "FerryProtocol", "FerryStorage", "FerryThreads", "NATS",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The agent's Prometheus backend (swift-prometheus): one registry per agent, Ferry's
        // histogram buckets, the text exposition. No NIO.
        .target(
            name: "FerryMetrics",
            dependencies: [
                "FerryAgent",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        // `GET /metrics` over HTTP (SwiftNIO), off by default; knows nothing of the agent but a
        // function that renders the exposition.
        .target(
            name: "FerryMetricsHTTP",
            dependencies: [
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The local Segment-compatible HTTP API (SwiftNIO, zlib): an ingest path registered as
        // kind "http" (IngestPathKind), on a Unix socket and optionally TCP.
        .target(
            name: "FerryHTTPIngest",
            dependencies: [
                "FerryAgent", "FerryPeer", "FerryProtocol", "FerryStorage", "CZlib",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // The ZeroMQ ingest socket (`<runtime>/ingest`): an ingest path registered as kind "zeromq"
        // (IngestPathKind), on a thread of its own that owns the socket; it submits through the
        // agent's IngestGateway like the HTTP API.
        .target(
            name: "FerryZeroMQIngest",
            dependencies: [
                "FerryAgent", "FerryPeer", "FerryProtocol", "FerryThreads", "ZeroMQ",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // What `ferryd` does before the agent runs: arguments, configuration, logging, the
        // metrics backend and its HTTP endpoint, the service group. The executable only names
        // the sink kinds it links.
        .target(
            name: "FerryDaemon",
            dependencies: [
                "FerryAgent", "FerryFileSink", "FerryProtocol", "FerryQuality", "FerryStorage", "FerryThreads", "FerryMetrics", "FerryMetricsHTTP",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        // The small test kit, for unit tests of the storage and the agent: temp directories,
        // waiting on conditions, log fixtures, fault seeds, in-process ZeroMQ peers. Links no NIO,
        // NATS or AsyncHTTPClient. A target for our own tests, not a product.
        .target(
            name: "FerryTestKit",
            dependencies: [
                "FerryProtocol", "FerryStorage", "FerryThreads", "ZeroMQ",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The integration test kit: child processes, launching ferryd and ferry, the HTTP test
        // server (SwiftNIO) and its Segment collector, gzip decoding, a nats-server process,
        // stallfs, tmpfs mounts. Not a product.
        .target(
            name: "FerryIntegrationKit",
            dependencies: [
                "FerryTestKit", "FerryProtocol", "FerryThreads", "FerryHTTPIngest", "ZeroMQ", "NATS",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // The sink contract kit: one test body for every sink (exactly once across kill -9 at
        // each crash point, retry classification, cursor saves, dead letters and replay,
        // disclosure, reload), run against the real ferryd and each sink's real upstream, and the
        // fixtures of the built-in sinks. Links no sink: ferryd does. Not a product.
        .target(
            name: "FerrySinkContractKit",
            dependencies: ["FerryTestKit", "FerryIntegrationKit", "NATS"]
        ),
        // The agent test kit: an agent in this process (InProcessAgent, serving the ZeroMQ path
        // and optionally the HTTP API) and the ingest-path contract (the same events over every
        // path: the same outcomes, bus messages and stored bytes). Not a product.
        .target(
            name: "FerryAgentTestKit",
            dependencies: [
                "FerryAgent", "FerryFileSink", "FerryZeroMQIngest", "FerryHTTPIngest", "FerryMetrics", "FerryProtocol",
                "FerryStorage", "FerryTestKit", "FerryIntegrationKit", "FerryThreads", "ZeroMQ",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "ferryd",
            dependencies: ["FerryDaemon", "FerryAgent", "FerryFileSink", "FerryHTTPSink", "FerryJetStreamSink", "FerryHTTPIngest", "FerryZeroMQIngest"]
        ),
        // What `ferry` does: its commands, their options, replies and exit statuses. A library so
        // its decisions have unit tests (FerryCLITests); the executable only calls it.
        .target(
            name: "FerryCLI",
            dependencies: [
                "Ferry", "FerryStorage", "FerryProtocol", "FerryQuality", "FerryThreads", "FerryMetricSamples", "ZeroMQ",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(name: "ferry", dependencies: ["FerryCLI"]),
        // The CLI's decisions (exit statuses, usage, reports) without an agent.
        .testTarget(
            name: "FerryCLITests",
            dependencies: [
                "FerryCLI", "Ferry", "FerryProtocol", "FerryAgent",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ", "FerryPeer"]),
        .testTarget(name: "NATSTests", dependencies: ["NATS", "FerryTestKit", "FerryIntegrationKit"]),
        .testTarget(name: "FerryProtocolTests", dependencies: ["FerryProtocol", "FerryMetricSamples"]),
        .testTarget(
            name: "FerryQualityTests",
            dependencies: ["FerryQuality", "FerryProtocol", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .testTarget(name: "FerryThreadsTests", dependencies: ["FerryThreads"]),
        // Only the small kit: no NIO, NATS or AsyncHTTPClient in this build.
        .testTarget(name: "FerryStorageTests", dependencies: ["FerryStorage", "FerryProtocol", "FerryTestKit"]),
        // The commit stage's decision, table-driven: no files, sockets, threads or test kit.
        .testTarget(name: "FerryCommitTests", dependencies: ["FerryAgent", "FerryProtocol", "FerryStorage"]),
        .testTarget(
            name: "FerryAgentTests",
            dependencies: [
                "FerryAgent", "FerryFileSink", "FerryStorage", "FerryProtocol", "FerryThreads", "ZeroMQ", "FerryPeer", "FerryMetrics",
                "FerryTestKit", "FerryIntegrationKit", "FerryHTTPIngest", "FerryQuality", "FerryMetricSamples",
                "FerryZeroMQIngest", "FerryAgentTestKit",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "FerryHTTPSinkTests",
            dependencies: [
                "FerryHTTPSink", "FerryAgent", "FerryFileSink", "FerryStorage", "FerryProtocol", "FerryTestKit", "FerryIntegrationKit",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "FerryJetStreamSinkTests",
            dependencies: [
                "FerryJetStreamSink", "FerryAgent", "FerryFileSink", "FerryStorage", "FerryProtocol", "NATS", "FerryTestKit", "FerryIntegrationKit",
            ]
        ),
        // The sink contract for every sink (one fixture each), and the tests that need every
        // sink type ferryd links: the one test target that links them all.
        .testTarget(
            name: "FerrySinkContractTests",
            dependencies: [
                "FerrySinkContractKit", "FerryTestKit", "FerryIntegrationKit",
                "FerryAgent", "FerryStorage", "FerryProtocol", "FerryFileSink", "FerryHTTPSink", "FerryJetStreamSink", "NATS",
            ]
        ),
        .testTarget(
            name: "FerryMetricsTests",
            dependencies: [
                "FerryMetrics", "FerryMetricsHTTP", "FerryAgent", "FerryProtocol", "FerryMetricSamples", "FerryTestKit", "FerryIntegrationKit",
                "FerryHTTPIngest",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "FerryHTTPIngestTests",
            dependencies: [
                "FerryHTTPIngest", "FerryAgent", "FerryFileSink", "FerryProtocol", "FerryStorage", "FerryTestKit", "FerryIntegrationKit",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "FerryTests",
            dependencies: [
                "Ferry", "FerryAgent", "FerryProtocol", "FerryTestKit", "FerryIntegrationKit",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "FerryDaemonTests",
            dependencies: ["FerryDaemon", "FerryTestKit", "FerryIntegrationKit", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(
            name: "FerryIntegrationTests",
            dependencies: [
                "FerryTestKit", "FerryIntegrationKit", "Ferry", "FerryProtocol", "FerryMetricSamples", "FerryStorage", "NATS",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

for target in package.targets where target.type != .system && target.name != "CFerryCRC32C" {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    // A file uses members (extension methods, conformances) only of modules it imports itself,
    // so a module's imports stop leaking into its users' files (as hummingbird does).
    settings.append(.enableUpcomingFeature("MemberImportVisibility"))
    target.swiftSettings = settings
}
