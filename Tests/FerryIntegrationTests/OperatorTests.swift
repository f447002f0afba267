import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Foundation
import Synchronization
import Testing

/// The operator's first hour (issue 39), with the real binaries: `ferry emit` without an agent,
/// `ferry status`'s ingest addresses, `ferry queue inspect` finding the agent's data directory,
/// `ferry reload`, and a circuit and health that follow the upstream's answers.
@Suite("The operator's first hour")
struct OperatorTests {
    @Test("ferry emit with no agent says so at once and exits 2, as the control commands do")
    func emitNoAgent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The runner's deadline is below emit's 30 s --timeout: waiting it out fails the test.
        for args in [["emit", "Clicked"], ["emit", "Clicked", "--wait", "--timeout", "60"]] {
            let result = try await runCLI(args, environment: ["FERRY_RUNTIME_DIR": dir.appending("rt")], timeout: .seconds(20))
            #expect(result.status == .exited(2), "\(result)")
            #expect(result.stderr.contains("ferryd is not running (no answer on ipc://\(dir.path)/rt/control)"), "\(result)")
            let metrics = try await runCLI(["metrics"], environment: ["FERRY_RUNTIME_DIR": dir.appending("rt")])
            #expect(metrics.status == .exited(2), "\(metrics)")
        }
    }

    @Test("status prints every ingest path's address; queue inspect reads the running agent's data directory")
    func statusAndQueue() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, extraArguments: ["--http-listen", "127.0.0.1:0"])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let status = try await runCLI(["status"], environment: agent.environment)
        #expect(status.status == .exited(0), "\(status)")
        #expect(status.stdout.contains("  zeromq        ipc://\(agent.runtimeDirectory)/ingest\n"), "\(status)")
        #expect(status.stdout.contains("  http unix     \(agent.runtimeDirectory)/http\n"), "\(status)")
        #expect(status.stdout.contains("  http tcp      127.0.0.1:"), "\(status)")
        let json = try await runCLI(["status", "--json"], environment: agent.environment)
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        let addresses = object?["ingest_addresses"] as? [String: String]
        #expect(addresses?["unix"] == agent.runtimeDirectory + "/http", "\(json)")
        #expect(addresses?["tcp"]?.hasPrefix("127.0.0.1:") == true && addresses?["tcp"] != "127.0.0.1:0", "\(json)")

        #expect(try await runCLI(["emit", "one", "--wait"], environment: agent.environment).status == .exited(0))
        // No --data-dir: the agent answering in FERRY_RUNTIME_DIR says where its queue is.
        let inspect = try await runCLI(["queue", "inspect", "--json"], environment: agent.environment)
        #expect(inspect.status == .exited(0), "\(inspect)")
        let report = try JSONSerialization.jsonObject(with: Data(inspect.stdout.utf8)) as? [String: Any]
        #expect(report?["data_dir"] as? String == agent.dataDirectory, "\(inspect)")
        #expect((report?["records"] as? NSNumber)?.intValue == 1, "\(inspect)")
        try await agent.terminate()
    }

    @Test("HTTP-INGEST.md's curl example works with FERRY_RUNTIME_DIR (no XDG_RUNTIME_DIR)")
    func curlExample() async throws {
        let doc = try String(contentsOfFile: ConfigSnippetTests.repository + "/docs/HTTP-INGEST.md", encoding: .utf8)
        let shell = try #require(doc.components(separatedBy: "From a shell").dropFirst().first?
            .firstMatch(of: /```sh\n([\s\S]*?)```/)?.output.1)
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let path = try FerryBinaries.directory() + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let run = try await runProcess("/usr/bin/env", ["-u", "XDG_RUNTIME_DIR", "PATH=" + path, "FERRY_RUNTIME_DIR=" + agent.runtimeDirectory,
                                                        "/bin/bash", "-euo", "pipefail", "-c", String(shell)])
        #expect(run.status == .exited(0), "\(run)")
        _ = try await waitForValue("the curl event in the sink") { try agent.deliveredEvents().first { $0.name == "Signed Up" } }
        try await agent.terminate()
    }

    @Test("ferry reload applies a reloadable change and says which; refuses a restart-only key and a broken plan with the key, exit 1")
    func reload() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let config = dir.appending("ferryd.json")
        func write(_ json: String) throws { try Data(json.utf8).write(to: URL(fileURLWithPath: config)) }
        try write(#"{"logLevel": "info"}"#)
        let agent = try AgentProcess(in: dir, extraArguments: ["--config", config])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        try write(#"{"logLevel": "debug"}"#)
        let applied = try await runCLI(["reload"], environment: agent.environment)
        #expect(applied.status == .exited(0) && applied.stdout == "reloaded: changed logLevel\n", "\(applied)")
        let same = try await runCLI(["reload", "--json"], environment: agent.environment)
        let object = try JSONSerialization.jsonObject(with: Data(same.stdout.utf8)) as? [String: Any]
        #expect(object?["applied"] as? Bool == true && (object?["changed"] as? [String])?.isEmpty == true, "\(same)")

        try write(#"{"logLevel": "debug", "maxEventBytes": 1000}"#)
        let restart = try await runCLI(["reload"], environment: agent.environment)
        #expect(restart.status == .exited(1), "\(restart)")
        #expect(restart.stdout.hasPrefix("reload refused; the running configuration is kept:\n"), "\(restart)")
        #expect(restart.stdout.contains("these keys need a restart: maxEventBytes"), "\(restart)")

        try write(#"{"logLevel": "debug", "quality": {"plan": "\#(dir.appending("no-plan.json"))"}}"#)
        let plan = try await runCLI(["reload"], environment: agent.environment)
        #expect(plan.status == .exited(1) && plan.stdout.contains("quality.plan: "), "\(plan)")
        // The log says the same; daemon/README.md's example lines are these, as printed.
        try await eventually("the refusal in the log") { agent.logs.contains("reload refused: quality.plan") }
        let readme = try String(contentsOfFile: ConfigSnippetTests.repository + "/daemon/README.md", encoding: .utf8)
        let example = try #require(readme.components(separatedBy: "one log line says why:\n\n```\n").dropFirst().first?
            .components(separatedBy: "```").first)
        for line in example.split(separator: "\n") {
            let printed = String(line.drop { $0 != " " })  // without the time stamp
            #expect(agent.logs.contains(printed), "daemon/README.md's \(line) is not what ferryd printed:\n\(agent.logs.suffix(3000))")
        }
        try await agent.terminate()
    }

    @Test("a permanent error on the probe closes the circuit; a replay that succeeds clears degraded without new traffic")
    func circuitAndHealth() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let answer = Atomic<Int>(503)
        let server = try await HTTPTestServer.start { _ in
            let status = answer.load(ordering: .relaxed)
            return status == 200 ? .ok : .status(status, body: "test")
        }
        let json = """
        {"delivery": {"retryInitialMilliseconds": 20, "retryMaxMilliseconds": 100},
         "sinks": [{"name": "collector", "type": "http", "url": "\(server.url())",
                    "circuit": {"failureThreshold": 2, "openMilliseconds": 300}}]}
        """
        let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(json, in: dir))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let env = agent.environment
        #expect(try await runCLI(["emit", "one", "--user", "u1", "--wait"], environment: env).status == .exited(0))
        // METRICS.md's example line, as printed (open, or half-open while it probes).
        _ = try await waitForValue("the circuit to open", timeout: .seconds(60)) { () -> Bool? in
            let health = try await runCLI(["health"], environment: env)
            return health.stdout.contains("circuit open (http sink: HTTP 503)") || health.stdout.contains("circuit half open (http sink: HTTP 503)")
                ? true : nil
        }
        // The upstream now refuses the batch for good: the probe's answer dead-letters it and
        // closes the circuit (it answered).
        answer.store(400, ordering: .relaxed)
        let letters = try await waitForValue("the dead letter", timeout: .seconds(60)) { () -> [String]? in
            let ids = ((try? FileManager.default.contentsOfDirectory(atPath: agent.deadLetterDirectory(sink: "collector"))) ?? [])
                .filter { $0.hasSuffix(".json") }
            return ids.isEmpty ? nil : ids.map { String($0.dropLast(5)) }
        }
        let degraded = try await waitForValue("health: only the dead letter", timeout: .seconds(60)) { () -> CommandResult? in
            let result = try await runCLI(["health"], environment: env)
            return result.stdout.contains("circuit") ? nil : result
        }
        #expect(degraded.status == .exited(1) && degraded.stdout == "degraded: sink collector: 1 dead letter waiting\n", "\(degraded)")
        let status = try await runCLI(["status", "--json"], environment: env)
        let sink = ((try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["sinks"] as? [[String: Any]])?.first
        #expect(sink?["circuit"] as? String == "closed", "\(status)")

        // A replay the upstream refuses says who refused.
        let refused = try await runCLI(["deadletter", "replay", letters[0]], environment: env)
        #expect(refused.status == .exited(1), "\(refused)")
        #expect(refused.stderr.contains("sink collector could not deliver it (http sink: HTTP 400"), "\(refused)")
        #expect(!refused.stderr.contains("the agent refused"), "\(refused)")

        // Fixed upstream: the replay succeeds and health is 0 at once, with no new event.
        answer.store(200, ordering: .relaxed)
        let replayed = try await runCLI(["deadletter", "replay", letters[0]], environment: env)
        #expect(replayed.status == .exited(0), "\(replayed)")
        let healthy = try await runCLI(["health"], environment: env)
        #expect(healthy.status == .exited(0) && healthy.stdout == "healthy\n", "\(healthy)")
        try await agent.terminate()
        await server.shutdown()
    }
}
