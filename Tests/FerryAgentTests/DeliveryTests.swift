@testable import FerryFileSink
import FerryAgentTestKit
import Foundation
@testable import FerryAgent
import FerryIntegrationKit
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import Testing

/// A sink entry for a ``ScriptedSink`` (its kind is a file sink in its own directory, replaced by
/// the scripted implementation when the agent starts).
func scriptedSinkConfiguration(
    _ name: String, _ scratch: ScratchDirectory,
    batch: AgentConfiguration.SinkConfiguration.Batch = .init(),
    retry: AgentConfiguration.SinkConfiguration.Retry = .init(initialMilliseconds: 5, maxMilliseconds: 50),
    circuit: AgentConfiguration.SinkConfiguration.Circuit = .init(failureThreshold: 1000, openMilliseconds: 1000)
) -> AgentConfiguration.SinkConfiguration {
    AgentConfiguration.SinkConfiguration(name: name, settings: .file(directory: scratch.appending("out-" + name), maxFileBytes: Int64(1 << 20)),
                                         batch: batch, retry: retry, circuit: circuit)
}

/// An in-process agent configuration with `sinks`.
func multiSinkConfiguration(
    _ scratch: ScratchDirectory, _ sinks: [AgentConfiguration.SinkConfiguration], segmentMaxBytes: Int64 = 1 << 20
) -> AgentConfiguration {
    var configuration = agentConfiguration(scratch, log: LogConfiguration(segmentMaxBytes: segmentMaxBytes))
    configuration.sinks = sinks
    return configuration
}

extension InProcessAgent {
    /// The status entry of sink `name`.
    func sinkStatus(_ name: String) -> StatusReply.Sink? {
        agent.status()?.sinks.first { $0.name == name }
    }

    /// Sends `frames` in one message and expects every one accepted.
    func send(_ frames: [[UInt8]], requestID: UInt32 = 1) async throws {
        let replies = try await exchange(runtimeDirectory: agent.configuration.runtimeDirectory, [[eventsHeader(requestID)] + frames])
        let statuses = replies.first?.entries?.map(\.status) ?? []
        guard statuses == Array(repeating: .accepted, count: frames.count) else {
            throw TestFailure("expected \(frames.count) accepted, got \(replies)")
        }
    }
}

func intValue(_ any: Any?) -> Int? { (any as? NSNumber)?.intValue }

@Suite("Delivery to several sinks: cursors, breaker, dead letters, batching")
struct DeliveryTests {
    @Test("a failing sink and a hanging sink hold back nothing of a healthy one; each catches up on its own")
    func failingSinkDoesNotBlockOthers() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let healthy = ScriptedSink(name: "healthy"), failing = ScriptedSink(name: "failing", mode: .fail(.unavailable))
        let slow = ScriptedSink(name: "slow", mode: .hang)
        let configuration = multiSinkConfiguration(scratch, [
            scriptedSinkConfiguration("healthy", scratch), scriptedSinkConfiguration("failing", scratch),
            scriptedSinkConfiguration("slow", scratch),
        ])
        let running = try await InProcessAgent(configuration, sinks: ["healthy": healthy, "failing": failing, "slow": slow])
        let frames = Events.frames(20)
        for (index, chunk) in stride(from: 0, to: frames.count, by: 5).map({ Array(frames[$0..<($0 + 5)]) }).enumerated() {
            try await running.send(chunk, requestID: UInt32(index + 1))
        }
        let expected = idsOf(frames).map(\.description)
        try await waitUntil("the healthy sink has every event") { healthy.ids == expected }
        try await waitUntil("the failing sink was retried") { failing.attempts.count >= 3 }
        #expect(failing.events.isEmpty)
        #expect(slow.events.isEmpty)
        // The sink has the events a moment before the loop records it: wait for the status.
        try await waitUntil("the healthy sink's cursor moved") { running.sinkStatus("healthy")?.backlogEvents == 0 }
        let failingStatus = running.sinkStatus("failing"), healthyStatus = running.sinkStatus("healthy")
        #expect(failingStatus?.state == "retrying")
        #expect(failingStatus?.backlogEvents == 20)
        #expect(failingStatus.map { $0.retried >= 2 } == true)
        #expect(failingStatus?.lastError == "upstream unavailable")
        #expect(healthyStatus?.backlogEvents == 0)
        #expect(healthyStatus?.delivered == 20)
        #expect(healthyStatus?.circuit == "closed")
        #expect(running.agent.status()?.queue.events == 20, "not yet delivered to every sink")

