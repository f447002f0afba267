import CoreMetrics
@testable import FerryAgent
import FerryHTTPIngest
import FerryIntegrationKit
import FerryMetrics
import FerryMetricsHTTP
import FerryMetricSamples
import FerryProtocol
import Foundation
import FerryTestKit
import Logging
import Testing

@Suite("Metrics: buckets, one store per agent, the exposition read back")
struct MetricsTests {
    /// The core's catalog and the metrics of the ingest path kind `ferryd` registers (the HTTP
    /// API's `ferry_http_*`, defined by FerryHTTPIngest): what ferryd exports and METRICS.md lists.
    static let everyMetric = MetricDescriptor.catalog + IngestPathKind.http.metrics

    @Test("latency buckets resolve 100 µs to 10 s in steps of at most 1.5×; 0.5, 1 and 2 ms fall apart")
    func latencyBuckets() {
        let seconds = AgentMetrics.latencyBuckets.map { Double($0.components.attoseconds) / 1e18 + Double($0.components.seconds) }
        #expect(abs(seconds.first! - 0.0001) < 1e-12)
        #expect(seconds.last! >= 10)
        for (lower, upper) in zip(seconds, seconds.dropFirst()) {
            #expect(upper > lower && upper / lower <= 1.5 + 1e-9, "\(lower) → \(upper)")
        }
        func bucket(_ value: Double) -> Int { seconds.firstIndex { $0 >= value } ?? seconds.count }
        #expect(Set([bucket(0.0005), bucket(0.001), bucket(0.002)]).count == 3)
    }

