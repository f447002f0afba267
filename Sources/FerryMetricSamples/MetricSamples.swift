import FerryProtocol

/// One line of the Prometheus text exposition: `name{label="value",…} value`.
public struct MetricSample: Sendable, Hashable {
    /// The sample's name (for histograms `…_bucket`, `…_sum`, `…_count`).
    public var name: String
    /// Its labels (`le` included for histogram buckets).
    public var labels: [String: String]
    /// Its value (`+Inf`, `-Inf` and `NaN` as the matching `Double`s).
    public var value: Double

    /// A sample.
    public init(name: String, labels: [String: String] = [:], value: Double) {
        self.name = name
        self.labels = labels
        self.value = value
    }
}

/// The samples of a Prometheus text exposition (format 0.0.4), as `ferry metrics` and
/// `GET /metrics` serve it: tools such as `ferry top` read `ferry metrics` with it. (The agent
/// itself never reads its metrics back: `ferry status` counters are its own state.)
///
/// ```swift
/// let samples = MetricSamples(parsing: Array("ferry_events_accepted_total 42\n".utf8))
/// samples.value("ferry_events_accepted_total")   // 42
/// ```
///
/// Comment lines (`# TYPE`, `# HELP`) and lines it cannot read are skipped; timestamps after the
/// value are ignored.
public struct MetricSamples: Sendable, Hashable {
    /// Every sample, in the order of the text.
    public var samples: [MetricSample]

    /// Samples as given.
    public init(_ samples: [MetricSample]) { self.samples = samples }

    /// Reads the samples of an exposition.
    public init(parsing text: [UInt8]) {
        samples = []
        var start = 0
        while start < text.count {
            var end = start
            while end < text.count && text[end] != UInt8(ascii: "\n") { end += 1 }
            if let sample = Self.parseLine(text[start..<end]) { samples.append(sample) }
            start = end + 1
        }
    }

    /// The value of the sample `name` whose labels are exactly `labels`, if there is one.
    public func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    /// The sum of every sample named `name`, whatever its labels (0 when there is none).
    public func sum(_ name: String) -> Double {
        samples.reduce(0) { $1.name == name ? $0 + $1.value : $0 }
    }

    /// The samples named `name` by the value of their label `label` (samples without it are left
    /// out; equal label values are summed).
    public func values(_ name: String, by label: String) -> [String: Double] {
        var out: [String: Double] = [:]
        for sample in samples where sample.name == name {
            if let key = sample.labels[label] { out[key, default: 0] += sample.value }
        }
        return out
    }

    /// A histogram's cumulative buckets (upper bound → count, `+Inf` included), `_sum` and
    /// `_count`, for the series with `labels` (besides `le`); nil when there is no `_count`.
    public func histogram(_ name: String, _ labels: [String: String] = [:]) -> Histogram? {
        guard let count = value(name + "_count", labels) else { return nil }
        var buckets: [(upperBound: Double, count: Double)] = []
        for sample in samples where sample.name == name + "_bucket" {
            var rest = sample.labels
            guard let le = rest.removeValue(forKey: "le"), rest == labels, let bound = Self.number(Array(le.utf8)[...]) else { continue }
            buckets.append((bound, sample.value))
        }
        buckets.sort { $0.upperBound < $1.upperBound }
        return Histogram(buckets: buckets.map { .init(upperBound: $0.upperBound, count: $0.count) },
                         sum: value(name + "_sum", labels) ?? 0, count: count)
    }

    /// A histogram read from an exposition.
    public struct Histogram: Sendable, Hashable {
        /// One cumulative bucket: how many observations were at most `upperBound`.
        public struct Bucket: Sendable, Hashable {
            /// The bucket's `le`.
            public var upperBound: Double
            /// Observations at most ``upperBound``.
            public var count: Double
            /// Creates a bucket.
            public init(upperBound: Double, count: Double) {
                self.upperBound = upperBound
                self.count = count
            }
        }
        /// The buckets, by increasing bound.
        public var buckets: [Bucket]
        /// The sum of the observations.
        public var sum: Double
        /// How many observations there were.
        public var count: Double

        /// Creates a histogram.
        public init(buckets: [Bucket], sum: Double, count: Double) {
            self.buckets = buckets
            self.sum = sum
            self.count = count
        }

        /// The smallest bucket bound with at least `quantile` of the observations at or below it
        /// (nil when empty): an upper estimate, as precise as the buckets.
        public func quantileUpperBound(_ quantile: Double) -> Double? {
            guard count > 0 else { return nil }
            let rank = quantile * count
            return buckets.first { $0.count >= rank }?.upperBound
        }
    }

    // MARK: Parsing

    private static func parseLine(_ line: ArraySlice<UInt8>) -> MetricSample? {
        var i = line.startIndex
        func skipSpaces() { while i < line.endIndex && (line[i] == 0x20 || line[i] == 0x09) { i += 1 } }
        skipSpaces()
        guard i < line.endIndex, line[i] != UInt8(ascii: "#") else { return nil }
        let nameStart = i
        while i < line.endIndex && line[i] != UInt8(ascii: "{") && line[i] != 0x20 && line[i] != 0x09 { i += 1 }
        guard i > nameStart else { return nil }
        let name = String(decoding: line[nameStart..<i], as: UTF8.self)
        var labels: [String: String] = [:]
        if i < line.endIndex && line[i] == UInt8(ascii: "{") {
            i += 1
            while true {
                skipSpaces()
                guard i < line.endIndex else { return nil }
                if line[i] == UInt8(ascii: "}") { i += 1; break }
                let keyStart = i
                while i < line.endIndex && line[i] != UInt8(ascii: "=") { i += 1 }
                guard i < line.endIndex else { return nil }
                let key = String(decoding: line[keyStart..<i], as: UTF8.self).trimmingSpaces
                i += 1
                guard i < line.endIndex, line[i] == UInt8(ascii: "\"") else { return nil }
                i += 1
                var value: [UInt8] = []
                while i < line.endIndex && line[i] != UInt8(ascii: "\"") {
                    if line[i] == UInt8(ascii: "\\"), i + 1 < line.endIndex {
                        i += 1
                        value.append(line[i] == UInt8(ascii: "n") ? 0x0A : line[i])
                    } else {
                        value.append(line[i])
                    }
                    i += 1
                }
                guard i < line.endIndex else { return nil }
                i += 1
                labels[key] = String(decoding: value, as: UTF8.self)
                skipSpaces()
                if i < line.endIndex && line[i] == UInt8(ascii: ",") { i += 1 }
            }
        }
        skipSpaces()
        let valueStart = i
        while i < line.endIndex && line[i] != 0x20 && line[i] != 0x09 { i += 1 }
        guard let value = number(line[valueStart..<i]) else { return nil }
        return MetricSample(name: name, labels: labels, value: value)
    }

    private static func number(_ text: ArraySlice<UInt8>) -> Double? {
        switch String(decoding: text, as: UTF8.self) {
        case "+Inf", "Inf": return .infinity
        case "-Inf": return -.infinity
        case "NaN": return .nan
        case let other: return Double(other)
        }
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        var scalars = Substring(self)
        while scalars.first == " " { scalars.removeFirst() }
        while scalars.last == " " { scalars.removeLast() }
        return String(scalars)
    }
}

extension MetricsReply {
    /// The samples of ``MetricsReply/text``.
    public var samples: MetricSamples { MetricSamples(parsing: Array(text.utf8)) }
}
