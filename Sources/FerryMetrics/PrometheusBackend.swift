import CoreMetrics
import FerryAgent
import Prometheus

/// The agent's Prometheus backend (swift-prometheus): a registry of its own — one per agent, so
/// agents in one process never share series — and a swift-metrics factory over it with Ferry's
/// histogram buckets (latencies 100 µs to 10 s in steps of at most 1.5×, events per commit in
/// powers of two) instead of swift-prometheus's defaults, which cannot tell 0.5 ms from 2 ms.
///
/// `ferryd` makes one and hands ``agentBackend`` to its agent:
///
/// ```swift
/// let metrics = PrometheusBackend()
/// let agent = FerryAgent(configuration: configuration, metrics: metrics.agentBackend, logger: logger)
/// print(String(decoding: metrics.exposition(), as: UTF8.self))   // ferry_events_accepted_total 0 …
/// ```
public struct PrometheusBackend: Sendable {
    /// The registry every instrument of ``factory`` lives in.
    public let registry: PrometheusCollectorRegistry
    /// The registry's swift-metrics factory with Ferry's buckets. It registers with an empty help
    /// text: the agent records through ``agentBackend``, whose factory gives each of its metrics
    /// the help text of its ``MetricDescriptor`` (`# HELP` in the exposition).
    public let factory: PrometheusMetricsFactory

    /// The metrics the agent records besides the core's catalog (its ingest paths' kinds'), whose
    /// help texts the exposition gives.
    public let metrics: [MetricDescriptor]

    /// A backend with a fresh registry, giving the help texts of the core's catalog and of
    /// `metrics` (the registered ingest path kinds', ``IngestPathRegistry/metrics``).
    public init(metrics: [MetricDescriptor] = []) {
        self.metrics = metrics
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        for name in AgentMetrics.latencyHistograms { factory.durationHistogramBuckets[name] = AgentMetrics.latencyBuckets }
        for name in AgentMetrics.sizeHistograms { factory.valueHistogramBuckets[name] = AgentMetrics.commitSizeBuckets }
        // Anything else recorded through this factory (another library's timers) gets the same
        // fine latency buckets rather than the coarse defaults.
        factory.defaultDurationHistogramBuckets = AgentMetrics.latencyBuckets
        self.registry = registry
        self.factory = factory
    }

    /// The Prometheus text exposition (format 0.0.4) of the registry.
    public func exposition() -> [UInt8] { registry.emitToBuffer() }

    /// What ``FerryAgent`` takes: this factory, with the catalog's help texts, and this exposition.
    public var agentBackend: AgentMetricsBackend {
        let registry = self.registry
        return AgentMetricsBackend(factory: CatalogMetricsFactory(base: factory, catalog: MetricDescriptor.catalog + metrics),
                                   exposition: { registry.emitToBuffer() })
    }
}
