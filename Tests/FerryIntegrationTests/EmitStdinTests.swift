import FerryIntegrationKit
import Foundation
import FerryProtocol
import FerryTestKit
import Testing

/// `ferry emit --stdin` says what became of every line (issue 10, section 3): the real `ferry`
/// and `ferryd` binaries, the file sink checked against the report.
@Suite("ferry emit --stdin reports every line")
struct EmitStdinTests {
    /// The `--json` report: the per-line objects and the summary object.
    struct JSONReport {
        var lines: [[String: Any]]
        var summary: [String: Int]
        var exitCode: Int

        init(_ stdout: String) throws {
            let objects = try stdout.split(separator: "\n").map { line in
                try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not an object: \(line)")
            }
            let last = try #require(objects.last, "empty report")
            summary = try #require(last["summary"] as? [String: Int], "no summary: \(stdout)")
            exitCode = try #require(last["exitCode"] as? Int)
            lines = Array(objects.dropLast())
        }

        /// Line number → status.
        var statuses: [Int: String] {
            Dictionary(uniqueKeysWithValues: lines.map { ($0["line"] as? Int ?? -1, $0["status"] as? String ?? "?") })
        }

        func line(_ number: Int) -> [String: Any]? { lines.first { $0["line"] as? Int == number } }
    }

    static let validFields = "valid fields: name, type, properties, userId, anonymousId, groupId, previousId, context, onceKey, category, localOnly"

