#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import NATS

// The fleet section (`--only fleet`, issue 24 point 3): N ferryd agents, each with its own data
// and runtime directories and a JetStream sink listing all three servers, deliver into an R3 file
// stream of a 3-node nats-server 2.15 cluster (`--nats-current`), with one event per message and
// with `eventsPerMessage` 100. Every figure at the cluster is read from the cluster (the stream's
// state in each node's `/jsz`, the servers' CPU from /proc); the agents' own counters only say
// when a run is over and how large each agent's backlog is.

/// The stream the fleet delivers into (deleted and created again before every run).
let fleetStream = "FLEET"

/// A 3-node JetStream cluster of one nats-server binary on loopback: each node its own store
/// directory, client port, route port and monitoring port; `sync_interval: always`, so a node
/// fsyncs before it acknowledges, as ferryd does before it acks an event.
final class FleetCluster {
    let processes: [Process]
    let clientPorts: [Int]
    let monitorPorts: [Int]

    init(nats: String, directory: String, basePort: Int) throws {
        clientPorts = (0..<3).map { basePort + $0 }
        let routePorts = (0..<3).map { basePort + 3 + $0 }
        monitorPorts = (0..<3).map { basePort + 6 + $0 }
        var started: [Process] = []
        do {
            for node in 0..<3 {
                let dir = directory + "/n\(node)"
                try makeDirectory(dir + "/store")
                let routes = (0..<3).filter { $0 != node }.map { "nats-route://127.0.0.1:\(routePorts[$0])" }
                let config = """
                    server_name: n\(node)
                    listen: 127.0.0.1:\(clientPorts[node])
                    http: 127.0.0.1:\(monitorPorts[node])
                    max_payload: 1MB
                    jetstream { store_dir: "\(dir)/store", sync_interval: always }
                    cluster { name: ferry-fleet, listen: 127.0.0.1:\(routePorts[node]), routes: [\(routes.joined(separator: ", "))] }
                    """
                try Data(config.utf8).write(to: URL(fileURLWithPath: dir + "/nats.conf"))
                let process = Process()
                process.executableURL = URL(fileURLWithPath: nats)
                process.arguments = ["-c", dir + "/nats.conf"]
                process.standardOutput = FileHandle.nullDevice
                FileManager.default.createFile(atPath: dir + "/nats.log", contents: nil)
                process.standardError = FileHandle(forWritingAtPath: dir + "/nats.log")
                try process.run()
                started.append(process)
            }
        } catch {
            for process in started { process.terminate(); process.waitUntilExit() }
            throw error
        }
        processes = started
    }

    var servers: [String] { clientPorts.map { "nats://127.0.0.1:\($0)" } }

    /// Deletes the fleet stream if it exists and creates it again: R3, file storage, 120 s
    /// duplicate window. Retries while the cluster elects its meta leader.
    func resetStream() throws {
        let deadline = nowNanoseconds() + 30_000_000_000
        while true {
            do {
                let connection = try NATSConnection(options: .init(servers: servers, retryOnFailedConnect: false))
                defer { connection.close() }
                let js = try JetStreamContext(connection: connection, options: .init(apiTimeout: .seconds(5)))
                if try js.streamInfo(fleetStream) != nil { try js.deleteStream(fleetStream) }
                try js.addStream(StreamConfiguration(name: fleetStream, subjects: ["ferry.events.>"], replicas: 3, storage: .file))
                return
            } catch {
                guard nowNanoseconds() < deadline else { throw error }
                sleepMicroseconds(250_000)
            }
        }
    }

    /// The stream's state as the most advanced replica reports it (`/jsz?streams=true` of every
    /// node): messages and bytes stored.
    func streamState() -> (messages: Int, bytes: Int) {
        var best = (messages: 0, bytes: 0)
        for port in monitorPorts {
            guard let body = httpGet(port: port, path: "/jsz?streams=true"),
                  let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { continue }
            for account in object["account_details"] as? [[String: Any]] ?? [] {
                for stream in account["stream_detail"] as? [[String: Any]] ?? [] where stream["name"] as? String == fleetStream {
                    let state = stream["state"] as? [String: Any] ?? [:]
                    let messages = state["messages"] as? Int ?? 0, bytes = state["bytes"] as? Int ?? 0
                    if messages > best.messages { best = (messages, bytes) }
                }
            }
        }
        return best
    }

