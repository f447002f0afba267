import FerryMetricSamples
import FerryProtocol
import Foundation

/// One poll of the agent for `ferry top`: the fields of the status document the view shows,
/// read leniently so that figures a newer agent adds (latencies, clients, per-sink oldest age)
/// appear as soon as the status document carries them, and "-" until then.
struct TopSample {
    /// When the sample was taken (monotonic), for rates.
    var at: ContinuousClock.Instant
    var pid: Int
    var uptimeMilliseconds: Int
    var runtimeDirectory: String
    var counters: [String: Int]
    var queueEvents: Int
    var queueBytes: Int
    var queueSegments: Int
    var oldestMilliseconds: Int?
    var heldEvents: Int?
    var clients: Int?
    /// The local HTTP API: requests answered and events taken (by listener, summed), open
    /// connections by listener (`ferry_http_*`); nil from an agent without them.
    var httpRequests: Int?
    var httpEvents: Int?
    var httpConnections: [String: Int]?
    /// Ack latency over the agent's last interval, when the status document has it.
    var ackP50Milliseconds: Double?
    var ackP99Milliseconds: Double?
    /// Time of the last group commit's fdatasync, when the status document has it.
    var fsyncMilliseconds: Double?
    var sinks: [SinkSample]
    /// The cumulative ack-latency and fsync histograms from the agent's metrics, for figures over
    /// the last interval (the difference of two polls).
    var ackHistogram: MetricSamples.Histogram?
    var fsyncHistogram: MetricSamples.Histogram?

    /// Adds what the agent's metrics (`ferry metrics`' exposition) tell: connected clients and
    /// the latency histograms.
    mutating func add(metrics: MetricSamples) {
        if let connected = metrics.value("ferry_clients_connected") { clients = Int(connected) }
        let connections = metrics.values("ferry_http_connections", by: "listener")
        if !connections.isEmpty {
            httpConnections = connections.mapValues { Int($0) }
            httpRequests = Int(metrics.sum("ferry_http_requests_total"))
            httpEvents = Int(metrics.values("ferry_http_events_total", by: "outcome")["accepted"] ?? 0)
        }
        ackHistogram = metrics.histogram("ferry_ack_latency_seconds")
        fsyncHistogram = metrics.histogram("ferry_fsync_seconds")
    }

    /// `current - previous` of a cumulative histogram: the observations of the last interval.
    static func interval(_ current: MetricSamples.Histogram?, _ previous: MetricSamples.Histogram?) -> MetricSamples.Histogram? {
        guard let current else { return nil }
        guard let previous, previous.buckets.count == current.buckets.count else { return current }
        let buckets = zip(current.buckets, previous.buckets).map { .init(upperBound: $0.upperBound, count: $0.count - $1.count) }
            as [MetricSamples.Histogram.Bucket]
        return MetricSamples.Histogram(buckets: buckets, sum: current.sum - previous.sum, count: current.count - previous.count)
    }

    /// One sink's figures.
    struct SinkSample {
        var name: String
        var type: String
        var state: String
        var circuit: String
        var backlog: Int
        var delivered: Int
        var deadLettered: Int
        /// Events the sink passed by (its route or consent requirement), every reason.
        var skipped: Int = 0
        var oldestMilliseconds: Int?
    }