    @Test("two agents' stores share nothing; status counters read the store, the exposition shows every series")
    func perAgentStore() {
        let first = AgentMetrics(backend: PrometheusBackend().agentBackend)
        let second = AgentMetrics(backend: PrometheusBackend().agentBackend)
        var tally = AgentMetrics.GroupTally()
        tally.accepted = 7
        tally.duplicate = 2
        tally.rejected = Array(repeating: 0, count: RejectReason.allCases.count)
        tally.rejected[Int(RejectReason.full.rawValue)] = 3
        tally.rejected[Int(RejectReason.tooLarge.rawValue)] = 1
        first.record(tally)
        first.commitEvents.record(7)
        first.recordLost(4, source: "app \"quoted\"")
        first.sink("collector").delivered.increment(by: 5)
        first.blockedAtSend.increment(by: 2)

        let counters = first.snapshot
        #expect(counters["accepted"] == 7 && counters["duplicate"] == 2)
        #expect(counters["rejected"] == 4 && counters["rejected_full"] == 3)
        #expect(counters["commits"] == 1 && counters["delivered"] == 5 && counters["blocked_at_send"] == 2)
        #expect(counters["client_events_lost"] == 4)
        #expect(first.clientEventsLostBySource == ["app \"quoted\"": 4])
        #expect(second.snapshot.values.allSatisfy { $0 == 0 }, "\(second.snapshot)")
        // Every reject reason is a series from the start, so readers see zeros, not gaps.
        let samples = MetricSamples(parsing: second.backend.exposition())
        #expect(samples.values("ferry_events_rejected_total", by: "reason").keys.sorted()
            == RejectReason.rejections.map(\.description).sorted())
    }

    // Until issue 20 this test asserted that status read 0 here (status counters were parsed
    // back from the exposition); the counters are the agent's state now and read true.
    @Test("the discarding backend exports nothing; status counters still read the true values")
    func discarding() {
        let counters = AgentMetrics()
        counters.accepted.increment(by: 3)
        #expect(counters.snapshot["accepted"] == 3)
        #expect(counters.backend.exposition().isEmpty)
    }

    @Test("the catalog: each name once, counters end in _total, one line of help each; histogram settings come from it")
    func catalog() {
        let names = Self.everyMetric.map(\.name)
        #expect(Set(names).count == names.count)
        for descriptor in Self.everyMetric {
            #expect(descriptor.name.hasSuffix("_total") == (descriptor.kind == .counter), "\(descriptor)")
            #expect(!descriptor.help.isEmpty && !descriptor.help.contains("\n"), "\(descriptor)")
        }
        for descriptor in MetricDescriptor.catalog { #expect(MetricDescriptor.named(descriptor.name) == descriptor) }
        #expect(AgentMetrics.latencyHistograms == ["ferry_ack_latency_seconds", "ferry_fsync_seconds", "ferry_delivery_latency_seconds"])
        #expect(AgentMetrics.sizeHistograms == ["ferry_commit_events"])
    }

    @Test("every family has # HELP (the catalog's text) and # TYPE; every metric, counters at 0, is there from the start")
    func helpAndTypeFromTheStart() throws {
        let backend = PrometheusBackend(metrics: IngestPathKind.http.metrics)
        let metrics = AgentMetrics(backend: backend.agentBackend)
        _ = metrics.sink("collector")  // an agent makes each configured sink's instruments at start
        _ = metrics.ingestPath("unix", .http)  // and each ingest path's
        let text = String(decoding: backend.exposition(), as: UTF8.self)
        var help: [String: String] = [:], type: [String: String] = [:], sampled: Set<String> = []
        for line in text.split(separator: "\n").map(String.init) {
            let words = line.split(separator: " ", maxSplits: 3).map(String.init)
            if line.hasPrefix("# HELP ") {
                #expect(help[words[2]] == nil, "two HELP lines for \(words[2])")
                help[words[2]] = words.count > 3 ? words[3] : ""
            } else if line.hasPrefix("# TYPE ") {
                #expect(type[words[2]] == nil, "two TYPE lines for \(words[2])")
                type[words[2]] = words[3]
            } else if !line.hasPrefix("#") {
                let series = String(line.prefix { $0 != "{" && $0 != " " })
                let family = ["_bucket", "_sum", "_count"].reduce(series) { name, suffix in
                    type[name] == nil && name.hasSuffix(suffix) ? String(name.dropLast(suffix.count)) : name
                }
                sampled.insert(family)
                #expect(type[family] != nil && help[family] != nil, "\(series): no TYPE or HELP before its sample")
            }
        }
        for descriptor in Self.everyMetric {
            #expect(help[descriptor.name] == descriptor.help, "\(descriptor)")
            let expected = ["counter": "counter", "gauge": "gauge"][descriptor.kind.rawValue] ?? "histogram"
            #expect(type[descriptor.name] == expected, "\(descriptor)")
            #expect(sampled.contains(descriptor.name), "\(descriptor) has no sample at start")
        }
        let samples = MetricSamples(parsing: backend.exposition())
        for descriptor in Self.everyMetric where descriptor.kind == .counter {
            #expect(samples.sum(descriptor.name) == 0, "\(descriptor)")
        }
        #expect(samples.value("ferry_client_events_lost_total", ["source": ""]) == 0)
        #expect(metrics.clientEventsLostBySource.isEmpty)
        #expect(Set(help.keys) == Set(Self.everyMetric.map(\.name)))
    }

    @Test("names stay distinct under OpenMetrics (a counter's family drops _total); the old held gauge is gone")
    func openMetricsNames() {
        let families = Self.everyMetric.map(\.openMetricsFamily)
        #expect(Set(families).count == families.count, "\(families)")
        #expect(MetricDescriptor.eventsHeld.name == "ferry_held_events")
        #expect(MetricDescriptor.deprecated.isEmpty)
        #expect(MetricDescriptor.named("ferry_events_held") == nil)
    }

    /// The family names prometheus_client's parser (OpenMetrics naming) gives the exposition's
    /// `# TYPE` lines: a counter's without `_total`. Each may appear once: the deprecated gauge
    /// `ferry_events_held` beside the counter `ferry_events_held_total` made two of one name.
    @Test("the exposition's families stay distinct under OpenMetrics naming, as prometheus_client reads them")
    func expositionFamiliesUnderOpenMetricsNaming() {
        let backend = PrometheusBackend()
        _ = AgentMetrics(backend: backend.agentBackend)
        let text = String(decoding: backend.exposition(), as: UTF8.self)
        var families: [String] = []
        for line in text.split(separator: "\n") where line.hasPrefix("# TYPE ") {
            let fields = line.split(separator: " ")
            guard fields.count >= 4 else { continue }
            let name = String(fields[2])
            families.append(fields[3] == "counter" && name.hasSuffix("_total") ? String(name.dropLast("_total".count)) : name)
        }
        #expect(!families.isEmpty)
        #expect(Set(families).count == families.count, "\(families.sorted())")
        #expect(!text.contains("# TYPE ferry_events_held gauge"))
        #expect(text.contains("# TYPE ferry_events_held_total counter"))
    }

    @Test("docs/METRICS.md's table lists every metric of the catalog with its type and its help text")
    func documentedHelp() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/METRICS.md")
        let rows = try String(contentsOf: url, encoding: .utf8).split(separator: "\n").filter { $0.hasPrefix("| `ferry_") }
        var documented: [String: (type: String, help: String)] = [:]
        for row in rows {
            let cells = row.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            documented[cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))] = (cells[2], cells[4])
        }
        #expect(Set(documented.keys) == Set(Self.everyMetric.map(\.name)))
        for descriptor in Self.everyMetric {
            let type = ["counter": "counter", "gauge": "gauge"][descriptor.kind.rawValue] ?? "histogram"
            #expect(documented[descriptor.name]?.type == type, "\(descriptor)")
            #expect(documented[descriptor.name]?.help == descriptor.help, "\(descriptor)")
        }
    }

    @Test("status counters and the exposition show the same figures")
    func storeAndExpositionAgree() {
        let backend = PrometheusBackend()
        let metrics = AgentMetrics(backend: backend.agentBackend)
        var tally = AgentMetrics.GroupTally()
        tally.accepted = 11
        tally.duplicate = 1
        tally.blocked = 2
        tally.suppressed = 3
        tally.held = 4
        tally.rejected = Array(repeating: 0, count: RejectReason.allCases.count)
        tally.rejected[Int(RejectReason.storage.rawValue)] = 5
        metrics.record(tally)
        metrics.record(tally)
        metrics.commitEvents.record(11)
        metrics.dropped.increment(by: 6)
        metrics.messagesRefused.increment()
        metrics.accessDenied.increment(by: 2)
        metrics.blockedAtSend.increment(by: 7)
        metrics.recordLost(8, source: "a")
        metrics.recordLost(1, source: "b")
        for (index, sink) in ["x", "y"].enumerated() {
            metrics.sink(sink).delivered.increment(by: 10 + index)
            metrics.sink(sink).failures.increment(by: 3)
            metrics.sink(sink).retried.increment(by: 2)
            metrics.sink(sink).deadLettered.increment(by: index)
        }
        let samples = MetricSamples(parsing: backend.exposition())
        let status = metrics.snapshot
        let table: [(String, MetricDescriptor)] = [
            ("accepted", .eventsAccepted), ("duplicate", .eventsDuplicate), ("rejected", .eventsRejected),
            ("dropped", .eventsDropped), ("delivered", .sinkDelivered), ("delivery_failures", .sinkFailures),
            ("retried", .sinkRetried), ("dead_lettered", .sinkDeadLettered), ("malformed_messages", .messagesRefused),
            ("suppressed", .eventsSuppressed), ("held", .eventsHeldTotal), ("client_events_lost", .clientEventsLost),
            ("access_denied", .messagesDenied),
        ]
        for (key, descriptor) in table {
            #expect(status[key] == Int(samples.sum(descriptor.name)), "\(key)")
            #expect((status[key] ?? 0) > 0, "\(key)")
        }
        #expect(status["blocked"] == 4 && samples.value("ferry_events_blocked_total", ["stage": "ingest"]) == 4)
        #expect(status["blocked_at_send"] == 7 && samples.value("ferry_events_blocked_total", ["stage": "send"]) == 7)
        #expect(status["commits"] == 1 && samples.value("ferry_commit_events_count") == 1)
        #expect(status["rejected"] == 10 && status["rejected_full"] == 0)
        #expect(metrics.clientEventsLostBySource == ["a": 8, "b": 1])
        #expect(metrics.sinkCounts("y") == (delivered: 11, retried: 2, deadLettered: 1))
    }

    @Test("the exposition parser reads labels with escapes, histograms and special values")
    func parser() throws {
        let text = """
            # TYPE a counter
            a 3
            b{sink="x",source="q\\"u\\\\o\\nte"} 2.5
            h_bucket{le="0.001"} 1
            h_bucket{le="0.01"} 4
            h_bucket{le="+Inf"} 5
            h_sum 0.0321
            h_count 5
            g NaN
            broken{ 1
            """
        let samples = MetricSamples(parsing: Array(text.utf8))
        #expect(samples.value("a") == 3)
        #expect(samples.value("b", ["sink": "x", "source": "q\"u\\o\nte"]) == 2.5)
        let histogram = try #require(samples.histogram("h"))
        #expect(histogram.count == 5 && histogram.buckets.count == 3 && histogram.buckets.last?.upperBound == .infinity)
        #expect(histogram.quantileUpperBound(0.5) == 0.01)
        #expect(samples.value("g")?.isNaN == true)
        #expect(samples.samples.count == 8)
    }

    @Test("GET /metrics: 200 with the exposition, 404 elsewhere, 405 for POST, HEAD without a body")
    func httpEndpoint() async throws {
        let backend = PrometheusBackend()
        let counters = AgentMetrics(backend: backend.agentBackend)
        counters.accepted.increment(by: 42)
        counters.ackLatency.recordNanoseconds(1_500_000)
        let server = MetricsHTTPServer(host: "127.0.0.1", port: 0, logger: Logger(label: "test")) { backend.exposition() }
        let task = Task { try await server.run() }
        defer { task.cancel() }
        let port = try await server.boundPort()
        let ok = try await httpRequest(port: port, path: "/metrics")
        #expect(ok.status == 200 && ok.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true, "\(ok)")
        let samples = MetricSamples(parsing: Array(ok.body.utf8))
        #expect(samples.value("ferry_events_accepted_total") == 42)
        #expect(samples.histogram("ferry_ack_latency_seconds")?.quantileUpperBound(1) == 0.0015)
        #expect(try await httpRequest(port: port, path: "/").status == 404)
        #expect(try await httpRequest(port: port, method: "POST", path: "/metrics").status == 405)
        let head = try await httpRequest(port: port, method: "HEAD", path: "/metrics")
        #expect(head.status == 200 && head.body.isEmpty)
        task.cancel()
        try await task.value
    }
}

