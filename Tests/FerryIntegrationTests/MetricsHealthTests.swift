import FerryIntegrationKit
import Foundation
import FerryMetricSamples
import FerryProtocol
import FerryTestKit
import Synchronization
import Testing

/// The real `ferryd` and `ferry`: `ferry metrics`, `GET /metrics`, `ferry health`.
@Suite("Watching Ferry: metrics and health")
struct MetricsHealthTests {
    @Test("after N events, ferry metrics and GET /metrics both show them, with ack latencies; status reads the same store")
    func metricsAfterEvents() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let port = try freeLocalPort()
        let config = try AgentProcess.configurationArguments(#"{"metrics": {"listen": "127.0.0.1:\#(port)"}}"#, in: dir)
        let agent = try AgentProcess(in: dir, extraArguments: config)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let events = 120
        let emitted = try await runCLI(["emit", "--stdin", "--wait", "--source", "metrics-e2e"],
                                       stdin: TestEvents.jsonLines(count: events, namePrefix: "m"), environment: agent.environment)
        #expect(emitted.status == .exited(0), "\(emitted)")

        let cli = try await runCLI(["metrics"], environment: agent.environment)
        #expect(cli.status == .exited(0), "\(cli)")
        let http = try await httpRequest(port: port, path: "/metrics")
        #expect(http.status == 200, "\(http)")
        #expect(http.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true, "\(http)")
        for (origin, text) in [("ferry metrics", cli.stdout), ("GET /metrics", http.body)] {
            let samples = MetricSamples(parsing: Array(text.utf8))
            #expect(samples.value("ferry_events_accepted_total") == Double(events), "\(origin): \(text)")
            let acks = try #require(samples.histogram("ferry_ack_latency_seconds"), "\(origin)")
            #expect(acks.count >= 1, "\(origin): no ack latency recorded")
            #expect(acks.buckets.count > 30, "\(origin): \(acks.buckets.count) buckets")
            let commits = try #require(samples.histogram("ferry_commit_events"), "\(origin)")
            #expect(commits.sum == Double(events), "\(origin): events per commit sum to \(commits.sum)")
            #expect((samples.histogram("ferry_fsync_seconds")?.count ?? 0) == commits.count, "\(origin)")
            #expect(samples.value("ferry_events_rejected_total", ["reason": "too_large"]) == 0, "\(origin)")
            #expect(samples.value("ferry_sink_circuit_open", ["sink": "file"]) == 0, "\(origin)")
        }
        // The file sink delivers them; the counters of status are the metrics' (one store).
        let status = try await waitForValue("delivery of \(events) events") { () -> AgentStatus? in
            let status = try await agent.status()
            return status.counters["delivered"] == events ? status : nil
        }
        let samples = MetricSamples(parsing: Array(try await httpRequest(port: port, path: "/metrics").body.utf8))
        #expect(Double(status.counters["accepted"] ?? -1) == samples.value("ferry_events_accepted_total"))
        #expect(Double(status.counters["commits"] ?? -1) == samples.value("ferry_commit_events_count"))
        #expect(samples.value("ferry_sink_delivered_total", ["sink": "file"]) == Double(events))
        #expect((samples.histogram("ferry_delivery_latency_seconds", ["sink": "file"])?.count ?? 0) == Double(events))
        #expect(samples.value("ferry_queue_events") == 0)
        let p50 = samples.histogram("ferry_ack_latency_seconds")?.quantileUpperBound(0.5) ?? .nan
        print("[measure] \(events) events: ack latency p50 ≤ \(p50 * 1000) ms over \(samples.value("ferry_ack_latency_seconds_count") ?? 0) messages")

        #expect(try await httpRequest(port: port, path: "/other").status == 404)
        #expect(try await httpRequest(port: port, method: "POST", path: "/metrics").status == 405)
        try await agent.terminate()
    }

    /// `promtool` (Debian's `prometheus`, installed by scripts/install-deps): `$PROMTOOL`, else the
    /// first on `PATH`. Missing, the test fails rather than skips: CI installs it.
    static func promtool() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let explicit = environment["PROMTOOL"], !explicit.isEmpty { return explicit }
        for directory in ((environment["PATH"] ?? "") + ":/usr/bin:/usr/local/bin").split(separator: ":") {
            let candidate = "\(directory)/promtool"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw FerryTestKitError("promtool not found (scripts/install-deps installs Debian's prometheus; or set PROMTOOL)")
    }

