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
        out.append("### Durable ingest (acked events/s)\n")
        out.append("| clients | body B | Ferry | raw ZeroMQ (a) | SQLite/GRDB (c) | Ferry/(a) | Ferry/(c) | Ferry runs |")
        out.append("|---|---|---|---|---|---|---|---|")
        for row in summary["ingest"] as? [[String: Any]] ?? [] {
            out.append("| \(row["clients"] ?? "") | \(row["size"] ?? "") | \(n(row["ferry_median"])) | \(n(row["zmq_median"])) | \(n(row["sqlite_median"])) | \(r(row["ferry_over_zmq"])) | \(r(row["ferry_over_sqlite"])) | \(list(row["ferry"])) |")
        }
        out.append("\n### Disk ceiling (b), one writer\n")
        out.append("| body B | record B | fdatasync per append (events/s) | one sync per MiB (events/s) | MiB/s |")
        out.append("|---|---|---|---|---|")
        for row in summary["disk"] as? [[String: Any]] ?? [] {
            out.append("| \(row["size"] ?? "") | \(row["record_bytes"] ?? "") | \(n(row["fdatasync_per_append"])) | \(n(row["sync_per_mib"])) | \(n(row["sync_per_mib_mib_s"])) |")
        }
        out.append("\n### Ack latency at fixed offered load (reference max \(n(summary["latency_reference_rate"])) events/s, 256 B)\n")
        out.append("| load | offered/s | achieved/s | p50 µs | p99 µs | p99.9 µs | max µs |")
        out.append("|---|---|---|---|---|---|---|")
        for row in summary["latency"] as? [[String: Any]] ?? [] {
            out.append("| \(Int(((row["fraction"] as? Double) ?? 0) * 100))% | \(n(row["offered_rate"])) | \(n(row["achieved_rate"])) | \(n(row["p50_us"])) | \(n(row["p99_us"])) | \(n(row["p999_us"])) | \(n(row["max_us"])) |")
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
        out.append("\n### Memory: ferryd VmHWM with delivery blocked (after 4 clients ingest)\n")
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
        for (key, label) in [("file", "file"), ("http", "HTTP, gzip off"), ("http_gzip", "HTTP, gzip on"), ("jetstream", "JetStream (1 node)")] {
            guard let row = delivery[key] as? [String: Any] else { continue }
            let runs = (row["rates"] as? [Double] ?? []).map { n($0) }.joined(separator: ", ")
            out.append("| \(label) | \(row["events"] ?? "") | \(n(row["median"])) | \(runs) |")
        }
        out.append("\nWall time: \(n(summary["wall_seconds"])) s")
        return out.joined(separator: "\n")
    }
}
