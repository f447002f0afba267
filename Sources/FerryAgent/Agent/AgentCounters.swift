import CoreMetrics
import FerryProtocol
import Synchronization

/// Where an agent's metrics go: the swift-metrics factory its instruments are made with, and the
/// Prometheus text exposition of what they hold.
///
/// The agent reads its `ferry status` counters back from ``exposition`` (one store for status and
/// metrics), answers `ferry metrics` with it, and `ferryd` serves it on `GET /metrics`. Each agent
/// has its own backend (in-process tests run several agents); the library never bootstraps the
/// global `MetricsSystem`. `FerryMetrics.PrometheusBackend` is the backend `ferryd` uses:
///
/// ```swift
/// let metrics = PrometheusBackend()
/// let agent = FerryAgent(configuration: configuration, metrics: metrics.agentBackend, logger: logger)
/// ```
public struct AgentMetricsBackend: Sendable {
    /// Makes the agent's instruments (counters, gauges, timers, recorders).
    public var factory: any MetricsFactory
    /// The Prometheus text exposition (format 0.0.4) of everything `factory` made.
    public var exposition: @Sendable () -> [UInt8]

    /// A backend of `factory`, rendered by `exposition`.
    public init(factory: any MetricsFactory, exposition: @escaping @Sendable () -> [UInt8]) {
        self.factory = factory
        self.exposition = exposition
    }

    /// Records nothing: status counters read 0 and `ferry metrics` is empty. For embedding where
    /// nobody looks; an agent of `ferryd` always has the Prometheus backend.
    public static var discarding: AgentMetricsBackend {
        AgentMetricsBackend(factory: NOOPMetricsHandler.instance, exposition: { [] })
    }
}

/// The agent's instruments, recorded through the swift-metrics API with the agent's own
/// factory, and the status counters read back from the same store.
///
/// Metric names and units follow Prometheus conventions (`docs/METRICS.md` lists them). The hot
/// path records per group commit and per message, never per event: the commit thread tallies a
/// group's outcomes in locals and adds each once.
public final class AgentCounters: Sendable {
    /// The backend the instruments record into.
    public let backend: AgentMetricsBackend

    // MARK: Ingest and commit (commit thread, socket thread)

    /// `ferry_events_accepted_total`: events stored and acked (held events included).
    let accepted: Counter
    /// `ferry_events_duplicate_total`: events answered `duplicate`.
    let duplicate: Counter
    /// `ferry_events_rejected_total{reason}`, by ``RejectReason`` raw value.
    let rejected: [Counter]
    /// `ferry_events_blocked_total{stage="ingest"}`: refused by consent at ingest.
    let blockedAtIngest: Counter
    /// `ferry_events_blocked_total{stage="send"}`: queued events refused by consent at send time.
    let blockedAtSend: Counter
    /// `ferry_events_suppressed_total`: local-only events answered `suppressed`.
    let suppressed: Counter
    /// `ferry_events_held_total`: events put in the held area.
    let heldTotal: Counter
    /// `ferry_events_dropped_total`: undelivered events deleted by the drop-oldest policy.
    let dropped: Counter
    /// `ferry_messages_refused_total`: whole messages refused with an error reply.
    let messagesRefused: Counter
    /// `ferry_messages_denied_total`: messages refused because the sender may not send events
    /// (access policy).
    let accessDenied: Counter
    /// `ferry_ack_latency_seconds`: message received → ack sent (socket thread, per message).
    let ackLatency: Timer
    /// `ferry_commit_events`: events per group commit (its `_count` is the number of commits).
    let commitEvents: Recorder
    /// `ferry_fsync_seconds`: the `fdatasync`s of one group commit.
    let fsync: Timer

    // MARK: State, set when the exposition is rendered

    /// `ferry_events_held`: events in the held area now.
    let eventsHeld: Gauge
    /// `ferry_queue_events`: events not yet delivered to every sink.
    let queueEvents: Gauge
    /// `ferry_queue_bytes`: bytes of the log's segments.
    let queueBytes: Gauge
    /// `ferry_queue_oldest_age_seconds`: age of the oldest undelivered event (0 when empty).
    let queueOldestAge: Gauge
    /// `ferry_clients_connected`: ingest connections, from the ZeroMQ socket monitor.
    let clientsConnected: Gauge

    /// `ferry_client_events_lost_total{source}` by source (at most ``maxLossSources`` names; the
    /// rest are counted under `""`).
    private let lostBySource = Mutex<[String: Counter]>([:])
    /// Most source names the lost-events counter keeps apart.
    static let maxLossSources = 1024

