#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

// Issue 30's row set "CPU per event across the load range": K app processes using the real
// `FerryClient` (`track-latency`, Poisson arrivals, 256 B) against a default ferryd whose file sink
// delivers live, CPU (utime + stime) of every app process and of ferryd divided by the events
// accepted; and the Python row: Ferry's Python client beside segment-analytics-python pointed at
// ferryd's local HTTP API, one after the other against the same ferryd.

/// CPU seconds of each thread of process `pid`, summed by thread name (`/proc/<pid>/task/*/comm`,
/// run time from `/proc/<pid>/task/*/schedstat`, in ns). Threads that ended are missing: the
/// process total (`cpuSeconds`) still counts them.
func threadCPUSeconds(pid: Int32) -> [String: Double] {
    var result: [String: Double] = [:]
    let base = "/proc/\(pid)/task"
    for tid in (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? [] {
        guard let comm = try? String(contentsOfFile: "\(base)/\(tid)/comm", encoding: .utf8),
              let schedstat = try? String(contentsOfFile: "\(base)/\(tid)/schedstat", encoding: .utf8),
              let first = schedstat.split(separator: " ").first, let ns = Double(first) else { continue }
        result[comm.trimmingCharacters(in: .whitespacesAndNewlines), default: 0] += ns / 1e9
    }
    return result
}

/// `after - before` per thread name (a name missing before counts from 0).
func threadDelta(_ before: [String: Double], _ after: [String: Double]) -> [String: Double] {
    after.reduce(into: [:]) { $0[$1.key] = $1.value - (before[$1.key] ?? 0) }
}

/// User plus system CPU of the calling process in seconds (getrusage: the same accounting as
/// /proc/<pid>/stat, in µs instead of clock ticks, which at 100 events/s for 10 s would be a
/// 10 µs/event step).
func ownCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}

/// This process's context switches so far (voluntary + involuntary, every thread, the ended ones
/// too: getrusage), which the driver cannot read once the client's threads ended.
func ownContextSwitches() -> Int {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return usage.ru_nvcsw + usage.ru_nivcsw
}

