import FerryIntegrationKit
import Foundation
import FerryTestKit
import Testing

/// `ferry emit` sends the event-model fields (issue 14): `--anonymous-id`, `--group-id`,
/// `--previous-id`, `--context` and the matching `--stdin` keys, checked in the file sink line of
/// a real `ferryd`.
@Suite("ferry emit event-model fields")
struct EmitEventModelTests {
    static let context = #"{"locale":"fr-FR","app":{"version":"1.2"}}"#

    /// The file sink lines of `source`, once there are `count` of them, in sink order.
    static func lines(_ agent: AgentProcess, source: String, count: Int) async throws -> [[String: Any]] {
        try await waitForValue("\(count) events of \(source) in the sink") { () -> [[String: Any]]? in
            let events = try agent.deliveredEvents().filter { $0.source == source }
            return events.count >= count ? events.map(\.object) : nil
        }
    }

    @Test("the help and the completion scripts name the new options and the six types", arguments: ["bash", "zsh", "fish"])
    func helpAndCompletions(shell: String) async throws {
        let help = try await runCLI(["emit", "--help"])
        #expect(help.status == .exited(0), "\(help)")
        // The help is wrapped to the terminal width: compare with single spaces.
        let text = help.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for option in ["--anonymous-id <id>", "--group-id <id>", "--previous-id <id>", "--context <json>",
                       "track, screen, identify, group, alias, page", #""anonymousId", "groupId", "previousId""#] {
            #expect(text.contains(option), "help lacks \(option)")
        }
        let completion = try await runCLI(["--generate-completion-script", shell])
        #expect(completion.status == .exited(0), "\(completion)")
        for option in ["anonymous-id", "group-id", "previous-id", "context"] {
            #expect(completion.stdout.contains(option), "\(shell) completion lacks \(option)")
        }
        // --type completes to the six types.
        let types = ["bash": #"'track'$'\n''screen'$'\n''identify'$'\n''group'$'\n''alias'$'\n''page'"#,
                     "zsh": "('track' 'screen' 'identify' 'group' 'alias' 'page')",
                     "fish": "'track screen identify group alias page'"]
        #expect(completion.stdout.contains(types[shell]!), "\(shell) completion lacks the --type values")
    }

    @Test("the flags arrive in the file sink line; identify, group and alias need no NAME")
    func flags() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        let runs: [[String]] = [
            ["Order Completed", "--user", "u1", "--anonymous-id", "anon-1", "--context", Self.context, "--prop", "total=42.5"],
            ["Pricing", "--type", "page", "--anonymous-id", "anon-1", "--context", #"{ "page" : { "path" : "/pricing" } }"#],
            ["--type", "group", "--user", "u1", "--group-id", "acme", "--prop", "plan=enterprise"],
            ["--type", "alias", "--user", "u1", "--previous-id", "anon-1"],
            ["--type", "identify", "--user", "u1", "--prop", "email=a@example.com", "--context", "{}"],
        ]
        // One after the other, so the sink holds them in this order.
        for arguments in runs {
            let result = try await runCLI(["emit"] + arguments + ["--source", "flags", "--wait"], environment: agent.environment)
            #expect(result.status == .exited(0), "\(arguments): \(result)")
            #expect(result.stdout == "accepted=1 duplicate=0 rejected=0\n", "\(result)")
        }
        let lines = try await Self.lines(agent, source: "flags", count: 5)
        #expect(lines.map { $0["type"] as? String } == ["track", "page", "group", "alias", "identify"])
        #expect(lines.map { $0["name"] as? String } == ["Order Completed", "Pricing", "", "", ""])

        let track = lines[0]
        #expect(track["user_id"] as? String == "u1")
        #expect(track["anonymous_id"] as? String == "anon-1")
        let context = try #require(track["context"] as? [String: Any], "\(track)")
        #expect(context["locale"] as? String == "fr-FR")
        #expect((context["app"] as? [String: Any])?["version"] as? String == "1.2")
        #expect((track["properties"] as? [String: Any])?["total"] as? Double == 42.5)
        // A context given over several spaces and lines still makes one compact sink line.
        #expect(((lines[1]["context"] as? [String: Any])?["page"] as? [String: Any])?["path"] as? String == "/pricing")
        #expect(lines[2]["group_id"] as? String == "acme")
        #expect((lines[2]["properties"] as? [String: Any])?["plan"] as? String == "enterprise")
        #expect(lines[3]["previous_id"] as? String == "anon-1")
        #expect(lines[3]["user_id"] as? String == "u1")
        // Fields not given are absent from the line; an empty context is no context.
        #expect(lines[4]["context"] == nil && lines[4]["anonymous_id"] == nil)
        #expect(lines.enumerated().allSatisfy { $0.offset == 2 || $0.element["group_id"] == nil })
        #expect(lines.enumerated().allSatisfy { $0.offset == 3 || $0.element["previous_id"] == nil })
    }