    private let sinks = Mutex<[String: SinkMetrics]>([:])

    /// Bucket bounds of the latency histograms, in seconds: 100 µs to 10 s in steps of at most
    /// 1.5× (1, 1.5, 2, 3, 4, 6, 8 per decade), so 0.5 ms, 1 ms and 2 ms fall in different
    /// buckets.
    public static let latencyBuckets: [Duration] = {
        var bounds: [Duration] = []
        var decade: Int64 = 100_000  // 100 µs in ns
        while decade < 10_000_000_000 {
            for step in [10, 15, 20, 30, 40, 60, 80] as [Int64] { bounds.append(.nanoseconds(decade * step / 10)) }
            decade *= 10
        }
        bounds.append(.seconds(10))
        return bounds
    }()

    /// Bucket bounds of `ferry_commit_events`: powers of two from 1 to 65 536 events.
    public static let commitSizeBuckets: [Double] = (0...16).map { Double(1 << $0) }

    /// The metric names of the timers (duration histograms), for a backend's bucket settings.
    public static let latencyHistograms = ["ferry_ack_latency_seconds", "ferry_fsync_seconds", "ferry_delivery_latency_seconds"]
    /// The metric names of the value histograms with ``commitSizeBuckets``.
    public static let sizeHistograms = ["ferry_commit_events"]

    /// Instruments made with `backend`'s factory; counters start at 0 and are in the exposition
    /// from the start (every reject reason too), so a reader sees every series.
    public init(backend: AgentMetricsBackend = .discarding) {
        self.backend = backend
        let factory = backend.factory
        accepted = Counter(label: "ferry_events_accepted_total", factory: factory)
        duplicate = Counter(label: "ferry_events_duplicate_total", factory: factory)
        // Indexed by raw value; `none` (never the reason of a rejection) is counted as `malformed`.
        let reasons = RejectReason.allCases.sorted { $0.rawValue < $1.rawValue }
        let byReason = Dictionary(uniqueKeysWithValues: RejectReason.rejections.map { reason in
            (reason, Counter(label: "ferry_events_rejected_total", dimensions: [("reason", reason.description)], factory: factory))
        })
        rejected = reasons.map { byReason[$0] ?? byReason[.malformed]! }
        blockedAtIngest = Counter(label: "ferry_events_blocked_total", dimensions: [("stage", "ingest")], factory: factory)
        blockedAtSend = Counter(label: "ferry_events_blocked_total", dimensions: [("stage", "send")], factory: factory)
        suppressed = Counter(label: "ferry_events_suppressed_total", factory: factory)
        heldTotal = Counter(label: "ferry_events_held_total", factory: factory)
        dropped = Counter(label: "ferry_events_dropped_total", factory: factory)
        messagesRefused = Counter(label: "ferry_messages_refused_total", factory: factory)
        accessDenied = Counter(label: "ferry_messages_denied_total", factory: factory)
        ackLatency = Timer(label: "ferry_ack_latency_seconds", factory: factory)
        commitEvents = Recorder(label: "ferry_commit_events", factory: factory)
        fsync = Timer(label: "ferry_fsync_seconds", factory: factory)
        eventsHeld = Gauge(label: "ferry_events_held", factory: factory)
        queueEvents = Gauge(label: "ferry_queue_events", factory: factory)
        queueBytes = Gauge(label: "ferry_queue_bytes", factory: factory)
        queueOldestAge = Gauge(label: "ferry_queue_oldest_age_seconds", factory: factory)
        clientsConnected = Gauge(label: "ferry_clients_connected", factory: factory)
        clientsConnected.record(0)
        for gauge in [eventsHeld, queueEvents, queueBytes, queueOldestAge] { gauge.record(0) }
    }

    /// The instruments of sink `name` (made on first use).
    func sink(_ name: String) -> SinkMetrics {
        sinks.withLock { sinks in
            if let existing = sinks[name] { return existing }
            let made = SinkMetrics(sink: name, factory: backend.factory)
            sinks[name] = made
            return made
        }
    }

    /// Counts `events` lost by the client `source`.
    func recordLost(_ events: Int, source: String) {
        let counter = lostBySource.withLock { counters -> Counter in
            let key = counters[source] != nil || counters.count < Self.maxLossSources ? source : ""
            if let existing = counters[key] { return existing }
            let made = Counter(label: "ferry_client_events_lost_total", dimensions: [("source", key)], factory: backend.factory)
            counters[key] = made
            return made
        }
        counter.increment(by: events)
    }