/// ferryd's `delivered` counter (-1 when the control socket does not answer).
func deliveredCounter(runtime: String) -> Int {
    (controlRequest(runtime: runtime, #"{"op":"status"}"#)?["counters"] as? [String: Any])?["delivered"] as? Int ?? -1
}

extension Driver {
    /// The loads of the row set: offered events/s and app processes.
    static let cpuLoads: [(rate: Double, processes: Int)] = [(100, 1), (1000, 1), (2000, 4), (10_000, 4), (40_000, 4)]
    /// The loads and client send delays (ms) of the frontier rows (the delay 0 is the row above).
    static let cpuFrontierLoads: [(rate: Double, processes: Int)] = [(100, 1), (1000, 1)]
    static let cpuSendDelays: [Double] = [20, 100]

    /// What the machine charges for the two things every acked event needs at a trickle, taken
    /// in the same run at 100 operations per second (10 ms apart, so each starts from idle): a
    /// 300-byte `pwrite` + `fdatasync` in the work directory, and a wake-up round trip between
    /// two threads (a pipe each way, both asleep in `poll` before it) — an event crosses about
    /// five such hand-offs in each process. CPU of this process (getrusage) per operation.
    func cpuFloors() throws -> [String: Any] {
        let operations = 200
        let gap: useconds_t = 10_000
        let path = work + "/floor-fdatasync"
        let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o600)
        guard fd >= 0 else { throw BenchError("cannot create \(path)") }
        defer { close(fd); unlink(path) }
        let record = [UInt8](repeating: 0x61, count: 300)
        let syncStart = ownCPUSeconds()
        for index in 0..<operations {
            _ = record.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(index * 300)) }
            fdatasync(fd)
            usleep(gap)
        }
        let syncSeconds = ownCPUSeconds() - syncStart
        // The idle baseline: the same loop's sleeps alone.
        let idleStart = ownCPUSeconds()
        for _ in 0..<operations { usleep(gap) }
        let idleSeconds = ownCPUSeconds() - idleStart
        var there: [Int32] = [0, 0], back: [Int32] = [0, 0]
        guard pipe(&there) == 0, pipe(&back) == 0 else { throw BenchError("pipe failed") }
        defer { for fd in there + back { close(fd) } }
        let (thereRead, backWrite) = (there[0], back[1])
        let peer = Thread {
            var byte: UInt8 = 0
            for _ in 0..<operations {
                var item = pollfd(fd: thereRead, events: Int16(POLLIN), revents: 0)
                _ = poll(&item, 1, -1)
                _ = read(thereRead, &byte, 1)
                _ = write(backWrite, &byte, 1)
            }
        }
        peer.start()
        let wakeStart = ownCPUSeconds()
        var byte: UInt8 = 1
        for _ in 0..<operations {
            _ = write(there[1], &byte, 1)
            var item = pollfd(fd: back[0], events: Int16(POLLIN), revents: 0)
            _ = poll(&item, 1, -1)
            _ = read(back[0], &byte, 1)
            usleep(gap)
        }
        let wakeSeconds = ownCPUSeconds() - wakeStart
        let perOperation = { (seconds: Double) in ((seconds - idleSeconds) / Double(operations) * 1e6 * 10).rounded() / 10 }
        let floors: [String: Any] = ["operations_per_second": 100, "fdatasync_us": perOperation(syncSeconds),
                                     "wake_round_trip_us": perOperation(wakeSeconds), "idle_sleep_us": (idleSeconds / Double(operations) * 1e6 * 10).rounded() / 10]
        note("floors at 100/s: pwrite + fdatasync \(floors["fdatasync_us"]!) µs CPU, thread wake-up round trip \(floors["wake_round_trip_us"]!) µs CPU")
        return floors
    }

    /// Waits (≤ 60 s) until the file sink delivered everything accepted, so that ferryd's CPU
    /// includes delivering the events it counts; returns whether it did.
    func waitDelivered(runtime: String) -> Bool {
        let deadline = nowNanoseconds() + 60_000_000_000
        while nowNanoseconds() < deadline {
            let accepted = acceptedCounter(runtime: runtime), delivered = deliveredCounter(runtime: runtime)
            if accepted > 0 && delivered >= accepted { return true }
            sleepMicroseconds(100_000)
        }
        return false
    }

    /// ferryd's CPU and per-thread CPU, read around `body`; the events accepted meanwhile.
    func measureAgent(_ agent: Agent, runtime: String, _ body: () throws -> Void)
        rethrows -> (seconds: Double, threads: [String: Double], events: Int, delivered: Bool) {
        let accepted0 = acceptedCounter(runtime: runtime)
        let cpu0 = cpuSeconds(pid: agent.child.pid), threads0 = threadCPUSeconds(pid: agent.child.pid)
        try body()
        let delivered = waitDelivered(runtime: runtime)
        let cpu1 = cpuSeconds(pid: agent.child.pid), threads1 = threadCPUSeconds(pid: agent.child.pid)
        let accepted1 = acceptedCounter(runtime: runtime)
        return (cpu1 - cpu0, threadDelta(threads0, threads1), accepted1 - accepted0, delivered)
    }

    /// Per-thread CPU seconds as µs per event, largest first, figures rounded to 0.1 µs.
    func perEvent(_ threads: [String: Double], events: Int) -> [String: Double] {
        guard events > 0 else { return [:] }
        return threads.filter { $0.value > 0 }.mapValues { ($0 * 1e6 / Double(events) * 10).rounded() / 10 }
    }

    /// One load: a fresh ferryd (default file sink, delivery started), `processes` track-latency
    /// apps offering `rate` events/s together for ``cpuRunSeconds``.
    func cpuRun(rate: Double, processes: Int, sendDelayMilliseconds: Double = 0) throws -> [String: Any] {
        let dir = work + "/cpu-\(Int(rate))-\(processes)-\(Int(sendDelayMilliseconds))"
        defer { removeTree(dir) }
        let config = try sinkConfig(dir: dir, #"{"consent":{"autoStart":true}}"#)
        let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                           sink: dir + "/sink", config: config, log: dir + ".log")
        defer { agent.stop() }
        // Let the probe event's delivery finish before measuring.
        _ = waitDelivered(runtime: dir + "/rt")
        let apps = try (0..<processes).map { i in
            try Child(me, ["track-latency", "--runtime", dir + "/rt", "--rate", "\(rate / Double(processes))",
                           "--seconds", "\(cpuRunSeconds)", "--size", "256", "--source", "cpu-\(i)",
                           "--send-delay-ms", "\(sendDelayMilliseconds)"])
        }
        for app in apps { try app.expectReady() }
        var appSeconds = 0.0, appThreads: [String: Double] = [:], histogram = LogHistogram()
        let agentCPU = try measureAgent(agent, runtime: dir + "/rt") {
            for app in apps { app.go() }
            for app in apps {
                let result = try app.result()
                appSeconds += result["cpu_seconds"] as? Double ?? .nan
                for (name, seconds) in result["threads_cpu_seconds"] as? [String: Double] ?? [:] { appThreads[name, default: 0] += seconds }
                histogram.merge(LogHistogram(encoded: result["histogram"]))
                app.wait()
            }
        }
        let events = Double(max(agentCPU.events, 0))
        return ["offered_rate": rate, "processes": processes, "seconds": cpuRunSeconds, "events": agentCPU.events,
                "send_delay_ms": sendDelayMilliseconds,
                "delivered_all": agentCPU.delivered,
                "apps_us_per_event": appSeconds * 1e6 / events, "ferryd_us_per_event": agentCPU.seconds * 1e6 / events,
                "total_us_per_event": (appSeconds + agentCPU.seconds) * 1e6 / events,
                "p50_us": histogram.value(atPercentile: 50), "p99_us": histogram.value(atPercentile: 99),
                "apps_threads_us_per_event": perEvent(appThreads, events: agentCPU.events),
                "ferryd_threads_us_per_event": perEvent(agentCPU.threads, events: agentCPU.events)]
    }

    /// The app's own cost at a load: `processes` `track-latency --null` apps (the same Poisson
    /// loop and events, no library) for ``cpuRunSeconds``, CPU per event sent.
    func cpuNullRun(rate: Double, processes: Int) throws -> Double {
        let apps = try (0..<processes).map { _ in
            try Child(me, ["track-latency", "--null", "--runtime", work, "--rate", "\(rate / Double(processes))",
                           "--seconds", "\(cpuRunSeconds)", "--size", "256"])
        }
        for app in apps { try app.expectReady() }
        for app in apps { app.go() }
        var seconds = 0.0, sent = 0
        for app in apps {
            let result = try app.result()
            seconds += result["cpu_seconds"] as? Double ?? .nan
            sent += result["sent"] as? Int ?? 0
            app.wait()
        }
        return seconds * 1e6 / Double(max(sent, 1))
    }

    /// The row set: every load (``cpuLoads``), `runs` times each, medians; then the Python row.
    mutating func cpuPerEvent() throws {
        var loads: [[String: Any]] = []
        for (rate, processes) in Self.cpuLoads {
            var runsOfLoad: [[String: Any]] = []
            for _ in 0..<runs { runsOfLoad.append(try cpuRun(rate: rate, processes: processes)) }
            func med(_ key: String) -> Double { median(runsOfLoad.compactMap { $0[key] as? Double }) }
            // The per-thread split of the run whose total is the median (or the first).
            let total = med("total_us_per_event")
            let middle = runsOfLoad.first { ($0["total_us_per_event"] as? Double) == total } ?? runsOfLoad[0]
            // The same loop without Ferry, for the apps' share that is Ferry's.
            let null = median(try (0..<runs).map { _ in try cpuNullRun(rate: rate, processes: processes) })
            loads.append(["offered_rate": rate, "processes": processes, "seconds": cpuRunSeconds,
                          "null_app_us_per_event": null, "apps_beyond_null_us_per_event": med("apps_us_per_event") - null,
                          "apps_us_per_event": med("apps_us_per_event"), "ferryd_us_per_event": med("ferryd_us_per_event"),
                          "total_us_per_event": total, "p50_us": med("p50_us"), "p99_us": med("p99_us"),
                          "apps_threads_us_per_event": middle["apps_threads_us_per_event"] ?? [String: Double](),
                          "ferryd_threads_us_per_event": middle["ferryd_threads_us_per_event"] ?? [String: Double](), "runs": runsOfLoad])
            note("cpu per event at \(Int(rate))/s, K=\(processes): apps \(String(format: "%.1f", med("apps_us_per_event"))) µs, ferryd \(String(format: "%.1f", med("ferryd_us_per_event"))) µs, total \(String(format: "%.1f", total)) µs (p50 \(whole(med("p50_us"))) µs)")
        }
        // The frontier at a trickle: the client's send delay (FerryClientConfiguration.sendDelay)
        // lets events share wake-ups, messages and commits, for that much more latency.
        var frontier: [[String: Any]] = []
        for (rate, processes) in Self.cpuFrontierLoads {
            for delay in Self.cpuSendDelays {
                var runsOfCell: [[String: Any]] = []
                for _ in 0..<runs { runsOfCell.append(try cpuRun(rate: rate, processes: processes, sendDelayMilliseconds: delay)) }
                func med(_ key: String) -> Double { median(runsOfCell.compactMap { $0[key] as? Double }) }
                frontier.append(["offered_rate": rate, "processes": processes, "send_delay_ms": delay,
                                 "apps_us_per_event": med("apps_us_per_event"), "ferryd_us_per_event": med("ferryd_us_per_event"),
                                 "total_us_per_event": med("total_us_per_event"), "p50_us": med("p50_us"), "p99_us": med("p99_us"),
                                 "runs": runsOfCell])
                note("cpu per event at \(Int(rate))/s, K=\(processes), send delay \(Int(delay)) ms: total \(String(format: "%.1f", med("total_us_per_event"))) µs (p50 \(whole(med("p50_us"))) µs)")
            }
        }
        summary["cpu_floors"] = try cpuFloors()
        summary["cpu_per_event"] = ["loads": loads, "send_delay": frontier, "size": 256, "delivery": "file sink, started",
                                    "method": "utime+stime of the app processes (getrusage) and of ferryd (/proc/<pid>/stat) ÷ events accepted; ferryd read after its file sink delivered them all"] as [String: Any]
        if let python = pythonApp { summary["python_cpu"] = try pythonRow(python: python.interpreter, app: python.script) }
    }

    /// The Python row: at 1 000 events/s (Poisson, ~250 B) for ``cpuRunSeconds``, Ferry's Python
    /// client (ZeroMQ) and segment-analytics-python (its defaults, to ferryd's local HTTP API on
    /// loopback TCP), alternately against one ferryd with the file sink live.
    func pythonRow(python: String, app: String) throws -> [String: Any] {
        let dir = work + "/cpu-python"
        defer { removeTree(dir) }
        let port = 21_000 + Int(getpid() % 5000)
        let config = try sinkConfig(dir: dir, #"{"consent":{"autoStart":true},"http":{"listen":"127.0.0.1:\#(port)"}}"#)
        let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                           sink: dir + "/sink", config: config, log: dir + ".log")
        defer { agent.stop() }
        _ = waitDelivered(runtime: dir + "/rt")
        let rate = 1000.0
        var results: [String: [[String: Any]]] = [:]
        for _ in 0..<runs {
            // Ferry's client at its defaults, with a 20 ms send delay (the frontier's point), and
            // Segment's library at its defaults (it batches in memory for up to 0.5 s).
            for (cell, library, delay) in [("ferry", "ferry", 0), ("ferry_send_delay_20ms", "ferry", 20), ("segment", "segment", 0)] {
                let child = try Child(python, [app, "--library", library, "--runtime", dir + "/rt", "--host", "http://127.0.0.1:\(port)",
                                               "--rate", "\(rate)", "--seconds", "\(cpuRunSeconds)", "--size", "250",
                                               "--send-delay-ms", "\(delay)"],
                                      stderrPath: dir + "-\(cell).err")
                try child.expectReady()
                var result: [String: Any] = [:]
                let agentCPU = try measureAgent(agent, runtime: dir + "/rt") {
                    child.go()
                    result = try child.result()
                    child.wait()
                }
                let events = Double(max(agentCPU.events, 0))
                let appSeconds = result["cpu_seconds"] as? Double ?? .nan
                results[cell, default: []].append([
                    "events": agentCPU.events, "delivered_all": agentCPU.delivered, "sent": result["sent"] ?? 0,
                    "app_us_per_event": appSeconds * 1e6 / events, "ferryd_us_per_event": agentCPU.seconds * 1e6 / events,
                    "total_us_per_event": (appSeconds + agentCPU.seconds) * 1e6 / events,
                    "app_threads_us_per_event": perEvent(result["threads_cpu_seconds"] as? [String: Double] ?? [:], events: agentCPU.events),
                    "ferryd_threads_us_per_event": perEvent(agentCPU.threads, events: agentCPU.events)])
            }
        }
        var row: [String: Any] = ["offered_rate": rate, "seconds": cpuRunSeconds, "size": 250]
        for (library, runsOfLibrary) in results {
            func med(_ key: String) -> Double { median(runsOfLibrary.compactMap { $0[key] as? Double }) }
            row[library] = ["app_us_per_event": med("app_us_per_event"), "ferryd_us_per_event": med("ferryd_us_per_event"),
                            "total_us_per_event": med("total_us_per_event"), "runs": runsOfLibrary] as [String: Any]
            note("python \(library) at 1000/s: app \(String(format: "%.1f", med("app_us_per_event"))) µs, ferryd \(String(format: "%.1f", med("ferryd_us_per_event"))) µs per event")
        }
        return row
    }
}

