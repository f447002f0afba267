@testable import FerryFileSink
import FerryAgentTestKit
import Foundation
@testable import FerryAgent
import FerryIntegrationKit
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import Testing

/// `count` events of `user` (sequence numbers from `first`).
func userFrames(_ user: String, _ count: Int, first: UInt64 = 1, marker: String = "") -> [[UInt8]] {
    (0..<count).map { index in
        let sequence = first + UInt64(index)
        return WireEvent(id: Events.ids.next(), timestamp: WallClock.unixMilliseconds(), sequence: sequence, pid: 4242,
                         type: .track, source: "erasure-tests", name: "Viewed", userID: user,
                         properties: Array(#"{"i":\#(sequence),"m":"\#(marker)"}"#.utf8)).encoded()
    }
}

extension InProcessAgent {
    /// The `forget_status` reply.
    func erasureStatus() async throws -> ErasureStatusReply {
        let body = Array(#"{"op":"forget_status"}"#.utf8)
        let reply = try await controlRequest(runtimeDirectory: agent.configuration.runtimeDirectory, request: body, timeout: .seconds(20))
        return try JSONDecoder().decode(ErasureStatusReply.self, from: Data(reply))
    }

    /// Request `id`'s state at `sink`.
    func erasure(_ sink: String) async throws -> ErasureSinkStatus? {
        try await erasureStatus().erasures.last?.sinks.first { $0.sink == sink }
    }
}

@Suite("Erasure upstream: which sinks, the outbox, retries, outcomes in the audit chain")
struct ErasureTests {
    static func position(_ segment: UInt64, _ offset: Int64) -> LogPosition { LogPosition(segment: segment, offset: offset) }

    struct Case: Sendable, CustomTestStringConvertible {
        var label: String
        var cursor: LogPosition
        var covered: [LogPosition]
        var firstSegment: UInt64
        var deliveryStarted = true
        var firstErased: LogPosition?
        var expected: Bool
        var testDescription: String { label }
    }

    static let cases: [Case] = [
        Case(label: "a user's event before the cursor: delivered", cursor: position(1, 5000), covered: [position(1, 100)], firstSegment: 1, expected: true),
        Case(label: "only after the cursor, far beyond a batch: not delivered", cursor: position(1, 16),
             covered: [position(1, 900_000)], firstSegment: 1, expected: false),
        Case(label: "just after the cursor: may be the batch on the wire", cursor: position(1, 16), covered: [position(1, 200)], firstSegment: 1, expected: true),
        Case(label: "just after the cursor, delivery never started: nothing can be on the wire", cursor: position(1, 16),
             covered: [position(1, 200)], firstSegment: 1, deliveryStarted: false, expected: false),
        Case(label: "at the start of the next segment, within a batch of the cursor: on the wire", cursor: position(1, 1000),
             covered: [position(2, 100)], firstSegment: 1, expected: true),
        Case(label: "no event of the user on disk, nothing lost: none", cursor: position(3, 500), covered: [], firstSegment: 1, expected: false),
        Case(label: "segments lost, the sink delivered something: unknowable, so yes", cursor: position(3, 500), covered: [], firstSegment: 2, expected: true),
        Case(label: "a record before the cursor erased by an earlier purge: unknowable, so yes", cursor: position(1, 5000), covered: [],
             firstSegment: 1, firstErased: position(1, 300), expected: true),
        Case(label: "erased records only after the cursor: none", cursor: position(1, 5000), covered: [],
             firstSegment: 1, firstErased: position(1, 900_000), expected: false),
        Case(label: "segments lost, the sink delivered nothing: none", cursor: position(2, SegmentedLog.segmentHeaderSize),
             covered: [], firstSegment: 2, expected: false),
    ]

    @Test("ErasureTargets: a sink gets the request when it may have delivered the user's events", arguments: cases)
    func targets(_ test: Case) {
        let sinks = [ErasureTargets.Sink(name: "s", cursor: test.cursor, batchMaxBytes: 64 << 10)]
        let events = test.covered.map {
            ErasureTargets.UserEvent(position: $0, acceptedAt: 1, facts: SinkPolicyEvent(type: .track, name: "Viewed", category: "analytics", source: "app"))
        }
        let knowledge = ErasureTargets.Knowledge(firstSegment: test.firstSegment, deliveryStarted: test.deliveryStarted, firstErased: test.firstErased)
        #expect(ErasureTargets.sinks(sinks, events: events, knowing: knowledge) == (test.expected ? ["s"] : []))
    }

    @Test("the outbox never keeps a request for no sink")
    func noSinkNoRequest() throws {
        // A set-up that fails (no scratch directory, no outbox) fails the test: it proves nothing.
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let outbox = try ErasureOutbox(path: scratch.appending("outbox.json"), sinks: [])
        #expect(try outbox.add(SinkErasure(id: "x", userID: "u", requestedAt: 1), sinks: []) == false)
        #expect(outbox.statuses.isEmpty)
    }

    @Test("forget: retried across an unreachable upstream, then sent; not supported fails for good; both audited; survives a restart")
    func forgetReachesSinks() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let retrying = ScriptedSink(name: "collector"), plain = ScriptedSink(name: "plain")
        retrying.setErase(.fail(.unavailable))
        let configuration = multiSinkConfiguration(scratch, [scriptedSinkConfiguration("collector", scratch),
                                                             scriptedSinkConfiguration("plain", scratch)])
        var running = try await InProcessAgent(configuration, sinks: ["collector": retrying, "plain": plain])
        try await running.send(userFrames("u-erase", 3, marker: "MARK-erase") + userFrames("u-keep", 2, first: 4))
        try await waitUntil("both sinks delivered") { retrying.events.count == 5 && plain.events.count == 5 }
        let runtime = configuration.runtimeDirectory

        // Nothing owed before any forget; a forget of a user nobody received records nothing.
        #expect(try await running.erasureStatus().erasures.isEmpty)
        _ = try await controlJSON(runtime, ["op": "forget", "user_id": "u-nobody"])
        #expect(try await running.erasureStatus().erasures.isEmpty)

        let reply = try await controlJSON(runtime, ["op": "forget", "user_id": "u-erase", "actor": "gdpr desk"])
        #expect(reply["ok"] as? Bool == true)
        let outboxPath = configuration.dataDirectory + "/consent/erasures.json"
        try await waitUntil("the retrying sink counted failed attempts and the plain one failed for good") {
            let text = String(decoding: (try? readBytes(outboxPath)) ?? [], as: UTF8.self)
            return text.contains("upstream unavailable") && text.contains("does not support erasure")
        }
        // While pending the user is in the outbox: it has to be sent.
        #expect(String(decoding: try readBytes(outboxPath), as: UTF8.self).contains("u-erase"))
        let pending = try #require(try await running.erasure("collector"))
        #expect(pending.state == .pending && pending.attempts >= 1 && pending.lastError == "upstream unavailable")
        #expect(try await running.erasure("plain")?.state == .failed)
        let id = try #require(try await running.erasureStatus().erasures.first?.id)

        // A restart with the request pending: the next run sends it, once the upstream is back.
        try await running.stop()
        let back = ScriptedSink(name: "collector")
        back.setErase(.accept)
        running = try await InProcessAgent(configuration, sinks: ["collector": back, "plain": ScriptedSink(name: "plain")])
        try await waitUntil("sent after the restart") { back.erasures.count == 1 }
        #expect(back.erasures.first?.id == id && back.erasures.first?.userID == "u-erase")
        try await eventually("settled") { try await running.erasureStatus().erasures.first?.done == true }
        let status = try await running.erasureStatus()
        let sent = try #require(status.erasures.first?.sinks.first { $0.sink == "collector" })
        #expect(sent.state == .sent && sent.reference == "ref-" + id.prefix(8) && sent.attempts > pending.attempts)
        #expect(status.erasures.first?.done == true)
        // Once every sink is done the user id is gone from the outbox.
        #expect(!String(decoding: try readBytes(outboxPath), as: UTF8.self).contains("u-erase"))

        // The audit chain: one entry per outcome, chained, never the user.
        let log = try await controlJSON(runtime, ["op": "consent_log"])
        #expect(log["verified"] as? Bool == true)
        let entries = try #require(log["entries"] as? [[String: Any]])
        let erasures = entries.filter { $0["change"] as? String == "erasure" }
        #expect(erasures.count == 2)
        let outcomes = erasures.compactMap { ($0["new"] as? String).flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] } }
        #expect(Set(outcomes.compactMap { $0["outcome"] as? String }) == ["sent", "failed"])
        #expect(outcomes.allSatisfy { $0["request"] as? String == id })
        #expect(!String(decoding: try readBytes(configuration.dataDirectory + "/consent/audit.log"), as: UTF8.self).contains("u-erase"))

        // Metrics: the counters and the gauge.
        // (`sent` is counted once the outcome is settled: wait for it.)
        try await eventually("the sent outcome counted") {
            String(decoding: running.agent.metricsExposition(), as: UTF8.self)
                .contains(#"ferry_erasure_requests_total{sink="collector",outcome="sent"} 1"#)
        }
        let exposition = String(decoding: running.agent.metricsExposition(), as: UTF8.self)
        #expect(exposition.contains(#"ferry_erasure_requests_total{sink="plain",outcome="failed"} 0"#), "the failure was counted by the first run")
        #expect(exposition.contains("ferry_erasures_pending 0"))

        // `ferry forget status` prints it.
        let cli = try await runCLI(["forget", "status", "--runtime-dir", runtime])
        #expect(cli.status == .exited(0), "\(cli)")
        #expect(cli.stdout.contains(id) && cli.stdout.contains("collector") && cli.stdout.contains("sent"), "\(cli)")
        #expect(cli.stdout.contains("does not support erasure"), "\(cli)")
        try await running.stop()
    }

    @Test("nothing is sent while delivery is paused (no-op mode); the consent change that ends it lets the request go")
    func waitsWhilePaused() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let sink = ScriptedSink(name: "collector")
        sink.setErase(.accept)
        let configuration = multiSinkConfiguration(scratch, [scriptedSinkConfiguration("collector", scratch)])
        let running = try await InProcessAgent(configuration, sinks: ["collector": sink])
        try await running.send(userFrames("u-paused", 2))
        try await waitUntil("delivered") { sink.events.count == 2 }
        let runtime = configuration.runtimeDirectory
        _ = try await controlJSON(runtime, ["op": "disable_features", "features": ["all"]])
        _ = try await controlJSON(runtime, ["op": "forget", "user_id": "u-paused"])
        #expect(try await running.erasure("collector")?.state == .pending)
        // A commit of other events does not let it go either (and does not wake it).
        #expect(sink.eraseAttempts == 0)
        _ = try await controlJSON(runtime, ["op": "enable_features", "features": ["all"]])
        try await eventually("sent once delivery may run") { try await running.erasure("collector")?.state == .sent }
        #expect(sink.erasures.map(\.userID) == ["u-paused"])
        try await running.stop()
    }

    @Test("file sink: the user's delivered lines are overwritten in place, same length; the others stay")
    func fileSink() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        var configuration = agentConfiguration(scratch)
        let directory = scratch.appending("delivered")
        configuration.sinks = [AgentConfiguration.SinkConfiguration(name: "file", settings: .file(directory: directory))]
        let running = try await InProcessAgent(configuration)
        try await running.send(userFrames("u-\"q\"", 3, marker: "SECRET-1") + userFrames("u-other", 2, first: 4, marker: "KEEP"))
        try await waitUntil("delivered") { (try? sinkLines(directory).count) == 5 }
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".jsonl") }.sorted()
        let before = try names.map { try readBytes(directory + "/" + $0).count }

        _ = try await controlJSON(configuration.runtimeDirectory, ["op": "forget", "user_id": "u-\"q\""])
        try await eventually("sent") { try await running.erasure("file")?.state == .sent }
        #expect(try await running.erasure("file")?.reference == "3 lines")
        #expect(try names.map { try readBytes(directory + "/" + $0).count } == before, "no offset moved")
        let lines = try sinkLines(directory)
        #expect(lines.count == 5)
        #expect(lines.filter { $0["erased"] as? Bool == true }.count == 3)
        #expect(lines.filter { $0["user_id"] as? String == "u-other" }.count == 2)
        let all = try names.map { String(decoding: try readBytes(directory + "/" + $0), as: UTF8.self) }.joined()
        #expect(!all.contains("SECRET-1") && all.contains("KEEP"))
        // New events still go after the erased lines.
        try await running.send(userFrames("u-other", 1, first: 6, marker: "AFTER"), requestID: 2)
        try await waitUntil("delivered after") { (try? sinkLines(directory).count) == 6 }
        try await running.stop()
    }

    @Test("the erased line keeps the length, whatever it is", arguments: [16, 17, 40, 60, 200])
    func erasedLineLength(length: Int) throws {
        let line = FileSink.erasedLine(length: length, request: "0190f5c2-7a3b-7c4d-8e5f-0123456789ab", lineFormat: 3)
        #expect(line.count == length)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
        #expect(object["erased"] as? Bool == true)
    }
}

