import FerryIntegrationKit
import FerryTestKit
import Foundation
import NATS
import Testing

/// The real `ferryd` delivering to real `nats-server -js` processes, through crashes of the
/// servers and of the agent: every event ends up in the stream exactly once.
@Suite("JetStream sink end to end", .serialized)
struct JetStreamIntegrationTests {
    /// Writes a ferryd configuration with a jetstream sink and returns the `--config` arguments.
    static func configArguments(_ dir: TemporaryDirectory, servers: [String], replicas: Int = 1, batchMaxEvents: Int = 10,
                                eventsPerMessage: Int = 1, autoStart: Bool = true) throws -> [String] {
        let path = dir.appending("ferryd.json")
        let servers = servers.map { "\"\($0)\"" }.joined(separator: ", ")
        try Data("""
        {
          "delivery": {"batchMaxEvents": \(batchMaxEvents), "retryInitialMilliseconds": 50, "retryMaxMilliseconds": 500},
          "consent": {"autoStart": \(autoStart)},
          "sink": {"type": "jetstream", "servers": [\(servers)], "replicas": \(replicas), "eventsPerMessage": \(eventsPerMessage),
                   "ackTimeoutMilliseconds": 2000, "connectTimeoutMilliseconds": 500, "reconnectWaitMilliseconds": 100}
        }
        """.utf8).write(to: URL(fileURLWithPath: path))
        return ["--config", path]
    }

    /// Emits `count` events named `<prefix>-<i>` through `ferry emit --stdin --wait`.
    static func emit(_ count: Int, prefix: String, first: Int = 1, agent: AgentProcess) async throws {
        let result = try await runCLI(["emit", "--stdin", "--wait", "--source", "js-it"],
                                      stdin: TestEvents.jsonLines(count: count, namePrefix: prefix, first: first),
                                      environment: agent.environment)
        #expect(result.status == .exited(0), "\(result)")
        #expect(result.stdout.hasPrefix("accepted=\(count) "), "\(result)")
    }

    /// Waits until the stream holds `count` messages, then checks each event name is there once.
    static func expectExactlyOnce(_ names: [String], in server: NATSServerProcess, agent: AgentProcess,
                                  timeout: Duration = .seconds(30)) async throws {
        do {
            try await eventually("\(names.count) events in the stream", timeout: timeout, pollInterval: .milliseconds(100)) {
                try await server.streamInfo("FERRY")?.messages ?? 0 >= UInt64(names.count)
            }
        } catch {
            Issue.record("\(error)\n--- ferryd ---\n\(agent.logs.suffix(3000))")
            throw error
        }
        let messages = try await server.streamMessages("FERRY")
        let bodies = try messages.map { message in
            try #require(try JSONSerialization.jsonObject(with: Data(message.payload)) as? [String: Any])
        }
        let stored = bodies.compactMap { $0["name"] as? String }
        #expect(stored.count == names.count, "the stream holds \(stored.count) events for \(names.count) emitted")
        #expect(Set(stored) == Set(names))
        #expect(Set(messages.compactMap(\.messageID)).count == messages.count, "a Nats-Msg-Id is stored twice")
        #expect(zip(messages, bodies).allSatisfy { $0.messageID == $1["id"] as? String })
    }

    static func names(_ prefix: String, _ range: ClosedRange<Int>) -> [String] { range.map { "\(prefix)-\($0)" } }

