import Ferry
import FerryCLI
import FerryProtocol
import Foundation
import Testing

/// One table of exit statuses for every `ferry` command (issue 39): the code follows it, and
/// README.md prints it as it is. (`FerryCLI.ExitStatus`: the integration kit has one for processes.)
@Suite("Exit statuses")
struct ExitStatusTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    @Test("each CLI error ends with its row: not running 2 for every command, access denied 3, a refusal 1", arguments: [
        (CLIError.notRunning("/run/x"), FerryCLI.ExitStatus.notRunning),
        (CLIError.accessDenied("access denied: uid 1000 may not change the consent state"), .accessDenied),
        (CLIError.refused("unknown category \"x\"", valid: ["analytics"]), .failure),
        (CLIError.message("no dead letter 42"), .failure),
    ])
    func errors(error: CLIError, status: FerryCLI.ExitStatus) {
        #expect(error.exitStatus == status)
    }

    @Test("a client error becomes the CLI error of its kind")
    func clientErrors() {
        let notRunning = CLIError(FerryClientError.agentNotRunning(endpoint: "ipc:///run/x/control", detail: "no socket"), runtimeDirectory: "/run/x")
        #expect(notRunning.exitStatus == .notRunning)
        #expect(notRunning.description.hasPrefix("ferryd is not running (no answer on ipc:///run/x/control)"))
        let denied = CLIError(FerryClientError.accessDenied("access denied: uid 5"), runtimeDirectory: "/run/x")
        #expect(denied.exitStatus == .accessDenied && denied.description == "access denied: uid 5")
    }

    @Test("README.md's table is the code's, row for row")
    func readmeTable() throws {
        let readme = try String(contentsOfFile: Self.repository + "/README.md", encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "## Exit status\n").dropFirst().first)
        let rows = section.split(separator: "\n").filter { $0.hasPrefix("| ") && !$0.hasPrefix("| status") }
            .map { line in line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) } }
        #expect(rows.map { $0[0] } == FerryCLI.ExitStatus.allCases.map { String($0.rawValue) })
        #expect(rows.map { $0[1] } == FerryCLI.ExitStatus.allCases.map(\.meaning))
    }

    @Test("emit's status is the first that applies: unacknowledged, invalid, rejected, unreadable input", arguments: [
        ([LineOutcome.Status.accepted: 2, .held: 1, .blocked: 1], false, FerryCLI.ExitStatus.success),
        ([.accepted: 1, .unacknowledged: 1, .invalid: 1], false, .notRunning),
        ([.invalid: 1, .rejected: 1], true, .invalidInput),
        ([.rejected: 1], true, .failure),
        ([.accepted: 1], true, .unreadableInput),
    ])
    func emitStatus(counts: [LineOutcome.Status: Int], readFailed: Bool, status: FerryCLI.ExitStatus) {
        #expect(LineOutcome.exitStatus({ counts[$0, default: 0] }, readFailed: readFailed) == status)
    }
}

/// `ferry emit --wait`'s summary counts held events as held, not accepted.
@Suite("Emit summary")
struct EmitSummaryTests {
    @Test("an event held by consent is held=1, not accepted=1")
    func held() {
        let id = EventID(high: 1, low: 2)
        #expect(LineOutcome(Receipt(id: id, status: .accepted, reason: .held)).status == .held)
        #expect(LineOutcome(Receipt(id: id, status: .accepted)).status == .accepted)
        #expect(LineOutcome(Receipt(id: id, status: .accepted, reason: .quarantined)).status == .quarantined)
        let counts: [LineOutcome.Status: Int] = [.held: 1]
        #expect(LineOutcome.summaryLine { counts[$0, default: 0] } == "accepted=0 duplicate=0 rejected=0 held=1")
        let mixed: [LineOutcome.Status: Int] = [.accepted: 2, .held: 1, .quarantined: 1, .unacknowledged: 3]
        #expect(LineOutcome.summaryLine { mixed[$0, default: 0] } == "accepted=2 duplicate=0 rejected=0 held=1 quarantined=1 unacknowledged=3")
    }
}
