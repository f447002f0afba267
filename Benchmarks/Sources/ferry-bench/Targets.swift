import Foundation

/// Issue 13's targets as rows (and those of issues 24, 30 and 36): each a ratio of two figures measured in the same run, the bound it
/// must meet, and the verdict (`met`, `missed`, `not measured` when its section did not run, or `superseded by` the row that
/// now bounds the same figure).
/// The rows go into the JSON summary (`targets`) and head the printed report.
struct Targets {
    let summary: [String: Any]
    init(_ summary: [String: Any]) { self.summary = summary }

    /// How a ratio is judged.
    enum Bound {
        case atLeast(Double), atMost(Double), below(Double)
        var text: String {
            switch self {
            case .atLeast(let v): "≥ \(Self.format(v))"
            case .atMost(let v): "≤ \(Self.format(v))"
            case .below(let v): "< \(Self.format(v))"
            }
        }
        func met(_ ratio: Double) -> Bool {
            switch self {
            case .atLeast(let v): ratio >= v
            case .atMost(let v): ratio <= v
            case .below(let v): ratio < v
            }
        }
        static func format(_ v: Double) -> String { v == v.rounded() ? String(Int(v)) : String(v) }
    }

    func row(_ id: String, _ target: String, measured: String, ratio: Double?, _ bound: Bound) -> [String: Any] {
        var row: [String: Any] = ["id": id, "target": target, "measured": measured, "bound": bound.text]
        if let ratio, ratio.isFinite {
            row["ratio"] = ratio
            row["verdict"] = bound.met(ratio) ? "met" : "missed"
        } else {
            row["verdict"] = "not measured"
        }
        return row
    }

    func d(_ value: Any?) -> Double? {
        if let v = value as? Double { return v }
        if let v = value as? Int { return Double(v) }
        return nil
    }
    func n(_ value: Double?) -> String {
        guard let value, value.isFinite else { return "–" }
        return Int(value.rounded()).formatted(.number.grouping(.automatic)).replacingOccurrences(of: ",", with: " ")
    }

