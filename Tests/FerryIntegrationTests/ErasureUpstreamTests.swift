import FerryIntegrationKit
import FerryTestKit
import Foundation
import NATS
import Testing

/// The black-box walk of `ferry forget --user` reaching every upstream (docs/CONSENT.md, "Erasure
/// upstream"): the real `ferryd` with an envelope collector, a Segment sink (its collector, and a
/// stand-in of Segment's Public API for the regulation) and a JetStream stream whose subjects
/// carry the user.
@Suite("Erasure upstream through the real ferryd")
struct ErasureUpstreamTests {
    @Test("forget reaches an envelope collector, Segment's Public API and JetStream; ferry forget status shows each sent")
    func everyUpstream() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let envelope = try await HTTPTestServer.start()
        let segment = SegmentCollector(writeKey: "wk-erase")
        let segmentServer = try await HTTPTestServer.start(handler: segment.handler)
        let api = try await SegmentPublicAPI.start(token: "sp-erase")
        defer { api.stop() }
        let nats = try NATSServerProcess(in: dir)
        defer { nats.cleanup() }
        try await nats.waitUntilReady()
        try "wk-erase".write(toFile: dir.appending("writekey"), atomically: true, encoding: .utf8)
        try "sp-erase".write(toFile: dir.appending("apitoken"), atomically: true, encoding: .utf8)
        chmod(dir.appending("writekey"), 0o600)
        chmod(dir.appending("apitoken"), 0o600)
        let arguments = try AgentProcess.configurationArguments("""
            {"sinks": [
              {"name": "collector", "type": "http", "url": "\(envelope.url("/v1/batch"))",
               "erasure": {"url": "\(envelope.url("/v1/erasure"))"}, "batch": {"maxWaitMilliseconds": 20}},
              {"name": "segment", "type": "http", "format": "segment", "url": "\(segmentServer.url("/v1/batch"))",
               "writeKeyFile": "\(dir.appending("writekey"))", "batch": {"maxWaitMilliseconds": 20},
               "erasure": {"apiURL": "\(api.url)", "tokenFile": "\(dir.appending("apitoken"))"}},
              {"name": "stream", "type": "jetstream", "servers": ["\(nats.urls[0])"], "subjectTemplate": "ferry.users.{user}.{type}",
               "streamSubjects": ["ferry.>"], "erasure": {"subject": "ferry.erasures"}, "batch": {"maxWaitMilliseconds": 20}}
            ]}
            """, in: dir)
        let agent = try AgentProcess(in: dir, extraArguments: arguments)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let lines = (1...3).map { #"{"name":"Viewed","userId":"u.1","properties":{"i":\#($0)}}"# }
            + [#"{"name":"Viewed","userId":"u-2","properties":{"i":9}}"#]
        let emitted = try await runCLI(["emit", "--stdin", "--wait"], stdin: lines.joined(separator: "\n") + "\n", environment: agent.environment)
        #expect(emitted.status == .exited(0), "\(emitted)")
        try await eventually("delivered to all three") {
            guard envelope.requests.flatMap(\.batchEventIDs).count == 4, segment.accepted.count == 4 else { return false }
            return try await nats.streamMessages("FERRY", timeout: .seconds(2)).count == 4
        }

        let forgot = try await runCLI(["forget", "--user", "u.1"], environment: agent.environment)
        #expect(forgot.status == .exited(0), "\(forgot)")
        try await eventually("sent to every sink") {
            let status = try await agent.control(["op": "forget_status"])
            let sinks = ((status["erasures"] as? [[String: Any]])?.first?["sinks"] as? [[String: Any]]) ?? []
            return sinks.count == 3 && sinks.allSatisfy { $0["state"] as? String == "sent" }
        }
        let cli = try await runCLI(["forget", "status"], environment: agent.environment)
        #expect(cli.status == .exited(0) && cli.stdout.contains("done"), "\(cli)")
        for sink in ["collector", "segment", "stream"] { #expect(cli.stdout.contains(sink), "\(cli)") }

        // The envelope collector got the erasure message.
        let message = try #require(envelope.requests.first { $0.path == "/v1/erasure" })
        #expect(message.json?["type"] as? String == "erasure" && message.json?["userId"] as? String == "u.1")
        // Segment's Public API got the regulation.
        let regulation = try #require(api.requests().last)
        #expect(regulation["status"] as? Int == 200 && regulation["authorization"] as? String == "Bearer sp-erase")
        #expect((regulation["body"] as? [String: Any])?["subjectIds"] as? [String] == ["u.1"])
        // The stream: u.1's subjects purged, u-2's kept, the erasure message there.
        let left = try await nats.streamMessages("FERRY")
        #expect(left.filter { $0.subject.hasPrefix("ferry.users.") }.map(\.subject) == ["ferry.users.u-2.track"])
        #expect(left.filter { $0.subject == "ferry.erasures" }.count == 1)
        // The audit chain: one outcome per sink.
        let log = try await agent.control(["op": "consent_log"])
        #expect(((log["entries"] as? [[String: Any]]) ?? []).filter { $0["change"] as? String == "erasure" }.count == 3)
        _ = try await agent.terminate()
        await envelope.shutdown()
        await segmentServer.shutdown()
    }
}
