#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryStorage
import Synchronization

/// The `status` reply (`ferry status`): the log's figures, the counters of the metric store
/// (read directly, never parsed back from the exposition), each sink's delivery state and
/// circuit (its breaker's), the consent state and what recovery found.
struct AgentStatusReport: Sendable {
    /// The configuration the agent started with.
    let configuration: AgentConfiguration
    /// Agent ms at construction (the uptime's start).
    let startedAt: UInt64
    /// The agent's metric store.
    let metrics: AgentMetrics
    /// The ingest paths it serves.
    let paths: [any IngestPath]
    /// The names of those that have figures of their own (not the ZeroMQ socket).
    var ingestPaths: [String] { paths.filter { $0.metricSet != nil }.map(\.name) }

    /// The reply for the running agent `running`, as of now.
    func reply(_ running: RunningAgent) -> StatusReply {
        let log = running.log.status()
        let now = WallClock.unixMilliseconds()
        var oldestAge: Int?
        if log.undeliveredEvents > 0, let at = running.log.oldestUndeliveredAcceptedAt() {
            oldestAge = now >= at ? Int(now - at) : 0
        }
        let letters = DeadLetterStore(dataDirectory: configuration.dataDirectory)
        let sinks = zip(running.deliveries, running.sinks).map { delivery, configured -> StatusReply.Sink in
            let state = delivery.state.withLock { $0 }
            let circuit = delivery.circuitStatus
            let counts = metrics.sinkCounts(state.sink)
            let routing = delivery.routing
            var entry = StatusReply.Sink(
                name: state.sink, type: configured.type, state: state.phase.rawValue,
                circuit: circuit.state.rawValue, consecutiveFailures: circuit.consecutiveFailures,
                backlogEvents: log.backlog[state.sink] ?? 0, delivered: counts.delivered,
                retried: counts.retried, deadLettered: counts.deadLettered,
                cursor: log.cursors[state.sink]?.description,
                lastSuccessAt: state.lastSuccessAt.map { Int($0) }, lastError: state.lastError,
                retryAt: state.phase == .retrying ? state.retryAt.map { Int($0) } : nil,
                deadLetters: (try? letters.ids(sink: state.sink).count) ?? 0)
            entry.skipped = metrics.sinkSkipped(state.sink)
            entry.requiresConsent = routing.requiresConsent
            entry.route = routing.route?.summary
            return entry
        }
        return StatusReply(
            pid: Int(getpid()),
            protocolVersion: Int(ferryProtocolVersion),
            uptimeMilliseconds: Int(now - startedAt),
            runtimeDirectory: configuration.runtimeDirectory,
            dataDirectory: configuration.dataDirectory,
            queue: StatusReply.Queue(
                events: log.undeliveredEvents, bytes: Int(log.bytes), segments: log.segments,
                oldestUndeliveredAgeMilliseconds: oldestAge, cursor: log.cursor.description,
                verifyingSegments: log.unverifiedSegments, retentionMaxBytes: Int(clamping: configuration.log.retentionMaxBytes)),
            // The single-sink shape of earlier versions: the first sink.
            delivery: sinks.first.map { StatusReply.Delivery($0) },
            consent: running.consent.snapshot(),
            sinks: sinks,
            counters: metrics.snapshot,
            recovery: StatusReply.Recovery(
                events: running.recovery.records, corruptRegions: running.recovery.corruptRegions,
                corruptBytes: Int(running.recovery.corruptBytes), truncatedBytes: Int(running.recovery.truncatedBytes)),
            clientEventsLost: metrics.clientEventsLostBySource,
            ingestPaths: ingestPathFigures,
            ingestAddresses: paths.isEmpty ? nil : Dictionary(paths.map { ($0.name, $0.endpoint) }, uniquingKeysWith: { first, _ in first }))
    }

    /// The figures of the ingest paths served that have their own (not the ZeroMQ socket; nil when none is).
    private var ingestPathFigures: [String: [String: Int]]? {
        guard !ingestPaths.isEmpty else { return nil }
        return metrics.ingestPathCounts.filter { ingestPaths.contains($0.key) }
    }
}
