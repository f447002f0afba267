import FerryIntegrationKit
import Foundation
import FerryTestKit
import Testing

/// Consent changes racing with delivery: the send-time gate and every change are serialised, and
/// each delivered batch is stamped with the audit entry (`consent_seq`) of the state that admitted
/// it, so the audit log proves under which state every event left.
@Suite("Consent under concurrency")
struct ConsentConcurrencyTests {
    /// Sends `set_consent analytics …` `count` times over the control socket (a process of its
    /// own), alternating from `<status>` between granted and denied, so every toggler changes the
    /// state whether or not the other one runs at the same moment.
    static let toggler = """
        import json, sys, zmq
        runtime, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
        other = "denied" if first == "granted" else "granted"
        context = zmq.Context()
        for i in range(count):
            status = first if i % 2 == 0 else other
            socket = context.socket(zmq.REQ)
            socket.setsockopt(zmq.LINGER, 0)
            socket.connect("ipc://%s/control" % runtime)
            socket.send(json.dumps({"op": "set_consent", "category": "analytics", "status": status, "actor": "toggler-" + first}).encode())
            if socket.poll(10000) == 0:
                sys.exit("no reply")
            reply = json.loads(socket.recv())
            if not reply.get("ok"):
                sys.exit("refused: %r" % reply)
            socket.close()
        """

    @Test("two processes changing consent while a third emits: no event is delivered under a state that forbade it at send time")
    func noDeliveryUnderForbiddingState() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let env = agent.environment

        let lines = (1...3000).map { #"{"name":"Race \#($0)","properties":{"n":\#($0)}}"# }.joined(separator: "\n") + "\n"
        let emitter = try startCLI(["emit", "--stdin", "--wait", "--timeout", "60", "--source", "racer"],
                                   input: .bytes(Array(lines.utf8)), environment: env, outputDirectory: dir.path, label: "emitter")
        defer { emitter.cleanup() }
        let togglers = try ["granted", "denied"].map { status in
            try ChildProcess(executable: "/usr/bin/python3", arguments: ["-c", Self.toggler, agent.runtimeDirectory, status, "40"],
                             environment: env, outputDirectory: dir.path, label: "toggler-\(status)")
        }
        defer { togglers.forEach { $0.cleanup() } }
        for toggler in togglers {
            let exit = try await toggler.waitForExit(timeout: .seconds(60))
            #expect(exit == .exited(0), "\(toggler.standardError)")
        }
        let emitted = try await emitter.waitForExit(timeout: .seconds(90))
        #expect(emitted.isSuccess, "\(emitter.standardOutput) \(emitter.standardError)")
        // End granted so whatever is still queued and allowed drains, then wait for the queue to empty.
        // A few events sent now must go out (the race itself may, on a busy machine, leave none).
        try await agent.control(["op": "set_consent", "category": "analytics", "status": "granted"])
        let tail = try await runCLI(["emit", "--stdin", "--wait", "--source", "racer"],
                                    stdin: (1...20).map { #"{"name":"After \#($0)"}"# }.joined(separator: "\n") + "\n", environment: env)
        #expect(tail.status == .exited(0), "\(tail)")
        try await eventually("the queue to drain", timeout: .seconds(60)) { try await agent.status().queuedEvents == 0 }

        // Replay the audit log: analytics' status after each entry.
        let log = try await agent.control(["op": "consent_log"])
        #expect(log["verified"] as? Bool == true)
        let entries = try #require(log["entries"] as? [[String: Any]])
        var statusAfter: [Int: String] = [0: "granted"]
        var current = "granted"
        for entry in entries {
            if entry["change"] as? String == "consent.analytics", let new = entry["new"] as? String {
                current = new.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            }
            statusAfter[entry["seq"] as? Int ?? -1] = current
        }
        #expect(entries.count > 2, "the togglers changed the state")

        let delivered = try agent.deliveredEvents().filter { $0.source == "racer" }
        #expect(delivered.filter { $0.name.hasPrefix("After") }.count == 20, "events sent after the last grant are delivered")
        var forbidden: [String] = []
        for event in delivered {
            let stamp = event.object["consent"] as? [String: Any]
            // Line format 2 on (docs/PROTOCOL.md, "File sink lines"): a number, never a string.
            guard (event.object["line_format"] as? Int ?? 1) >= 2, !(stamp?["consent_seq"] is String),
                  let seq = (stamp?["consent_seq"] as? NSNumber)?.intValue else {
                forbidden.append("\(event.name): no consent stamp")
                continue
            }
            if statusAfter[seq] != "granted" { forbidden.append("\(event.name) sent under entry \(seq): \(statusAfter[seq] ?? "?")") }
        }
        #expect(forbidden.isEmpty, "\(forbidden.prefix(10))")
        #expect(Set(delivered.map(\.id)).count == delivered.count, "no event delivered twice")
        let status = try await agent.status()
        print("consent race: \(entries.count) changes, \(delivered.count) of 3000 delivered, blocked at ingest \(status.counters["blocked"] ?? 0), blocked at send \(status.counters["blocked_at_send"] ?? 0)")
    }
}
