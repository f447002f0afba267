#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

@Suite("Two file sinks through the real ferryd")
struct MultiSinkTests {
    /// A configuration with two file sinks writing to `<dir>/out-a` and `<dir>/out-b`.
    static func configuration(_ dir: TemporaryDirectory) throws -> [String] {
        try AgentProcess.configurationArguments("""
        {
          "log": {"segmentMaxBytes": 65536, "retentionMaxBytes": 1073741824},
          "sinks": [
            {"name": "alpha", "type": "file", "directory": "\(dir.appending("out-a"))",
             "batch": {"maxEvents": 100}, "retry": {"initialMilliseconds": 10, "maxMilliseconds": 200}},
            {"name": "beta", "type": "file", "directory": "\(dir.appending("out-b"))",
             "batch": {"maxEvents": 37, "maxWaitMilliseconds": 20}, "circuit": {"failureThreshold": 3, "openMilliseconds": 500}}
          ]
        }
        """, in: dir)
    }

    @Test("both sinks get every event exactly once, also across a kill -9 mid-stream; status lists both")
    func twoFileSinksAcrossKill() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configuration(dir))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let total = 3000
        let emitter = try startCLI(["emit", "--stdin", "--wait", "--timeout", "90", "--source", "two-sinks"],
                                   input: .pipe, environment: agent.environment, outputDirectory: dir.path, label: "emit-two-sinks")
        defer { emitter.cleanup() }
        let writer = Task {
            var written = 0
            while written < total {
                let count = min(100, total - written)
                do {
                    try await emitter.writeInput(TestEvents.jsonLines(count: count, namePrefix: "two", first: written + 1, padding: 40))
                } catch {
                    break
                }
                written += count
            }
            return written
        }
        try await eventually("both sinks receiving", timeout: .seconds(30)) {
            try deliveredEvents(in: dir.appending("out-a")).count >= 200 && deliveredEvents(in: dir.appending("out-b")).count >= 200
                && FileManager.default.fileExists(atPath: agent.cursorPath(sink: "alpha"))
                && FileManager.default.fileExists(atPath: agent.cursorPath(sink: "beta"))
        }
        #expect(agent.kill9() == .signaled(SIGKILL))
        let atKill = (try deliveredEvents(in: dir.appending("out-a")).count, try deliveredEvents(in: dir.appending("out-b")).count)
        print("[measure] kill -9 with alpha at \(atKill.0) and beta at \(atKill.1) of \(total) events")
        try await agent.restart()
        #expect(await writer.value == total)
        emitter.closeInput()
        let exit = try await emitter.waitForExit(timeout: .seconds(120))
        #expect(exit == .exited(0), "\(emitter.standardError)")

        for (sink, directory) in [("alpha", "out-a"), ("beta", "out-b")] {
            let report = try await waitForValue("every event in \(sink)", timeout: .seconds(60)) { () -> DeliveryReport? in
                let report = try DeliveryReport(sinkDirectory: dir.appending(directory))
                return report.events.count >= total ? report : nil
            }
            #expect(report.events.count == total, "\(sink): \(report)")
            #expect(report.duplicateIDs.isEmpty, "\(sink): duplicated ids, e.g. \(report.duplicateIDs.prefix(5))")
            #expect(report.sequenceProblem(source: "two-sinks", count: total) == nil, "\(sink)")
        }
        let status = try await waitForValue("an empty queue", timeout: .seconds(30)) { () -> AgentStatus? in
            let status = try await agent.status()
            return status.queuedEvents == 0 ? status : nil
        }
        let sinks = status.object["sinks"] as? [[String: Any]] ?? []
        #expect(sinks.compactMap { $0["name"] as? String } == ["alpha", "beta"])
        #expect(sinks.allSatisfy { ($0["backlog_events"] as? NSNumber)?.intValue == 0 && $0["circuit"] as? String == "closed" })
        #expect((status.object["delivery"] as? [String: Any])?["sink"] as? String == "alpha", "the single-sink shape shows the first sink")

        let text = try await runCLI(["status"], environment: agent.environment)
        #expect(text.status == .exited(0), "\(text)")
        #expect(text.stdout.contains("alpha (file):") && text.stdout.contains("beta (file):"), "\(text.stdout)")
        #expect(text.stdout.contains("circuit closed"), "\(text.stdout)")
        // Segments delivered to both sinks are gone: only the active one may be left.
        try await eventually("delivered segments deleted", timeout: .seconds(20)) {
            let names = try FileManager.default.contentsOfDirectory(atPath: agent.dataDirectory + "/segments").filter { $0.hasSuffix(".seg") }
            return names.count == 1
        }
        let list = try await runCLI(["deadletter", "list", "--data-dir", agent.dataDirectory])
        #expect(list.stdout.contains("no dead letters"), "\(list)")
        // Without --data-dir the CLI asks the running agent where its data directory is (this
        // agent's is not the default one).
        let found = try await runCLI(["deadletter", "list"], environment: agent.environment)
        #expect(found.status == .exited(0) && found.stdout.contains("no dead letters in \(agent.dataDirectory)/deadletter"), "\(found)")
    }
}
