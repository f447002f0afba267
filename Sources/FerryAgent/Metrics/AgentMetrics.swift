import CoreMetrics
import FerryProtocol
import Synchronization

/// Where an agent's metrics are exported: the swift-metrics factory its instruments are made
/// with, and the Prometheus text exposition of what they hold.
///
/// The agent answers `ferry metrics` with ``exposition`` and `ferryd` serves it on
/// `GET /metrics`; `ferry status` never reads it (its counters are the typed store,
/// ``AgentMetrics``). Each agent has its own backend (in-process tests run several agents); the
/// library never bootstraps the global `MetricsSystem`. `FerryMetrics.PrometheusBackend` is the
/// backend `ferryd` uses:
///
/// ```swift
/// let metrics = PrometheusBackend()
/// let agent = FerryAgent(configuration: configuration, metrics: metrics.agentBackend, logger: logger)
/// ```
public struct AgentMetricsBackend: Sendable {
    /// Makes the exported instruments (counters, gauges, timers, recorders).
    public var factory: any MetricsFactory
    /// The Prometheus text exposition (format 0.0.4) of everything `factory` made.
    public var exposition: @Sendable () -> [UInt8]

    /// A backend of `factory`, rendered by `exposition`.
    public init(factory: any MetricsFactory, exposition: @escaping @Sendable () -> [UInt8]) {
        self.factory = factory
        self.exposition = exposition
    }

    /// Exports nothing: `ferry metrics` is empty. The status counters still read the true
    /// values (they are the agent's own state, not read back from here). For embedding where
    /// nobody scrapes; an agent of `ferryd` always has the Prometheus backend.
    public static var discarding: AgentMetricsBackend {
        AgentMetricsBackend(factory: NOOPMetricsHandler.instance, exposition: { [] })
    }
}

/// A monotonic count the agent keeps as state — an atomic that `ferry status` reads — and
/// exports: each increment is passed on to the swift-metrics counter of its descriptor, so the
/// exposition always shows the same figure.
final class MetricCounter: Sendable {
    private let count = Atomic<Int>(0)
    private let exported: Counter

    /// A counter of `descriptor` with the label values `labels` (in the descriptor's order).
    init(_ descriptor: MetricDescriptor, _ labels: [String] = [], factory: any MetricsFactory) {
        assert(descriptor.kind == .counter && labels.count == descriptor.labels.count, "\(descriptor)")
        exported = Counter(label: descriptor.name, dimensions: Array(zip(descriptor.labels, labels)), factory: factory)
    }

    /// Adds `amount` (never negative).
    func increment<Amount: BinaryInteger>(by amount: Amount) {
        count.wrappingAdd(Int(amount), ordering: .relaxed)
        exported.increment(by: amount)
    }

    /// Adds 1.
    func increment() { increment(by: 1) }

    /// The count so far.
    var value: Int { count.load(ordering: .relaxed) }
}

/// A histogram of values whose number of observations is state too (`ferry status` `commits`
/// is the `_count` of `ferry_commit_events`).
final class CountedRecorder: Sendable {
    private let count = Atomic<Int>(0)
    private let exported: Recorder

    /// A recorder of `descriptor` (a value histogram).
    init(_ descriptor: MetricDescriptor, factory: any MetricsFactory) {
        assert(descriptor.kind == .valueHistogram, "\(descriptor)")
        exported = Recorder(label: descriptor.name, factory: factory)
    }

    /// Records one observation.
    func record<Value: BinaryInteger>(_ value: Value) {
        count.wrappingAdd(1, ordering: .relaxed)
        exported.record(value)
    }

    /// How many observations were recorded.
    var observations: Int { count.load(ordering: .relaxed) }
}