    /// One group's outcomes, tallied by the commit thread and added once per group.
    struct GroupTally {
        var accepted = 0, duplicate = 0, blocked = 0, suppressed = 0, held = 0
        var rejected: [Int] = []
    }

    /// Adds a group's tally.
    func record(_ tally: GroupTally) {
        if tally.accepted > 0 { accepted.increment(by: tally.accepted) }
        if tally.duplicate > 0 { duplicate.increment(by: tally.duplicate) }
        if tally.blocked > 0 { blockedAtIngest.increment(by: tally.blocked) }
        if tally.suppressed > 0 { suppressed.increment(by: tally.suppressed) }
        if tally.held > 0 { heldTotal.increment(by: tally.held) }
        for (raw, count) in tally.rejected.enumerated() where count > 0 && raw < rejected.count {
            rejected[raw].increment(by: count)
        }
    }

    // MARK: Reading back

    /// The current samples of the backend's exposition.
    public var samples: MetricSamples { MetricSamples(parsing: backend.exposition()) }

    /// The `ferry status` counters, read from `samples` (the same store as the metrics): each
    /// is a metric or a sum of one over its labels.
    public static func statusCounters(_ samples: MetricSamples) -> [String: Int] {
        func total(_ name: String) -> Int { Int(samples.sum(name)) }
        let rejectedByReason = samples.values("ferry_events_rejected_total", by: "reason")
        let blocked = samples.values("ferry_events_blocked_total", by: "stage")
        return [
            "accepted": total("ferry_events_accepted_total"),
            "duplicate": total("ferry_events_duplicate_total"),
            "rejected": Int(rejectedByReason.values.reduce(0, +)),
            "rejected_full": Int(rejectedByReason["full"] ?? 0),
            "dropped": total("ferry_events_dropped_total"),
            "delivered": total("ferry_sink_delivered_total"),
            "delivery_failures": total("ferry_sink_failures_total"),
            "retried": total("ferry_sink_retried_total"),
            "dead_lettered": total("ferry_sink_dead_lettered_total"),
            "malformed_messages": total("ferry_messages_refused_total"),
            "commits": total("ferry_commit_events_count"),
            "blocked": Int(blocked["ingest"] ?? 0),
            "suppressed": total("ferry_events_suppressed_total"),
            "held": total("ferry_events_held_total"),
            "blocked_at_send": Int(blocked["send"] ?? 0),
            "client_events_lost": total("ferry_client_events_lost_total"),
            "access_denied": total("ferry_messages_denied_total"),
        ]
    }

    /// The status counters (``statusCounters(_:)`` of the current samples).
    public var snapshot: [String: Int] { Self.statusCounters(samples) }

    /// Client events lost, by source name (from `ferry_client_events_lost_total{source}`).
    public var clientEventsLostBySource: [String: Int] {
        samples.values("ferry_client_events_lost_total", by: "source").mapValues { Int($0) }
    }
}

/// One sink's instruments, labelled `sink`.
final class SinkMetrics: Sendable {
    /// `ferry_sink_delivered_total`: events the sink acknowledged (replays included).
    let delivered: Counter
    /// `ferry_sink_failures_total`: failed delivery attempts.
    let failures: Counter
    /// `ferry_sink_retried_total`: failed attempts that were retried.
    let retried: Counter
    /// `ferry_sink_dead_lettered_total`: events written to the dead-letter directory.
    let deadLettered: Counter
    /// `ferry_sink_backlog_events`: events the sink has still to take (set at rendering).
    let backlog: Gauge
    /// `ferry_sink_circuit_open`: 1 while the circuit is open or half-open, else 0.
    let circuitOpen: Gauge
    /// `ferry_delivery_latency_seconds`: accepted → delivered, per event.
    let deliveryLatency: Timer

    init(sink: String, factory: any MetricsFactory) {
        let label = [("sink", sink)]
        delivered = Counter(label: "ferry_sink_delivered_total", dimensions: label, factory: factory)
        failures = Counter(label: "ferry_sink_failures_total", dimensions: label, factory: factory)
        retried = Counter(label: "ferry_sink_retried_total", dimensions: label, factory: factory)
        deadLettered = Counter(label: "ferry_sink_dead_lettered_total", dimensions: label, factory: factory)
        backlog = Gauge(label: "ferry_sink_backlog_events", dimensions: label, factory: factory)
        circuitOpen = Gauge(label: "ferry_sink_circuit_open", dimensions: label, factory: factory)
        deliveryLatency = Timer(label: "ferry_delivery_latency_seconds", dimensions: label, factory: factory)
        backlog.record(0)
        circuitOpen.record(0)
    }
}
