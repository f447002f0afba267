#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

// Issue 36's rows (performance round 5): CPU and context switches per event across the load range
// against the round's bounds, no collapse at 16 clients, the Python client at its defaults, awaited
// send() and track() latency, sustained ingest against the same clients' maximum, file delivery
// against ingest (filled with delivery paused, then drained), and ingest's instruction count.

extension Driver {
    /// The maximum ingest of the sustain probes' own clients: 4 `track-latency` processes (256 B,
    /// the library's defaults) as fast as their outboxes allow (`--rate 0`) for the run time,
    /// against a fresh ferryd with no sink delivering (`consent.autoStart` false); `runs` times,
    /// the median. The denominator of `8.sustained` and the ceiling of the sustain search.
    mutating func sameClientMaximum() throws {
        var rates: [Double] = [], sendDelay = Double.nan
        for index in 0..<runs {
            let dir = work + "/same-client-max-\(index)"
            defer { removeTree(dir) }
            let config = try sinkConfig(dir: dir, #"{"consent":{"autoStart":false}}"#)
            let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                               sink: dir + "/sink", config: config, log: dir + ".log")
            defer { agent.stop() }
            let children = try (0..<Self.sustainProcesses).map { i in
                try Child(me, ["track-latency", "--runtime", dir + "/rt", "--rate", "0", "--seconds", "\(duration)",
                               "--size", "256", "--source", "max-\(i)"])
            }
            for child in children { try child.expectReady() }
            for child in children { child.go() }
            var rate = 0.0
            for child in children {
                let result = try child.result()
                rate += result["rate"] as? Double ?? .nan
                sendDelay = result["send_delay_ms"] as? Double ?? .nan
                child.wait()
            }
            rates.append(rate)
        }
        summary["sustain_same_client_maximum"] = ["processes": Self.sustainProcesses, "size": 256, "seconds": duration,
                                                  "rates": rates, "median": median(rates), "send_delay_ms": sendDelay] as [String: Any]
        note("maximum ingest of the sustain probes' clients (\(Self.sustainProcesses) track-latency, no sink delivering): \(whole(median(rates))) events/s")
    }

    /// File sink delivery against ingest, one ferryd per run: 4 `client` processes (256 B) fill
    /// its queue for ``fillSeconds`` with delivery paused (`consent.autoStart` false; ingest rate:
    /// the events each client had acked within that time), then `{"op":"start"}` and the time
    /// until `counters.delivered` reaches everything accepted (drain rate). `runs` times; the
    /// median of each run's drain ÷ ingest.
    mutating func fileFillDrain() throws {
        let fillSeconds = quick ? 2.0 : 5.0
        var results: [[String: Any]] = []
        for index in 0..<runs {
            let dir = work + "/fill-drain-\(index)"
            defer { removeTree(dir) }
            let config = try sinkConfig(dir: dir, #"{"consent":{"autoStart":false}}"#)
            let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                               sink: dir + "/sink", config: config, log: dir + ".log")
            defer { agent.stop() }
            let children = try (0..<4).map { i in
                try Child(me, ["client", "--runtime", dir + "/rt", "--seconds", "\(fillSeconds)", "--size", "256", "--source", "fill-\(i)"])
            }
            for child in children { try child.expectReady() }
            for child in children { child.go() }
            var acked = 0, sendDelay = Double.nan
            for child in children {
                let result = try child.result()
                acked += result["accepted"] as? Int ?? 0
                sendDelay = result["send_delay_ms"] as? Double ?? .nan
                child.wait()  // after its shutdown: what it still held is accepted too
            }
            let queued = acceptedCounter(runtime: dir + "/rt"), delivered0 = max(0, deliveredCounter(runtime: dir + "/rt"))
            guard controlRequest(runtime: dir + "/rt", #"{"op":"start"}"#)?["delivery_started"] as? Bool == true else {
                throw BenchError("ferryd did not start delivery; see \(dir).log")
            }
            let started = nowNanoseconds()
            let deadline = started + 600_000_000_000
            while nowNanoseconds() < deadline && deliveredCounter(runtime: dir + "/rt") < queued {
                sleepMicroseconds(50_000)  // as the delivery rows poll: each status costs ferryd CPU
            }
            let drained = seconds(since: started)
            let ingestRate = Double(acked) / fillSeconds, drainRate = Double(queued - delivered0) / drained
            results.append(["ingest_rate": ingestRate, "drain_rate": drainRate, "events": queued - delivered0,
                            "drain_seconds": drained, "ratio": drainRate / ingestRate, "send_delay_ms": sendDelay])
            note("file sink fill/drain \(index + 1): ingest \(whole(ingestRate))/s (delivery paused), drain \(whole(drainRate))/s of \(queued - delivered0) events")
        }
        func med(_ key: String) -> Double { median(results.compactMap { $0[key] as? Double }) }
        summary["file_fill_drain"] = ["clients": 4, "size": 256, "fill_seconds": fillSeconds, "runs": results,
                                      "ingest_median": med("ingest_rate"), "drain_median": med("drain_rate"),
                                      "ratio_median": med("ratio")] as [String: Any]
    }
}