/// The agent's metrics: a typed store of its counters (atomics, read directly by `ferry status`)
/// exported through the swift-metrics API to its backend, with the gauges and histograms that are
/// an export only.
///
/// Each metric's name, type and help text come from its ``MetricDescriptor``; `docs/METRICS.md`
/// lists them. Because the counters are the agent's own state, status reads the true values
/// whatever the backend — with ``AgentMetricsBackend/discarding`` too. The hot path records per
/// group commit and per message, never per event: the commit thread tallies a group's outcomes
/// in locals and adds each once (``record(_:)``).
public final class AgentMetrics: Sendable {
    /// The backend the instruments export to.
    public let backend: AgentMetricsBackend

    // MARK: Ingest and commit (commit thread, socket thread)

    /// `ferry_events_accepted_total`: events stored and acked (held events included).
    let accepted: MetricCounter
    /// `ferry_events_duplicate_total`: events answered `duplicate`.
    let duplicate: MetricCounter
    /// `ferry_events_rejected_total{reason}`, by ``RejectReason`` raw value (`none`, never the
    /// reason of a rejection, shares `malformed`'s counter).
    let rejected: [MetricCounter]
    /// `ferry_events_blocked_total{stage="ingest"}`: refused by consent at ingest.
    let blockedAtIngest: MetricCounter
    /// `ferry_events_blocked_total{stage="send"}`: queued events refused by consent at send time.
    let blockedAtSend: MetricCounter
    /// `ferry_events_suppressed_total`: local-only events answered `suppressed`.
    let suppressed: MetricCounter
    /// `ferry_events_held_total`: events put in the held area.
    let heldTotal: MetricCounter
    /// `ferry_events_quarantined_total`: events put in the quarantine.
    let quarantinedTotal: MetricCounter
    /// `ferry_events_redacted_total`: events redaction changed before they were stored.
    let redacted: MetricCounter
    /// `ferry_events_dropped_total`: undelivered events deleted by the drop-oldest policy.
    let dropped: MetricCounter
    /// `ferry_messages_refused_total`: whole messages refused with an error reply.
    let messagesRefused: MetricCounter
    /// `ferry_messages_denied_total`: messages refused because the sender may not send them
    /// (access policy).
    let accessDenied: MetricCounter
    /// `ferry_ack_latency_seconds`: message received → ack sent (socket thread, per message).
    let ackLatency: Timer
    /// `ferry_commit_events`: events per group commit (its observations are the commits).
    let commitEvents: CountedRecorder
    /// `ferry_fsync_seconds`: the `fdatasync`s of one group commit.
    let fsync: Timer

    // MARK: State, set when the exposition is rendered (``AgentGauges``)

    /// `ferry_held_events`: events in the held area now.
    let eventsHeld: Gauge
    /// `ferry_queue_events`: events not yet delivered to every sink.
    let queueEvents: Gauge
    /// `ferry_queue_bytes`: bytes of the log's segments.
    let queueBytes: Gauge
    /// `ferry_queue_oldest_age_seconds`: age of the oldest undelivered event (0 when empty).
    let queueOldestAge: Gauge
    /// `ferry_clients_connected`: ingest connections, from the ZeroMQ socket monitor.
    let clientsConnected: Gauge
    /// `ferry_erasures_pending`: upstream erasure requests pending, once per sink.
    let erasuresPending: Gauge
    /// `ferry_erasure_requests_total{sink,outcome}`, by sink and outcome.
    private let erasureCounters = Mutex<[String: MetricCounter]>([:])
    /// `ferry_quarantined_events`: events in the quarantine now.
    let quarantinedEvents: Gauge

    /// `ferry_plan_violations_total{event,rule}` by `event` and `rule` (at most
    /// ``maxViolationSeries`` pairs; the rest are counted under `other`/`other`).
    private let violations = Mutex<[ViolationKey: MetricCounter]>([:])
    /// Most (event, rule) pairs the violations counter keeps apart.
    static let maxViolationSeries = 1024
    /// The rules a violation names (the JSON Schema keywords the plan supports, and
    /// `unplanned`); any other is counted as `other`.
    static let violationRules: Set<String> = [
        "type", "properties", "required", "additionalProperties", "enum", "const", "pattern", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "items", "format", "not", "false", "unplanned",
    ]

