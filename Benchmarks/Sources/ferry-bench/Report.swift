import Foundation

/// Renders the JSON summary as markdown tables (what docs/BENCHMARKS.md quotes).
struct Report {
    let summary: [String: Any]
    init(_ summary: [String: Any]) { self.summary = summary }

    func n(_ value: Any?) -> String {
        guard let value = value as? Double, value.isFinite else { return "–" }
        return Int(value.rounded()).formatted(.number.grouping(.automatic)).replacingOccurrences(of: ",", with: " ")
    }
    func r(_ value: Any?) -> String {
        guard let value = value as? Double, value.isFinite else { return "–" }
        return String(format: "%.2f", value)
    }
    func list(_ value: Any?) -> String { (value as? [Double])?.map { n($0) }.joined(separator: ", ") ?? "" }

    func markdown() -> String {
        var out: [String] = []
        let machine = summary["machine"] as? [String: Any] ?? [:]
        out.append("Mode: \(summary["mode"] ?? "?"), \(summary["runs"] ?? "?") run(s) per cell, medians. Machine: \(machine["cores"] ?? "?") cores, \(machine["cpu"] ?? "?"); load average at start \(machine["loadavg_at_start"] ?? "?").\n")
        out.append("### Targets (issues 13, 24, 30, 36): ratios measured in this run\n")
        out.append("| row | target | measured | ratio | bound | verdict |")
        out.append("|---|---|---|---|---|---|")
        for row in summary["targets"] as? [[String: Any]] ?? [] {
            let verdict = row["verdict"] as? String ?? ""
            out.append("| `\(row["id"] ?? "")` | \(row["target"] ?? "") | \(row["measured"] ?? "") | \(r(row["ratio"])) | \(row["bound"] ?? "") | \(verdict == "missed" ? "**missed**" : verdict) |")
        }
        out.append("\n### Durable ingest (acked events/s) and its peers\n")
        if let current = summary["nats_current"] as? [String: Any] {
            out.append("JetStream peers: Debian's nats-server 2.9 (default sync); \(current["version"] ?? "?") default (fsync every 2 min); the same with `sync_interval: always` (verified in /varz).\n")
        }
        out.append("| clients | body B | Ferry | JetStream 2.9 | JS 2.15 | JS 2.15 sync always | raw ZeroMQ (a) | disk, sync/MiB (b) | SQLite (c) | Ferry/JS 2.9 | Ferry/JS 2.15 | Ferry/JS 2.15 sync | Ferry/(a) | Ferry/(b) | ferryd CPU µs/event | Ferry runs |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for row in summary["ingest"] as? [[String: Any]] ?? [] {
            out.append("| \(row["clients"] ?? "") | \(row["size"] ?? "") | \(n(row["ferry_median"])) | \(n(row["jetstream_median"])) | \(n(row["jetstream_current_median"])) | \(n(row["jetstream_current_sync_median"])) | \(n(row["zmq_median"])) | \(n(row["disk_median"])) | \(n(row["sqlite_median"])) | \(r(row["ferry_over_jetstream"])) | \(r(row["ferry_over_jetstream_current"])) | \(r(row["ferry_over_jetstream_current_sync"])) | \(r(row["ferry_over_zmq"])) | \(r(row["ferry_over_disk"])) | \(r(row["cpu_us_per_event_median"])) | \(list(row["ferry"])) |")
        }
        if let latency = summary["latency"] as? [String: Any] {
            let sync = (summary["fdatasync_us"] as? [String: Any])?["median"]
            out.append("\n### Ack latency, track() to ack: \(latency["processes"] ?? "?") FerryClient processes, Poisson arrivals, \(latency["size"] ?? "?") B, client defaults: send delay \(r(latency["send_delay_ms"])) ms (maximum \(n(latency["maximum"])) events/s; fdatasync \(n(sync)) µs)\n")
            out.append("| load | offered/s | achieved/s | p50 µs | p99 µs | p99.9 µs |")
            out.append("|---|---|---|---|---|---|")
            for row in latency["loads"] as? [[String: Any]] ?? [] {
                out.append("| \(Int(((row["fraction"] as? Double) ?? 0) * 100))% | \(n(row["offered_rate"])) | \(n(row["achieved_rate"])) | \(n(row["p50_us"])) | \(n(row["p99_us"])) | \(n(row["p999_us"])) |")
            }
        }
        if let raw = summary["latency_one_per_message"] as? [String: Any] {
            out.append("\nOne event per message (raw DEALER) offered at \(n(raw["offered_rate"]))/s: sent \(n(raw["achieved_rate"]))/s, acked \(n(raw["ack_rate"]))/s, p50 \(n(raw["p50_us"])) µs, p99 \(n(raw["p99_us"])) µs, p99.9 \(n(raw["p999_us"])) µs.")
        }
        out.append("\n### Recovery: ferryd start to first ack (ms)\n")
        out.append("| backlog events | after clean stop | after kill -9 |")
        out.append("|---|---|---|")
        if let empty = (summary["memory"] as? [[String: Any]])?.first(where: { $0["backlog"] as? Int == 0 }) {
            out.append("| 0 (fresh data directory) | \(r(empty["first_ack_ms"])) | – |")
        }
        for row in summary["recovery"] as? [[String: Any]] ?? [] {
            out.append("| \(n((row["backlog"] as? Int).map(Double.init))) | \(r(row["clean_median_ms"])) | \(r(row["kill9_median_ms"])) |")
        }
        out.append("\n### Memory: ferryd VmHWM with delivery blocked (after 16 clients ingest 1 KiB events)\n")
        out.append("| backlog events | VmHWM MiB after start | VmHWM MiB after ingest | VmRSS MiB | delivery blocked |")
        out.append("|---|---|---|---|---|")
        for row in summary["memory"] as? [[String: Any]] ?? [] {
            func mib(_ key: String) -> String { String(format: "%.1f", Double(row[key] as? Int ?? 0) / 1024) }
            out.append("| \(n((row["backlog"] as? Int).map(Double.init))) | \(mib("hwm_kib_after_start")) | \(mib("hwm_kib")) | \(mib("rss_kib")) | \(row["delivery_blocked"] ?? "") |")
        }
        let delivery = summary["delivery"] as? [String: Any] ?? [:]
        out.append("\n### Delivery\n")
        out.append("| sink | events | events/s (median) | runs |")
        out.append("|---|---|---|---|")
        for (key, label) in [("file", "file"), ("http", "HTTP (nginx 204), gzip off"), ("http_gzip", "HTTP (nginx 204), gzip on"), ("jetstream", "JetStream (1 node)"), ("jetstream_batched", "JetStream (1 node), 100 events/message")] {
            guard let row = delivery[key] as? [String: Any] else { continue }
            let runs = (row["rates"] as? [Double] ?? []).map { n($0) }.joined(separator: ", ")
            out.append("| \(label) | \(row["events"] ?? "") | \(n(row["median"])) | \(runs) |")
        }
        if let sustain = summary["sustainable"] as? [String: Any] {
            out.append("\n### Sustainable throughput: file + HTTP sinks live, 4 FerryClient processes, 256 B, Poisson (max ingest \(n(sustain["max_ingest"])) events/s)\n")
            out.append("Sustained: \(n(sustain["sustained_rate"])) events/s; lowest rate not sustained: \(n(sustain["lowest_failed_rate"])). A probe sustains when every sink's backlog slope ≤ \(r(sustain["growth_fraction"].map { ($0 as? Double ?? 0) * 100 }))% of the offered rate and ferryd accepts ≥ \(r(sustain["accepted_fraction"].map { ($0 as? Double ?? 0) * 100 }))% of it.\n")
            out.append("| probe | offered/s | accepted/s | file backlog slope/s | HTTP backlog slope/s | largest backlog | seconds | sustained |")
            out.append("|---|---|---|---|---|---|---|---|")
            for (i, probe) in (sustain["probes"] as? [[String: Any]] ?? []).enumerated() {
                let slopes = probe["backlog_slopes"] as? [String: Double] ?? [:]
                let largest = (probe["max_backlog"] as? [String: Int] ?? [:]).values.max().map(Double.init)
                out.append("| \(i + 1) | \(n(probe["offered_rate"])) | \(n(probe["accepted_rate"])) | \(n(slopes["file"])) | \(n(slopes["http"])) | \(n(largest)) | \(r(probe["seconds"])) | \(probe["sustained"] as? Bool == true ? "yes" : (probe["stopped_early"] as? Bool == true ? "no (stopped early)" : "no")) |")
            }
        }
        out.append(contentsOf: fleetMarkdown())
        out.append(contentsOf: cpuMarkdown())
        out.append(contentsOf: round5Markdown())
        out.append("\nWall time: \(n(summary["wall_seconds"])) s")
        return out.joined(separator: "\n")
    }
}