    func rows() -> [[String: Any]] {
        var rows: [[String: Any]] = []
        let ingest = summary["ingest"] as? [[String: Any]] ?? []
        func cell(_ k: Int, _ size: Int) -> [String: Any]? {
            ingest.first { $0["clients"] as? Int == k && $0["size"] as? Int == size }
        }
        let cells = [1, 4, 16].flatMap { k in [64, 256, 1024].map { (k, $0) } }

        // 1. Ferry against the JetStream peer, every cell.
        for (k, size) in cells {
            let c = cell(k, size)
            let ferry = d(c?["ferry_median"]), js = d(c?["jetstream_median"])
            rows.append(row("1.jetstream.k\(k).\(size)B", "durable ingest ÷ JetStream, K=\(k), \(size) B",
                            measured: "\(n(ferry)) vs \(n(js)) events/s", ratio: ferry.flatMap { f in js.map { f / $0 } }, .atLeast(3)))
        }
        // 1 (issue 24, point 5). The same against the current nats-server (2.15) in both modes,
        // measured in the same rounds: its default (fsync every 2 minutes) and `sync_interval:
        // always` (fsync before every PubAck, as Ferry syncs before every ack).
        let version = ((summary["nats_current"] as? [String: Any])?["version"] as? String)?
            .replacingOccurrences(of: "nats-server: ", with: "") ?? "2.15"
        for (id, key, label) in [("js215", "jetstream_current", "default sync"), ("js215sync", "jetstream_current_sync", "sync_interval always")] {
            for (k, size) in cells {
                let c = cell(k, size)
                let ferry = d(c?["ferry_median"]), js = d(c?[key + "_median"])
                rows.append(row("1.\(id).k\(k).\(size)B", "durable ingest ÷ JetStream \(version) (\(label)), K=\(k), \(size) B",
                                measured: "\(n(ferry)) vs \(n(js)) events/s", ratio: ferry.flatMap { f in js.map { f / $0 } }, .atLeast(3)))
            }
        }
        // 2. Against the disk ceiling (one writer, one fdatasync per MiB, same record size), every cell.
        for (k, size) in cells {
            let c = cell(k, size)
            let ferry = d(c?["ferry_median"]), disk = d(c?["disk_median"])
            rows.append(row("2.disk.k\(k).\(size)B", "durable ingest ÷ disk ceiling, K=\(k), \(size) B",
                            measured: "\(n(ferry)) vs \(n(disk)) events/s", ratio: ferry.flatMap { f in disk.map { f / $0 } }, .atLeast(0.7)))
        }
        // 2. No collapse: 16/4 against raw ZeroMQ's 16/4, and ferryd's CPU per event 16 vs 4.
        for size in [64, 256, 1024] {
            let f16 = d(cell(16, size)?["ferry_median"]), f4 = d(cell(4, size)?["ferry_median"])
            let z16 = d(cell(16, size)?["zmq_median"]), z4 = d(cell(4, size)?["zmq_median"])
            var ratio: Double?
            if let f16, let f4, let z16, let z4 { ratio = (f16 / f4) / (z16 / z4) }
            let text = [f16, f4, z16, z4].allSatisfy { $0 != nil }
                ? String(format: "Ferry 16/4 %.2f, ZeroMQ 16/4 %.2f", f16! / f4!, z16! / z4!) : "–"
            rows.append(row("2.collapse.\(size)B", "(Ferry 16/4) ÷ (raw ZeroMQ 16/4), \(size) B", measured: text, ratio: ratio, .atLeast(0.9)))
        }
        for size in [64, 256, 1024] {
            let c16 = d(cell(16, size)?["cpu_us_per_event_median"]), c4 = d(cell(4, size)?["cpu_us_per_event_median"])
            let text = (c16 != nil && c4 != nil) ? String(format: "%.2f vs %.2f µs", c16!, c4!) : "–"
            rows.append(row("2.cpu.\(size)B", "ferryd CPU/event at 16 ÷ at 4 clients, \(size) B", measured: text,
                            ratio: c16.flatMap { a in c4.map { a / $0 } }, .atMost(1.2)))
        }
        // 3. Latency with the real client library.
        let latency = summary["latency"] as? [String: Any]
        let loads = latency?["loads"] as? [[String: Any]] ?? []
        func load(_ fraction: Double) -> [String: Any]? { loads.first { d($0["fraction"]) == fraction } }
        let p99at50 = d(load(0.5)?["p99_us"])
        rows.append(row("3.p99.50pct", "track()→ack p99 at 50% of max (\(n(d(latency?["maximum"])))/s) ÷ 2 ms",
                        measured: "\(n(p99at50)) µs", ratio: p99at50.map { $0 / 2000 }, .atMost(1)))
        let p50at10 = d(load(0.1)?["p50_us"]), sync = d((summary["fdatasync_us"] as? [String: Any])?["median"])
        rows.append(row("3.p50.10pct", "track()→ack p50 at 10% ÷ fdatasync latency",
                        measured: "\(n(p50at10)) vs \(n(sync)) µs", ratio: p50at10.flatMap { p in sync.map { p / $0 } }, .atMost(2)))
        let raw = summary["latency_one_per_message"] as? [String: Any]
        let sustained = d(raw?["ack_rate"]), rawP99 = d(raw?["p99_us"])
        rows.append(row("3.raw.rate", "one event per message: sustained ÷ 100 000 msg/s", measured: "\(n(sustained)) msg/s",
                        ratio: sustained.map { $0 / 100_000 }, .atLeast(0.99)))
        rows.append(row("3.raw.p99", "one event per message at 100 000/s: p99 ÷ 5 ms", measured: "\(n(rawP99)) µs",
                        ratio: rawP99.map { $0 / 5000 }, .atMost(1)))
        // 4. Delivery on a pre-written queue against the run's maximum ingest (256 B bodies).
        let maxIngest = ingest.filter { $0["size"] as? Int == 256 }.compactMap { d($0["ferry_median"]) }.max()
        let delivery = summary["delivery"] as? [String: Any] ?? [:]
        for (key, label, bound) in [("file", "file sink", 1.0), ("http", "HTTP sink (nginx 204, gzip off)", 1.0), ("jetstream", "JetStream sink", 0.5),
                                    ("jetstream_batched", "JetStream sink, 100 events/message", 1.0)] {
            let rate = d((delivery[key] as? [String: Any])?["median"])
            rows.append(row("4.delivery.\(key)", "\(label) ÷ max ingest (256 B)", measured: "\(n(rate)) vs \(n(maxIngest)) events/s",
                            ratio: rate.flatMap { r in maxIngest.map { r / $0 } }, .atLeast(bound)))
        }
        // 4 (issue 24, point 4). Latency with the file sink delivering: the latency section's runs
        // (delivery started, the default file sink), against absolute bounds.
        rows.append(row("4.latency.p99.50pct", "track()→ack p99 at 50% of max, file sink delivering ÷ 10 ms",
                        measured: "\(n(p99at50)) µs", ratio: p99at50.map { $0 / 10_000 }, .atMost(1)))
        rows.append(row("4.latency.p50.10pct", "track()→ack p50 at 10% of max, file sink delivering ÷ 1 ms",
                        measured: "\(n(p50at10)) µs", ratio: p50at10.map { $0 / 1000 }, .atMost(1)))
        // Both p50 rows were bounded for clients that send each event at once. Since round 5 the
        // clients linger for their send delay by default (issue 36), and `8.track.p50.10pct` bounds
        // the same p50 against that delay + 1 ms: with a delay, these two keep their figures and
        // ratios but give no verdict.
        if let delay = d(latency?["send_delay_ms"]), delay > 0 {
            for index in rows.indices where ["3.p50.10pct", "4.latency.p50.10pct"].contains(rows[index]["id"] as? String) {
                rows[index]["verdict"] = "superseded by 8.track.p50.10pct (send delay \(Bound.format(delay)) ms)"
            }
        }
        // 4 (issue 24, point 2). Sustainable throughput: the largest offered rate at which, with the
        // file and HTTP sinks live, no backlog grows (Sustained.swift), ÷ the run's maximum ingest
        // with no sink delivering.
        let sustain = summary["sustainable"] as? [String: Any]
        let sustainedRate = d(sustain?["sustained_rate"]), failed = d(sustain?["lowest_failed_rate"])
        let sustainMax = d(sustain?["max_ingest"])
        let probes = (sustain?["probes"] as? [[String: Any]] ?? []).count
        rows.append(row("4.sustained", "largest rate with file + HTTP sinks live and no backlog growing (\(n(d(sustain?["seconds"]))) s) ÷ max ingest",
                        measured: sustain == nil ? "–" : "\(sustainedRate.map { n($0) } ?? "none of \(probes) probes") vs \(n(sustainMax)) events/s (lowest failed \(n(failed)))",
                        ratio: sustain == nil ? nil : sustainMax.map { (sustainedRate ?? 0) / $0 }, .atLeast(0.7)))
        // 5. track() cost (ordo-one/benchmark).
        let cost = summary["client_cost"] as? [String: Any]
        let ns = d(cost?["median_ns"]), mallocs = d(cost?["mallocs"])
        rows.append(row("5.track.time", "track() median, 2 properties ÷ 1 µs", measured: "\(n(ns)) ns", ratio: ns.map { $0 / 1000 }, .atMost(1)))
        rows.append(row("5.track.allocs", "track() allocations, 2 properties ÷ 2", measured: "\(n(mallocs))",
                        ratio: mallocs.map { $0 / 2 }, .atMost(1)))
        // 6. First ack at the largest backlog measured, and peak memory under 16 × 1 KiB ingest.
        let recovery = (summary["recovery"] as? [[String: Any]] ?? []).max { (d($0["backlog"]) ?? 0) < (d($1["backlog"]) ?? 0) }
        let firstAck = d(recovery?["clean_median_ms"])
        rows.append(row("6.first-ack", "first ack after start, \(n(d(recovery?["backlog"])))-event backlog ÷ 50 ms",
                        measured: "\(firstAck.map { String(format: "%.1f", $0) } ?? "–") ms", ratio: firstAck.map { $0 / 50 }, .atMost(1)))
        let hwm = (summary["memory"] as? [[String: Any]] ?? []).compactMap { d($0["hwm_kib"]) }.max()
        rows.append(row("6.vmhwm", "VmHWM, 16 clients × 1 KiB, any backlog ÷ 64 MiB",
                        measured: "\(hwm.map { String(format: "%.1f", $0 / 1024) } ?? "–") MiB", ratio: hwm.map { $0 / 65536 }, .below(1)))
        // 7. CPU per event across the load range and the Python row (issue 30, CPUPerEvent.swift).
        rows += cpuRows()
        // 8. Round 5 (issue 36, Round5.swift).
        rows += round5Rows()
        return rows
    }
}

