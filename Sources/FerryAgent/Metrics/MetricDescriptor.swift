/// What one of the agent's metrics is — its name, type, labels and help text — written once.
///
/// Every instrument the agent makes is made from one of these (``catalog``), and the Prometheus
/// backend takes its histogram settings from them, so a name is spelled in one place: renaming a
/// metric cannot silently zero a `ferry status` field (status reads the typed store,
/// ``AgentMetrics``, never the names). `docs/METRICS.md` documents the same table.
public struct MetricDescriptor: Sendable, Hashable, CustomStringConvertible {
    /// The Prometheus type of a metric and the swift-metrics instrument it is recorded with.
    public enum Kind: String, Sendable, Hashable {
        /// A monotonic count (`Counter`); its name ends in `_total`.
        case counter
        /// A value set from the agent's state (`Gauge`).
        case gauge
        /// A histogram of durations in seconds (`Timer`), with ``AgentMetrics/latencyBuckets``.
        case durationHistogram
        /// A histogram of plain values (`Recorder` with aggregation), with ``AgentMetrics/commitSizeBuckets``.
        case valueHistogram
    }

    /// The metric's name, as the exposition prints it.
    public let name: String
    /// Its type.
    public let kind: Kind
    /// The names of its labels (a histogram's `le` aside).
    public let labels: [String]
    /// Its help text: one line, for the exposition's `# HELP` (the same for every series of the
    /// name, as Prometheus registries require).
    public let help: String

    /// A descriptor.
    public init(_ name: String, _ kind: Kind, labels: [String] = [], help: String) {
        self.name = name
        self.kind = kind
        self.labels = labels
        self.help = help
    }

    /// The metric's name.
    public var description: String { name }
}

extension MetricDescriptor {
    // MARK: Ingest and commit

    /// `ferry_events_accepted_total`.
    public static let eventsAccepted = MetricDescriptor(
        "ferry_events_accepted_total", .counter, help: "Events stored and acked accepted (held events included).")
    /// `ferry_events_duplicate_total`.
    public static let eventsDuplicate = MetricDescriptor(
        "ferry_events_duplicate_total", .counter, help: "Events answered duplicate.")
    /// `ferry_events_rejected_total{reason}`.
    public static let eventsRejected = MetricDescriptor(
        "ferry_events_rejected_total", .counter, labels: ["reason"], help: "Events rejected, by reason.")
    /// `ferry_events_blocked_total{stage}` (`ingest`, `send`).
    public static let eventsBlocked = MetricDescriptor(
        "ferry_events_blocked_total", .counter, labels: ["stage"], help: "Events refused by consent, at ingest or at send time.")
    /// `ferry_events_suppressed_total`.
    public static let eventsSuppressed = MetricDescriptor(
        "ferry_events_suppressed_total", .counter, help: "Local-only events answered suppressed.")
    /// `ferry_events_held_total`.
    public static let eventsHeldTotal = MetricDescriptor(
        "ferry_events_held_total", .counter, help: "Events put in the held area.")
    /// `ferry_events_quarantined_total`.
    public static let eventsQuarantinedTotal = MetricDescriptor(
        "ferry_events_quarantined_total", .counter, help: "Events that broke the tracking plan put in the quarantine.")
    /// `ferry_plan_violations_total{event,rule}`.
    public static let planViolations = MetricDescriptor(
        "ferry_plan_violations_total", .counter, labels: ["event", "rule"],
        help: "Tracking plan violations found at ingest, by the plan's event and the broken rule.")
    /// `ferry_events_redacted_total`.
    public static let eventsRedacted = MetricDescriptor(
        "ferry_events_redacted_total", .counter, help: "Events redaction changed before they were stored.")
    /// `ferry_quarantined_events`.
    public static let quarantinedEvents = MetricDescriptor(
        "ferry_quarantined_events", .gauge, help: "Events in the quarantine now.")
    /// `ferry_events_dropped_total`.
    public static let eventsDropped = MetricDescriptor(
        "ferry_events_dropped_total", .counter, help: "Undelivered events deleted by the drop-oldest policy.")
    /// `ferry_messages_refused_total`.
    public static let messagesRefused = MetricDescriptor(
        "ferry_messages_refused_total", .counter, help: "Whole messages answered with an error reply.")
    /// `ferry_messages_denied_total`.
    public static let messagesDenied = MetricDescriptor(
        "ferry_messages_denied_total", .counter, help: "Messages and control requests refused by the access policy.")
    /// `ferry_client_events_lost_total{source}`.
    public static let clientEventsLost = MetricDescriptor(
        "ferry_client_events_lost_total", .counter, labels: ["source"],
        help: "Client events lost (gaps in session sequences), by source.")
    /// `ferry_ack_latency_seconds`.
    public static let ackLatency = MetricDescriptor(
        "ferry_ack_latency_seconds", .durationHistogram, help: "Seconds from a message received to its ack sent.")
    /// `ferry_commit_events` (its `_count` is the number of group commits).
    public static let commitEvents = MetricDescriptor(
        "ferry_commit_events", .valueHistogram, help: "Events stored per group commit.")
    /// `ferry_fsync_seconds`.
    public static let fsync = MetricDescriptor(
        "ferry_fsync_seconds", .durationHistogram, help: "Seconds of the fdatasyncs of one group commit.")

    // MARK: State