    @Test("good, bad, good: the report names exactly the accepted lines and the sink holds exactly those")
    func goodBadGood() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, extraArguments: ["--max-event-bytes", "1024"])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        // --json: line 2 has a typo'd field, line 4 is refused by the agent (too large).
        let big = String(repeating: "x", count: 2000)
        let input = """
            {"name":"good-1","properties":{"n":1}}
            {"name":"bad-2","propertis":{"n":2}}

            {"name":"good-4","properties":{"n":4}}
            {"name":"big-5","properties":{"blob":"\(big)"}}

            """
        let result = try await runCLI(["emit", "--stdin", "--json", "--source", "json-run"], stdin: input,
                                      environment: agent.environment)
        #expect(result.status == .exited(65), "\(result)")
        let report = try JSONReport(result.stdout)
        // The blank line 3 is skipped but counted: line numbers are those of the input.
        #expect(report.statuses == [1: "accepted", 2: "invalid", 4: "accepted", 5: "rejected"], "\(result.stdout)")
        #expect(report.lines.map { $0["line"] as? Int } == [1, 2, 4, 5], "in input order")
        let error = try #require(report.line(2)?["error"] as? String)
        #expect(error == "unknown field \"propertis\"; \(Self.validFields)")
        #expect(report.line(5)?["reason"] as? String == "too_large")
        #expect(report.summary["accepted"] == 2 && report.summary["invalid"] == 1 && report.summary["rejected"] == 1)
        #expect(report.summary["unacknowledged"] == 0 && report.summary["duplicate"] == 0)
        #expect(report.exitCode == 65)
        #expect(result.stderr.isEmpty, "\(result)")

        // The sink holds exactly the accepted lines, under the ids the report gave.
        let reported = Set([1, 4].compactMap { report.line($0)?["id"] as? String })
        #expect(reported.count == 2)
        let delivered = try await waitForValue("both accepted lines delivered") {
            let events = try agent.deliveredEvents().filter { $0.source == "json-run" }
            return events.count >= 2 ? events : nil
        }
        #expect(Set(delivered.map(\.id)) == reported)
        #expect(delivered.sorted { $0.seq < $1.seq }.map(\.name) == ["good-1", "good-4"], "sent in input order")
        let status = try await agent.status()
        #expect(status.counters["accepted"] == 2, "nothing else reached the agent")

        // Text: the summary on stdout, the lines that were not acked named on stderr.
        let text = try await runCLI(["emit", "--stdin", "--wait", "--source", "text-run"], stdin: input,
                                    environment: agent.environment)
        #expect(text.status == .exited(65), "\(text)")
        #expect(text.stdout == "accepted=2 duplicate=0 rejected=1 invalid=1\n", "\(text)")
        #expect(text.stderr == """
            ferry emit: stdin line 2: invalid, not sent: unknown field "propertis"; \(Self.validFields)
            ferry emit: stdin line 5: rejected by the agent (too_large)

            """, "\(text)")
        try await eventually("the text run's lines delivered") {
            try agent.deliveredEvents().filter { $0.source == "text-run" }.map(\.name).sorted() == ["good-1", "good-4"]
        }
    }

    /// Lines refused before anything is sent, with the message each gets. No agent is needed:
    /// invalid lines never reach the client.
    @Test("invalid lines are refused with a message naming the problem", arguments: [
        (#"{"name":"a","propertis":{}}"#, "unknown field \"propertis\"; \(validFields)"),
        (#"{"name":"a","userid":"u1"}"#, "unknown field \"userid\"; \(validFields)"),
        (#"{"type":"track"}"#, "missing string field \"name\""),
        (#"{"name":7}"#, "\"name\" must be a string"),
        (#"{"name":"a","type":"click"}"#, "unknown type \"click\"; valid types: \(EventType.allCases.map(\.description).joined(separator: ", "))"),
        (#"{"name":"a","properties":[1]}"#, "\"properties\" must be an object"),
        (#"{"name":"a","localOnly":1}"#, "\"localOnly\" must be true or false"),
        (#"{"name":"a","userId":5}"#, "\"userId\" must be a string"),
        (#"{"name":"a","anonymousId":5}"#, "\"anonymousId\" must be a string"),
        (#"{"type":"group","groupId":["acme"]}"#, "\"groupId\" must be a string"),
        (#"{"type":"alias","previousId":true}"#, "\"previousId\" must be a string"),
        (#"{"name":"a","context":"fr-FR"}"#, "\"context\" must be an object"),
        (#"{"name":"a","groupid":"acme"}"#, "unknown field \"groupid\"; \(validFields)"),
        (#"{"type":"page"}"#, "missing string field \"name\""),
        (#"["name"]"#, "not a JSON object"),
        (#"{"name":"a""#, "not valid JSON"),
    ])
    func invalidLine(line: String, message: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try await runCLI(["emit", "--stdin", "--json"], stdin: line + "\n",
                                      environment: ["FERRY_RUNTIME_DIR": dir.path + "/run"], timeout: .seconds(30))
        #expect(result.status == .exited(65), "\(result)")
        let report = try JSONReport(result.stdout)
        #expect(report.lines.count == 1)
        #expect(report.line(1)?["status"] as? String == "invalid")
        #expect(report.line(1)?["error"] as? String == message, "\(result.stdout)")

        let text = try await runCLI(["emit", "--stdin"], stdin: line + "\n",
                                    environment: ["FERRY_RUNTIME_DIR": dir.path + "/run"], timeout: .seconds(30))
        #expect(text.status == .exited(65), "\(text)")
        #expect(text.stderr == "ferry emit: stdin line 1: invalid, not sent: \(message)\n", "\(text)")
    }

    @Test("streaming: each line is sent and reported as it arrives, not at end of input")
    func streaming() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        let emit = try startCLI(["emit", "--stdin", "--json", "--source", "stream"], input: .pipe,
                                environment: agent.environment, outputDirectory: dir.path, label: "emit-stream")
        defer { emit.cleanup() }
        try await emit.writeInput(#"{"name":"first"}"# + "\n")
        // Standard input is still open: the first line must be acked, reported and delivered.
        try await eventually("line 1 reported accepted") {
            let first = try JSONSerialization.jsonObject(with: Data((emit.outputLines.first ?? "").utf8)) as? [String: Any]
            return first?["status"] as? String == "accepted" && first?["line"] as? Int == 1
        }
        try await eventually("line 1 in the sink") {
            try agent.deliveredEvents().map(\.name) == ["first"]
        }
        #expect(emit.isRunning)

        try await emit.writeInput(#"{"name":"second","propertis":{}}"# + "\n" + #"{"name":"third"}"# + "\n")
        try await eventually("lines 2 and 3 reported") { emit.outputLines.count == 3 }
        try await eventually("line 3 in the sink") {
            try agent.deliveredEvents().map(\.name) == ["first", "third"]
        }
        #expect(emit.isRunning)

        emit.closeInput()
        let status = try await emit.waitForExit(timeout: .seconds(30))
        #expect(status == .exited(65), "\(emit.standardError)")
        let report = try JSONReport(emit.standardOutput)
        #expect(report.statuses == [1: "accepted", 2: "invalid", 3: "accepted"])
        #expect(report.summary["accepted"] == 2 && report.summary["invalid"] == 1)
    }

    @Test("no agent: every sent line is reported unacknowledged after --timeout, exit 2")
    func agentUnreachable() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let input = #"{"name":"a"}"# + "\n" + #"{"name":"b","bogus":1}"# + "\n" + #"{"name":"c"}"# + "\n"
        let result = try await runCLI(["emit", "--stdin", "--json", "--timeout", "1"], stdin: input,
                                      environment: ["FERRY_RUNTIME_DIR": dir.path + "/run"], timeout: .seconds(30))
        #expect(result.status == .exited(2), "\(result)")
        let report = try JSONReport(result.stdout)
        #expect(report.statuses == [1: "unacknowledged", 2: "invalid", 3: "unacknowledged"])
        #expect(report.exitCode == 2)
        #expect(result.stderr.contains("2 of 2 events unacknowledged"), "\(result)")
        #expect(result.stderr.contains("ferryd is not running"), "\(result)")
    }
}