/// Reads scripts/callgrind-ingest's output line (`… instructions_per_event=N`).
func parseCallgrindIngest(path: String) -> [String: Any] {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return ["error": "cannot read \(path)"] }
    guard let line = text.split(separator: "\n").last(where: { $0.contains("instructions_per_event=") }),
          let value = line.split(separator: " ").first(where: { $0.hasPrefix("instructions_per_event=") })?.split(separator: "=").last,
          let perEvent = Double(value) else { return ["error": "no instructions_per_event in \(path)", "source": path] }
    return ["source": path, "line": String(line), "instructions_per_event": perEvent]
}

extension Targets {
    /// Issue 36's bounds on the load range: (rate, K, total µs, apps µs, switches per event).
    static let round5Loads: [(rate: Double, processes: Int, total: Double, apps: Double, switches: Double)] = [
        (100, 1, 250, 80, 7), (1000, 1, 60, 30, 2.5), (2000, 4, 80, 30, 4), (40_000, 4, 25, 15, 1.2)]

    /// Issue 36's rows (round 5). Absolute bounds are rows of measured ÷ bound (≤ 1), as `7.*`;
    /// ratios of two figures of the run are rows of that ratio against the issue's bound.
    func round5Rows() -> [[String: Any]] {
        var rows: [[String: Any]] = []
        func f(_ value: Double?, _ format: String = "%.1f") -> String {
            guard let value, value.isFinite else { return "–" }
            return String(format: format, value)
        }
        func ratio(_ a: Double?, _ b: Double?) -> Double? { a.flatMap { a in b.map { a / $0 } } }
        let loads = (summary["cpu_per_event"] as? [String: Any])?["loads"] as? [[String: Any]] ?? []
        let floors = summary["cpu_floors"] as? [String: Any]
        let floorText = "floors in this run: pwrite + fdatasync \(f(d(floors?["fdatasync_us"]))) µs, thread wake-up round trip \(f(d(floors?["wake_round_trip_us"]))) µs"
        // The bound in the figure's own unit, for the plots (scripts/bench-plots).
        func limited(_ row: [String: Any], _ limit: Double) -> [String: Any] { row.merging(["limit": limit]) { $1 } }
        for bound in Self.round5Loads {
            let load = loads.first { d($0["offered_rate"]) == bound.rate }
            let apps = d(load?["apps_us_per_event"]), ferryd = d(load?["ferryd_us_per_event"]), total = d(load?["total_us_per_event"])
            let appSwitches = d(load?["apps_switches_per_event"]), ferrydSwitches = d(load?["ferryd_switches_per_event"])
            let switches = d(load?["total_switches_per_event"])
            let label = "\(n(bound.rate))/s, K=\(bound.processes), send delay \(f(d(load?["send_delay_ms"]))) ms"
            let cpu = "total \(f(total)) µs, apps \(f(apps)), ferryd \(f(ferryd)) (each the median over the runs, so they need not add up) (the same apps without Ferry \(f(d(load?["null_app_us_per_event"]))) µs); \(floorText)"
            rows.append(limited(row("8.cpu.\(Int(bound.rate)).total", "apps + ferryd CPU per event at \(label) ÷ \(Targets.Bound.format(bound.total)) µs",
                                    measured: cpu, ratio: total.map { $0 / bound.total }, .atMost(1)), bound.total))
            rows.append(limited(row("8.cpu.\(Int(bound.rate)).apps", "app CPU per event at \(label) ÷ \(Targets.Bound.format(bound.apps)) µs",
                                    measured: cpu, ratio: apps.map { $0 / bound.apps }, .atMost(1)), bound.apps))
            rows.append(limited(row("8.switches.\(Int(bound.rate))", "context switches per event (apps + ferryd, every thread) at \(label) ÷ \(Targets.Bound.format(bound.switches))",
                            measured: "total \(f(switches, "%.2f")), apps \(f(appSwitches, "%.2f")), ferryd \(f(ferrydSwitches, "%.2f")) (medians over the runs) (the same apps without Ferry \(f(d(load?["null_app_switches_per_event"]), "%.2f")))",
                            ratio: switches.map { $0 / bound.switches }, .atMost(1)), bound.switches))
        }
        // No collapse: 16 client processes against 4, durable ingest of 1 KiB events.
        let ingest = summary["ingest"] as? [[String: Any]] ?? []
        func ferry(_ k: Int) -> Double? { d(ingest.first { $0["clients"] as? Int == k && $0["size"] as? Int == 1024 }?["ferry_median"]) }
        rows.append(row("8.collapse.1KiB", "durable ingest with 16 client processes ÷ with 4, 1 KiB events",
                        measured: "\(n(ferry(16))) vs \(n(ferry(4))) events/s", ratio: ratio(ferry(16), ferry(4)), .atLeast(0.9)))
        // The Python client at its defaults against segment-analytics-python (local HTTP API).
        let python = summary["python_cpu"] as? [String: Any]
        let fp = python?["ferry"] as? [String: Any], sp = python?["segment"] as? [String: Any]
        let delay = "send delay \(f(d(fp?["send_delay_ms"]))) ms"
        rows.append(row("8.python.app", "Python app CPU per event at 1 000/s: Ferry's client at its defaults (\(delay)) ÷ segment-analytics-python (local HTTP API)",
                        measured: "\(f(d(fp?["app_us_per_event"]))) vs \(f(d(sp?["app_us_per_event"]))) µs; switches \(f(d(fp?["app_switches_per_event"]), "%.2f")) vs \(f(d(sp?["app_switches_per_event"]), "%.2f"))",
                        ratio: ratio(d(fp?["app_us_per_event"]), d(sp?["app_us_per_event"])), .atMost(0.6)))
        rows.append(row("8.python.total", "app + ferryd CPU per event at 1 000/s: Ferry's Python client at its defaults (\(delay)) ÷ segment-analytics-python",
                        measured: "\(f(d(fp?["total_us_per_event"]))) vs \(f(d(sp?["total_us_per_event"]))) µs; switches \(f(d(fp?["total_switches_per_event"]), "%.2f")) vs \(f(d(sp?["total_switches_per_event"]), "%.2f"))",
                        ratio: ratio(d(fp?["total_us_per_event"]), d(sp?["total_us_per_event"])), .atMost(0.7)))
        // Awaited send() → receipt at 100/s.
        let awaited = summary["send_await"] as? [String: Any]
        let sendP50 = d(awaited?["p50_us"])
        rows.append(row("8.send.p50", "awaited send() → receipt p50 at \(n(d(awaited?["offered_rate"]) ?? 100))/s (send delay \(f(d(awaited?["send_delay_ms"]))) ms) ÷ 0.5 ms",
                        measured: "\(n(sendP50)) µs (p99 \(n(d(awaited?["p99_us"]))) µs; switches \(f(d(awaited?["total_switches_per_event"]), "%.2f"))/event)",
                        ratio: sendP50.map { $0 / 500 }, .atMost(1)))
        // track() → ack p50 at 10% of the maximum, against the send delay the clients ran with + 1 ms.
        let latency = summary["latency"] as? [String: Any]
        let p50 = d((latency?["loads"] as? [[String: Any]] ?? []).first { d($0["fraction"]) == 0.1 }?["p50_us"])
        let sendDelay = d(latency?["send_delay_ms"])
        let allowance = sendDelay.map { $0 * 1000 + 1000 }
        rows.append(row("8.track.p50.10pct", "track()→ack p50 at 10% of max ÷ (the clients' send delay + 1 ms)",
                        measured: "\(n(p50)) µs vs \(f(sendDelay)) ms + 1 ms", ratio: ratio(p50, allowance), .atMost(1)))
        // Sustained with the file and HTTP sinks live ÷ the same clients' maximum with no sink delivering.
        let sustain = summary["sustainable"] as? [String: Any]
        let sameMax = d((summary["sustain_same_client_maximum"] as? [String: Any])?["median"])
        let sustained: Double? = sustain == nil ? nil : (d(sustain?["sustained_rate"]) ?? 0)
        rows.append(row("8.sustained", "largest rate with file + HTTP sinks live and no backlog growing ÷ maximum ingest of the same client processes (4 track-latency, 256 B) with no sink delivering",
                        measured: "\(sustained.map { n($0) } ?? "–") vs \(n(sameMax)) events/s (lowest failed \(n(d(sustain?["lowest_failed_rate"]))))",
                        ratio: ratio(sustained, sameMax), .atLeast(0.8)))
        // File sink delivery ÷ ingest: filled with delivery paused, then drained.
        let fill = summary["file_fill_drain"] as? [String: Any]
        rows.append(row("8.delivery.file", "file sink delivery ÷ ingest, 4 clients, 256 B (filled with delivery paused, then drained)",
                        measured: "\(n(d(fill?["drain_median"]))) vs \(n(d(fill?["ingest_median"]))) events/s (median of the runs' ratios)",
                        ratio: d(fill?["ratio_median"]), .atLeast(1)))
        // scripts/callgrind-ingest: instructions per ingested event.
        let callgrind = d((summary["callgrind_ingest"] as? [String: Any])?["instructions_per_event"])
        rows.append(row("8.callgrind.ingest", "scripts/callgrind-ingest instructions per event ÷ 6 100", measured: "\(n(callgrind))",
                        ratio: callgrind.map { $0 / 6100 }, .atMost(1)))
        return rows
    }
}