    @Test("a --context that is not a JSON object is refused (exit 64) without sending; a too long id is rejected by the agent")
    func badContext() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        let refused: [(String, String)] = [
            ("[1,2]", "--context must be a JSON object, got '[1,2]'"),
            (#""fr-FR""#, #"--context must be a JSON object, got '"fr-FR"'"#),
            ("42", "--context must be a JSON object, got '42'"),
            ("null", "--context must be a JSON object, got 'null'"),
            (#"{"locale":"#, #"--context is not valid JSON: '{"locale":'"#),
            ("", "--context is not valid JSON: ''"),
        ]
        for (context, message) in refused {
            let result = try await runCLI(["emit", "Bad", "--context", context, "--source", "bad", "--wait"],
                                          environment: agent.environment)
            #expect(result.status == .exited(64), "\(context): \(result)")
            #expect(result.stderr.contains(message), "\(result)")
            #expect(result.stderr.contains(#"for example '{"locale":"fr-FR"}'"#), "\(result)")
            #expect(result.stdout.isEmpty, "\(result)")
        }
        // An id over the wire's 1024 bytes reaches the agent, which rejects it: exit 1.
        let long = try await runCLI(["emit", "--type", "group", "--group-id", String(repeating: "g", count: 1025),
                                     "--source", "bad", "--wait"], environment: agent.environment)
        #expect(long.status == .exited(1), "\(long)")
        #expect(long.stdout == "accepted=0 duplicate=0 rejected=1\n", "\(long)")
        #expect(long.stderr == "ferry emit: the event: rejected by the agent (invalid_field)\n", "\(long)")

        let good = try await runCLI(["emit", "Good", "--context", Self.context, "--source", "good", "--wait"],
                                    environment: agent.environment)
        #expect(good.status == .exited(0), "\(good)")
        _ = try await Self.lines(agent, source: "good", count: 1)
        // None of the refused events reached the agent: one accepted (Good), one rejected (the long id).
        let status = try await agent.status()
        #expect(status.counters["accepted"] == 1 && status.counters["rejected"] == 1, "\(status.counters)")
        #expect(try agent.deliveredEvents().map(\.name) == ["Good"])
    }

    @Test("--stdin: anonymousId, groupId, previousId and context arrive in the sink; a non-object context is invalid, not sent")
    func stdinFields() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        let input = #"""
            {"name":"Order Completed","userId":"u1","anonymousId":"anon-1","context":{"locale":"fr-FR","app":{"version":"1.2"}}}
            {"type":"group","userId":"u1","groupId":"acme","properties":{"plan":"enterprise"}}
            {"type":"alias","userId":"u1","previousId":"anon-1"}
            {"name":"Bad","context":[1]}
            {"name":"Nulls","anonymousId":null,"groupId":null,"previousId":null,"context":null}
            {"name":"Empty","context":{}}
            {"type":"page","name":"Pricing","anonymousId":"anon-2","contxt":{}}

            """#
        let result = try await runCLI(["emit", "--stdin", "--json", "--source", "lines"], stdin: input,
                                      environment: agent.environment)
        #expect(result.status == .exited(65), "\(result)")
        let report = try EmitStdinTests.JSONReport(result.stdout)
        #expect(report.statuses == [1: "accepted", 2: "accepted", 3: "accepted", 4: "invalid", 5: "accepted",
                                    6: "accepted", 7: "invalid"], "\(result.stdout)")
        #expect(report.line(4)?["error"] as? String == "\"context\" must be an object")
        #expect(report.line(7)?["error"] as? String == "unknown field \"contxt\"; \(EmitStdinTests.validFields)")

        let lines = try await Self.lines(agent, source: "lines", count: 5)
        #expect(lines.map { $0["name"] as? String } == ["Order Completed", "", "", "Nulls", "Empty"])
        #expect(lines.map { $0["type"] as? String } == ["track", "group", "alias", "track", "track"])
        #expect(lines[0]["anonymous_id"] as? String == "anon-1")
        let context = try #require(lines[0]["context"] as? [String: Any], "\(lines[0])")
        #expect(context["locale"] as? String == "fr-FR")
        #expect((context["app"] as? [String: Any])?["version"] as? String == "1.2")
        #expect(lines[1]["group_id"] as? String == "acme")
        #expect((lines[1]["properties"] as? [String: Any])?["plan"] as? String == "enterprise")
        #expect(lines[2]["previous_id"] as? String == "anon-1" && lines[2]["user_id"] as? String == "u1")
        for line in lines[3...] {
            for key in ["anonymous_id", "group_id", "previous_id", "context"] {
                #expect(line[key] == nil, "\(key) in \(line)")
            }
        }
        let status = try await agent.status()
        #expect(status.counters["accepted"] == 5, "the invalid lines were not sent")
    }
}
