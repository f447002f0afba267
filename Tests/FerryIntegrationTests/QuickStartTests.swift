import Foundation
import FerryTestKit
import Testing

/// The README quick start, run for real: ferryd, `ferry emit`, `ferry tail`, `ferry status`,
/// `ferry queue inspect`.
@Suite("CLI quick start")
struct QuickStartTests {
    @Test("emit --wait is accepted, tail sees it accepted and delivered, status and queue inspect report it")
    func quickStart() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let env = agent.environment

        // A tail with --count: it must exit by itself after exactly that many messages.
        let tailCount = 60
        let tail = try BusTail(count: tailCount, environment: env, outputDirectory: dir.path)
        defer { tail.cleanup() }
        try await tail.waitUntilSubscribed()

        let emit = try await runCLI(["emit", "Signed Up", "--prop", "plan=pro", "--prop", "seats=3", "--wait"], environment: env)
        #expect(emit.status == .exited(0), "\(emit)")
        #expect(emit.stdout == "accepted=1 duplicate=0 rejected=0\n", "\(emit)")

        // The sink has it, once, with the fields of the file sink format.
        let event = try await waitForValue("the event in the sink") {
            try agent.deliveredEvents().first { $0.name == "Signed Up" }
        }
        #expect(event.type == "track")
        #expect(event.source == "ferry-cli")
        #expect(event.seq == 1)
        #expect(event.pid > 0)
        #expect(event.acceptedAt >= event.timestamp - 60_000)
        #expect(event.properties["plan"] as? String == "pro")
        #expect((event.properties["seats"] as? NSNumber)?.intValue == 3)
        #expect(event.object["id"] as? String == event.id && event.id.count == 36)

        // tail --json saw it accepted, then delivered (same id, name and source).
        try await eventually("tail to show the event accepted and delivered") {
            try tail.ids(topic: "accepted").contains(event.id) && tail.ids(topic: "delivered").contains(event.id)
        }
        let accepted = try #require(try tail.messages(topic: "accepted").first { $0["id"] as? String == event.id })
        #expect(accepted["name"] as? String == "Signed Up")
        #expect(accepted["source"] as? String == "ferry-cli")
        let delivered = try #require(try tail.messages(topic: "delivered").first { $0["id"] as? String == event.id })
        #expect(delivered["sink"] as? String == "file")

        // Fill the bus until tail's --count is reached: it exits 0 having printed exactly that many.
        let printed = try tail.messages().count
        #expect(printed < tailCount, "tail already printed \(printed) messages")
        let filler = try await runCLI(["emit", "--stdin", "--wait", "--source", "filler"],
                                      stdin: TestEvents.jsonLines(count: tailCount, namePrefix: "filler"), environment: env)
        #expect(filler.status == .exited(0), "\(filler)")
        let tailExit = try await tail.process.waitForExit(timeout: .seconds(20))
        #expect(tailExit == .exited(0), "\(tail.process.standardError)")
        #expect(try tail.messages().count == tailCount)

        // status --json: counters match what went in and out.
        let expectedTotal = try await waitForValue("everything delivered") { () -> Int? in
            let sink = try agent.deliveredEvents()
            let status = try await agent.status()
            return status.counters["delivered"] == sink.count && status.queuedEvents == 0 && sink.count > tailCount ? sink.count : nil
        }
        let statusJSON = try await runCLI(["status", "--json"], environment: env)
        #expect(statusJSON.status == .exited(0), "\(statusJSON)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(statusJSON.stdout.utf8)) as? [String: Any])
        let counters = try #require(document["counters"] as? [String: Any])
        #expect((counters["accepted"] as? NSNumber)?.intValue == expectedTotal)
        #expect((counters["delivered"] as? NSNumber)?.intValue == expectedTotal)
        #expect((counters["rejected"] as? NSNumber)?.intValue == 0)
        #expect((document["pid"] as? NSNumber)?.intValue == Int(agent.pid ?? -1))
        #expect(((document["queue"] as? [String: Any])?["events"] as? NSNumber)?.intValue == 0)

        let statusText = try await runCLI(["status"], environment: env)
        #expect(statusText.status == .exited(0), "\(statusText)")
        #expect(statusText.stdout.contains("ferryd pid \(agent.pid ?? -1)"), "\(statusText)")