    /// User plus system CPU seconds of the three servers so far.
    func serverCPUSeconds() -> Double { serverCPUSecondsEach().reduce(0, +) }

    /// The same, per server (n0, n1, n2): the stream's leader does more than its followers.
    func serverCPUSecondsEach() -> [Double] { processes.map { cpuSeconds(pid: $0.processIdentifier) } }

    /// The largest resident set of the three servers now, KiB (the stream leader holds the
    /// duplicate window's ids, as every replica does).
    func largestRSSKiB() -> Int { processes.map { memoryKiB(pid: $0.processIdentifier).rss }.max() ?? 0 }

    /// Events in the stream: each message's `Ferry-Events` header, 1 without it (docs/JETSTREAM.md).
    func countEvents() throws -> Int {
        let connection = try NATSConnection(options: .init(servers: servers, retryOnFailedConnect: false))
        defer { connection.close() }
        let js = try JetStreamContext(connection: connection, options: .init(apiTimeout: .seconds(10)))
        return try js.fetchAll(stream: fleetStream, timeout: .seconds(300)).reduce(0) { $0 + (Int($1.headers["Ferry-Events"] ?? "") ?? 1) }
    }

    func stop() {
        for process in processes where process.isRunning { process.terminate() }
        for process in processes { process.waitUntilExit() }
    }
}

/// One HTTP/1.0 GET on loopback (the servers' monitoring port): the body, or nil.
func httpGet(port: Int, path: String) -> [UInt8]? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
    guard connected else { return nil }
    let request = Array("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
    guard request.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == request.count else { return nil }
    var response: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n <= 0 { break }
        response += chunk[..<n]
    }
    let separator = Array("\r\n\r\n".utf8)
    guard let start = (0..<max(0, response.count - 3)).first(where: { Array(response[$0..<$0 + 4]) == separator }) else { return nil }
    return Array(response[(start + 4)...])
}

extension Driver {
    /// The fleet's sizes: agents (`FERRY_BENCH_FLEET_AGENTS` overrides), events pre-written per
    /// agent for the capacity runs (ten times more with batching, so that run too lasts seconds),
    /// offered events/s per agent and seconds of the steady-state runs.
    var fleetShape: (agents: Int, backlog: Int, batchedBacklog: Int, rate: Double, seconds: Double) {
        let agents = ProcessInfo.processInfo.environment["FERRY_BENCH_FLEET_AGENTS"].flatMap { Int($0) }
        return quick ? (agents ?? 8, 4_000, 40_000, 200, 8) : (agents ?? 50, 2_000, 20_000, 100, 20)
    }

    /// The fleet section: one cluster for the whole section; each run on a fresh stream and fresh
    /// agents.
    mutating func fleet() throws {
        guard let nats = natsCurrent else {
            note("fleet: skipped (no --nats-current: the path of nats-server 2.15)")
            return
        }
        let dir = work + "/fleet"
        defer { removeTree(dir) }
        let cluster = try FleetCluster(nats: nats, directory: dir + "/cluster", basePort: 30_000 + Int(getpid() % 3000) * 10)
        defer { cluster.stop() }
        try cluster.resetStream()
        let shape = fleetShape
        var result: [String: Any] = ["agents": shape.agents, "servers": 3, "replicas": 3, "sync_interval": "always",
                                     "nats_server": natsVersion(nats), "size": 256]
        // One event per message; 100 per message (a delivery batch as it comes); and 100 per
        // message with the batch waiting up to 1 s for more events (`batch.maxWaitMilliseconds`),
        // which at a low per-host rate is what fills the messages. Capacity runs start on a
        // backlog, where the wait changes nothing: the first two only.
        for (key, perMessage, wait) in [("one_per_message", 1, 0), ("batched", 100, 0), ("batched_wait_1s", 100, 1000)] {
            var mode: [String: Any] = ["events_per_message": perMessage, "batch_max_wait_ms": wait]
            if wait == 0 {
                mode["capacity"] = try fleetCapacity(cluster: cluster, dir: dir + "/cap-\(key)", perMessage: perMessage)
            }
            mode["steady"] = try fleetSteady(cluster: cluster, dir: dir + "/steady-\(key)", perMessage: perMessage, maxWait: wait)
            result[key] = mode
        }
        summary["fleet"] = result
    }

