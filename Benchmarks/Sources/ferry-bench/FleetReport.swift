import Foundation

extension Report {
    /// The fleet section's table: capacity and steady state, one event per message and 100.
    func fleetMarkdown() -> [String] {
        guard let fleet = summary["fleet"] as? [String: Any] else { return [] }
        var out: [String] = []
        out.append("\n### JetStream at fleet scale: \(fleet["agents"] ?? "?") ferryd → 3-node cluster (\(fleet["nats_server"] ?? "?"), R3 file stream, sync_interval always), figures at the cluster\n")
        out.append("| events/message | regime | events/s | messages/s | bytes/s | B/event stored | server CPU µs/message | server CPU µs/event | agents' backlog | notes |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for key in ["one_per_message", "batched", "batched_wait_1s"] {
            guard let mode = fleet[key] as? [String: Any] else { continue }
            let wait = mode["batch_max_wait_ms"] as? Int ?? 0
            let per = "\(mode["events_per_message"] ?? "?")\(wait > 0 ? ", wait \(wait) ms" : "")"
            if let c = mode["capacity"] as? [String: Any] {
                out.append("| \(per) | capacity (\(n(c["events_offered"])) pre-written; 10–90%) | \(n(c["events_per_second"])) | \(n(c["messages_per_second"])) | \(n(c["bytes_per_second"])) | \(n(c["bytes_per_event"])) | \(r(c["server_cpu_us_per_message"])) | \(r(c["server_cpu_us_per_event"])) | ≤ \(c["max_agent_backlog"] ?? "?") | \(n(c["events_stored"])) events in \(c["messages_stored"] ?? "?") messages, \(r(c["seconds"])) s (\(n(c["events_per_second_whole_run"])) events/s over the whole run); agents' CPU \(r(c["agents_cpu_us_per_event"])) µs/event\((c["drained"] as? Bool ?? false) ? "" : ", **not drained**") |")
            }
            if let s = mode["steady"] as? [String: Any] {
                out.append("| \(per) | steady (\(n(s["offered_per_second"]))/s offered) | ≈ \(n(s["events_per_second"])) | \(n(s["messages_per_second"])) | \(n(s["bytes_per_second"])) | – | \(r(s["server_cpu_us_per_message"])) | \(r(s["server_cpu_us_per_event"])) | ≤ \(s["max_agent_backlog_last_third"] ?? "?") (last third) | \(r(s["events_per_message"])) events/message; \(n(s["events_stored"])) of \(n(s["accepted"])) accepted stored after \(r(s["drain_seconds"])) s drain; agents used \(r(s["agents_cpu_cores"])) cores |")
            }
        }
        return out
    }
}