extension Report {
    /// The round-5 measurements that have no table of their own elsewhere.
    func round5Markdown() -> [String] {
        var out: [String] = []
        if let fill = summary["file_fill_drain"] as? [String: Any] {
            out.append("\n### File sink: filled with delivery paused, then drained (4 clients, 256 B, \(n(fill["fill_seconds"])) s of ingest)\n")
            out.append("| run | ingest events/s | drain events/s | events | drain ÷ ingest |")
            out.append("|---|---|---|---|---|")
            for (i, run) in (fill["runs"] as? [[String: Any]] ?? []).enumerated() {
                out.append("| \(i + 1) | \(n(run["ingest_rate"])) | \(n(run["drain_rate"])) | \(n((run["events"] as? Int).map(Double.init))) | \(r(run["ratio"])) |")
            }
        }
        if let maximum = summary["sustain_same_client_maximum"] as? [String: Any] {
            out.append("\nMaximum ingest of the sustain probes' clients (\(maximum["processes"] ?? 4) track-latency processes, 256 B, as fast as their outboxes allow, no sink delivering): \(n(maximum["median"])) events/s (runs: \(list(maximum["rates"]))).")
        }
        if let callgrind = summary["callgrind_ingest"] as? [String: Any] {
            out.append("\nscripts/callgrind-ingest: `\((callgrind["line"] as? String) ?? (callgrind["error"] as? String) ?? "?")`")
        }
        return out
    }
}