    struct ViolationKey: Hashable {
        var event: String
        var rule: String
    }

    /// `ferry_client_events_lost_total{source}` by source (at most ``maxLossSources`` names; the
    /// rest are counted under `""`, a series at 0 from the start).
    private let lostBySource = Mutex<[String: MetricCounter]>([:])
    /// Most source names the lost-events counter keeps apart.
    static let maxLossSources = 1024

    private let sinks = Mutex<[String: SinkMetrics]>([:])
    private let ingestPaths = Mutex<[String: IngestPathMetrics]>([:])

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
    public static let latencyHistograms = MetricDescriptor.catalog.filter { $0.kind == .durationHistogram }.map(\.name)
    /// The metric names of the value histograms with ``commitSizeBuckets``.
    public static let sizeHistograms = MetricDescriptor.catalog.filter { $0.kind == .valueHistogram }.map(\.name)

    /// A store at 0, exporting to `backend`; every counter is in the exposition from the start
    /// (every reject reason too), so a reader sees every series.
    public init(backend: AgentMetricsBackend = .discarding) {
        self.backend = backend
        let factory = backend.factory
        func counter(_ descriptor: MetricDescriptor, _ labels: String...) -> MetricCounter {
            MetricCounter(descriptor, labels, factory: factory)
        }
        func gauge(_ descriptor: MetricDescriptor) -> Gauge {
            let gauge = Gauge(label: descriptor.name, factory: factory)
            gauge.record(0)
            return gauge
        }
        accepted = counter(.eventsAccepted)
        duplicate = counter(.eventsDuplicate)
        let reasons = RejectReason.allCases.sorted { $0.rawValue < $1.rawValue }
        let byReason = Dictionary(uniqueKeysWithValues: RejectReason.rejections.map { ($0, counter(.eventsRejected, $0.description)) })
        rejected = reasons.map { byReason[$0] ?? byReason[.malformed]! }
        blockedAtIngest = counter(.eventsBlocked, "ingest")
        blockedAtSend = counter(.eventsBlocked, "send")
        suppressed = counter(.eventsSuppressed)
        heldTotal = counter(.eventsHeldTotal)
        quarantinedTotal = counter(.eventsQuarantinedTotal)
        redacted = counter(.eventsRedacted)
        dropped = counter(.eventsDropped)
        messagesRefused = counter(.messagesRefused)
        accessDenied = counter(.messagesDenied)
        ackLatency = Timer(label: MetricDescriptor.ackLatency.name, factory: factory)
        commitEvents = CountedRecorder(.commitEvents, factory: factory)
        fsync = Timer(label: MetricDescriptor.fsync.name, factory: factory)
        eventsHeld = gauge(.eventsHeld)
        queueEvents = gauge(.queueEvents)
        queueBytes = gauge(.queueBytes)
        queueOldestAge = gauge(.queueOldestAge)
        clientsConnected = gauge(.clientsConnected)
        erasuresPending = gauge(.erasuresPending)
        quarantinedEvents = gauge(.quarantinedEvents)
        // The overflow pair, at 0: the family is in the exposition from the start.
        let otherPair = ViolationKey(event: "other", rule: "other")
        violations.withLock { $0[otherPair] = MetricCounter(.planViolations, ["other", "other"], factory: factory) }
        // The overflow series, at 0: the family is in the exposition (TYPE, HELP, a sample)
        // before the first loss, as every other counter.
        let overflow = counter(.clientEventsLost, "")
        lostBySource.withLock { $0[""] = overflow }
    }

