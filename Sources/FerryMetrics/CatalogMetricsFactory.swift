import CoreMetrics
import FerryAgent
import Prometheus

/// A swift-metrics factory over a swift-prometheus registry that gives each family of the
/// agent's catalog (``MetricDescriptor/catalog``) its help text, so the exposition has a `# HELP`
/// line beside every `# TYPE` line.
///
/// swift-prometheus's own factory registers every instrument with an empty help text (the
/// swift-metrics API has no place for one), and its registry `fatalError`s when one name is
/// registered with two help texts. So help comes from one place: every instrument of a catalog
/// name is made here, always with that name's help; names outside the catalog (another library's
/// instruments) go to the base factory unchanged.
struct CatalogMetricsFactory: MetricsFactory {
    /// Buckets, sanitising and the registry; what the catalog does not describe goes here.
    let base: PrometheusMetricsFactory
    /// Help text by metric name.
    let help: [String: String]

    init(base: PrometheusMetricsFactory, catalog: [MetricDescriptor] = MetricDescriptor.catalog) {
        self.base = base
        self.help = Dictionary(catalog.map { ($0.name, $0.help) }, uniquingKeysWith: { first, _ in first })
    }

    private func descriptor(_ label: String) -> MetricNameDescriptor? {
        help[label].map { MetricNameDescriptor(metricName: label, unitName: "", helpText: $0) }
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        guard let descriptor = descriptor(label) else { return base.makeCounter(label: label, dimensions: dimensions) }
        return base.registry.makeCounter(descriptor: descriptor, labels: dimensions)
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        guard let descriptor = descriptor(label) else {
            return base.makeFloatingPointCounter(label: label, dimensions: dimensions)
        }
        return base.registry.makeCounter(descriptor: descriptor, labels: dimensions)
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        guard let descriptor = descriptor(label) else {
            return base.makeRecorder(label: label, dimensions: dimensions, aggregate: aggregate)
        }
        guard aggregate else { return base.registry.makeGauge(descriptor: descriptor, labels: dimensions) }
        let buckets = base.valueHistogramBuckets[label] ?? base.defaultValueHistogramBuckets
        return base.registry.makeValueHistogram(descriptor: descriptor, labels: dimensions, buckets: buckets)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        guard let descriptor = descriptor(label) else { return base.makeMeter(label: label, dimensions: dimensions) }
        return base.registry.makeGauge(descriptor: descriptor, labels: dimensions)
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        guard let descriptor = descriptor(label) else { return base.makeTimer(label: label, dimensions: dimensions) }
        let buckets = base.durationHistogramBuckets[label] ?? base.defaultDurationHistogramBuckets
        return base.registry.makeDurationHistogram(descriptor: descriptor, labels: dimensions, buckets: buckets)
    }

    func destroyCounter(_ handler: any CounterHandler) { base.destroyCounter(handler) }
    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) { base.destroyFloatingPointCounter(handler) }
    func destroyRecorder(_ handler: any RecorderHandler) { base.destroyRecorder(handler) }
    func destroyMeter(_ handler: any MeterHandler) { base.destroyMeter(handler) }
    func destroyTimer(_ handler: any TimerHandler) { base.destroyTimer(handler) }
}