        // queue inspect, offline view of the same data directory: every record's CRC is fine.
        let inspect = try await runCLI(["queue", "inspect", "--data-dir", agent.dataDirectory], environment: env)
        #expect(inspect.status == .exited(0), "\(inspect)")
        #expect(inspect.stdout.contains("crc ok"), "\(inspect)")
        #expect(inspect.stdout.contains("0 damaged regions"), "\(inspect)")
        let inspectJSON = try await runCLI(["queue", "inspect", "--data-dir", agent.dataDirectory, "--json", "--events"], environment: env)
        #expect(inspectJSON.status == .exited(0), "\(inspectJSON)")
        let queue = try #require(try JSONSerialization.jsonObject(with: Data(inspectJSON.stdout.utf8)) as? [String: Any])
        #expect((queue["damaged_regions"] as? NSNumber)?.intValue == 0)
        #expect((queue["undelivered"] as? NSNumber)?.intValue == 0)

        let stopped = try await agent.terminate()
        #expect(stopped == .exited(0), "\(agent.logs)")
    }

    @Test("ferry status without an agent says ferryd is not running and fails, also with a stale socket")
    func statusWithoutAgent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Nothing ever ran here.
        let never = try await runCLI(["status"], environment: ["FERRY_RUNTIME_DIR": dir.appending("none")], timeout: .seconds(20))
        #expect(never.status != .exited(0), "\(never)")
        #expect(never.stderr.contains("ferryd is not running"), "\(never)")

        // An agent that was killed: its socket files are still there, nobody answers.
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        agent.kill9()
        #expect(FileManager.default.fileExists(atPath: agent.runtimeDirectory + "/control"))
        let stale = try await runCLI(["status", "--json"], environment: agent.environment, timeout: .seconds(20))
        #expect(stale.status != .exited(0), "\(stale)")
        #expect(stale.stderr.contains("ferryd is not running"), "\(stale)")
        #expect(stale.stdout.isEmpty, "\(stale)")
    }

    @Test("ferry emit started before the agent completes once the agent comes up")
    func agentStartedAfterClient() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, start: false)
        defer { agent.cleanup() }

        let emit = try startCLI(["emit", "Before Agent", "--prop", "n=1", "--wait", "--timeout", "30"],
                                environment: agent.environment, outputDirectory: dir.path)
        defer { emit.cleanup() }
        // The client is really up (its ZeroMQ context exists) before the agent starts.
        try await eventually("the emit client to set up its socket") { try clientSocketIsOpen(emit) }
        #expect(emit.isRunning)
        #expect(!FileManager.default.fileExists(atPath: agent.runtimeDirectory + "/ingest"))

        try agent.start()
        try await agent.waitUntilReady()
        let status = try await emit.waitForExit(timeout: .seconds(40))
        #expect(status == .exited(0), "\(emit.standardError)")
        #expect(emit.standardOutput == "accepted=1 duplicate=0 rejected=0\n")
        let delivered = try await waitForValue("the event in the sink") {
            try agent.deliveredEvents().first { $0.name == "Before Agent" }
        }
        #expect(delivered.seq == 1)
        #expect((delivered.properties["n"] as? NSNumber)?.intValue == 1)
    }

    @Test("an event over --max-event-bytes is rejected: emit prints rejected=1 and exits 1")
    func oversizedEventFromCLI() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, extraArguments: ["--max-event-bytes", "1024"])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let big = String(repeating: "y", count: 2000)
        let rejected = try await runCLI(["emit", "Too Big", "--prop", "blob=\(big)", "--wait"], environment: agent.environment)
        #expect(rejected.status == .exited(1), "\(rejected)")
        #expect(rejected.stdout == "accepted=0 duplicate=0 rejected=1\n", "\(rejected)")
        let small = try await runCLI(["emit", "Small", "--prop", "blob=ok", "--wait"], environment: agent.environment)
        #expect(small.status == .exited(0), "\(small)")
        try await eventually("the small event in the sink") { try agent.deliveredEvents().map(\.name) == ["Small"] }
        let status = try await agent.status()
        #expect(status.counters["rejected"] == 1)
        #expect(status.counters["accepted"] == 1)
    }
}

/// Whether `process` has its ZeroMQ context open (an eventfd, Linux) — proof that the client
/// library is initialised. Elsewhere, true as soon as the process runs.
func clientSocketIsOpen(_ process: ChildProcess) throws -> Bool {
    if let exit = process.exitStatus { throw FerryTestKitError("\(process) exited early: \(exit)") }
    #if os(Linux)
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.pid)/fd")) ?? []
    return fds.contains { fd in
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.pid)/fd/\(fd)"))?.contains("eventfd") ?? false
    }
    #else
    return true
    #endif
}