extension Targets {
    /// Issue 30's rows: CPU per event across the load range against its bounds, and the Python row.
    func cpuRows() -> [[String: Any]] {
        var rows: [[String: Any]] = []
        let loads = (summary["cpu_per_event"] as? [String: Any])?["loads"] as? [[String: Any]] ?? []
        func load(_ rate: Double) -> [String: Any]? { loads.first { d($0["offered_rate"]) == rate } }
        func f(_ value: Double?) -> String { value.map { String(format: "%.1f µs", $0) } ?? "–" }
        // (rate, K, apps bound, total bound); nil: the issue sets none.
        let bounds: [(Double, Int, Double?, Double?)] = [(100, 1, 30, 120), (1000, 1, nil, nil), (2000, 4, 15, 50),
                                                         (10_000, 4, nil, nil), (40_000, 4, 15, 15)]
        for (rate, k, appsBound, totalBound) in bounds {
            let row = load(rate)
            let apps = d(row?["apps_us_per_event"]), ferryd = d(row?["ferryd_us_per_event"]), total = d(row?["total_us_per_event"])
            let label = "\(n(rate))/s, K=\(k)"
            let measured = "apps \(f(apps)), ferryd \(f(ferryd)), total \(f(total))"
            if let appsBound {
                rows.append(self.row("7.cpu.\(Int(rate)).apps", "app CPU per event at \(label) ÷ \(Int(appsBound)) µs", measured: measured,
                                     ratio: apps.map { $0 / appsBound }, .atMost(1)))
            }
            if let totalBound {
                rows.append(self.row("7.cpu.\(Int(rate)).total", "apps + ferryd CPU per event at \(label) ÷ \(Int(totalBound)) µs", measured: measured,
                                     ratio: total.map { $0 / totalBound }, .atMost(1)))
            }
        }
        let python = summary["python_cpu"] as? [String: Any]
        let ferry = python?["ferry"] as? [String: Any], segment = python?["segment"] as? [String: Any]
        let fa = d(ferry?["app_us_per_event"]), sa = d(segment?["app_us_per_event"])
        let ft = d(ferry?["total_us_per_event"]), st = d(segment?["total_us_per_event"])
        rows.append(row("7.python.app", "Python app CPU per event at 1 000/s: Ferry's client ÷ segment-analytics-python (local HTTP API)",
                        measured: "\(f(fa)) vs \(f(sa))", ratio: fa.flatMap { a in sa.map { a / $0 } }, .atMost(1)))
        rows.append(row("7.python.total", "app + ferryd CPU per event at 1 000/s: Ferry's Python client ÷ segment-analytics-python",
                        measured: "\(f(ft)) vs \(f(st))", ratio: ft.flatMap { a in st.map { a / $0 } }, .atMost(1)))
        // The same with Ferry's client given a 20 ms send delay (Segment's library waits up to 0.5 s).
        let delayed = python?["ferry_send_delay_20ms"] as? [String: Any]
        let da = d(delayed?["app_us_per_event"]), dt = d(delayed?["total_us_per_event"])
        rows.append(row("7.python.app.send_delay_20ms", "the same, Ferry's client with send_delay 20 ms: app ÷ segment-analytics-python",
                        measured: "\(f(da)) vs \(f(sa))", ratio: da.flatMap { a in sa.map { a / $0 } }, .atMost(1)))
        rows.append(row("7.python.total.send_delay_20ms", "the same, Ferry's client with send_delay 20 ms: app + ferryd ÷ segment-analytics-python",
                        measured: "\(f(dt)) vs \(f(st))", ratio: dt.flatMap { a in st.map { a / $0 } }, .atMost(1)))
        return rows
    }
}

