import FerryIntegrationKit
import Foundation
import FerryTestKit
import Testing

/// The real `ferryd` with `format: segment` and a write key, posting to a Segment-like collector
/// (FerryTestKit's `SegmentCollector`: write key, 32 KB / 500 KB limits, each type's shape).
@Suite("Segment sink end to end")
struct SegmentSinkIntegrationTests {
    /// Writes the write key file and a configuration selecting the segment sink; returns the
    /// `--config` arguments.
    static func configure(_ dir: TemporaryDirectory, url: String, writeKey: String, sinkKeys: String = "") throws -> [String] {
        let keyPath = dir.appending("segment.key")
        try Data((writeKey + "\n").utf8).write(to: URL(fileURLWithPath: keyPath))
        chmod(keyPath, 0o600)
        return try AgentProcess.configurationArguments("""
            {"delivery": {"batchMaxEvents": 100, "retryInitialMilliseconds": 20, "retryMaxMilliseconds": 200},
             "sink": {"type": "http", "url": "\(url)", "format": "segment", "writeKeyFile": "\(keyPath)", "gzip": true\(sinkKeys)}}
            """, in: dir)
    }

    /// One `ferry emit --stdin` line.
    static func line(_ name: String, userID: String?, padding: Int = 0) -> String {
        let user = userID.map { #","userId":"\#($0)""# } ?? ""
        return #"{"name":"\#(name)"\#(user),"properties":{"pad":"\#(String(repeating: "x", count: padding))"}}"# + "\n"
    }

    static func emit(_ lines: String, count: Int, agent: AgentProcess) async throws {
        let result = try await runCLI(["emit", "--stdin", "--wait", "--source", "segment-e2e"], stdin: lines, environment: agent.environment)
        #expect(result.stdout == "accepted=\(count) duplicate=0 rejected=0\n", "\(result)")
    }

    /// `ferry deadletter list --json` for the agent's data directory.
    static func deadLetters(_ agent: AgentProcess) async throws -> [[String: Any]] {
        let result = try await runCLI(["deadletter", "list", "--json", "--data-dir", agent.dataDirectory])
        #expect(result.status == .exited(0), "\(result)")
        return (try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]]) ?? []
    }

    @Test("a message without userId and one over 32 KB are dead-lettered with the reason; the other 30 go out in requests under 500 KB, each once")
    func limits() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let writeKey = "wk_e2e_" + UUID().uuidString
        let collector = SegmentCollector(writeKey: writeKey)
        let server = try await HTTPTestServer.start(handler: collector.handler)
        // Without the agent's anonymous id as a fallback (disclose.anonymousId false), an event
        // with neither id is what Segment refuses.
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configure(dir, url: server.url(), writeKey: writeKey,
                                                                                 sinkKeys: #", "disclose": {"anonymousId": false}"#))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        var lines = ""
        for i in 1...15 { lines += Self.line("seg-\(i)", userID: "u\(i)", padding: 25_000) }
        lines += Self.line("anonymous", userID: nil)
        lines += Self.line("huge", userID: "u-huge", padding: 40_000)
        for i in 16...30 { lines += Self.line("seg-\(i)", userID: "u\(i)", padding: 25_000) }
        try await Self.emit(lines, count: 32, agent: agent)

        try await eventually("30 delivered, 2 dead-lettered, nothing queued") {
            let status = try await agent.status()
            return status.counters["delivered"] == 30 && status.counters["dead_lettered"] == 2 && status.queuedEvents == 0
        }
        #expect(collector.refusals.isEmpty, "\(collector.refusals)")
        let accepted = collector.accepted
        #expect(accepted.count == 30 && Set(accepted.map(\.messageID)).count == 30, "every event exactly once")
        #expect(accepted.map { $0.json["event"] as? String } == (1...30).map { "seg-\($0)" })
        #expect(accepted.allSatisfy { ($0.json["context"] as? [String: Any])?["ferry"] is [String: Any] })
        #expect(collector.largestBody <= 500_000)
        #expect(server.requests.count >= 2, "750 KB of messages need at least two requests")
        #expect(server.requests.allSatisfy { $0.header("Authorization") == SegmentCollector.authorization(writeKey: writeKey) })

        let letters = try await Self.deadLetters(agent)
        #expect(letters.count == 2, "\(letters)")
        #expect(letters.allSatisfy { $0["reason"] as? String == "rejected" && ($0["events"] as? NSNumber)?.intValue == 1 })
        let errors = Set(letters.compactMap { $0["error"] as? String })
        #expect(errors.contains("segment: a track message needs a userId or an anonymousId; the event has neither"), "\(errors)")
        #expect(errors.contains { $0.hasPrefix("segment: the message is 40") && $0.hasSuffix("over Segment's limit of 32000 bytes per message") }, "\(errors)")

        // Replaying one cannot succeed: the reason again, exit status 1, the dead letter kept.
        let anonymous = try #require(letters.first { ($0["error"] as? String)?.contains("userId") == true }?["id"] as? String)
        let replay = try await runCLI(["deadletter", "replay", anonymous], environment: agent.environment)
        #expect(replay.status == .exited(1), "\(replay)")
        #expect(replay.stderr.contains("needs a userId or an anonymousId"), "\(replay)")
        #expect(try await Self.deadLetters(agent).count == 2)
        #expect(!agent.logs.contains(writeKey), "the write key must not be logged")
        try await agent.terminate()
        await server.shutdown()
    }

    @Test("README's `ferry emit NAME` without --user reaches Segment with the agent's anonymous id (issue 39)")
    func anonymousEventDelivered() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let writeKey = "wk_e2e_" + UUID().uuidString
        let collector = SegmentCollector(writeKey: writeKey)
        let server = try await HTTPTestServer.start(handler: collector.handler)
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configure(dir, url: server.url(), writeKey: writeKey))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let emit = try await runCLI(["emit", "Signed Up", "--prop", "plan=pro", "--wait"], environment: agent.environment)
        #expect(emit.status == .exited(0), "\(emit)")
        let message = try await waitForValue("the event at the collector") { collector.accepted.first { $0.json["event"] as? String == "Signed Up" } }
        let show = try await runCLI(["consent", "show", "--json"], environment: agent.environment)
        let consent = (try JSONSerialization.jsonObject(with: Data(show.stdout.utf8)) as? [String: Any])?["consent"] as? [String: Any]
        let anonymousID = try #require(consent?["anonymous_id"] as? String, "\(show)")
        #expect(message.anonymousID == anonymousID && message.userID == nil, "\(message.json)")
        #expect(try await Self.deadLetters(agent).isEmpty)
        try await agent.terminate()
        await server.shutdown()
    }

    @Test("routine consent changes reach Segment as track consent_updated with the agent's anonymousId: no dead letter, health stays ok")
    func consentChangesReachSegment() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let writeKey = "wk_e2e_" + UUID().uuidString
        let collector = SegmentCollector(writeKey: writeKey)
        let server = try await HTTPTestServer.start(handler: collector.handler)
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configure(dir, url: server.url(), writeKey: writeKey))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        for change in [["consent", "set", "analytics", "granted"], ["consent", "set", "advertising", "denied"],
                       ["tracking", "off"], ["tracking", "on"], ["consent", "set", "analytics", "denied"]] {
            let result = try await runCLI(change, environment: agent.environment)
            #expect(result.status == .exited(0), "\(change): \(result)")
        }
        let anonymousID = try #require(try await agent.consentState()["anonymous_id"] as? String)
        // analytics is granted already (nothing changes) and tracking off lets nothing out: three
        // consent_updated events, for advertising, tracking on and analytics denied.
        let updates = try await waitForValue("the consent changes at the collector") { () -> [SegmentCollector.Message]? in
            let updates = collector.accepted.filter { $0.json["event"] as? String == "consent_updated" }
            return updates.count >= 3 ? updates : nil
        }
        #expect(collector.refusals.isEmpty, "\(collector.refusals)")
        for update in updates {
            #expect(update.type == "track" && update.anonymousID == anonymousID && update.userID == nil, "\(update.json)")
            let ferry = (update.json["context"] as? [String: Any])?["ferry"] as? [String: Any]
            #expect(ferry?["origin"] == nil && ferry?["pid"] == nil, "nothing about the host: \(update.json)")
        }
        #expect(try await Self.deadLetters(agent).isEmpty)
        let health = try await runCLI(["health"], environment: agent.environment)
        #expect(health.status == .exited(0) && health.stdout == "healthy\n", "\(health)")
        let status = try await agent.status()
        #expect(status.counters["dead_lettered"] == 0)
        try await agent.terminate()
        await server.shutdown()
    }

    @Test("a replayed dead letter sends each message byte for byte as the first attempt did, origin and process details included when the sink opts in")
    func replayIsExact() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let writeKey = "wk_e2e_" + UUID().uuidString
        let collector = SegmentCollector(writeKey: writeKey)
        let server = try await HTTPTestServer.start(handler: collector.handler)
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configure(
            dir, url: server.url(), writeKey: "wk_revoked", sinkKeys: #", "disclose": {"origin": true, "process": true}"#))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await Self.emit((1...3).map { Self.line("exact-\($0)", userID: "u\($0)", padding: 100) }.joined(), count: 3, agent: agent)
        try await eventually("the three events dead-lettered") {
            try await agent.status().counters["dead_lettered"] == 3
        }
        // The first attempt, as the collector got it (and refused it: 401).
        var first: [String: [UInt8]] = [:]
        for request in server.requests {
            for message in try SegmentCollector.validate(body: request.body) { first[message.messageID] = message.raw }
        }
        #expect(first.count == 3)

        try Data((writeKey + "\n").utf8).write(to: URL(fileURLWithPath: dir.appending("segment.key")))
        agent.kill(signal: SIGHUP)
        try await eventually("the reload logged") { agent.logs.contains("configuration reloaded") }
        for id in try await Self.deadLetters(agent).compactMap({ $0["id"] as? String }) {
            let replay = try await runCLI(["deadletter", "replay", id], environment: agent.environment)
            #expect(replay.status == .exited(0), "\(replay)")
        }
        let replayed = collector.accepted
        #expect(replayed.count == 3)
        for message in replayed {
            let original = try #require(first[message.messageID])
            #expect(String(decoding: message.raw, as: UTF8.self) == String(decoding: original, as: UTF8.self), "byte for byte")
            let ferry = try #require((message.json["context"] as? [String: Any])?["ferry"] as? [String: Any])
            #expect((ferry["origin"] as? [String: Any])?["comm"] as? String == "ferry" && ferry["pid"] is NSNumber, "\(ferry)")
        }
        try await agent.terminate()
        await server.shutdown()
    }

    @Test("a wrong write key: 401, the batch is dead-lettered; fix the file, SIGHUP, replay: delivered")
    func wrongWriteKey() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let writeKey = "wk_e2e_" + UUID().uuidString
        let collector = SegmentCollector(writeKey: writeKey)
        let server = try await HTTPTestServer.start(handler: collector.handler)
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configure(dir, url: server.url(), writeKey: "wk_revoked"))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await Self.emit((1...3).map { Self.line("key-\($0)", userID: "u\($0)") }.joined(), count: 3, agent: agent)

        try await eventually("the three events dead-lettered") {
            let status = try await agent.status()
            return status.counters["dead_lettered"] == 3 && status.queuedEvents == 0
        }
        // One dead letter per batch the delivery loop read (how the three were batched varies).
        let letters = try await Self.deadLetters(agent)
        #expect(letters.reduce(0) { $0 + (($1["events"] as? NSNumber)?.intValue ?? 0) } == 3)
        for letter in letters {
            #expect(letter["reason"] as? String == "permanent")
            #expect((letter["upstream_status"] as? NSNumber)?.intValue == 401)
        }
        #expect(collector.accepted.isEmpty && Set(collector.refusals.map(\.status)) == [401])

        try Data((writeKey + "\n").utf8).write(to: URL(fileURLWithPath: dir.appending("segment.key")))
        agent.kill(signal: SIGHUP)
        try await eventually("the reload logged") { agent.logs.contains("configuration reloaded") }
        for id in letters.compactMap({ $0["id"] as? String }) {
            let replay = try await runCLI(["deadletter", "replay", id], environment: agent.environment)
            #expect(replay.status == .exited(0), "\(replay)")
        }
        #expect(collector.accepted.map { $0.json["event"] as? String } == ["key-1", "key-2", "key-3"])
        #expect(try await Self.deadLetters(agent).isEmpty)
        #expect(!agent.logs.contains(writeKey) && !agent.logs.contains("wk_revoked"))
        try await agent.terminate()
        await server.shutdown()
    }
}