    /// `ferry_erasure_requests_total{sink,outcome}` of `sink` and `outcome` (`sent`, `failed`,
    /// `retried`; made on first use, the three of a sink together so each is in the exposition
    /// from the start).
    func erasureRequests(sink: String, outcome: String) -> MetricCounter {
        erasureCounters.withLock { counters in
            if counters[sink + "\u{0}" + outcome] == nil {
                for name in ["sent", "failed", "retried"] {
                    counters[sink + "\u{0}" + name] = MetricCounter(.erasureRequests, [sink, name], factory: backend.factory)
                }
            }
            if let existing = counters[sink + "\u{0}" + outcome] { return existing }
            let made = MetricCounter(.erasureRequests, [sink, outcome], factory: backend.factory)
            counters[sink + "\u{0}" + outcome] = made
            return made
        }
    }

    /// The instruments of sink `name` (made on first use).
    func sink(_ name: String) -> SinkMetrics {
        let (metrics, made) = sinks.withLock { sinks -> (SinkMetrics, Bool) in
            if let existing = sinks[name] { return (existing, false) }
            let made = SinkMetrics(sink: name, factory: backend.factory)
            sinks[name] = made
            return (made, true)
        }
        // The sink's erasure series too, at 0 from the start like its other counters.
        if made { _ = erasureRequests(sink: name, outcome: "sent") }
        return metrics
    }

    /// The instruments of ingest path `name`, of its kind's `metrics` (made on first use: the
    /// agent makes each path's at start, so every family is in the exposition from then on).
    func ingestPath(_ name: String, _ metrics: IngestPathMetricSet) -> IngestPathMetrics {
        ingestPaths.withLock { paths in
            if let existing = paths[name] { return existing }
            let made = IngestPathMetrics(path: name, metrics: metrics, factory: backend.factory)
            paths[name] = made
            return made
        }
    }

    /// The figures of each ingest path other than ZeroMQ, by name (for `ferry status`).
    public var ingestPathCounts: [String: [String: Int]] {
        ingestPaths.withLock { $0.mapValues(\.snapshot) }
    }

    /// Counts one violation of `rule` by `event` (as the plan names it: `track:Order
    /// Completed`, `identify`). The label set stays bounded: an event the plan does not name
    /// (rule `unplanned`) is counted under event `other`, a rule outside ``violationRules`` under
    /// rule `other`, and past ``maxViolationSeries`` pairs every new one under `other`/`other`.
    func recordViolation(event: String, rule: String) {
        var key = ViolationKey(event: rule == "unplanned" ? "other" : event,
                               rule: Self.violationRules.contains(rule) ? rule : "other")
        let counter = violations.withLock { counters -> MetricCounter in
            if let existing = counters[key] { return existing }
            guard counters.count < Self.maxViolationSeries else {
                key = ViolationKey(event: "other", rule: "other")
                return counters[key]!
            }
            let made = MetricCounter(.planViolations, [key.event, key.rule], factory: backend.factory)
            counters[key] = made
            return made
        }
        counter.increment()
    }

    /// Counts `events` lost by the client `source`.
    func recordLost(_ events: Int, source: String) {
        let counter = lostBySource.withLock { counters -> MetricCounter in
            // `""` (the overflow) is there from the start and is not one of the named sources.
            let key = counters[source] != nil || counters.count <= Self.maxLossSources ? source : ""
            if let existing = counters[key] { return existing }
            let made = MetricCounter(.clientEventsLost, [key], factory: backend.factory)
            counters[key] = made
            return made
        }
        counter.increment(by: events)
    }

    /// One group's outcomes, tallied by the commit thread and added once per group.
    struct GroupTally {
        var accepted = 0, duplicate = 0, blocked = 0, suppressed = 0, held = 0, quarantined = 0
        var rejected: [Int] = []
    }

