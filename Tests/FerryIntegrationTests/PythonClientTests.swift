import FerryIntegrationKit
import Foundation
import FerryTestKit
import Testing

/// The Python example client speaks the protocol from docs/PROTOCOL.md alone; run it for real.
@Suite("Python client example")
struct PythonClientTests {
    /// `client/python/ferry_emit.py` in this checkout.
    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("client/python/ferry_emit.py").path

    /// Debian's interpreter, which has python3-zmq (scripts/install-deps installs it).
    static let python = "/usr/bin/python3"

    @Test("its encoder produces the bytes of the worked example in PROTOCOL.md")
    func selftest() async throws {
        let result = try await runProcess(Self.python, [Self.script, "--selftest"])
        #expect(result.status == .exited(0), "\(result)")
        #expect(result.stdout == "selftest ok\n")
    }

    @Test("it sends events that ferryd accepts and delivers, and re-sends are answered duplicate")
    func sendsToAgent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        let result = try await runProcess(
            Self.python,
            [Self.script, "--count", "600", "--name", "From Python", "--source", "py", "--props", #"{"lang":"python"}"#],
            environment: agent.environment, timeout: .seconds(60))
        #expect(result.status == .exited(0), "\(result)")
        #expect(result.stdout == "accepted=600 duplicate=0 rejected=0\n", "\(result)")

        let delivered = try await waitForValue("600 events in the sink") { () -> [DeliveredEvent]? in
            let events = try agent.deliveredEvents().filter { $0.source == "py" }
            return events.count >= 600 ? events : nil
        }
        #expect(delivered.count == 600)
        #expect(Set(delivered.map(\.seq)) == Set(1...600))
        #expect(delivered.allSatisfy { $0.name == "From Python" && $0.properties["lang"] as? String == "python" })
    }
}