    /// Reads a status reply (the `status` control op's JSON object).
    init(json: [UInt8], at: ContinuousClock.Instant) throws {
        guard let object = try JSONSerialization.jsonObject(with: Data(json)) as? [String: Any] else {
            throw CLIError.message("the agent sent an unreadable status document")
        }
        self.at = at
        pid = Self.int(object["pid"]) ?? 0
        uptimeMilliseconds = Self.int(object["uptime_ms"]) ?? 0
        runtimeDirectory = object["runtime_dir"] as? String ?? ""
        var counters: [String: Int] = [:]
        for (key, value) in object["counters"] as? [String: Any] ?? [:] {
            if let number = Self.int(value) { counters[key] = number }
        }
        self.counters = counters
        let queue = object["queue"] as? [String: Any] ?? [:]
        queueEvents = Self.int(queue["events"]) ?? 0
        queueBytes = Self.int(queue["bytes"]) ?? 0
        queueSegments = Self.int(queue["segments"]) ?? 0
        oldestMilliseconds = Self.int(queue["oldest_undelivered_age_ms"])
        heldEvents = Self.int((object["consent"] as? [String: Any])?["held_events"])
        clients = Self.int(object["clients"]) ?? Self.int((object["clients"] as? [String: Any])?["connected"])
        let latency = object["latency"] as? [String: Any] ?? [:]
        let ack = latency["ack"] as? [String: Any] ?? [:]
        ackP50Milliseconds = Self.double(ack["p50_ms"])
        ackP99Milliseconds = Self.double(ack["p99_ms"])
        let fsync = latency["fsync"] as? [String: Any] ?? [:]
        fsyncMilliseconds = Self.double(fsync["last_ms"]) ?? Self.double(fsync["p50_ms"])
        sinks = (object["sinks"] as? [[String: Any]] ?? []).map { sink in
            SinkSample(
                name: sink["name"] as? String ?? "?", type: sink["type"] as? String ?? "?",
                state: sink["state"] as? String ?? "?", circuit: sink["circuit"] as? String ?? "?",
                backlog: Self.int(sink["backlog_events"]) ?? 0, delivered: Self.int(sink["delivered"]) ?? 0,
                deadLettered: Self.int(sink["dead_lettered"]) ?? 0,
                skipped: (sink["skipped"] as? [String: Any] ?? [:]).values.reduce(0) { $0 + (Self.int($1) ?? 0) },
                oldestMilliseconds: Self.int(sink["oldest_age_ms"])
            )
        }
    }

    private static func int(_ value: Any?) -> Int? {
        (value as? NSNumber)?.intValue
    }

    private static func double(_ value: Any?) -> Double? { (value as? NSNumber)?.doubleValue }
}

/// Draws `ferry top`'s screen: pure text, one line per row, cut to the terminal's width.
enum TopView {
    /// The counters shown as rates, in order, with their labels.
    static let rateCounters: [(key: String, label: String)] = [
        ("accepted", "accepted"), ("blocked", "blocked"), ("held", "held"), ("suppressed", "suppressed"),
        ("rejected", "rejected"), ("duplicate", "duplicate"),
    ]