    /// Adds a group's tally.
    func record(_ tally: GroupTally) {
        if tally.accepted > 0 { accepted.increment(by: tally.accepted) }
        if tally.duplicate > 0 { duplicate.increment(by: tally.duplicate) }
        if tally.blocked > 0 { blockedAtIngest.increment(by: tally.blocked) }
        if tally.suppressed > 0 { suppressed.increment(by: tally.suppressed) }
        if tally.held > 0 { heldTotal.increment(by: tally.held) }
        if tally.quarantined > 0 { quarantinedTotal.increment(by: tally.quarantined) }
        for (raw, count) in tally.rejected.enumerated() where count > 0 && raw < rejected.count {
            rejected[raw].increment(by: count)
        }
    }

    // MARK: Reading (ferry status)

    /// The `ferry status` counters, read from the store: each is a counter or a sum of one's
    /// children (sinks, reasons, sources).
    public var snapshot: [String: Int] {
        let sinks = self.sinks.withLock { Array($0.values) }
        func total(_ counter: KeyPath<SinkMetrics, MetricCounter>) -> Int { sinks.reduce(0) { $0 + $1[keyPath: counter].value } }
        // `none` shares `malformed`'s counter: count each counter once.
        let reasonCounters = RejectReason.rejections.map { rejected[Int($0.rawValue)] }
        return [
            "accepted": accepted.value,
            "duplicate": duplicate.value,
            "rejected": reasonCounters.reduce(0) { $0 + $1.value },
            "rejected_full": rejected[Int(RejectReason.full.rawValue)].value,
            "dropped": dropped.value,
            "delivered": total(\.delivered),
            "delivery_failures": total(\.failures),
            "retried": total(\.retried),
            "dead_lettered": total(\.deadLettered),
            "malformed_messages": messagesRefused.value,
            "commits": commitEvents.observations,
            "blocked": blockedAtIngest.value,
            "suppressed": suppressed.value,
            "held": heldTotal.value,
            "blocked_at_send": blockedAtSend.value,
            "client_events_lost": lostBySource.withLock { $0.values.reduce(0) { $0 + $1.value } },
            "access_denied": accessDenied.value,
        ]
    }

    /// Client events lost, by source name (sources that lost none left out).
    public var clientEventsLostBySource: [String: Int] {
        lostBySource.withLock { $0.compactMapValues { $0.value > 0 ? $0.value : nil } }
    }

    /// What sink `name` delivered, retried and dead-lettered (zeros for a sink that has done
    /// nothing yet).
    func sinkCounts(_ name: String) -> (delivered: Int, retried: Int, deadLettered: Int) {
        guard let sink = sinks.withLock({ $0[name] }) else { return (0, 0, 0) }
        return (sink.delivered.value, sink.retried.value, sink.deadLettered.value)
    }

    /// What sink `name` passed by, by ``SinkSkipReason`` (reasons with none left out).
    func sinkSkipped(_ name: String) -> [String: Int] {
        sinks.withLock { $0[name] }?.skippedCounts ?? [:]
    }
}

/// One sink's instruments, labelled `sink`.
final class SinkMetrics: Sendable {
    /// `ferry_sink_delivered_total`: events the sink acknowledged (replays included).
    let delivered: MetricCounter
    /// `ferry_sink_failures_total`: failed delivery attempts.
    let failures: MetricCounter
    /// `ferry_sink_retried_total`: failed attempts that were retried.
    let retried: MetricCounter
    /// `ferry_sink_dead_lettered_total`: events written to the dead-letter directory.
    let deadLettered: MetricCounter
    /// `ferry_sink_skipped_total{sink,reason}`: events the sink passed by (its route or consent
    /// requirement), one counter per ``SinkSkipReason`` in its `allCases` order.
    private let skippedByReason: [MetricCounter]
    /// `ferry_sink_backlog_events`: events the sink has still to take (set at rendering).
    let backlog: Gauge
    /// `ferry_sink_circuit_open`: 1 while the circuit is open or half-open, else 0.
    let circuitOpen: Gauge
    /// `ferry_delivery_latency_seconds`: accepted → delivered, per event.
    let deliveryLatency: Timer

