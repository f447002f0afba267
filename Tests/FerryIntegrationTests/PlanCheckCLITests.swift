import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// `ferry plan check` (issue 31): the real binary, its exit status and what it prints.
@Suite("ferry plan check")
struct PlanCheckCLITests {
    static let plan = #"""
    {"events": [{"type": "track", "name": "Order Completed",
                 "properties": {"required": ["total"], "properties": {"total": {"type": "number"}, "email": {"type": "string", "pattern": "^hmac:"}}}},
                {"type": "identify", "traits": {"required": ["plan"]}}]}
    """#
    static let good = #"{"name": "Order Completed", "properties": {"total": 5}}"# + "\n" + #"{"type": "identify", "properties": {"plan": "pro"}}"# + "\n"
    static let bad = #"{"name": "Order Completed", "properties": {"total": "5", "email": "jane@example.com"}, "userId": "jane@example.com"}"#

    @Test("exit 0 when all pass, 1 with each violation by line, 65 on a bad plan or redact table, --redact shows the stored event")
    func exitCodes() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let planPath = dir.appending("plan.json"), eventsPath = dir.appending("events.jsonl")
        try Self.plan.write(toFile: planPath, atomically: true, encoding: .utf8)
        try (Self.good + "\n" + Self.bad + "\n" + #"{"name": "Signed Up"}"# + "\n").write(toFile: eventsPath, atomically: true, encoding: .utf8)

        let passing = try await runCLI(["plan", "check", planPath, "-"], stdin: Self.good)
        #expect(passing.status == .exited(0), "\(passing)")
        #expect(passing.stdoutLines == ["checked 2 events: 2 passed, 0 broke the plan"])

        let failing = try await runCLI(["plan", "check", planPath, eventsPath])
        #expect(failing.status == .exited(1), "\(failing)")
        #expect(failing.stdoutLines == [
            "line 4: track:Order Completed properties.email: pattern: must match the pattern ^hmac:",
            "line 4: track:Order Completed properties.total: type: must be number, not a string",
            "checked 4 events: 3 passed, 1 broke the plan",
        ])

        let strict = try await runCLI(["plan", "check", "--no-allow-unplanned", planPath], stdin: #"{"name": "Signed Up"}"# + "\n")
        #expect(strict.status == .exited(1), "\(strict)")
        #expect(strict.stdoutLines.first == "line 1: track:Signed Up: unplanned: the plan does not name this event")

        let notAnEvent = try await runCLI(["plan", "check", planPath], stdin: "{\"nam\": 1}\n")
        #expect(notAnEvent.status == .exited(1), "\(notAnEvent)")
        #expect(notAnEvent.stdoutLines.first?.hasPrefix("line 1: not an event: unknown field \"nam\"") == true)

        // --redact with a ferryd configuration file: redaction first (the plan wants a hash).
        let keyPath = dir.appending("redact.key")
        try #require(FileManager.default.createFile(atPath: keyPath, contents: Data(repeating: 9, count: 32), attributes: [.posixPermissions: 0o600]),
                     "cannot create \(keyPath)")
        let configPath = dir.appending("ferryd.json")
        try #"{"redact": {"keyFile": "\#(keyPath)", "rules": [{"path": "properties.email", "action": "hash"}], "detect": [{"kind": "email", "action": "mask"}]}}"#
            .write(toFile: configPath, atomically: true, encoding: .utf8)
        let redacted = try await runCLI(["plan", "check", planPath, "--redact", configPath], stdin: Self.bad + "\n")
        #expect(redacted.status == .exited(1), "\(redacted)")
        let stored = try #require(redacted.stdoutLines.first)
        #expect(stored.hasPrefix(#"line 1: redacted {"type":"track","name":"Order Completed","userId":"j***@e***.com","properties":{"email":"hmac:"#))
        #expect(!redacted.stdout.contains("jane@example.com"))
        #expect(redacted.stdoutLines.dropFirst().first == "line 1: track:Order Completed properties.total: type: must be number, not a string")

        // A bad plan and a bad redact table: exit 65 (invalid input; 2 is "not running"), the file and the JSON path named.
        let badPlan = dir.appending("bad.json")
        try #"{"events": [{"type": "track", "name": "A", "properties": {"properties": {"a": {"oneOf": []}}}}]}"#
            .write(toFile: badPlan, atomically: true, encoding: .utf8)
        let refused = try await runCLI(["plan", "check", badPlan, eventsPath])
        #expect(refused.status == .exited(65), "\(refused)")
        #expect(refused.stderr.contains("\(badPlan): $.events[0].properties.properties.a: unsupported JSON Schema keyword \"oneOf\""))
        let badRedact = dir.appending("redact.json")
        try #"{"rules": [{"path": "email", "action": "hash"}]}"#.write(toFile: badRedact, atomically: true, encoding: .utf8)
        let refusedRedact = try await runCLI(["plan", "check", planPath, eventsPath, "--redact", badRedact])
        #expect(refusedRedact.status == .exited(65), "\(refusedRedact)")
        #expect(refusedRedact.stderr.contains("rules[0].path"))

        let missing = try await runCLI(["plan", "check", planPath, dir.appending("nonexistent.jsonl")])
        #expect(missing.status == .exited(74), "\(missing)")
    }
}