@Suite("Health")
struct HealthReportTests {
    static func status(
        circuit: String = "closed", deadLetters: Int = 0, bytes: Int = 0, cap: Int = 1000, corrupt: Int = 0, lost: Int = 0
    ) -> StatusReply {
        StatusReply(
            pid: 1, protocolVersion: 2, uptimeMilliseconds: 1, runtimeDirectory: "/r", dataDirectory: "/d",
            queue: .init(events: 0, bytes: bytes, segments: 1, oldestUndeliveredAgeMilliseconds: nil, cursor: "0:0",
                         verifyingSegments: 0, retentionMaxBytes: cap),
            delivery: nil,
            consent: ConsentSnapshot(networkTracking: true, trackingEnabled: true, categories: [], enabledFeatures: [], consent: [:],
                                     persistence: .granted, gdpr: GDPRRecord(), deliveryStarted: true, anonymousID: "a",
                                     heldEvents: 0, auditEntries: 0, auditHead: ""),
            sinks: [.init(name: "s", type: "http", state: "idle", circuit: circuit, consecutiveFailures: 0, backlogEvents: 0,
                          delivered: 0, retried: 0, deadLettered: 0, cursor: nil, lastSuccessAt: nil, lastError: nil, retryAt: nil,
                          deadLetters: deadLetters)],
            counters: ["client_events_lost": lost], recovery: .init(events: 0, corruptRegions: corrupt, corruptBytes: corrupt * 10, truncatedBytes: 0),
            clientEventsLost: lost > 0 ? ["app": lost] : [:])
    }