    init(sink: String, factory: any MetricsFactory) {
        let label = [("sink", sink)]
        delivered = MetricCounter(.sinkDelivered, [sink], factory: factory)
        failures = MetricCounter(.sinkFailures, [sink], factory: factory)
        retried = MetricCounter(.sinkRetried, [sink], factory: factory)
        deadLettered = MetricCounter(.sinkDeadLettered, [sink], factory: factory)
        skippedByReason = SinkSkipReason.allCases.map { MetricCounter(.sinkSkipped, [sink, $0.rawValue], factory: factory) }
        backlog = Gauge(label: MetricDescriptor.sinkBacklog.name, dimensions: label, factory: factory)
        circuitOpen = Gauge(label: MetricDescriptor.sinkCircuitOpen.name, dimensions: label, factory: factory)
        deliveryLatency = Timer(label: MetricDescriptor.deliveryLatency.name, dimensions: label, factory: factory)
        backlog.record(0)
        circuitOpen.record(0)
    }

    /// The counter of events skipped for `reason`.
    func skipped(_ reason: SinkSkipReason) -> MetricCounter {
        skippedByReason[SinkSkipReason.allCases.firstIndex(of: reason)!]
    }

    /// Events skipped so far, by reason (reasons with none left out).
    var skippedCounts: [String: Int] {
        var counts: [String: Int] = [:]
        for (reason, counter) in zip(SinkSkipReason.allCases, skippedByReason) where counter.value > 0 {
            counts[reason.rawValue] = counter.value
        }
        return counts
    }
}

/// One ingest path's instruments, of the metrics its kind names (``IngestPathMetricSet``),
/// labelled first with the path's name.
package final class IngestPathMetrics: Sendable {
    /// The event outcomes counted (the `outcome` label of ``IngestPathMetricSet/events``).
    package static let outcomes = ["accepted", "quarantined", "duplicate", "blocked", "suppressed", "refused", "retry"]
    private let path: String
    private let metrics: IngestPathMetricSet
    private let factory: any MetricsFactory
    private let requests = Mutex<[Int: MetricCounter]>([:])
    private let events: [String: MetricCounter]
    private let connections: Gauge
    private let open = Atomic<Int>(0)

    init(path: String, metrics: IngestPathMetricSet, factory: any MetricsFactory) {
        self.path = path
        self.metrics = metrics
        self.factory = factory
        events = Dictionary(uniqueKeysWithValues: Self.outcomes.map {
            ($0, MetricCounter(metrics.events, [path, $0], factory: factory))
        })
        connections = Gauge(label: metrics.connections.name, dimensions: [(metrics.connections.labels.first ?? "path", path)],
                            factory: factory)
        connections.record(0)
        // The family is in the exposition from the start, as every other counter.
        _ = counter(status: 200)
    }

    private func counter(status: Int) -> MetricCounter {
        requests.withLock { counters in
            if let existing = counters[status] { return existing }
            let made = MetricCounter(metrics.requests, [path, String(status)], factory: factory)
            counters[status] = made
            return made
        }
    }

    /// Counts a request answered with `status`.
    package func request(status: Int) { counter(status: status).increment() }

    /// Counts `count` events with `outcome` (one of ``outcomes``).
    package func events(_ outcome: String, _ count: Int) {
        guard count > 0, let counter = events[outcome] else { return }
        counter.increment(by: count)
    }

    /// A connection opened (`+1`) or closed (`-1`).
    package func connection(_ change: Int) {
        connections.record(open.wrappingAdd(change, ordering: .relaxed).newValue)
    }

    /// Requests by status, events by outcome and connections now, for `ferry status`.
    var snapshot: [String: Int] {
        var result = events.mapValues(\.value)
        for (status, counter) in requests.withLock({ $0 }) { result["requests_\(status)"] = counter.value }
        result["requests"] = requests.withLock { $0.values.reduce(0) { $0 + $1.value } }
        result["connections"] = open.load(ordering: .relaxed)
        return result
    }
}