    /// The frame for `current`, with rates against `previous` ("-" without one), fitted to
    /// `width` × `height` (at least 80 × 24 is the target; smaller terminals lose the bottom rows).
    static func frame(current: TopSample, previous: TopSample?, width: Int, height: Int, now: Date = Date()) -> [String] {
        let seconds = previous.map { previous in
            let interval = previous.at.duration(to: current.at).components
            return Double(interval.seconds) + Double(interval.attoseconds) / 1e18
        } ?? 0
        func rate(_ now: Int?, _ before: Int?) -> String {
            guard let now, let before, seconds > 0 else { return "-" }
            return number(Double(max(0, now - before)) / seconds)
        }

        var lines: [String] = []
        let clock = Self.clock(now)
        let title = "ferry top  ferryd pid \(current.pid)  up \(duration(current.uptimeMilliseconds))"
        lines.append(title + String(repeating: " ", count: max(1, width - title.count - clock.count)) + clock)
        lines.append("agent \(current.runtimeDirectory)")
        lines.append("")
        let rates = rateCounters.map { "\($0.label) \(rate(current.counters[$0.key], previous?.counters[$0.key]))" }
        lines.append("events/s " + rates.prefix(3).joined(separator: "  "))
        lines.append("         " + rates.dropFirst(3).joined(separator: "  "))
        lines.append("queue    \(current.queueEvents) events  \(bytes(current.queueBytes)) in \(current.queueSegments) segments  oldest \(age(current.oldestMilliseconds))")
        lines.append("held     \(current.heldEvents.map(String.init) ?? "-") events  clients \(current.clients.map(String.init) ?? "-")")
        if let connections = current.httpConnections {
            let open = connections.sorted { $0.key > $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            lines.append("http     requests/s \(rate(current.httpRequests, previous?.httpRequests))  accepted/s \(rate(current.httpEvents, previous?.httpEvents))  connections \(open)")
        }
        // Over the last interval, from the metrics' histograms (bucket upper bounds), else what
        // the status document says.
        let ack = TopSample.interval(current.ackHistogram, previous?.ackHistogram)
        let fsync = TopSample.interval(current.fsyncHistogram, previous?.fsyncHistogram)
        let p50 = ack?.quantileUpperBound(0.5).map { $0 * 1000 } ?? current.ackP50Milliseconds
        let p99 = ack?.quantileUpperBound(0.99).map { $0 * 1000 } ?? current.ackP99Milliseconds
        let fsyncMean = fsync.flatMap { $0.count > 0 ? $0.sum / $0.count * 1000 : nil } ?? current.fsyncMilliseconds
        lines.append("ack      p50 \(millis(p50))  p99 \(millis(p99))  fsync \(millis(fsyncMean))")
        lines.append("")
        lines.append(row(["SINK", "TYPE", "STATE", "CIRCUIT", "DELIV/S", "BACKLOG", "OLDEST", "DEAD", "SKIP"]))
        for sink in current.sinks {
            let before = previous?.sinks.first { $0.name == sink.name }
            lines.append(row([
                sink.name, sink.type, sink.state, sink.circuit, rate(sink.delivered, before?.delivered),
                String(sink.backlog), age(sink.oldestMilliseconds), String(sink.deadLettered), String(sink.skipped),
            ]))
        }
        if current.sinks.isEmpty { lines.append("(no sinks)") }

        // Fit: keep the last row for the key help, cut long lines.
        let help = "q quit" + (previous == nil ? "  (rates from the next refresh)" : "")
        let rows = max(1, height - 1)
        if lines.count > rows { lines = Array(lines.prefix(rows)) }
        while lines.count < rows { lines.append("") }
        lines.append(help)
        return lines.map { fit($0, width) }
    }

    /// Columns of `ferry top`'s sink table: widths that fit 80 columns.
    static let columns = [14, 10, 11, 10, 8, 8, 7, 5, 6]

    static func row(_ cells: [String]) -> String {
        zip(cells, columns).enumerated().map { index, pair in
            let (cell, width) = pair
            let cut = fit(cell, width - 1)
            // Text left-aligned, numbers right-aligned.
            return index < 4 ? cut.padding(toLength: width, withPad: " ", startingAt: 0)
                : String(repeating: " ", count: max(0, width - 1 - cut.count)) + cut + " "
        }.joined().trimmingTrailingSpaces()
    }

    static func fit(_ text: String, _ width: Int) -> String {
        text.count <= width ? text : String(text.prefix(max(0, width)))
    }

    static func number(_ value: Double) -> String {
        value >= 10_000 ? String(format: "%.0f", value) : String(format: "%.1f", value)
    }

    static func millis(_ value: Double?) -> String {
        guard let value else { return "-" }
        return value < 10 ? String(format: "%.2f ms", value) : String(format: "%.0f ms", value)
    }

    static func age(_ milliseconds: Int?) -> String {
        guard let milliseconds else { return "-" }
        if milliseconds < 1000 { return "\(milliseconds)ms" }
        return milliseconds < 10_000 ? String(format: "%.1fs", Double(milliseconds) / 1000) : duration(milliseconds)
    }

    static func duration(_ milliseconds: Int) -> String {
        let seconds = milliseconds / 1000
        if seconds < 60 { return "\(seconds)s" }
        if seconds < 3600 { return "\(seconds / 60)m\(String(format: "%02d", seconds % 60))s" }
        if seconds < 86_400 { return "\(seconds / 3600)h\(String(format: "%02d", seconds / 60 % 60))m" }
        return "\(seconds / 86_400)d\(String(format: "%02d", seconds / 3600 % 24))h"
    }

    static func bytes(_ count: Int) -> String {
        if count < 1024 { return "\(count) B" }
        if count < 1 << 20 { return String(format: "%.1f KiB", Double(count) / 1024) }
        if count < 1 << 30 { return String(format: "%.1f MiB", Double(count) / Double(1 << 20)) }
        return String(format: "%.1f GiB", Double(count) / Double(1 << 30))
    }

    static func clock(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm:ss"
        return formatter.string(from: date)
    }
}

extension String {
    fileprivate func trimmingTrailingSpaces() -> String {
        var text = self
        while text.last == " " { text.removeLast() }
        return text
    }
}
