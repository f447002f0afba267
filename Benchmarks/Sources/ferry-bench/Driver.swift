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

    init(_ flags: Flags) throws {
        ferryd = try flags.string("ferryd")
        me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        quick = flags.has("quick")
        work = flags.string("work", default: NSTemporaryDirectory() + "ferry-bench-\(getpid())")
        out = flags.string("out", default: "bench-results.json")
        runs = flags.int("runs", default: quick ? 1 : 3)
        duration = flags.double("seconds", default: quick ? 1 : 2)
        only = Set(flags.string("only", default: "").split(separator: ",").map(String.init))
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
        if wanted("disk") { try disk() }
        if wanted("latency") { try latency() }
        if wanted("recovery") { try recoveryAndMemory() }
        if wanted("delivery") { try delivery() }
        summary["wall_seconds"] = Date().timeIntervalSince(started)
        let data = try JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys, .prettyPrinted])
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

    func ferryRun(clients count: Int, size: Int) throws -> Double {
        let dir = work + "/ferry-\(count)-\(size)"
        defer { removeTree(dir) }
        let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                           sink: dir + "/sink", config: configPath, log: dir + ".log")
        defer { agent.stop() }
        return try drive(clients(count, runtime: dir + "/rt", size: size))
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
        var rows: [[String: Any]] = []
        for size in sizes {
            for count in clientCounts {
                var ferry: [Double] = [], zmq: [Double] = [], sqlite: [Double] = []
                for _ in 0..<runs {
                    zmq.append(try zmqRun(clients: count, size: size))
                    ferry.append(try ferryRun(clients: count, size: size))
                    sqlite.append(try sqliteRun(clients: count, size: size))
                }
                let row: [String: Any] = [
                    "clients": count, "size": size, "ferry": ferry, "zmq": zmq, "sqlite": sqlite,
                    "ferry_median": median(ferry), "zmq_median": median(zmq), "sqlite_median": median(sqlite),
                    "ferry_over_zmq": median(ferry) / median(zmq), "ferry_over_sqlite": median(ferry) / median(sqlite),
                ]
                note("ingest clients=\(count) size=\(size): ferry \(Int(median(ferry)))/s zmq \(Int(median(zmq)))/s sqlite \(Int(median(sqlite)))/s")
                rows.append(row)
            }
        }
        summary["ingest"] = rows
    }

    mutating func disk() throws {
        var rows: [[String: Any]] = []
        for size in sizes {
            let recordSize = LogRecordSize.of(bodySize: size)
            var perAppend: [Double] = [], perMiB: [Double] = [], mib: [Double] = []
            for _ in 0..<runs {
                let result = try diskCeiling(directory: work + "/disk", recordSize: recordSize, seconds: quick ? 0.5 : 1)
                perAppend.append(result.syncPerAppend)
                perMiB.append(result.syncPerMiB)
                mib.append(result.mibPerSecond)
            }
            rows.append(["size": size, "record_bytes": recordSize, "fdatasync_per_append": median(perAppend),
                         "sync_per_mib": median(perMiB), "sync_per_mib_mib_s": median(mib)])
            note("disk size=\(size): fdatasync/append \(Int(median(perAppend)))/s, sync/MiB \(Int(median(perMiB)))/s")
        }
        summary["disk"] = rows
    }

    // MARK: Latency at fixed offered load

    mutating func latency() throws {
        let rows = summary["ingest"] as? [[String: Any]] ?? []
        // The maximum: Ferry's median at 4 clients and 256-byte bodies, measured above.
        let max = rows.first { $0["clients"] as? Int == 4 && $0["size"] as? Int == 256 }?["ferry_median"] as? Double ?? 10_000
        var results: [[String: Any]] = []
        for fraction in [0.1, 0.5, 0.9] {
            var samples: [[String: Any]] = []
            for _ in 0..<runs {
                let dir = work + "/latency-\(fraction)"
                defer { removeTree(dir) }
                let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                                   sink: dir + "/sink", config: configPath, log: dir + ".log")
                defer { agent.stop() }
                let client = try Child(me, ["latency", "--runtime", dir + "/rt", "--rate", "\(max * fraction)",
                                            "--seconds", quick ? "2" : "4", "--size", "256"])
                try client.expectReady()
                client.go()
                samples.append(try client.result())
                client.wait()
            }
            func med(_ key: String) -> Double { median(samples.map { Double($0[key] as? Int ?? 0) }) }
            results.append([
                "fraction": fraction, "offered_rate": max * fraction,
                "achieved_rate": median(samples.map { $0["achieved_rate"] as? Double ?? 0 }),
                "p50_us": med("p50_us"), "p99_us": med("p99_us"), "p999_us": med("p999_us"), "max_us": med("max_us"),
                "runs": samples,
            ])
            note("latency \(Int(fraction * 100))%: p50 \(med("p50_us")) µs p99 \(med("p99_us")) µs p99.9 \(med("p999_us")) µs")
        }
        summary["latency_reference_rate"] = max
        summary["latency"] = results
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

    /// Starts ferryd on the backlog, runs 4 clients for the run time, reads VmHWM.
    func measureMemory(dir: String, backlog: Int, blocked: Bool) throws -> [String: Any] {
        let (agent, firstAck) = try launch(dir)
        defer { agent.stop() }
        let afterStart = memoryKiB(pid: agent.child.pid)
        let rate = try drive(clients(4, runtime: dir + "/rt", size: 256))
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
        // The file sink, the HTTP sink (a local collector that answers 200 at once; gzip on and
        // off) and the JetStream sink (a local nats-server -js, one node). Each run starts ferryd
        // on a pre-written backlog and times until every event is counted delivered.
        let collector = try LocalProcess.httpCollector(port: 20_000 + Int(getpid() % 5000))
        defer { collector.stop() }
        let nats = try LocalProcess.natsServer(port: 25_000 + Int(getpid() % 5000), store: work + "/nats-store")
        defer { nats.stop() }
        let sinks: [(name: String, config: String?)] = [
            ("file", nil),
            ("http", #"{"sinks":[{"name":"http","type":"http","url":"http://127.0.0.1:\#(collector.port)/v1/batch","gzip":false}]}"#),
            ("http_gzip", #"{"sinks":[{"name":"http","type":"http","url":"http://127.0.0.1:\#(collector.port)/v1/batch","gzip":true}]}"#),
            ("jetstream", #"{"sinks":[{"name":"js","type":"jetstream","servers":["nats://127.0.0.1:\#(nats.port)"],"stream":"BENCH","streamSubjects":["ferry.events.>"],"duplicateWindowSeconds":120}]}"#),
        ]
        for (name, config) in sinks {
            var rates: [Double] = []
            for _ in 0..<runs {
                let dir = work + "/delivery-" + name
                defer { removeTree(dir) }
                try generateLog(directory: dir + "/data/segments", events: events, bodySize: 256)
                var path = configPath
                if let config {
                    // The retention setting of the shared config, plus this sink.
                    path = dir + ".json"
                    let base = #"{"log":{"retentionMaxBytes":17179869184},"# + config.dropFirst()
                    try Data(base.utf8).write(to: URL(fileURLWithPath: path))
                }
                let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                                   sink: dir + "/sink", config: path, log: dir + ".log")
                defer { agent.stop() }
                let ready = nowNanoseconds()
                let deadline = ready + 600_000_000_000
                while nowNanoseconds() < deadline {
                    let counters = controlRequest(runtime: dir + "/rt", #"{"op":"status"}"#)?["counters"] as? [String: Any]
                    if (counters?["delivered"] as? Int ?? 0) >= events { break }
                    sleepMicroseconds(20_000)
                }
                rates.append(Double(events) / seconds(since: ready))
            }
            note("\(name) sink delivery: \(Int(median(rates))) events/s")
            results[name] = ["events": events, "size": 256, "rates": rates, "median": median(rates)] as [String: Any]
        }
        summary["delivery"] = results
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

    /// A collector answering every POST with 200 at once (Python's standard library, threaded).
    static func httpCollector(port: Int) throws -> LocalProcess {
        let script = """
            import http.server, sys
            class H(http.server.BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"
                def do_POST(self):
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))
                    self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
                def log_message(self, *a): pass
            http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
            """
        return try LocalProcess("/usr/bin/python3", ["-c", script, String(port)], port: port)
    }

    /// A single-node JetStream server storing in `store`.
    static func natsServer(port: Int, store: String) throws -> LocalProcess {
        try LocalProcess("/usr/sbin/nats-server", ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", store], port: port)
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