    /// `ferry_held_events`: the held area now. Named like the other gauges of a number of events
    /// (`ferry_queue_events`, `ferry_sink_backlog_events`), and apart from the counter
    /// `ferry_events_held_total`, whose OpenMetrics family name is `ferry_events_held`.
    public static let eventsHeld = MetricDescriptor(
        "ferry_held_events", .gauge, help: "Events in the held area now.")
    /// `ferry_queue_events`.
    public static let queueEvents = MetricDescriptor(
        "ferry_queue_events", .gauge, help: "Events not yet delivered to every sink.")
    /// `ferry_queue_bytes`.
    public static let queueBytes = MetricDescriptor(
        "ferry_queue_bytes", .gauge, help: "Bytes of the log's segments.")
    /// `ferry_queue_oldest_age_seconds`.
    public static let queueOldestAge = MetricDescriptor(
        "ferry_queue_oldest_age_seconds", .gauge, help: "Age in seconds of the oldest undelivered event, 0 when empty.")
    /// `ferry_clients_connected`.
    public static let clientsConnected = MetricDescriptor(
        "ferry_clients_connected", .gauge, help: "Ingest connections now.")

    // MARK: Sinks

    /// `ferry_sink_delivered_total{sink}`.
    public static let sinkDelivered = MetricDescriptor(
        "ferry_sink_delivered_total", .counter, labels: ["sink"], help: "Events the sink acknowledged (replays included).")
    /// `ferry_sink_failures_total{sink}`.
    public static let sinkFailures = MetricDescriptor(
        "ferry_sink_failures_total", .counter, labels: ["sink"], help: "Failed delivery attempts.")
    /// `ferry_sink_retried_total{sink}`.
    public static let sinkRetried = MetricDescriptor(
        "ferry_sink_retried_total", .counter, labels: ["sink"], help: "Failed delivery attempts that were retried.")
    /// `ferry_sink_dead_lettered_total{sink}`.
    public static let sinkDeadLettered = MetricDescriptor(
        "ferry_sink_dead_lettered_total", .counter, labels: ["sink"], help: "Events written to the dead-letter directory.")
    /// `ferry_sink_skipped_total{sink,reason}` (``SinkSkipReason``: `route`, `consent_denied`, …).
    public static let sinkSkipped = MetricDescriptor(
        "ferry_sink_skipped_total", .counter, labels: ["sink", "reason"],
        help: "Events the sink passed by because its route or consent requirement does not let it have them, by reason.")
    /// `ferry_sink_backlog_events{sink}`.
    public static let sinkBacklog = MetricDescriptor(
        "ferry_sink_backlog_events", .gauge, labels: ["sink"], help: "Events the sink has still to take.")
    /// `ferry_sink_circuit_open{sink}`.
    public static let sinkCircuitOpen = MetricDescriptor(
        "ferry_sink_circuit_open", .gauge, labels: ["sink"], help: "1 while the sink's circuit is open or half-open, else 0.")
    /// `ferry_delivery_latency_seconds{sink}`.
    public static let deliveryLatency = MetricDescriptor(
        "ferry_delivery_latency_seconds", .durationHistogram, labels: ["sink"],
        help: "Seconds from an event accepted to its delivery, per event.")

    // MARK: Erasure upstream

    /// `ferry_erasures_pending`.
    public static let erasuresPending = MetricDescriptor(
        "ferry_erasures_pending", .gauge, help: "Upstream erasure requests not yet sent or failed, counted once per sink.")
    /// `ferry_erasure_requests_total{sink,outcome}` (`sent`, `failed`, `retried`).
    public static let erasureRequests = MetricDescriptor(
        "ferry_erasure_requests_total", .counter, labels: ["sink", "outcome"],
        help: "Upstream erasure requests by sink and outcome (sent, failed, retried: an attempt that failed and is retried).")

    /// Every metric of the agent core, in the order of `docs/METRICS.md` (the deprecated ones too:
    /// they are exported until they are removed). An ingest path's metrics are its kind's
    /// (``IngestPathKind/metrics``; the HTTP API's `ferry_http_*`).
    public static let catalog: [MetricDescriptor] = [
        eventsAccepted, eventsDuplicate, eventsRejected, eventsBlocked, eventsSuppressed, eventsHeldTotal, eventsQuarantinedTotal, planViolations,
        eventsRedacted, quarantinedEvents, eventsDropped, messagesRefused, messagesDenied, clientEventsLost, eventsHeld, queueEvents, queueBytes, queueOldestAge,
        clientsConnected, ackLatency, commitEvents, fsync, sinkDelivered, sinkFailures, sinkRetried, sinkDeadLettered,
        sinkSkipped, sinkBacklog, sinkCircuitOpen, deliveryLatency, erasuresPending, erasureRequests,
    ] + deprecated

    /// The metrics kept one release under an earlier name, removed in the next (METRICS.md says
    /// which replaces each). None now: the gauge `ferry_events_held` (now `ferry_held_events`)
    /// was removed in this release.
    public static let deprecated: [MetricDescriptor] = []

    /// The family name OpenMetrics gives the metric: a counter's without its `_total`. Two
    /// metrics of the catalog never share one.
    public var openMetricsFamily: String {
        kind == .counter && name.hasSuffix("_total") ? String(name.dropLast("_total".count)) : name
    }

    /// The descriptor of the metric `name`, if the agent has one.
    public static func named(_ name: String) -> MetricDescriptor? { catalog.first { $0.name == name } }
}
