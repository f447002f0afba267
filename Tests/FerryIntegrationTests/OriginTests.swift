import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// The kernel-verified origin of events, end to end with the real binaries.
@Suite("Origin", .serialized)
struct OriginTests {
    @Test("every stored event carries the sender's uid, gid, pid, comm and exe from the kernel; ferry tail shows and filters by it")
    func originEndToEnd() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let mine = try startCLI(["tail", "--json", "--topic", "accepted", "--uid", String(getuid()), "--count", "1"],
                                environment: agent.environment, outputDirectory: dir.path, label: "tail-mine")
        defer { mine.cleanup() }
        let others = try startCLI(["tail", "--json", "--topic", "accepted", "--uid", String(getuid() &+ 12345), "--count", "1", "--idle-timeout", "5"],
                                  environment: agent.environment, outputDirectory: dir.path, label: "tail-others")
        defer { others.cleanup() }
        try await eventually("both tails to listen", timeout: .seconds(20)) {
            mine.standardError.contains("listening") && others.standardError.contains("listening")
        }
        // Keep emitting until the subscription has reached the agent and the matching tail ends.
        try await eventually("the tail filtered by my uid to see an event", timeout: .seconds(30)) {
            _ = try await runCLI(["emit", "probe", "--source", "origin-test", "--wait"], environment: agent.environment)
            return mine.exitStatus != nil
        }
        let line = try #require(mine.standardOutput.split(separator: "\n").first.map(String.init))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let origin = try #require(object["origin"] as? [String: Any], "\(line)")
        #expect((origin["uid"] as? NSNumber)?.uint32Value == getuid())
        #expect(origin["comm"] as? String == "ferry")
        // The tail filtered by another uid saw nothing and gave up.
        // --idle-timeout's status: 75 (README.md, "Exit status").
        #expect(try await others.waitForExit(timeout: .seconds(30)) == .exited(75), "\(others.standardOutput)")

        let stored = try #require(try agent.deliveredEvents().first { $0.source == "origin-test" })
        let record = try #require(try JSONSerialization.jsonObject(with: Data(stored.line.utf8)) as? [String: Any])
        let fileOrigin = try #require(record["origin"] as? [String: Any], "\(stored.line)")
        #expect((fileOrigin["uid"] as? NSNumber)?.uint32Value == getuid())
        #expect((fileOrigin["gid"] as? NSNumber)?.uint32Value == getgid())
        #expect((fileOrigin["pid"] as? NSNumber) != nil)
        #expect((fileOrigin["exe"] as? String)?.hasSuffix("/ferry") == true, "\(fileOrigin)")
        #expect(fileOrigin.keys.contains("unit"), "unit is null when unknown, never left out")
    }

    @Test("a file sink's disclose turns origin and process details off on SIGHUP, from the next batch on; dropContext drops those keys")
    func discloseReloads() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let config = dir.appending("ferryd.json")
        func write(_ disclose: String) throws {
            try Data(#"{"sinks": [{"name": "file", "type": "file"\#(disclose)}]}"#.utf8).write(to: URL(fileURLWithPath: config))
        }
        try write("")
        let agent = try AgentProcess(in: dir, extraArguments: ["--config", config])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        func emit(_ name: String) async throws -> [String: Any] {
            let result = try await runCLI(["emit", name, "--source", "disclose-test", "--context", #"{"ip":"203.0.113.9","locale":"de"}"#, "--wait"],
                                          environment: agent.environment)
            #expect(result.status == .exited(0), "\(result)")
            // Lines without pid and seq: read as objects, not as DeliveredEvents.
            return try await waitForValue("\(name) in the file sink") {
                try deliveredEventObjects(in: agent.sinkDirectory).first { $0["name"] as? String == name }
            }
        }
        let before = try await emit("before")
        #expect(before["origin"] is [String: Any] && before["pid"] is NSNumber && before["seq"] is NSNumber, "\(before)")
        #expect((before["context"] as? [String: Any])?.keys.sorted() == ["ip", "locale"])

        try write(#", "disclose": {"origin": false, "process": false, "dropContext": ["ip"]}"#)
        agent.kill(signal: SIGHUP)
        try await eventually("the reload logged") { agent.logs.contains("sinks[0].disclose") }
        let after = try await emit("after")
        #expect(after["origin"] == nil && after["pid"] == nil && after["seq"] == nil && after["session"] == nil, "\(after)")
        #expect((after["context"] as? [String: Any])?.keys.sorted() == ["locale"], "\(after)")
        try await agent.terminate()
    }
}