        failing.set(.accept)
        slow.set(.accept)
        try await waitUntil("the failing sink caught up") { failing.ids == expected }
        try await waitUntil("the slow sink caught up") { slow.ids == expected }
        try await waitUntil("queue empty") { running.agent.status()?.queue.events == 0 }
        #expect(healthy.ids == expected, "nothing delivered twice to the healthy sink")
        let counters = running.counters
        #expect(counters["delivered"] == 60)
        try await running.stop()
    }

    @Test("each sink's delivery loop runs on the sink's own thread: every attempt, retries included, is made there")
    func loopRunsOnTheSinkThread() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        // Short names: an OS thread name holds 15 bytes (`ferry-sink-up`, `ferry-sink-down`).
        let up = ScriptedSink(name: "up"), down = ScriptedSink(name: "down", mode: .fail(SinkError(.retry(after: nil), "down")))
        let configuration = multiSinkConfiguration(scratch, [
            scriptedSinkConfiguration("up", scratch, batch: .init(maxEvents: 1, maxBytes: 1 << 20, maxWaitMilliseconds: 0)),
            scriptedSinkConfiguration("down", scratch, batch: .init(maxEvents: 1, maxBytes: 1 << 20, maxWaitMilliseconds: 0)),
        ])
        let running = try await InProcessAgent(configuration, sinks: ["up": up, "down": down])
        try await running.send(Events.frames(3))
        try await waitUntil("three batches at the first sink") { up.batches.count == 3 }
        try await waitUntil("the second sink retried") { down.attempts.count >= 2 }
        down.set(.accept)
        try await waitUntil("three batches at the second sink") { down.batches.count == 3 }
        try await running.stop()
        #expect(Set(up.threads) == ["ferry-sink-up"], "\(up.threads)")
        #expect(Set(down.threads) == ["ferry-sink-down"], "\(down.threads)")
    }

    @Test("a segment file is deleted only after both sinks passed it")
    func segmentDeletedAfterBothSinks() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let fast = ScriptedSink(name: "fast"), late = ScriptedSink(name: "late", mode: .hang)
        let configuration = multiSinkConfiguration(
            scratch, [scriptedSinkConfiguration("fast", scratch), scriptedSinkConfiguration("late", scratch)], segmentMaxBytes: 4096)
        let segments = configuration.dataDirectory + "/segments"
        let running = try await InProcessAgent(configuration, sinks: ["fast": fast, "late": late])
        let frames = Events.frames(60, padding: 200)
        for (index, chunk) in stride(from: 0, to: frames.count, by: 10).map({ Array(frames[$0..<($0 + 10)]) }).enumerated() {
            try await running.send(chunk, requestID: UInt32(index + 1))
        }
        let written = segmentFiles(segments)
        #expect(written.count >= 4, "the events span several segments: \(written)")
        do {
            try await waitUntil("the fast sink has every event") { fast.events.count >= frames.count }
        } catch {
            Issue.record("fast has \(fast.events.count) attempts \(fast.attempts.count); status \(String(describing: running.agent.status()))")
            throw error
        }
        #expect(fast.events.count == frames.count)
        // The commit thread deletes delivered segments at least every 500 ms; wait for the round
        // after the fast sink's cursor moved and check nothing went.
        let commits = running.counters["commits"] ?? 0
        try await running.send([Events.make(1000).encoded()], requestID: 100)
        try await waitUntil("another commit round") { (running.counters["commits"] ?? 0) > commits }
        #expect(segmentFiles(segments).count >= written.count, "no segment deleted while the late sink lags")

        late.set(.accept)
        try await waitUntil("the late sink has every event") { late.events.count == frames.count + 1 }
        try await waitUntil("delivered segments deleted") { segmentFiles(segments).count == 1 }
        try await running.stop()
    }

    @Test("each sink resumes from its own cursor file after a restart")
    func eachSinkResumesFromItsOwnCursor() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let configuration = multiSinkConfiguration(scratch, [scriptedSinkConfiguration("a", scratch), scriptedSinkConfiguration("b", scratch)])
        let a1 = ScriptedSink(name: "a"), b1 = ScriptedSink(name: "b", mode: .fail(.unavailable))
        let first = Events.frames(10)
        let agent1 = try await InProcessAgent(configuration, sinks: ["a": a1, "b": b1])
        try await agent1.send(first)
        try await waitUntil("sink a has the first events") { a1.events.count == first.count }
        try await agent1.stop()
        #expect(b1.events.isEmpty)
        let cursors = try FileManager.default.contentsOfDirectory(atPath: configuration.dataDirectory + "/cursors").sorted()
        #expect(cursors == ["a.cursor", "b.cursor"])

        let a2 = ScriptedSink(name: "a"), b2 = ScriptedSink(name: "b")
        let agent2 = try await InProcessAgent(configuration, sinks: ["a": a2, "b": b2])
        let second = Events.frames(5)
        try await agent2.send(second)
        try await waitUntil("sink b has everything") { b2.events.count == first.count + second.count }
        try await waitUntil("sink a has the new events") { a2.events.count == second.count }
        try await agent2.stop()
        #expect(a2.ids == idsOf(second).map(\.description), "a resumed after what it had")
        #expect(b2.ids == idsOf(first + second).map(\.description), "b resumed from the start")
    }

    @Test("circuit breaker: opens after N failures, no attempt while open, one half-open probe, closes on success; published on `circuit`")
    func circuitBreaker() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let sink = ScriptedSink(name: "upstream")
        let configuration = multiSinkConfiguration(scratch, [scriptedSinkConfiguration(
            "upstream", scratch, retry: .init(initialMilliseconds: 1, maxMilliseconds: 5),
            circuit: .init(failureThreshold: 3, openMilliseconds: 300))])
        let running = try await InProcessAgent(configuration, sinks: ["upstream": sink])
        let environment = ["FERRY_RUNTIME_DIR": configuration.runtimeDirectory]
        let tail = try BusTail(environment: environment, outputDirectory: scratch.path)
        defer { tail.cleanup() }
        try await tail.waitUntilSubscribed()
        try await waitUntil("probes delivered") {
            running.sinkStatus("upstream")?.backlogEvents == 0 && sink.events.count == running.counters["accepted"]
        }

        sink.set(.fail(.unavailable))
        let before = sink.attempts.count
        let deliveredBefore = sink.events.count
        let frame = Events.make(1).encoded()
        try await running.send([frame])
        func changes() throws -> [[String: Any]] { try tail.messages(topic: "circuit") }
        try await waitUntil("open, half-open, open again") { try changes().count >= 3 }
        #expect(running.sinkStatus("upstream")?.circuit == "open")
        sink.set(.accept)
        try await waitUntil("closed again") { try changes().last?["state"] as? String == "closed" }

        let messages = try changes()
        let states = messages.map { "\($0["previous"] as? String ?? "?")>\($0["state"] as? String ?? "?")" }
        #expect(Array(states.prefix(3)) == ["closed>open", "open>half_open", "half_open>open"])
        #expect(Array(states.suffix(2)) == ["open>half_open", "half_open>closed"])
        #expect(messages.allSatisfy { $0["sink"] as? String == "upstream" })
        #expect(intValue(messages[0]["consecutive_failures"]) == 3)
        #expect(messages[0]["error"] as? String == "upstream unavailable")
        #expect(intValue(messages[0]["retry_at"]) != nil)

        // Ordering (not durations): the threshold's attempts come before the circuit opened, and
        // between each open and the next half-open there is no attempt; each half-open period has
        // exactly one attempt (the probe).
        let attempts = Array(sink.attempts.dropFirst(before))
        let at = messages.map { UInt64(intValue($0["at"]) ?? 0) }
        #expect(attempts.prefix(3).allSatisfy { $0 <= at[0] })
        for (index, message) in messages.enumerated() where message["state"] as? String == "open" {
            let reopen = at[index], halfOpen = index + 1 < at.count ? at[index + 1] : UInt64.max
            #expect(!attempts.contains { $0 > reopen && $0 < halfOpen }, "an attempt while open")
        }
        for (index, message) in messages.enumerated() where message["state"] as? String == "half_open" {
            let start = at[index], end = index + 1 < at.count ? at[index + 1] : UInt64.max
            #expect(attempts.filter { $0 >= start && $0 <= end }.count == 1, "one probe per half-open period")
        }
        #expect(attempts.count == 5, "3 failures, a failed probe, a successful probe: \(attempts)")
        // The event sent while the upstream failed is what the successful probe delivered: it
        // arrives once, and nothing else was acknowledged since.
        #expect(Array(sink.ids.dropFirst(deliveredBefore)) == [Events.id(of: frame).description])
        try await waitUntil("closed in status") { running.sinkStatus("upstream")?.circuit == "closed" }
        try await running.stop()
    }

    @Test("a permanent error dead-letters the batch with its details and frames, moves the cursor and loses nothing")
    func permanentErrorDeadLetters() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let sink = ScriptedSink(name: "collector", mode: .fail(.badRequest))
        let configuration = multiSinkConfiguration(scratch, [scriptedSinkConfiguration("collector", scratch)])
        let running = try await InProcessAgent(configuration, sinks: ["collector": sink])
        let bad = Events.frames(5)
        try await running.send(bad)
        let store = DeadLetterStore(dataDirectory: configuration.dataDirectory)
        let ids = try await waitForValue("a dead letter") { () -> [String]? in
            let ids = try store.ids(sink: "collector")
            return ids.isEmpty ? nil : ids
        }
        #expect(ids.count == 1)
        let path = store.path(sink: "collector", id: ids[0])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(readBytes(path))) as? [String: Any])
        #expect(document["sink"] as? String == "collector")
        #expect(document["reason"] as? String == "permanent")
        #expect(document["error"] as? String == "upstream refused the batch")
        #expect(intValue(document["upstream_status"]) == 400)
        #expect(document["upstream_body"] as? String == #"{"error":"field 'name' is invalid"}"#)
        #expect(intValue(document["attempts"]) == 1)
        #expect(intValue(document["event_count"]) == 5)
        #expect(intValue(document["created_at"]).map { $0 > 0 } == true)
        let key = "\(Events.id(of: bad[0]))-5"
        #expect(document["idempotency_key"] as? String == key)
        #expect(ids[0] == key)
        let events = document["events"] as? [[String: Any]] ?? []
        #expect(events.compactMap { $0["id"] as? String } == idsOf(bad).map(\.description))
        #expect(events.first?["name"] as? String == "Test Event")
        let frames = (document["frames"] as? [[String: Any]] ?? []).compactMap { ($0["frame"] as? String).flatMap { Data(base64Encoded: $0) } }
        #expect(frames.map { Array($0) } == bad, "the exact frames are kept")
        #expect(fileMode(path) == 0o600)

        try await waitUntil("cursor moved past the batch") { running.sinkStatus("collector")?.backlogEvents == 0 }
        #expect(running.sinkStatus("collector")?.deadLettered == 5)
        #expect(running.counters["dead_lettered"] == 5)
        sink.set(.accept)
        let good = Events.frames(2)
        try await running.send(good, requestID: 2)
        try await waitUntil("the next events delivered") { sink.events.count == 2 }
        #expect(sink.ids == idsOf(good).map(\.description), "the dead-lettered batch is not sent again by the loop")
        try await running.stop()
    }

    @Test("a batch still failing after retry.maxElapsedMilliseconds is dead-lettered")
    func maxElapsedDeadLetters() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let sink = ScriptedSink(name: "flaky", mode: .fail(.unavailable))
        let configuration = multiSinkConfiguration(scratch, [scriptedSinkConfiguration(
            "flaky", scratch, retry: .init(initialMilliseconds: 5, maxMilliseconds: 20, maxElapsedMilliseconds: 150))])
        let running = try await InProcessAgent(configuration, sinks: ["flaky": sink])
        let frames = Events.frames(3)
        try await running.send(frames)
        let store = DeadLetterStore(dataDirectory: configuration.dataDirectory)
        let id = try await waitForValue("a dead letter") { try store.ids(sink: "flaky").first }
        let letter = try #require(try store.load(sink: "flaky", id: id))
        #expect(letter.reason == "max_elapsed")
        #expect(letter.attempts > 1)
        #expect(letter.upstreamStatus == 503)
        #expect(letter.events.map(\.frame) == frames)
        try await waitUntil("cursor moved") { running.sinkStatus("flaky")?.backlogEvents == 0 }
        try await running.stop()
    }

    @Test("replay over the control socket: success hands the exact events to the sink and deletes the file; failure keeps it")
    func replay() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let sink = ScriptedSink(name: "collector", mode: .fail(.badRequest))
        let configuration = multiSinkConfiguration(scratch, [scriptedSinkConfiguration("collector", scratch)])
        let running = try await InProcessAgent(configuration, sinks: ["collector": sink])
        let frames = Events.frames(4)
        try await running.send(frames)
        let store = DeadLetterStore(dataDirectory: configuration.dataDirectory)
        let id = try await waitForValue("a dead letter") { try store.ids(sink: "collector").first }
        let runtime = configuration.runtimeDirectory

        // Still failing: the reply says why, the file stays.
        sink.set(.fail(.unavailable))
        let failed = try await controlJSON(runtime, ["op": "deadletter_replay", "sink": "collector", "id": id])
        #expect(failed["ok"] as? Bool == false)
        // Who failed: the sink (or its upstream), not the agent.
        #expect(failed["error"] as? String == "sink collector could not deliver it (upstream unavailable); the dead letter is kept")
        #expect(try store.ids(sink: "collector") == [id])
        // A status request is answered while nothing else waits.
        #expect(try await controlJSON(runtime, ["op": "status"])["ok"] as? Bool == true)

        // The ferry CLI replays it (no --sink: the only sink holding the id).
        sink.set(.accept)
        let result = try await runCLI(["deadletter", "replay", id, "--runtime-dir", runtime])
        #expect(result.status == .exited(0), "\(result)")
        #expect(result.stdout.contains("4 events delivered"), "\(result)")
        #expect(try store.ids(sink: "collector").isEmpty)
        #expect(sink.events.map(\.frame) == frames, "the sink got exactly the stored events")
        #expect(sink.batches.first?.idempotencyKey == id)

        let missing = try await controlJSON(runtime, ["op": "deadletter_replay", "id": id])
        #expect(missing["ok"] as? Bool == false)
        #expect((missing["error"] as? String)?.contains("no dead letter") == true)
        let cli = try await runCLI(["deadletter", "replay", id, "--runtime-dir", runtime])
        #expect(cli.status == .exited(1))
        #expect(cli.stderr.contains("no dead letter"), "\(cli)")
        try await running.stop()
    }

    @Test("batching: a partial batch waits up to maxWait for more events; a full batch goes at once")
    func maxWaitBatching() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        // Nothing here depends on how fast commits land: what must share a batch is ordered by the
        // acks (the second message goes after the first is committed), and the holding sink's
        // maxWait (ten minutes) is far longer than the deadlines the test waits on (3 × 60 s).
        let prompt = ScriptedSink(name: "prompt"), holding = ScriptedSink(name: "holding")
        let configuration = multiSinkConfiguration(scratch, [
            // A partial batch goes once its (short) wait is over, with no more events coming.
            scriptedSinkConfiguration("prompt", scratch, batch: .init(maxEvents: 100, maxBytes: 1 << 20, maxWaitMilliseconds: 100)),
            // Would hold a partial batch for ten minutes: only a full batch can arrive in the test.
            scriptedSinkConfiguration("holding", scratch, batch: .init(maxEvents: 10, maxBytes: 1 << 20, maxWaitMilliseconds: 600_000)),
        ])
        let running = try await InProcessAgent(configuration, sinks: ["prompt": prompt, "holding": holding])
        let first = Events.frames(3), second = Events.frames(9)
        try await running.send(first, requestID: 1)
        try await waitUntil("the partial batch sent after its wait", timeout: .seconds(60)) { !prompt.batches.isEmpty }
        #expect(prompt.batches.map(\.events.count) == [3])
        #expect(holding.batches.isEmpty, "a partial batch of 3 of 10 is held")

        // One commit of 9: the held 3 and 7 of them make a full batch of 10, which goes without
        // waiting out the ten minutes; the other 2 are held in turn.
        try await running.send(second, requestID: 2)
        try await waitUntil("a full batch for the holding sink", timeout: .seconds(60)) { !holding.batches.isEmpty }
        #expect(holding.batches.map(\.events.count) == [10], "the held partial batch and the next events, one batch")
        #expect(holding.ids == idsOf(first + Array(second.prefix(7))).map(\.description))
        try await waitUntil("the prompt sink has every event", timeout: .seconds(60)) { prompt.ids.count == 12 }
        #expect(prompt.batches.map(\.events.count) == [3, 9])
        #expect(prompt.ids == idsOf(first + second).map(\.description))
        try await running.stop()
    }

    @Test("a reader at the committed end of a segment waits for a group that rotated: it never skips the group's records")
    func readerDoesNotSkipRotatingGroup() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        let opened = try openLog(scratch.path, segmentMaxBytes: 4096)
        let writer = try LogWriter(log: opened.log)
        let first = Events.frames(3, padding: 200)
        try append(first, to: writer)
        let head = try opened.log.read(from: LogPosition(segment: 1, offset: 16), maxEvents: 100, maxBytes: 1 << 20)
        #expect(head.events.count == 3)
        // A group that fills segment 1 and opens segment 2, not yet committed.
        let group = Events.frames(20, padding: 200)
        for frame in group { try writer.append(frame: frame, acceptedAt: 7) }
        #expect(writer.activeIndex > 1, "the group rotated")
        let during = try opened.log.read(from: head.next, maxEvents: 100, maxBytes: 1 << 20)
        #expect(during.events.isEmpty)
        #expect(during.next.segment == 1, "the reader stays in segment 1 instead of jumping to the new one")
        try writer.commit()
        let after = try readAll(opened.log, from: during.next)
        #expect(after.map(\.decodedID) == idsOf(group), "every record of the group, in order")
    }

    @Test("the two-consumer log: deletable segments are those both cursors passed")
    func logConsumers() throws {
        let scratch = try ScratchDirectory()
        defer { scratch.remove() }
        var report = RecoveryReport()
        let log = try SegmentedLog(directory: scratch.path, configuration: LogConfiguration(segmentMaxBytes: 4096),
                                   cursors: ["a": nil, "b": nil], logger: quietLogger, recovered: &report) { _, _ in }
        let writer = try LogWriter(log: log)
        try append(Events.frames(60, padding: 100), to: writer)
        let all = try readAll(log)
        #expect(log.status().backlog == ["a": 60, "b": 60])
        let beforeActive = all.filter { $0.position.segment < writer.activeIndex }
        log.markDelivered(beforeActive, next: LogPosition(segment: writer.activeIndex, offset: 16), consumer: "a")
        #expect(log.deliveredSegments().isEmpty, "b has not moved")
        #expect(log.status().backlog["a"] == all.filter { $0.position.segment == writer.activeIndex }.count)
        #expect(log.status().undeliveredEvents == 60)
        let half = Array(all.prefix(30))
        log.markDelivered(half, next: all[30].position, consumer: "b")
        #expect(log.deliveredSegments().map(\.index) == Array(1..<all[30].position.segment))
        #expect(log.cursor == all[30].position, "the oldest cursor")
        #expect(log.cursor(for: "a") == LogPosition(segment: writer.activeIndex, offset: 16))
    }
}

/// Sends one control request and decodes the reply.
func controlJSON(_ runtimeDirectory: String, _ request: [String: Any], timeout: Duration = .seconds(20)) async throws -> [String: Any] {
    let body = Array(try JSONSerialization.data(withJSONObject: request))
    let reply = try await controlRequest(runtimeDirectory: runtimeDirectory, request: body, timeout: timeout)
    guard let object = try JSONSerialization.jsonObject(with: Data(reply)) as? [String: Any] else {
        throw TestFailure("control reply is not a JSON object")
    }
    return object
}

func fileMode(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path))?[.posixPermissions] as? NSNumber)?.intValue ?? -1
}
