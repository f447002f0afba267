@testable import FerryAgent
@testable import FerryStorage
import FerryQuality
import FerryTestKit
import Foundation
import Testing

/// `ferryd validate` is a pre-flight (issue 39): every error of a file at once, each with its key
/// path; a JSON syntax error with its line and column; the files the settings name read as start
/// reads them.
@Suite("Configuration pre-flight")
struct PreflightTests {
    @Test("a disclose block with three faults reports three, each with the sink's key path")
    func everyDiscloseError() throws {
        let error = try ConfigurationTests.error(#"{"sinks": [{"name": "a", "type": "file", "disclose": {"dropContext": ["", "device.id", "ip", "ip"]}}]}"#)
        let lines = error.message.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(lines)")
        #expect(lines.allSatisfy { $0.contains(#"sinks[0]: sink "a": disclose.dropContext: "#) }, "\(lines)")
    }

    @Test("every bad value of one file sink is reported, each on its own line with the sink's key path")
    func everyFileSinkError() throws {
        let error = try ConfigurationTests.error(#"{"sinks": [{"name": "a", "type": "file", "directory": "", "maxFileBytes": 0, "lineFormat": 99}]}"#)
        let lines = error.message.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(lines)")
        #expect(lines.allSatisfy { $0.contains(#"sinks[0]: sink "a": "#) }, "\(lines)")
        #expect(lines.contains { $0.hasSuffix("maxFileBytes must be positive") } && lines.contains { $0.hasSuffix("directory must not be empty") }
            && lines.contains { $0.contains("lineFormat must be") }, "\(lines)")
    }

    @Test("errors of keys and of values come together")
    func keysAndValues() throws {
        let error = try ConfigurationTests.error(#"{"nope": 1, "log": {"segmentMaxBytes": 10}, "dedup": {"maxEntries": 0}}"#)
        let lines = error.message.split(separator: "\n")
        #expect(lines.count == 3, "\(lines)")
        #expect(lines.contains { $0.contains("nope: unknown key") })
        #expect(lines.contains { $0.contains("log.segmentMaxBytes must be at least 4096") })
        #expect(lines.contains { $0.contains("dedup limits must be positive") })
    }

    @Test("a JSON syntax error says its line and column", arguments: [
        ("{\n  \"logLevel\": \"info\",\n  \"maxEventBytes\": x\n}", "line 3, column 20"),
        ("{\n  \"logLevel\": \"info\",\n", "line 3, column 1"),
    ])
    func syntaxPosition(json: String, position: String) throws {
        let error = try ConfigurationTests.error(json)
        #expect(error.message.contains("is not valid JSON: \(position)"), "\(error.message)")
    }

    @Test("a missing plan and a missing redaction key are both reported, each with its key")
    func filesNamed() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        var configuration = AgentConfiguration(runtimeDirectory: scratch.appending("run"), dataDirectory: scratch.appending("data"))
        configuration.quality.configuration.planPath = scratch.appending("no-plan.json")
        let problems = FerryAgent.preflight(configuration, ingestPathKinds: .none)
        #expect(problems.count == 1 && problems[0].hasPrefix("quality.plan: "), "\(problems)")
        #expect(problems[0].contains("no-plan.json"), "\(problems)")
        #expect(FerryAgent.preflight(AgentConfiguration(runtimeDirectory: "/tmp/x", dataDirectory: "/tmp/y"), ingestPathKinds: .none).isEmpty)
    }

    @Test("a sink's `disclose.anonymousId` is read, and on by default")
    func anonymousIDSetting() throws {
        let off = try ConfigurationTests.load(#"{"sinks": [{"name": "a", "type": "file", "disclose": {"anonymousId": false}}]}"#)
        #expect(off.sinks[0].disclosure.anonymousID == false)
        let on = try ConfigurationTests.load(#"{"sinks": [{"name": "a", "type": "file"}]}"#)
        #expect(on.sinks[0].disclosure.anonymousID)
    }

    @Test("an unsafe-path error says its message once (it used to repeat it as its cause)")
    func unsafePathOnce() {
        let storage = StorageError(code: .unsafePath, message: "/tmp/x is writable by other users")
        let error = AgentError(code: .unsafePath, message: storage.message, cause: storage)
        #expect(error.description == "unsafe_path: /tmp/x is writable by other users")
        // A cause that adds something is still said.
        let other = AgentError(code: .configuration, message: "cannot start", cause: storage)
        #expect(other.description.hasSuffix("(unsafe_path: /tmp/x is writable by other users)"))
    }
}