    /// The events in the stream: one per line of each message's body (`Ferry-Events` of them).
    static func streamEvents(_ server: NATSServerProcess) async throws -> [[String: Any]] {
        try await server.streamMessages("FERRY").flatMap { message in
            let lines = message.payload.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            #expect(lines.count == Int(message.headers["Ferry-Events"] ?? "1"), "Ferry-Events counts the body's lines")
            return try lines.map { try #require(try JSONSerialization.jsonObject(with: Data($0)) as? [String: Any]) }
        }
    }

    /// Waits until the stream's messages carry `names.count` events, then checks each name is there once.
    static func expectEventsExactlyOnce(_ names: [String], in server: NATSServerProcess, agent: AgentProcess,
                                        timeout: Duration = .seconds(30)) async throws {
        let events: [[String: Any]]
        do {
            events = try await waitForValue("\(names.count) events in the stream", timeout: timeout, pollInterval: .milliseconds(200)) {
                let events = try await Self.streamEvents(server)
                return events.count >= names.count ? events : nil
            }
        } catch {
            Issue.record("\(error)\n--- ferryd ---\n\(agent.logs.suffix(3000))")
            throw error
        }
        let stored = events.compactMap { $0["name"] as? String }
        #expect(stored.count == names.count, "the stream holds \(stored.count) events for \(names.count) emitted")
        #expect(Set(stored) == Set(names))
    }

    /// Runs `ferry start` (delivery of an agent configured with `autoStart: false`).
    static func startDelivery(_ agent: AgentProcess) async throws {
        let result = try await runCLI(["start"], environment: agent.environment)
        #expect(result.status == .exited(0), "\(result)")
    }

    @Test("events emitted with `ferry emit` arrive in the stream, once each, on the templated subject")
    func endToEnd() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir)
        defer { server.cleanup() }
        try await server.waitUntilReady()
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configArguments(dir, servers: server.urls))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        try await Self.emit(200, prefix: "e2e", agent: agent)
        try await Self.expectExactlyOnce(Self.names("e2e", 1...200), in: server, agent: agent)
        let first = try #require(try await server.streamMessages("FERRY").first)
        #expect(first.subject == "ferry.events.0.track")
        #expect(first.headers["Ferry-Batch"]?.hasPrefix(first.messageID ?? "?") == true)
        try await eventually("the agent's queue to drain") { try await agent.status().queuedEvents == 0 }
        #expect(try await agent.status().object["delivery"].flatMap { ($0 as? [String: Any])?["sink"] as? String } == "jetstream")
        let exit = try await agent.terminate()
        #expect(exit == .exited(0), "\(agent.logs.suffix(2000))")
    }

    @Test("with the server down at start, events wait in the agent's log and all arrive once it comes up")
    func serverDownAtStart() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir, start: false)
        defer { server.cleanup() }
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configArguments(dir, servers: server.urls))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        try await Self.emit(150, prefix: "early", agent: agent)
        try await eventually("delivery to fail and be retried") {
            let status = try await agent.status()
            return status.deliveryState == "retrying" && status.queuedEvents == 150
        }
        try server.start(node: 0)
        try await server.waitUntilReady()
        try await Self.emit(50, prefix: "late", agent: agent)
        try await Self.expectExactlyOnce(Self.names("early", 1...150) + Self.names("late", 1...50), in: server, agent: agent)
    }

    @Test("a 3-node cluster with an R3 stream loses a node (kill -9) during delivery: nothing lost, nothing twice")
    func clusterNodeKilled() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let cluster = try NATSServerProcess(in: dir, nodes: 3)
        defer { cluster.cleanup() }
        try await cluster.waitUntilReady()
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configArguments(dir, servers: cluster.urls, replicas: 3))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        try await Self.emit(600, prefix: "before", agent: agent)
        // Kill the node the agent is connected to, as soon as delivery is under way.
        try await eventually("delivery to start", pollInterval: .milliseconds(10)) {
            try await cluster.streamInfo("FERRY")?.messages ?? 0 > 0
        }
        var victim = 0
        for node in cluster.nodes.indices where try await cluster.clientNames(node: node).contains("ferryd") { victim = node }
        cluster.kill9(node: victim)
        try await Self.emit(400, prefix: "after", agent: agent)
        try await Self.expectExactlyOnce(Self.names("before", 1...600) + Self.names("after", 1...400), in: cluster, agent: agent,
                                         timeout: .seconds(40))
        let info = try #require(try await cluster.streamInfo("FERRY"))
        #expect(info.replicas == 3)
    }

    // ferryd killed -9 mid-delivery with one event per message, restarted: nothing lost, nothing
    // twice — the sink contract's `exactlyOnceAcrossKill` for `jetstream` at each of its crash
    // points, driven by progress (FerrySinkContractTests). What follows is particular to several
    // events per message: the recorded cut, a kill between chunks of a batch.

    @Test("several events per message: ferryd killed -9 after a batch's messages are acknowledged, before its cursor moved, then restarted with more events queued: the batch is re-sent as the same messages, nothing twice")
    func combinedAgentKilledAfterPublish() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir)
        defer { server.cleanup() }
        try await server.waitUntilReady()
        // Delivery waits for `ferry start`, so the first batch is exactly the 7 events queued.
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configArguments(
            dir, servers: server.urls, batchMaxEvents: 100, eventsPerMessage: 5, autoStart: false), start: false)
        defer { agent.cleanup() }
        try agent.start(extraEnvironment: ["FERRY_CRASH_AT": "jetstream.published:1"])
        try await agent.waitUntilReady()
        try await Self.emit(7, prefix: "planned", agent: agent)
        try await Self.startDelivery(agent)
        // The kill point is the sink's progress: every message of the first batch acknowledged.
        try await eventually("ferryd to kill itself at jetstream.published", timeout: .seconds(30)) { agent.process?.exitStatus != nil }
        #expect(agent.process?.exitStatus == .signaled(SIGKILL), "\(agent.logs.suffix(2000))")
        #expect(try await server.streamMessages("FERRY").map { $0.headers["Ferry-Events"] } == ["5", "2"])

        // Restarted with 3 more events queued before delivery starts: the batch from the same
        // cursor holds 10. Cut anew it would be 5 + 5 (a new message id for events 6-10, so 6 and 7 twice).
        try agent.start()
        try await agent.waitUntilReady()
        try await Self.emit(3, prefix: "planned", first: 8, agent: agent)
        try await Self.startDelivery(agent)
        try await Self.expectEventsExactlyOnce(Self.names("planned", 1...10), in: server, agent: agent)
        #expect(try await server.streamMessages("FERRY").map { $0.headers["Ferry-Events"] } == ["5", "2", "3"])
        #expect(agent.logs.contains("re-sending a batch as recorded before a restart"))
    }

    @Test("several events per message: ferryd killed -9 mid-delivery (some but not all messages in the stream) and restarted: nothing lost, nothing twice")
    func combinedAgentKilled() async throws {
        // Two batches of 1 500 events, 150 messages each: the sink publishes a batch's messages in
        // chunks of 128 and reads their acknowledgements chunk by chunk.
        let total = 3000, eventsPerMessage = 10, batchEvents = 1500
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir)
        defer { server.cleanup() }
        try await server.waitUntilReady()
        // Delivery waits for `ferry start`, so the first batch is the first 1 500 of the queue.
        let agent = try AgentProcess(in: dir, extraArguments: try Self.configArguments(
            dir, servers: server.urls, batchMaxEvents: batchEvents, eventsPerMessage: eventsPerMessage, autoStart: false),
            start: false)
        defer { agent.cleanup() }
        // Progress, not time: ferryd kills itself once the first batch's first chunk (128 of its
        // 150 messages) is acknowledged; its last 22 messages may or may not be stored by then,
        // the second batch is not published.
        try agent.start(extraEnvironment: ["FERRY_CRASH_AT": "jetstream.acked:1"])
        try await agent.waitUntilReady()
        try await Self.emit(total, prefix: "combined", agent: agent)
        try await Self.startDelivery(agent)
        try await eventually("ferryd to kill itself at jetstream.acked:1", timeout: .seconds(30)) { agent.process?.exitStatus != nil }
        #expect(agent.process?.exitStatus == .signaled(SIGKILL), "\(agent.logs.suffix(2000))")
        let messages = try await server.streamInfo("FERRY")?.messages ?? 0
        let atKill = try await Self.streamEvents(server).count
        #expect(messages >= 128 && messages <= 150, "\(messages) messages in the stream at the kill")
        #expect(atKill >= 1280 && atKill <= batchEvents, "the kill did not land mid-delivery: \(atKill) of \(total) events in the stream")
        print("[measure] jetstream combinedAgentKilled: \(messages) of the first batch's 150 messages in the stream at the kill")

        try agent.start()
        try await agent.waitUntilReady()
        try await Self.startDelivery(agent)
        try await Self.expectEventsExactlyOnce(Self.names("combined", 1...total), in: server, agent: agent)
    }
}
