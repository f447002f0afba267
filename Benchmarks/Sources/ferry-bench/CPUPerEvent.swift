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

/// A thread of a process: its id and name.
struct ThreadKey: Hashable {
    let tid: Int
    let name: String
}

/// Context switches (voluntary + involuntary) so far of each live thread of process `pid`:
/// `voluntary_ctxt_switches` + `nonvoluntary_ctxt_switches` of `/proc/<pid>/task/*/status` (the
/// name is that file's `Name:`). Threads that ended are missing (no process-wide total in /proc
/// keeps them). Issue 36's method; the reference implementation is the Python one
/// (`Benchmarks/python/proc_counts.py`, used by scripts/bench-cpu-per-event and the Python row's
/// app), which reads the same fields the same way; ``switchesByName(_:_:)`` is its `delta_by_name`.
func threadContextSwitches(pid: Int32) -> [ThreadKey: Double] {
    var result: [ThreadKey: Double] = [:]
    let base = "/proc/\(pid)/task"
    for tid in (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? [] {
        guard let status = try? String(contentsOfFile: "\(base)/\(tid)/status", encoding: .utf8) else { continue }
        var name = "?", switches = 0.0
        for line in status.split(separator: "\n") {
            if line.hasPrefix("Name:") {
                name = line.dropFirst(5).trimmingCharacters(in: .whitespaces)
            } else if line.hasPrefix("voluntary_ctxt_switches:") || line.hasPrefix("nonvoluntary_ctxt_switches:") {
                switches += Double(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) ?? 0
            }
        }
        result[ThreadKey(tid: Int(tid) ?? -1, name: name)] = switches
    }
    return result
}

/// Context switches per thread name between two ``threadContextSwitches(pid:)`` readings: a
/// thread is matched by its id (Swift's pool threads rename themselves) and named as in `after`;
/// threads of one name are summed; a thread born in between counts from zero; one that ended is
/// missing.
func switchesByName(_ before: [ThreadKey: Double], _ after: [ThreadKey: Double]) -> [String: Double] {
    let earlier = Dictionary(before.map { ($0.key.tid, $0.value) }, uniquingKeysWith: +)
    return after.reduce(into: [:]) { $0[$1.key.name, default: 0] += $1.value - (earlier[$1.key.tid] ?? 0) }
}

/// A duration in milliseconds (the send delay a client reports).
func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
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

/// ferryd's `delivered` counter (-1 when the control socket does not answer).
func deliveredCounter(runtime: String) -> Int {
    (controlRequest(runtime: runtime, #"{"op":"status"}"#)?["counters"] as? [String: Any])?["delivered"] as? Int ?? -1
}

extension Driver {
    /// The loads of the row set: offered events/s and app processes.
    static let cpuLoads: [(rate: Double, processes: Int)] = [(100, 1), (1000, 1), (2000, 4), (10_000, 4), (40_000, 4)]
    /// The loads and client send delays (ms) of the frontier rows, each set explicitly (the
    /// loads above run at the clients' default delay, the frontier's point for it).
    static let cpuFrontierLoads: [(rate: Double, processes: Int)] = [(100, 1), (1000, 1)]
    static let cpuSendDelays: [Double] = [0, 20, 100]
    /// The load of the awaited-`send()` cell (issue 36: `send()` → receipt p50 at 100/s).
    static let sendAwaitLoad: (rate: Double, processes: Int) = (100, 1)

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

    /// ferryd's CPU and context switches with their per-thread splits, read around `body` (and
    /// after it once its file sink delivered everything accepted); the events accepted meanwhile.
    func measureAgent(_ agent: Agent, runtime: String, _ body: () throws -> Void)
        rethrows -> (seconds: Double, threads: [String: Double], switches: [String: Double], events: Int, delivered: Bool) {
        let pid = agent.child.pid
        let accepted0 = acceptedCounter(runtime: runtime)
        let cpu0 = cpuSeconds(pid: pid), threads0 = threadCPUSeconds(pid: pid), switches0 = threadContextSwitches(pid: pid)
        try body()
        let delivered = waitDelivered(runtime: runtime)
        let cpu1 = cpuSeconds(pid: pid), threads1 = threadCPUSeconds(pid: pid), switches1 = threadContextSwitches(pid: pid)
        let accepted1 = acceptedCounter(runtime: runtime)
        return (cpu1 - cpu0, threadDelta(threads0, threads1), switchesByName(switches0, switches1), accepted1 - accepted0, delivered)
    }

    /// Per-thread CPU seconds as µs per event, largest first, figures rounded to 0.1 µs.
    func perEvent(_ threads: [String: Double], events: Int) -> [String: Double] {
        guard events > 0 else { return [:] }
        return threads.filter { $0.value > 0 }.mapValues { ($0 * 1e6 / Double(events) * 10).rounded() / 10 }
    }

    /// Per-thread context switches per event, rounded to 0.01.
    func switchesPerEvent(_ threads: [String: Double], events: Int) -> [String: Double] {
        guard events > 0 else { return [:] }
        return threads.filter { $0.value > 0 }.mapValues { ($0 / Double(events) * 100).rounded() / 100 }
    }

    /// One load: a fresh ferryd (default file sink, delivery started), `processes` track-latency
    /// apps offering `rate` events/s together for ``cpuRunSeconds``, with the client's default
    /// send delay unless `sendDelayMilliseconds` sets one; `awaitSend`: each app awaits every
    /// `send()` (latencies from the call to the receipt). Each app's send delay as its client
    /// reported it is in `send_delay_ms`.
    func cpuRun(rate: Double, processes: Int, sendDelayMilliseconds: Double? = nil, awaitSend: Bool = false) throws -> [String: Any] {
        let dir = work + "/cpu-\(Int(rate))-\(processes)-\(sendDelayMilliseconds.map { String(Int($0)) } ?? "default")\(awaitSend ? "-await" : "")"
        defer { removeTree(dir) }
        let config = try sinkConfig(dir: dir, #"{"consent":{"autoStart":true}}"#)
        let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                           sink: dir + "/sink", config: config, log: dir + ".log")
        defer { agent.stop() }
        // Let the probe event's delivery finish before measuring.
        _ = waitDelivered(runtime: dir + "/rt")
        let apps = try (0..<processes).map { i in
            var arguments = ["track-latency", "--runtime", dir + "/rt", "--rate", "\(rate / Double(processes))",
                             "--seconds", "\(cpuRunSeconds)", "--size", "256", "--source", "cpu-\(i)"]
            if let sendDelayMilliseconds { arguments += ["--send-delay-ms", "\(sendDelayMilliseconds)"] }
            if awaitSend { arguments.append("--await-send") }
            return try Child(me, arguments)
        }
        for app in apps { try app.expectReady() }
        var appSeconds = 0.0, appSwitches = 0.0, histogram = LogHistogram()
        var appThreads: [String: Double] = [:], appThreadSwitches: [String: Double] = [:], sendDelays: [Double] = []
        let agentCPU = try measureAgent(agent, runtime: dir + "/rt") {
            for app in apps { app.go() }
            for app in apps {
                let result = try app.result()
                appSeconds += result["cpu_seconds"] as? Double ?? .nan
                appSwitches += result["context_switches"] as? Double ?? .nan
                for (name, seconds) in result["threads_cpu_seconds"] as? [String: Double] ?? [:] { appThreads[name, default: 0] += seconds }
                for (name, count) in result["threads_context_switches"] as? [String: Double] ?? [:] { appThreadSwitches[name, default: 0] += count }
                sendDelays.append(result["send_delay_ms"] as? Double ?? .nan)
                histogram.merge(LogHistogram(encoded: result["histogram"]))
                app.wait()
            }
        }
        let events = Double(max(agentCPU.events, 0))
        let ferrydSwitches = agentCPU.switches.values.reduce(0, +)
        return ["offered_rate": rate, "processes": processes, "seconds": cpuRunSeconds, "events": agentCPU.events,
                "send_delay_ms": sendDelays.filter(\.isFinite).max() ?? .nan, "await_send": awaitSend,
                "delivered_all": agentCPU.delivered,
                "apps_us_per_event": appSeconds * 1e6 / events, "ferryd_us_per_event": agentCPU.seconds * 1e6 / events,
                "total_us_per_event": (appSeconds + agentCPU.seconds) * 1e6 / events,
                "apps_switches_per_event": appSwitches / events, "ferryd_switches_per_event": ferrydSwitches / events,
                "total_switches_per_event": (appSwitches + ferrydSwitches) / events,
                "p50_us": histogram.value(atPercentile: 50), "p99_us": histogram.value(atPercentile: 99),
                "apps_threads_us_per_event": perEvent(appThreads, events: agentCPU.events),
                "ferryd_threads_us_per_event": perEvent(agentCPU.threads, events: agentCPU.events),
                "apps_threads_switches_per_event": switchesPerEvent(appThreadSwitches, events: agentCPU.events),
                "ferryd_threads_switches_per_event": switchesPerEvent(agentCPU.switches, events: agentCPU.events)]
    }

    /// The app's own cost at a load: `processes` `track-latency --null` apps (the same Poisson
    /// loop and events, no library) for ``cpuRunSeconds``: CPU µs and context switches per event sent.
    func cpuNullRun(rate: Double, processes: Int) throws -> (microseconds: Double, switches: Double) {
        let apps = try (0..<processes).map { _ in
            try Child(me, ["track-latency", "--null", "--runtime", work, "--rate", "\(rate / Double(processes))",
                           "--seconds", "\(cpuRunSeconds)", "--size", "256"])
        }
        for app in apps { try app.expectReady() }
        for app in apps { app.go() }
        var seconds = 0.0, switches = 0.0, sent = 0
        for app in apps {
            let result = try app.result()
            seconds += result["cpu_seconds"] as? Double ?? .nan
            switches += result["context_switches"] as? Double ?? .nan
            sent += result["sent"] as? Int ?? 0
            app.wait()
        }
        return (seconds * 1e6 / Double(max(sent, 1)), switches / Double(max(sent, 1)))
    }

    /// The figures of one cell over its runs: the medians of ``cpuMedianKeys``, the per-thread
    /// splits and send delay of the run whose total is the median (or the first), every run.
    static let cpuMedianKeys = ["apps_us_per_event", "ferryd_us_per_event", "total_us_per_event", "apps_switches_per_event",
                                "ferryd_switches_per_event", "total_switches_per_event", "p50_us", "p99_us"]
    func cpuCell(_ runs: [[String: Any]]) -> [String: Any] {
        var cell: [String: Any] = ["runs": runs]
        for key in Self.cpuMedianKeys { cell[key] = median(runs.compactMap { $0[key] as? Double }) }
        let middle = runs.first { ($0["total_us_per_event"] as? Double) == cell["total_us_per_event"] as? Double } ?? runs[0]
        for key in ["offered_rate", "processes", "seconds", "send_delay_ms", "await_send", "apps_threads_us_per_event",
                    "ferryd_threads_us_per_event", "apps_threads_switches_per_event", "ferryd_threads_switches_per_event"] {
            cell[key] = middle[key]
        }
        return cell
    }

    /// A progress note for a cell.
    func noteCell(_ label: String, _ cell: [String: Any]) {
        func f(_ key: String) -> String { String(format: "%.1f", cell[key] as? Double ?? .nan) }
        note("\(label): apps \(f("apps_us_per_event")) µs, ferryd \(f("ferryd_us_per_event")) µs, total \(f("total_us_per_event")) µs; switches \(f("apps_switches_per_event")) + \(f("ferryd_switches_per_event")) = \(f("total_switches_per_event")); p50 \(whole(cell["p50_us"] as? Double ?? .nan)) µs; send delay \(f("send_delay_ms")) ms")
    }

    /// The row set: every load (``cpuLoads``) at the clients' default send delay, `runs` times
    /// each, medians, beside the same apps without Ferry; awaited `send()` at 100/s; the
    /// send-delay frontier; the floors; then the Python row.
    mutating func cpuPerEvent() throws {
        var loads: [[String: Any]] = []
        for (rate, processes) in Self.cpuLoads {
            var cell = cpuCell(try (0..<runs).map { _ in try cpuRun(rate: rate, processes: processes) })
            // The same loop without Ferry, for the apps' share that is Ferry's.
            let null = try (0..<runs).map { _ in try cpuNullRun(rate: rate, processes: processes) }
            let nullCPU = median(null.map(\.microseconds)), nullSwitches = median(null.map(\.switches))
            cell["null_app_us_per_event"] = nullCPU
            cell["null_app_switches_per_event"] = nullSwitches
            cell["apps_beyond_null_us_per_event"] = (cell["apps_us_per_event"] as? Double ?? .nan) - nullCPU
            loads.append(cell)
            noteCell("cpu per event at \(Int(rate))/s, K=\(processes)", cell)
        }
        // Awaited send() → receipt at a trickle (issue 36): one app awaiting every send.
        let awaited = cpuCell(try (0..<runs).map { _ in try cpuRun(rate: Self.sendAwaitLoad.rate, processes: Self.sendAwaitLoad.processes, awaitSend: true) })
        noteCell("awaited send() at \(Int(Self.sendAwaitLoad.rate))/s", awaited)
        // The frontier at a trickle: the client's send delay (FerryClientConfiguration.sendDelay)
        // lets events share wake-ups, messages and commits, for that much more latency. The
        // loads above are its point at the default delay.
        var frontier: [[String: Any]] = []
        for (rate, processes) in Self.cpuFrontierLoads {
            for delay in Self.cpuSendDelays {
                var cell = cpuCell(try (0..<runs).map { _ in try cpuRun(rate: rate, processes: processes, sendDelayMilliseconds: delay) })
                cell["requested_send_delay_ms"] = delay
                frontier.append(cell)
                noteCell("cpu per event at \(Int(rate))/s, K=\(processes), send delay \(Int(delay)) ms", cell)
            }
        }
        summary["cpu_floors"] = try cpuFloors()
        summary["send_await"] = awaited
        summary["cpu_per_event"] = ["loads": loads, "send_delay": frontier, "size": 256, "delivery": "file sink, started",
                                    "method": "utime+stime of the app processes (getrusage) and of ferryd (/proc/<pid>/stat) ÷ events accepted; ferryd read after its file sink delivered them all; context switches: voluntary + nonvoluntary of every thread (/proc/<pid>/task/*/status), the apps' read by each app over the same span as its CPU"] as [String: Any]
        if let python = pythonApp { summary["python_cpu"] = try pythonRow(python: python.interpreter, app: python.script) }
    }

    /// The Python row: at 1 000 events/s (Poisson, ~250 B) for ``cpuRunSeconds``, Ferry's Python
    /// client (ZeroMQ: at its defaults, with no send delay and with 20 ms) and
    /// segment-analytics-python (its defaults, to ferryd's local HTTP API on loopback TCP),
    /// alternately against one ferryd with the file sink live.
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
            // Ferry's client at its defaults, with no send delay (the old default) and with 20 ms
            // (the frontier's point), and Segment's library at its defaults (it batches in memory
            // for up to 0.5 s).
            let cells: [(cell: String, library: String, delay: Double?)] = [
                ("ferry", "ferry", nil), ("ferry_send_delay_0ms", "ferry", 0), ("ferry_send_delay_20ms", "ferry", 20), ("segment", "segment", nil)]
            for (cell, library, delay) in cells {
                var arguments = [app, "--library", library, "--runtime", dir + "/rt", "--host", "http://127.0.0.1:\(port)",
                                 "--rate", "\(rate)", "--seconds", "\(cpuRunSeconds)", "--size", "250"]
                if let delay { arguments += ["--send-delay-ms", "\(delay)"] }
                let child = try Child(python, arguments, stderrPath: dir + "-\(cell).err")
                try child.expectReady()
                var result: [String: Any] = [:]
                let agentCPU = try measureAgent(agent, runtime: dir + "/rt") {
                    child.go()
                    result = try child.result()
                    child.wait()
                }
                let events = Double(max(agentCPU.events, 0))
                let appSeconds = result["cpu_seconds"] as? Double ?? .nan
                let appSwitches = result["context_switches"] as? Double ?? .nan
                let ferrydSwitches = agentCPU.switches.values.reduce(0, +)
                results[cell, default: []].append([
                    "events": agentCPU.events, "delivered_all": agentCPU.delivered, "sent": result["sent"] ?? 0,
                    "send_delay_ms": result["send_delay_ms"] ?? NSNull(),
                    "app_us_per_event": appSeconds * 1e6 / events, "ferryd_us_per_event": agentCPU.seconds * 1e6 / events,
                    "total_us_per_event": (appSeconds + agentCPU.seconds) * 1e6 / events,
                    "app_switches_per_event": appSwitches / events, "ferryd_switches_per_event": ferrydSwitches / events,
                    "total_switches_per_event": (appSwitches + ferrydSwitches) / events,
                    "app_threads_us_per_event": perEvent(result["threads_cpu_seconds"] as? [String: Double] ?? [:], events: agentCPU.events),
                    "ferryd_threads_us_per_event": perEvent(agentCPU.threads, events: agentCPU.events),
                    "app_threads_switches_per_event": switchesPerEvent(result["threads_context_switches"] as? [String: Double] ?? [:], events: agentCPU.events),
                    "ferryd_threads_switches_per_event": switchesPerEvent(agentCPU.switches, events: agentCPU.events)])
            }
        }
        var row: [String: Any] = ["offered_rate": rate, "seconds": cpuRunSeconds, "size": 250]
        for (library, runsOfLibrary) in results {
            func med(_ key: String) -> Double { median(runsOfLibrary.compactMap { $0[key] as? Double }) }
            var cell: [String: Any] = ["runs": runsOfLibrary, "send_delay_ms": runsOfLibrary.first?["send_delay_ms"] ?? NSNull()]
            for key in ["app_us_per_event", "ferryd_us_per_event", "total_us_per_event", "app_switches_per_event",
                        "ferryd_switches_per_event", "total_switches_per_event"] { cell[key] = med(key) }
            // The per-thread splits of the run whose total is the median (or the first), as the
            // load range's cells do (``cpuCell(_:)``).
            let middle = runsOfLibrary.first { ($0["total_us_per_event"] as? Double) == cell["total_us_per_event"] as? Double } ?? runsOfLibrary.first
            for key in ["app_threads_us_per_event", "ferryd_threads_us_per_event"] { cell[key] = middle?[key] ?? NSNull() }
            row[library] = cell
            note("python \(library) at 1000/s: app \(String(format: "%.1f", med("app_us_per_event"))) µs, ferryd \(String(format: "%.1f", med("ferryd_us_per_event"))) µs per event; switches \(String(format: "%.1f", med("app_switches_per_event"))) + \(String(format: "%.1f", med("ferryd_switches_per_event")))")
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
    /// The CPU-per-event tables (issues 30 and 36), with the largest threads of each side by CPU
    /// and by context switches.
    func cpuMarkdown() -> [String] {
        var out: [String] = []
        func f(_ value: Any?) -> String {
            guard let value = value as? Double, value.isFinite else { return "–" }
            return String(format: "%.1f", value)
        }
        func f2(_ value: Any?) -> String {
            guard let value = value as? Double, value.isFinite else { return "–" }
            return String(format: "%.2f", value)
        }
        func top(_ threads: Any?, _ format: String = "%.1f") -> String {
            let sorted = (threads as? [String: Double] ?? [:]).sorted { $0.value > $1.value }.prefix(4)
            return sorted.map { "\($0.key) \(String(format: format, $0.value))" }.joined(separator: ", ")
        }
        func switches(_ row: [String: Any], _ app: String = "apps") -> String {
            "\(f(row["\(app)_switches_per_event"])) + \(f(row["ferryd_switches_per_event"])) = \(f(row["total_switches_per_event"]))"
        }
        if let cpu = summary["cpu_per_event"] as? [String: Any] {
            let loads = cpu["loads"] as? [[String: Any]] ?? []
            out.append("\n### CPU per event across the load range: K FerryClient processes (track-latency, Poisson, 256 B), clients at their defaults, default ferryd, file sink live\n")
            out.append("| offered/s | K | send delay ms | apps µs/event | the same apps without Ferry | ferryd µs/event | total µs/event | context switches/event: apps + ferryd = total | the same apps without Ferry | p50 µs | p99 µs | apps: top threads µs/event (the run of median total) | ferryd: top threads µs/event (the same run) |")
            out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for row in loads {
                out.append("| \(n(row["offered_rate"])) | \(row["processes"] ?? "") | \(f(row["send_delay_ms"])) | \(f(row["apps_us_per_event"])) | \(f(row["null_app_us_per_event"])) | \(f(row["ferryd_us_per_event"])) | \(f(row["total_us_per_event"])) | \(switches(row)) | \(f2(row["null_app_switches_per_event"])) | \(n(row["p50_us"])) | \(n(row["p99_us"])) | \(top(row["apps_threads_us_per_event"])) | \(top(row["ferryd_threads_us_per_event"])) |")
            }
            out.append("\nContext switches per event by thread (the same runs; voluntary + involuntary, `/proc/<pid>/task/*/status`):\n")
            out.append("| offered/s | K | apps: top threads | ferryd: top threads |")
            out.append("|---|---|---|---|")
            for row in loads {
                out.append("| \(n(row["offered_rate"])) | \(row["processes"] ?? "") | \(top(row["apps_threads_switches_per_event"], "%.2f")) | \(top(row["ferryd_threads_switches_per_event"], "%.2f")) |")
            }
        }
        if let awaited = summary["send_await"] as? [String: Any] {
            out.append("\nAwaited `send()` → receipt, \(n(awaited["offered_rate"]))/s, K = \(awaited["processes"] ?? "?") (each send awaited before the next; send delay \(f(awaited["send_delay_ms"])) ms): p50 \(n(awaited["p50_us"])) µs, p99 \(n(awaited["p99_us"])) µs; apps \(f(awaited["apps_us_per_event"])) + ferryd \(f(awaited["ferryd_us_per_event"])) = \(f(awaited["total_us_per_event"])) µs/event; context switches \(switches(awaited)).")
        }
        if let cpu = summary["cpu_per_event"] as? [String: Any], let frontier = cpu["send_delay"] as? [[String: Any]], !frontier.isEmpty {
            out.append("\n### The send-delay frontier: the same runs with the client's `sendDelay` set (K = 1; the load-range rows are the default's point)\n")
            out.append("| offered/s | send delay ms | apps µs/event | ferryd µs/event | total µs/event | context switches/event: apps + ferryd = total | p50 µs | p99 µs |")
            out.append("|---|---|---|---|---|---|---|---|")
            for row in frontier {
                out.append("| \(n(row["offered_rate"])) | \(f(row["send_delay_ms"])) | \(f(row["apps_us_per_event"])) | \(f(row["ferryd_us_per_event"])) | \(f(row["total_us_per_event"])) | \(switches(row)) | \(n(row["p50_us"])) | \(n(row["p99_us"])) |")
            }
        }
        if let floors = summary["cpu_floors"] as? [String: Any] {
            out.append("\nFloors in the same run, 100 operations/s, CPU per operation beyond the loop's sleep: 300-byte `pwrite` + `fdatasync` \(f(floors["fdatasync_us"])) µs; a wake-up round trip between two threads (pipe, `poll`) \(f(floors["wake_round_trip_us"])) µs.")
        }
        if let python = summary["python_cpu"] as? [String: Any] {
            out.append("\n### Python at 1 000 events/s (Poisson, ~250 B), same ferryd, file sink live\n")
            out.append("| client | send delay ms | app µs/event | ferryd µs/event | total µs/event | context switches/event: app + ferryd = total | app: top threads (the run of median total) | ferryd: top threads (the same run) |")
            out.append("|---|---|---|---|---|---|---|---|")
            for (key, label) in [("ferry", "Ferry's Python client (ZeroMQ), defaults"),
                                 ("ferry_send_delay_0ms", "Ferry's Python client, send_delay 0"),
                                 ("ferry_send_delay_20ms", "Ferry's Python client, send_delay 20 ms"),
                                 ("segment", "segment-analytics-python → local HTTP API, defaults")] {
                guard let row = python[key] as? [String: Any] else { continue }
                out.append("| \(label) | \(f(row["send_delay_ms"])) | \(f(row["app_us_per_event"])) | \(f(row["ferryd_us_per_event"])) | \(f(row["total_us_per_event"])) | \(switches(row, "app")) | \(top(row["app_threads_us_per_event"])) | \(top(row["ferryd_threads_us_per_event"])) |")
            }
        }
        return out
    }
}