    func natsVersion(_ path: String) -> String {
        let process = Process(), pipe = Pipe()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["--version"]
        process.standardOutput = pipe
        guard (try? process.run()) != nil else { return "?" }
        process.waitUntilExit()
        return String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Starts `count` agents delivering to the cluster; their directories under `dir`.
    func fleetAgents(_ count: Int, cluster: FleetCluster, dir: String, perMessage: Int, maxWait: Int = 0, autoStart: Bool,
                     backlog: Int) throws -> [Agent] {
        let servers = cluster.servers.map { "\"\($0)\"" }.joined(separator: ",")
        let sink = #"{"name":"js","type":"jetstream","servers":[\#(servers)],"stream":"\#(fleetStream)","createStream":false,"eventsPerMessage":\#(perMessage),"batch":{"maxWaitMilliseconds":\#(maxWait)}}"#
        let config = #"{"consent":{"autoStart":\#(autoStart)},"sinks":[\#(sink)]}"#
        var agents: [Agent] = []
        do {
            for i in 0..<count {
                let home = dir + "/a\(i)"
                if backlog > 0 { try generateLog(directory: home + "/data/segments", events: backlog, bodySize: 256) }
                try makeDirectory(home + "/rt")
                let path = try sinkConfig(dir: home, config)
                agents.append(try Agent(ferryd: ferryd, data: home + "/data", runtime: home + "/rt", sink: home + "/sink",
                                        config: path, log: home + ".log"))
            }
            // Ready when each control socket answers.
            let deadline = nowNanoseconds() + 120_000_000_000
            for agent in agents {
                while controlRequest(runtime: agent.runtime, #"{"op":"status"}"#) == nil {
                    guard nowNanoseconds() < deadline, agent.child.process.isRunning else { throw BenchError("ferryd did not start; see \(dir)") }
                    sleepMicroseconds(20_000)
                }
            }
        } catch {
            for agent in agents { agent.kill9() }
            throw error
        }
        return agents
    }

    /// User plus system CPU seconds of every agent so far.
    func agentsCPUSeconds(_ agents: [Agent]) -> Double { agents.map { cpuSeconds(pid: $0.child.pid) }.reduce(0, +) }

    /// Each agent's JetStream sink backlog (events), -1 when it does not answer.
    func fleetBacklogs(_ agents: [Agent]) -> [Int] {
        agents.map { agent in
            let sinks = controlRequest(runtime: agent.runtime, #"{"op":"status"}"#)?["sinks"] as? [[String: Any]] ?? []
            return sinks.first?["backlog_events"] as? Int ?? -1
        }
    }

    /// Capacity: every agent holds `backlog` pre-written events and starts delivering at once
    /// (`start` on each control socket); the clock runs from the first `start` to the cluster
    /// sample at which the stream first held its final message count.
    func fleetCapacity(cluster: FleetCluster, dir: String, perMessage: Int) throws -> [String: Any] {
        defer { removeTree(dir) }
        try cluster.resetStream()
        let shape = fleetShape
        let backlog = perMessage == 1 ? shape.backlog : shape.batchedBacklog
        let total = shape.agents * backlog
        let agents = try fleetAgents(shape.agents, cluster: cluster, dir: dir, perMessage: perMessage, autoStart: false, backlog: backlog)
        defer { for agent in agents { agent.stop() } }
        let cpu0 = cluster.serverCPUSeconds(), rss0 = cluster.largestRSSKiB(), each0 = cluster.serverCPUSecondsEach()
        let agentsCPU0 = agentsCPUSeconds(agents)
        let started = nowNanoseconds()
        for agent in agents { _ = controlRequest(runtime: agent.runtime, #"{"op":"start"}"#) }
        var samples: [(t: Double, messages: Int, bytes: Int)] = []
        var maxBacklog = 0, lastAgentCheck = 0.0, drained = false
        let limit = quick ? 300.0 : 900.0
        while seconds(since: started) < limit {
            sleepMicroseconds(200_000)
            let state = cluster.streamState()
            samples.append((seconds(since: started), state.messages, state.bytes))
            if perMessage == 1 && state.messages >= total { drained = true; break }
            // The agents are asked once a second whether they are done (with batching the
            // message count of a complete stream is not known in advance).
            if samples.last!.t - lastAgentCheck >= 1 {
                lastAgentCheck = samples.last!.t
                let backlogs = fleetBacklogs(agents)
                maxBacklog = max(maxBacklog, backlogs.max() ?? 0)
                if backlogs.allSatisfy({ $0 == 0 }) {
                    let final = cluster.streamState()
                    samples.append((seconds(since: started), final.messages, final.bytes))
                    drained = true
                    break
                }
            }
        }
        let cpu = cluster.serverCPUSeconds() - cpu0
        let each = zip(cluster.serverCPUSecondsEach(), each0).map { $0 - $1 }
        let agentsCPU = agentsCPUSeconds(agents) - agentsCPU0
        let rss = cluster.largestRSSKiB()
        let final = samples.last ?? (0, 0, 0)
        let done = samples.first { $0.messages == final.messages }?.t ?? .nan
        // A stream that cannot be read back gives no event count (NaN figures), never a negative one.
        let events = perMessage == 1 ? Double(final.messages) : ((try? cluster.countEvents()).map(Double.init) ?? .nan)
        // The rate between 10% and 90% of the final count: without the agents' connecting at
        // the start (each connects on its first delivery) and the last stragglers.
        let low = samples.first { $0.messages * 10 >= final.messages }, high = samples.first { $0.messages * 10 >= final.messages * 9 }
        var middle = (messages: Double.nan, bytes: Double.nan)
        if let low, let high, high.t > low.t {
            middle = (Double(high.messages - low.messages) / (high.t - low.t), Double(high.bytes - low.bytes) / (high.t - low.t))
        }
        let perMessageEvents = events / Double(max(1, final.messages))
        let row: [String: Any] = [
            "events_offered": total, "events_stored": events, "messages_stored": final.messages, "bytes_stored": final.bytes,
            "seconds": done, "drained": drained, "events_per_second": middle.messages * perMessageEvents,
            "messages_per_second": middle.messages, "bytes_per_second": middle.bytes,
            "events_per_second_whole_run": Double(events) / done, "messages_per_second_whole_run": Double(final.messages) / done,
            "bytes_per_event": Double(final.bytes) / Double(events), "server_cpu_seconds": cpu,
            "server_cpu_us_per_message": cpu * 1e6 / Double(final.messages), "server_cpu_us_per_event": cpu * 1e6 / Double(events),
            "max_agent_backlog": maxBacklog, "server_rss_kib_before": rss0, "server_rss_kib": rss,
            "server_cpu_seconds_each": each, "agents_cpu_seconds": agentsCPU, "agents_cpu_us_per_event": agentsCPU * 1e6 / Double(events),
        ]
        note("fleet capacity, \(shape.agents) agents × \(backlog) events, \(perMessage)/message: \(whole(events)) events in \(final.messages) messages in \(String(format: "%.1f", done)) s — between 10% and 90% of them \(whole(middle.messages * perMessageEvents)) events/s, \(whole(middle.messages)) messages/s at the cluster (\(whole(Double(events) / done)) events/s over the whole run)\(drained ? "" : " (not drained)")")
        return row
    }

    /// Steady state: each agent fed `rate` events/s by one `track-latency` process for
    /// `seconds`; the cluster's stream sampled every second, every agent's backlog too. Then the
    /// clients stop and the agents get up to 60 s to drain; the events in the stream are counted.
    func fleetSteady(cluster: FleetCluster, dir: String, perMessage: Int, maxWait: Int) throws -> [String: Any] {
        defer { removeTree(dir) }
        try cluster.resetStream()
        let shape = fleetShape, warmup = 10
        let agents = try fleetAgents(shape.agents, cluster: cluster, dir: dir, perMessage: perMessage, maxWait: maxWait,
                                     autoStart: true, backlog: warmup)
        defer { for agent in agents { agent.stop() } }
        // Warm-up: each agent connects on its first delivery (and checks the stream); with 50
        // agents starting at once that takes seconds, which belong to no steady state. The
        // window starts once every agent has delivered its few pre-written events.
        let warmupStart = nowNanoseconds()
        while seconds(since: warmupStart) < 120, !fleetBacklogs(agents).allSatisfy({ $0 == 0 }) { sleepMicroseconds(500_000) }
        let warmupSeconds = seconds(since: warmupStart)
        var clients: [Child] = []
        defer { for child in clients where child.process.isRunning { child.signal(SIGKILL); child.wait() } }
        for (i, agent) in agents.enumerated() {
            clients.append(try Child(me, ["track-latency", "--runtime", agent.runtime, "--rate", "\(shape.rate)",
                                          "--seconds", "\(shape.seconds)", "--size", "256", "--source", "fleet-\(i)"]))
        }
        for child in clients { try child.expectReady() }
        let state0 = cluster.streamState(), cpu0 = cluster.serverCPUSeconds(), agentsCPU0 = agentsCPUSeconds(agents)
        let started = nowNanoseconds()
        for child in clients { child.go() }
        var samples: [[String: Any]] = []
        // The cluster every second; the agents every 4 s (50 status requests take a while on a
        // loaded machine, and cost the agents CPU).
        var lastAgents = 0.0
        while seconds(since: started) < shape.seconds {
            sleepMicroseconds(1_000_000)
            let state = cluster.streamState()
            var sample: [String: Any] = ["t": seconds(since: started), "messages": state.messages, "bytes": state.bytes]
            if seconds(since: started) - lastAgents >= 4 {
                lastAgents = seconds(since: started)
                let backlogs = fleetBacklogs(agents)
                sample["max_backlog"] = backlogs.max() ?? -1
                sample["total_backlog"] = backlogs.filter { $0 > 0 }.reduce(0, +)
            }
            samples.append(sample)
        }
        let window = seconds(since: started)
        let state1 = cluster.streamState(), cpu1 = cluster.serverCPUSeconds(), agentsCPU = agentsCPUSeconds(agents) - agentsCPU0
        var accepted = 0
        for child in clients {
            accepted += (try? child.result())?["accepted"] as? Int ?? 0
            child.wait()
        }
        // Drain, then count what the stream holds.
        let drainStart = nowNanoseconds()
        while seconds(since: drainStart) < 60, !fleetBacklogs(agents).allSatisfy({ $0 == 0 }) { sleepMicroseconds(500_000) }
        let drainSeconds = seconds(since: drainStart)
        let final = cluster.streamState()
        let events = (perMessage == 1 ? Double(final.messages) : ((try? cluster.countEvents()).map(Double.init) ?? .nan)) - Double(warmup * shape.agents)
        let eventsPerMessage = final.messages > state0.messages ? events / Double(final.messages - state0.messages) : .nan
        let messages = state1.messages - state0.messages, bytes = state1.bytes - state0.bytes
        let tail = samples.suffix(max(1, samples.count / 3))
        let lateBacklog = tail.compactMap { $0["max_backlog"] as? Int }.max() ?? -1
        let cpu = cpu1 - cpu0
        let row: [String: Any] = [
            "offered_per_second": shape.rate * Double(shape.agents), "accepted": accepted, "window_seconds": window,
            "messages_per_second": Double(messages) / window, "bytes_per_second": Double(bytes) / window,
            "events_per_message": eventsPerMessage, "events_per_second": Double(messages) * eventsPerMessage / window,
            "server_cpu_seconds": cpu, "server_cpu_us_per_message": cpu * 1e6 / Double(messages),
            "server_cpu_us_per_event": cpu * 1e6 / (Double(messages) * eventsPerMessage),
            "max_agent_backlog_last_third": lateBacklog, "drain_seconds": drainSeconds,
            "agents_cpu_seconds": agentsCPU, "agents_cpu_cores": agentsCPU / window,
            "events_stored": events, "messages_stored": final.messages - state0.messages, "warmup_events_per_agent": warmup,
            "warmup_seconds": warmupSeconds, "samples": samples,
        ]
        note("fleet steady, \(shape.agents) agents × \(whole(shape.rate))/s, \(perMessage)/message, wait \(maxWait) ms: accepted \(whole(Double(accepted) / shape.seconds))/s; cluster \(whole(Double(messages) / window)) messages/s ≈ \(whole(Double(messages) * eventsPerMessage / window)) events/s, \(String(format: "%.1f", cpu * 1e6 / Double(max(1, messages)))) µs server CPU/message, agents \(String(format: "%.2f", agentsCPU / window)) cores; largest agent backlog \(lateBacklog) in the last third; stored \(whole(events)) of \(accepted) events after \(String(format: "%.1f", drainSeconds)) s of drain")
        return row
    }
}