    @Test("each degraded condition, alone, gives exit 1 and its reason", arguments: [
        (status(), 0, ""),
        (status(circuit: "open"), 1, "sink s: circuit open"),
        (status(circuit: "half_open"), 1, "sink s: circuit half open"),
        (status(deadLetters: 2), 1, "sink s: 2 dead letters waiting"),
        (status(bytes: 900), 0, ""),
        (status(bytes: 901), 1, "queue at 90% of its retention cap (901 of 1000 bytes)"),
        (status(corrupt: 1), 1, "damaged log: 1 corrupt region (10 bytes)"),
        (status(lost: 3), 1, "3 client events lost (app)"),
    ])
    func conditions(status: StatusReply, exit: Int32, reason: String) {
        let report = HealthReport(status: status)
        #expect(report.exitCode == exit)
        #expect(report.reasons == (reason.isEmpty ? [] : [reason]))
        #expect(report.line == (exit == 0 ? "healthy" : "degraded: \(reason)"))
    }

    @Test("not running is 2, access denied is 3")
    func exitCodes() {
        #expect(HealthReport(state: .notRunning).exitCode == 2)
        #expect(HealthReport(state: .accessDenied, reasons: ["access denied: no"]).exitCode == 3)
        #expect(HealthReport(state: .accessDenied, reasons: ["access denied: no"]).line == "access denied: no")
        #expect(ControlRefusal("access denied: uid 5", code: ControlRefusal.accessDenied).isAccessDenied)
        #expect(ControlRefusal("Access denied by policy").isAccessDenied)
        #expect(!ControlRefusal("unknown op").isAccessDenied)
    }
}