/// Reads the ClientCost benchmark's markdown output (`swift package benchmark --format
/// markdown`): the median wall clock and malloc count of `track()` with 2 properties, agent up.
func parseClientCost(path: String) -> [String: Any] {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return ["error": "cannot read \(path)"] }
    var result: [String: Any] = ["source": path]
    var inSection = false
    for line in text.split(separator: "\n") {
        if line.hasPrefix("#") || (!line.hasPrefix("|") && !line.hasPrefix("│")) {
            if line.contains("track() with 2 properties, agent up") { inSection = true } else if line.contains("track()") { inSection = false }
            continue
        }
        guard inSection else { continue }
        let cells = line.split(whereSeparator: { $0 == "|" || $0 == "│" }).map { $0.trimmingCharacters(in: .whitespaces) }
        guard cells.count >= 4, let p50 = Double(cells[3]) else { continue }
        let label = cells[0]
        var scale = 1.0
        if label.contains("(K)") { scale = 1e3 } else if label.contains("(M)") { scale = 1e6 }
        if label.hasPrefix("Time (wall clock)") {
            result["wall_clock_label"] = label
            if label.contains("(ns)") {
                result["median_ns"] = p50
            } else if result["median_ns"] == nil {
                // Coarser units round the median to a whole µs: derive it from the throughput.
                var unit = 1e3
                if label.contains("(ms)") { unit = 1e6 } else if label.contains("(s)") { unit = 1e9 }
                result["median_ns"] = p50 * unit
            }
        } else if label.hasPrefix("Throughput") {
            result["throughput_per_s"] = p50 * scale
            if !((result["wall_clock_label"] as? String)?.contains("(ns)") ?? false), p50 > 0 {
                result["median_ns"] = 1e9 / (p50 * scale)
            }
        } else if label.hasPrefix("Malloc (total)") {
            result["mallocs"] = p50 * scale
            result["malloc_label"] = label
        }
    }
    return result
}
