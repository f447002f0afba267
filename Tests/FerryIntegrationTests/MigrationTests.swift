import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// Moving a per-user agent's queue and consent choices into another (the system) agent.
@Suite("Queue migration", .serialized)
struct MigrationTests {
    @Test("a stopped agent's queued and held events move to a running agent with their ids, exactly once; consent choices follow with --consent")
    func migrate() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The per-user agent: delivery not started (events stay queued), analytics undetermined
        // and held (its screen events wait in held/), advertising denied by its user.
        let personalConfig = #"{"consent": {"autoStart": false, "initialConsent": {"analytics": "undetermined"}, "undetermined": {"policy": "hold"}}}"#
        let personal = try AgentProcess(dataDirectory: dir.appending("p-data"), runtimeDirectory: dir.appending("p-rt"),
                                        logDirectory: dir.appending("p-logs"),
                                        extraArguments: try AgentProcess.configurationArguments(personalConfig, in: dir))
        defer { personal.cleanup() }
        try await personal.waitUntilReady()
        let queued = try await runCLI(["emit", "--stdin", "--wait", "--source", "mine"], stdin: TestEvents.jsonLines(count: 20, namePrefix: "queued"),
                                      environment: personal.environment)
        #expect(queued.status == .exited(0), "\(queued)")
        // Five diagnostics events are queued (not held): delivery has not started.
        let diagnostics = try await runCLI(["emit", "--stdin", "--wait", "--source", "mine-diag", "--category", "diagnostics"],
                                           stdin: TestEvents.jsonLines(count: 5, namePrefix: "diag"), environment: personal.environment)
        #expect(diagnostics.status == .exited(0), "\(diagnostics)")
        let denied = try await runCLI(["consent", "set", "advertising", "denied"], environment: personal.environment)
        #expect(denied.status == .exited(0), "\(denied)")
        let exit = try await personal.terminate()
        #expect(exit == .exited(0))

        let host = try AgentProcess(dataDirectory: dir.appending("s-data"), runtimeDirectory: dir.appending("s-rt"),
                                    logDirectory: dir.appending("s-logs"))
        defer { host.cleanup() }
        try await host.waitUntilReady()
        let migrated = try await runCLI(["queue", "migrate", "--from-data-dir", personal.dataDirectory, "--consent",
                                         "--runtime-dir", host.runtimeDirectory])
        #expect(migrated.status == .exited(0), "\(migrated)")
        #expect(migrated.stdout.contains("migrated 25 events"), "\(migrated)")
        #expect(migrated.stdout.contains("accepted=25"), "\(migrated)")
        let delivered = try await waitForValue("the migrated events in the host's sink", timeout: .seconds(30)) { () -> [DeliveredEvent]? in
            let events = try host.deliveredEvents().filter { $0.source == "mine" }
            return events.count >= 20 ? events : nil
        }
        #expect(Set(delivered.map(\.seq)) == Set(1...20))
        let queuedOnes = try await waitForValue("the queued events too", timeout: .seconds(30)) { () -> Int? in
            let count = try host.deliveredEvents().filter { $0.source == "mine-diag" }.count
            return count >= 5 ? count : nil
        }
        #expect(queuedOnes == 5)
        // Again: nothing is stored twice.
        let again = try await runCLI(["queue", "migrate", "--from-data-dir", personal.dataDirectory, "--runtime-dir", host.runtimeDirectory])
        #expect(again.stdout.contains("duplicate=25"), "\(again)")
        #expect(try host.deliveredEvents().filter { $0.source == "mine" }.count == 20)
        let consent = try await host.consentState()
        #expect((consent["consent"] as? [String: Any])?["advertising"] as? String == "denied", "\(consent)")

        // A running source is refused.
        try personal.start()
        try await personal.waitUntilReady()
        let busy = try await runCLI(["queue", "migrate", "--from-data-dir", personal.dataDirectory, "--runtime-dir", host.runtimeDirectory])
        #expect(busy.status != .exited(0) && busy.stderr.contains("still running"), "\(busy)")
    }
}