    @Test("promtool check metrics passes on ferry metrics and GET /metrics, before and after traffic")
    func promtoolCheckMetrics() async throws {
        let promtool = try Self.promtool()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let port = try freeLocalPort()
        let config = try AgentProcess.configurationArguments(#"{"metrics": {"listen": "127.0.0.1:\#(port)"}}"#, in: dir)
        let agent = try AgentProcess(in: dir, extraArguments: config)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        for round in ["at start", "after events"] {
            if round == "after events" {
                let emitted = try await runCLI(["emit", "--stdin", "--wait", "--source", "promtool"],
                                               stdin: TestEvents.jsonLines(count: 20, namePrefix: "p"), environment: agent.environment)
                #expect(emitted.status == .exited(0), "\(emitted)")
            }
            let cli = try await runCLI(["metrics"], environment: agent.environment)
            #expect(cli.status == .exited(0), "\(cli)")
            let http = try await httpRequest(port: port, path: "/metrics")
            #expect(http.status == 200, "\(http)")
            for (origin, text) in [("ferry metrics", cli.stdout), ("GET /metrics", http.body)] {
                let checked = try await runProcess(promtool, ["check", "metrics"], stdin: text)
                #expect(checked.status == .exited(0), "\(origin) \(round): \(checked)\n\(text)")
                #expect(checked.stdout.isEmpty && checked.stderr.isEmpty, "\(origin) \(round): \(checked)")
                for descriptor in ["ferry_client_events_lost_total", "ferry_held_events", "ferry_events_held_total"] {
                    #expect(text.contains("# TYPE \(descriptor) "), "\(origin) \(round): no TYPE for \(descriptor)")
                    #expect(text.contains("# HELP \(descriptor) "), "\(origin) \(round): no HELP for \(descriptor)")
                }
            }
        }
        try await agent.terminate()
    }

    @Test("ferry_clients_connected follows connections (socket monitor), not traffic")
    func clientsConnected() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        func connected() async throws -> Double? {
            let result = try await runCLI(["metrics"], environment: agent.environment)
            return MetricSamples(parsing: Array(result.stdout.utf8)).value("ferry_clients_connected")
        }
        #expect(try await connected() == 0)
        // A client that connected and sent one event, then stays quiet with its socket open.
        let client = try startCLI(["emit", "--stdin", "--wait"], input: .pipe, environment: agent.environment,
                                  outputDirectory: dir.appending("logs"))
        defer { client.cleanup() }
        try await client.writeInput(#"{"name":"hello"}"# + "\n")
        try await eventually("the quiet client to count as connected") { try await connected() == 1 }
        client.closeInput()
        _ = try await client.waitForExit(timeout: .seconds(20))
        try await eventually("the client to stop counting once gone") { try await connected() == 0 }
        try await agent.terminate()
    }

    @Test("ferry health: 1 while a sink's circuit is open, 0 once it closes; --json; 2 with no agent")
    func healthFollowsCircuit() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let failing = Atomic<Bool>(true)
        let server = try await HTTPTestServer.start { _ in
            failing.load(ordering: .relaxed) ? .status(503, body: "down for the test") : .ok
        }
        let json = """
        {"delivery": {"retryInitialMilliseconds": 20, "retryMaxMilliseconds": 100},
         "sinks": [{"name": "collector", "type": "http", "url": "\(server.url())",
                    "circuit": {"failureThreshold": 2, "openMilliseconds": 200}}]}
        """
        let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(json, in: dir))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let healthy = try await runCLI(["health"], environment: agent.environment)
        #expect(healthy.status == .exited(0) && healthy.stdout == "healthy\n", "\(healthy)")

        let emitted = try await runCLI(["emit", "one", "--wait"], environment: agent.environment)
        #expect(emitted.status == .exited(0), "\(emitted)")
        let degraded = try await waitForValue("ferry health to report the open circuit") { () -> CommandResult? in
            let result = try await runCLI(["health"], environment: agent.environment)
            return result.status == .exited(1) ? result : nil
        }
        #expect(degraded.stdout.hasPrefix("degraded: sink collector: circuit "), "\(degraded)")
        #expect(degraded.stdout.split(separator: "\n").count == 1, "one line: \(degraded)")
        let asJSON = try await runCLI(["health", "--json"], environment: agent.environment)
        #expect(asJSON.status == .exited(1), "\(asJSON)")
        let object = try JSONSerialization.jsonObject(with: Data(asJSON.stdout.utf8)) as? [String: Any]
        #expect(object?["state"] as? String == "degraded" && (object?["exit_code"] as? NSNumber)?.intValue == 1, "\(asJSON)")
        let metrics = MetricSamples(parsing: Array(try await runCLI(["metrics"], environment: agent.environment).stdout.utf8))
        #expect((metrics.value("ferry_sink_failures_total", ["sink": "collector"]) ?? 0) >= 2)

        failing.store(false, ordering: .relaxed)
        try await eventually("ferry health to be 0 once the circuit closed") {
            try await runCLI(["health"], environment: agent.environment).status == .exited(0)
        }
        let after = MetricSamples(parsing: Array(try await runCLI(["metrics"], environment: agent.environment).stdout.utf8))
        #expect(after.value("ferry_sink_circuit_open", ["sink": "collector"]) == 0)
        #expect(after.value("ferry_sink_delivered_total", ["sink": "collector"]) == 1)
        try await agent.terminate()
        await server.shutdown()

        let gone = try await runCLI(["health"], environment: agent.environment)
        #expect(gone.status == .exited(2) && gone.stdout.hasPrefix("not running"), "\(gone)")
    }

    @Test("a control refusal that says access denied makes ferry health exit 3")
    func healthAccessDenied() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let runtime = dir.appending("rt")
        let fake = try FakeControlAgent(runtimeDirectory: runtime) { _, _ in
            #"{"ok":false,"error":"access denied: uid 1000 may not read this agent","code":"access_denied"}"#
        }
        defer { fake.stop() }
        let result = try await runCLI(["health"], environment: ["FERRY_RUNTIME_DIR": runtime])
        #expect(result.status == .exited(3), "\(result)")
        #expect(result.stdout == "access denied: uid 1000 may not read this agent\n", "\(result)")
    }
}
