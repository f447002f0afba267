// Client cost: wall time and allocations of one FerryClient.track() on the app's thread, with the
// agent up (a real ferryd started from $FERRYD in a temp directory) and with no agent at all.
// Run through scripts/bench, or: cd Benchmarks && FERRYD=../.build/release/ferryd swift package benchmark
import Benchmark
import Ferry
import Foundation
import Logging

/// What a benchmark's setup made and its teardown ends. Touched only by the benchmark runner's
/// setup, body and teardown, which run one after another.
nonisolated(unsafe) var client: FerryClient?
nonisolated(unsafe) var agent: Process?
nonisolated(unsafe) var directory = ""

func makeClient(runtime: String) throws {
    var logger = Logger(label: "client-cost")
    logger.logLevel = .critical
    client = try FerryClient(configuration: FerryClientConfiguration(source: "bench", runtimeDirectory: runtime), logger: logger)
}

func startAgent() throws {
    directory = NSTemporaryDirectory() + "ferry-client-cost-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: ProcessInfo.processInfo.environment["FERRYD"] ?? "../.build/release/ferryd")
    process.arguments = ["--data-dir", directory + "/data", "--runtime-dir", directory + "/rt", "--log-level", "error"]
    try process.run()
    agent = process
    while !FileManager.default.fileExists(atPath: directory + "/rt/ingest") { usleep(10_000) }
    try makeClient(runtime: directory + "/rt")
}

func stop() async {
    await client?.shutdown()
    client = nil
    agent?.terminate()
    agent?.waitUntilExit()
    agent = nil
    if !directory.isEmpty { try? FileManager.default.removeItem(atPath: directory) }
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .mallocCountTotal, .throughput],
        // Whole nanoseconds: scripts/bench reads the median from this output, and automatic
        // units print a 1.4 µs median as "1".
        timeUnits: .nanoseconds,
        warmupIterations: 1_000,
        scalingFactor: .kilo,
        maxDuration: .seconds(2),
        maxIterations: 200
    )

    Benchmark("track() with 2 properties, agent up", closure: { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(client!.track("Order Completed", properties: ["total": 42.5, "sku": "A-1"]))
        }
    }, setup: { try startAgent() }, teardown: { await stop() })

    Benchmark("track() without properties, agent up", closure: { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(client!.track("Order Completed"))
        }
    }, setup: { try startAgent() }, teardown: { await stop() })

    // No agent: the outbox fills (10 000 events) and then drops its oldest event per call.
    Benchmark("track() with 2 properties, agent down", closure: { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(client!.track("Order Completed", properties: ["total": 42.5, "sku": "A-1"]))
        }
    }, setup: {
        directory = NSTemporaryDirectory() + "ferry-client-cost-down-\(getpid())"
        try makeClient(runtime: directory)
    }, teardown: { await stop() })
}