extension Report {
    /// The CPU-per-event tables (issue 30), with the largest threads of each side.
    func cpuMarkdown() -> [String] {
        var out: [String] = []
        func f(_ value: Any?) -> String {
            guard let value = value as? Double, value.isFinite else { return "–" }
            return String(format: "%.1f", value)
        }
        func top(_ threads: Any?) -> String {
            let sorted = (threads as? [String: Double] ?? [:]).sorted { $0.value > $1.value }.prefix(4)
            return sorted.map { "\($0.key) \(String(format: "%.1f", $0.value))" }.joined(separator: ", ")
        }
        if let cpu = summary["cpu_per_event"] as? [String: Any] {
            out.append("\n### CPU per event across the load range: K FerryClient processes (track-latency, Poisson, 256 B), default ferryd, file sink live\n")
            out.append("| offered/s | K | apps µs/event | the same apps without Ferry | ferryd µs/event | total µs/event | p50 µs | p99 µs | apps: top threads µs/event | ferryd: top threads µs/event |")
            out.append("|---|---|---|---|---|---|---|---|---|---|")
            for row in cpu["loads"] as? [[String: Any]] ?? [] {
                out.append("| \(n(row["offered_rate"])) | \(row["processes"] ?? "") | \(f(row["apps_us_per_event"])) | \(f(row["null_app_us_per_event"])) | \(f(row["ferryd_us_per_event"])) | \(f(row["total_us_per_event"])) | \(n(row["p50_us"])) | \(n(row["p99_us"])) | \(top(row["apps_threads_us_per_event"])) | \(top(row["ferryd_threads_us_per_event"])) |")
            }
        }
        if let cpu = summary["cpu_per_event"] as? [String: Any], let frontier = cpu["send_delay"] as? [[String: Any]], !frontier.isEmpty {
            out.append("\n### The send-delay frontier: the same runs with the client's `sendDelay` (K = 1)\n")
            out.append("| offered/s | send delay ms | apps µs/event | ferryd µs/event | total µs/event | p50 µs | p99 µs |")
            out.append("|---|---|---|---|---|---|---|")
            for row in frontier {
                out.append("| \(n(row["offered_rate"])) | \(n(row["send_delay_ms"])) | \(f(row["apps_us_per_event"])) | \(f(row["ferryd_us_per_event"])) | \(f(row["total_us_per_event"])) | \(n(row["p50_us"])) | \(n(row["p99_us"])) |")
            }
        }
        if let floors = summary["cpu_floors"] as? [String: Any] {
            out.append("\nFloors in the same run, 100 operations/s, CPU per operation beyond the loop's sleep: 300-byte `pwrite` + `fdatasync` \(f(floors["fdatasync_us"])) µs; a wake-up round trip between two threads (pipe, `poll`) \(f(floors["wake_round_trip_us"])) µs.")
        }
        if let python = summary["python_cpu"] as? [String: Any] {
            out.append("\n### Python at 1 000 events/s (Poisson, ~250 B), same ferryd, file sink live\n")
            out.append("| client | app µs/event | ferryd µs/event | total µs/event | app: top threads | ferryd: top threads |")
            out.append("|---|---|---|---|---|---|")
            for (key, label) in [("ferry", "Ferry's Python client (ZeroMQ), defaults"),
                                 ("ferry_send_delay_20ms", "Ferry's Python client, send_delay 20 ms"),
                                 ("segment", "segment-analytics-python → local HTTP API, defaults")] {
                guard let row = python[key] as? [String: Any] else { continue }
                let first = (row["runs"] as? [[String: Any]])?.first
                out.append("| \(label) | \(f(row["app_us_per_event"])) | \(f(row["ferryd_us_per_event"])) | \(f(row["total_us_per_event"])) | \(top(first?["app_threads_us_per_event"])) | \(top(first?["ferryd_threads_us_per_event"])) |")
            }
        }
        return out
    }
}