@Suite("The erasure outbox: idempotent steps, the user id kept only while pending")
struct ErasureOutboxTests {
    @Test("add and settle are idempotent; once every sink is done the user id is gone; finished requests are trimmed; a damaged file refuses")
    func outbox() throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let path = scratch.appending("erasures.json")
        var outbox = try ErasureOutbox(path: path, sinks: [])
        let request = SinkErasure(id: "r-1", userID: "u-secret", requestedAt: 5)
        #expect(try outbox.add(request, sinks: ["a", "b"]))
        #expect(try outbox.add(request, sinks: ["a", "b"]) == false, "a forget finished again adds it once")
        #expect(outbox.pending(for: "a") == [request] && outbox.pendingCount == 2)
        try outbox.recordAttempt("r-1", sink: "a", error: "HTTP 503", at: 6)
        #expect(outbox.status(of: "r-1", sink: "a")?.attempts == 1)

        // Reopened (a restart): the same state.
        outbox = try ErasureOutbox(path: path, sinks: [])
        #expect(outbox.status(of: "r-1", sink: "a")?.lastError == "HTTP 503")
        #expect(try outbox.settle(ErasureOutcome(id: "r-1", sink: "a", state: .sent, attempts: 2, reference: "ref", at: 7)))
        #expect(try outbox.settle(ErasureOutcome(id: "r-1", sink: "a", state: .failed, attempts: 3, at: 8)) == false,
                "an outcome settled again after a crash changes nothing")
        #expect(String(decoding: try readBytes(path), as: UTF8.self).contains("u-secret"), "b still has it pending")
        #expect(try outbox.settle(ErasureOutcome(id: "r-1", sink: "b", state: .failed, attempts: 1, error: "not supported", at: 9)))
        #expect(!String(decoding: try readBytes(path), as: UTF8.self).contains("u-secret"))
        #expect(outbox.statuses.first?.done == true && outbox.pendingCount == 0 && outbox.pending(for: "b").isEmpty)

        // Only the newest finished requests are kept.
        for index in 0..<(ErasureStatusReply.keptFinished + 5) {
            let id = "t-\(index)"
            try outbox.add(SinkErasure(id: id, userID: "u", requestedAt: 10), sinks: ["a"])
            try outbox.settle(ErasureOutcome(id: id, sink: "a", state: .sent, attempts: 1))
        }
        #expect(outbox.statuses.count == ErasureStatusReply.keptFinished)
        #expect(outbox.statuses.last?.id == "t-\(ErasureStatusReply.keptFinished + 4)")

        try Array("{not json".utf8).withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: path)) }
        #expect(throws: AgentError.self) { try ErasureOutbox(path: path, sinks: []) }
    }
}
