import FerryIntegrationKit
import FerryProtocol
import FerryStorage
import FerryTestKit
import Foundation
import Testing

/// Exactly-once intake across re-sends for clients with a session (protocol 2), with the real
/// `ferryd`: the id window is bounded by count, the session table is not.
@Suite("Sessions: exactly-once intake", .serialized)
struct SessionDedupTests {
    /// A client's batch of `count` events in session `session`, sequences from `first`.
    static func batch(session: EventID, source: String, first: UInt64, count: Int) -> [[UInt8]] {
        (0..<count).map { offset in
            var event = TestEvents.wireEvent(name: "e\(first + UInt64(offset))", source: source, sequence: first + UInt64(offset))
            event.session = session
            return event.encoded()
        }
    }

    static func newSession() -> EventID { EventID(high: .random(in: 0...UInt64.max), low: .random(in: 0...UInt64.max)) }

    /// Sends `frames` in messages of at most 1000 events on one connection; returns every ack entry.
    static func send(_ frames: [[UInt8]], to agent: AgentProcess, version: UInt8 = ferryProtocolVersion) async throws -> [AckEntry] {
        var messages: [[[UInt8]]] = []
        for (index, start) in stride(from: 0, to: frames.count, by: 1000).enumerated() {
            let chunk = frames[start..<min(start + 1000, frames.count)]
            messages.append([TestEvents.header(requestID: UInt32(index + 1), version: version)] + chunk)
        }
        let replies = try await RawIngestClient.exchange(runtimeDirectory: agent.runtimeDirectory, messages: messages, timeout: .seconds(30))
        return try replies.flatMap { reply in try #require(reply.entries, "\(reply)") }
    }

    static let smallWindow = #"{"dedup": {"maxEntries": 1000, "maxAgeSeconds": 900, "lossGraceSeconds": 1}, "log": {"segmentMaxBytes": 262144}}"#

    @Test("a batch re-sent after 10x the id window of other events (10 M in the soak) is answered duplicate, before and after a kill -9, and stored once")
    func resendAfterTenWindows() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(Self.smallWindow, in: dir))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        let a = Self.newSession()
        let original = Self.batch(session: a, source: "client-a", first: 1, count: 100)
        let first = try await Self.send(original, to: agent)
        #expect(first.allSatisfy { $0.status == .accepted }, "\(first.prefix(3))")

        // Events from another client: ten times the id window (1000 ids) in CI, 10 M in the soak.
        let b = Self.newSession()
        let floodEvents = FaultSettings.scale(ci: 10_000, soak: 10_000_000)
        var flooded = 0
        while flooded < floodEvents {
            let count = min(50_000, floodEvents - flooded)
            let flood = try await Self.send(Self.batch(session: b, source: "client-b", first: UInt64(flooded + 1), count: count), to: agent)
            #expect(flood.allSatisfy { $0.status == .accepted })
            flooded += count
        }

        let again = try await Self.send(original, to: agent)
        #expect(again.map(\.status) == Array(repeating: .duplicate, count: 100), "\(Set(again.map(\.status)))")

        // The flood was delivered, so segments holding client A's events may be gone: the
        // session table comes back from its snapshot and the log after it.
        _ = try await waitForValue("the flood to be delivered", timeout: .seconds(60)) { () -> Bool? in
            (try await agent.status()).queuedEvents == 0 ? true : nil
        }
        _ = agent.kill9()
        try await agent.restart()
        let afterRestart = try await Self.send(original, to: agent)
        #expect(afterRestart.map(\.status) == Array(repeating: .duplicate, count: 100), "\(Set(afterRestart.map(\.status)))")

        let delivered = try agent.deliveredEvents().filter { $0.source == "client-a" }
        #expect(delivered.count == 100)
        #expect(Set(delivered.map(\.id)).count == 100)
    }

    @Test("an event refused as blocked is judged again when re-sent; a duplicate sequence in flight is stored once")
    func refusedEventsAreJudgedAgain() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let session = Self.newSession()
        let frames = Self.batch(session: session, source: "judged", first: 1, count: 10)

        _ = try await agent.control(["op": "set_tracking", "enabled": false])
        let blocked = try await Self.send(frames, to: agent)
        #expect(blocked.allSatisfy { $0.status == .blocked }, "\(blocked.prefix(2))")
        _ = try await agent.control(["op": "set_tracking", "enabled": true])
        let accepted = try await Self.send(frames, to: agent)
        #expect(accepted.allSatisfy { $0.status == .accepted }, "\(accepted.prefix(2))")

        // The same sequences in one message twice: the second copy is a duplicate.
        let more = Self.batch(session: session, source: "judged", first: 11, count: 5)
        let doubled = try await Self.send(more + more, to: agent)
        #expect(doubled.map(\.status) == Array(repeating: .accepted, count: 5) + Array(repeating: .duplicate, count: 5))
    }

    @Test("a gap in a session's sequence is published on the lost topic and counted by source")
    func gapsAreReportedLost() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(Self.smallWindow, in: dir))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let tail = try BusTail(topics: ["lost"], environment: agent.environment, outputDirectory: dir.path)
        defer { tail.cleanup() }
        try await tail.waitUntilListening()

        let session = Self.newSession()
        // Sequences 1–5 and 9–10: 6, 7 and 8 never arrive (the client dropped them).
        let frames = Self.batch(session: session, source: "gappy", first: 1, count: 10)
        let sent = Array(frames[0..<5]) + Array(frames[8..<10])
        let acks = try await Self.send(sent, to: agent)
        #expect(acks.allSatisfy { $0.status == .accepted })

        let status = try await waitForValue("the loss to be counted", timeout: .seconds(20)) { () -> AgentStatus? in
            let status = try await agent.status()
            return status.counters["client_events_lost"] == 3 ? status : nil
        }
        let bySource = status.object["client_events_lost"] as? [String: Any]
        #expect((bySource?["gappy"] as? NSNumber)?.intValue == 3, "\(status.object)")
        // The tail subscribed before the gap was reported (reports come at least a second after).
        let lost = try await waitForValue("a lost message on the bus", timeout: .seconds(20)) { () -> [String: Any]? in
            try tail.messages(topic: "lost").first
        }
        #expect(lost["source"] as? String == "gappy")
        #expect((lost["events"] as? NSNumber)?.intValue == 3)
        #expect(lost["session"] as? String == session.description)
        #expect(lost["gaps"] as? [[Int]] == [[6, 8]])
    }

    @Test("protocol 1 clients keep working, and an extension block in a version 1 message is malformed")
    func protocolOneClients() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let plain = (1...3).map { TestEvents.wireEvent(name: "v1", source: "old", sequence: UInt64($0)).encoded() }
        let acks = try await Self.send(plain + plain, to: agent, version: 1)
        #expect(acks.map(\.status) == [.accepted, .accepted, .accepted, .duplicate, .duplicate, .duplicate])
        let extended = Self.batch(session: Self.newSession(), source: "confused", first: 1, count: 1)
        let refused = try await Self.send(extended, to: agent, version: 1)
        #expect(refused.map(\.status) == [.rejected] && refused.first?.reason == .malformed)
        // A version 3 message gets unsupported_version, in version 2.
        let replies = try await RawIngestClient.exchange(
            runtimeDirectory: agent.runtimeDirectory, messages: [[TestEvents.header(requestID: 9, version: 3)] + plain])
        guard case .error(9, let reply) = replies[0] else {
            Issue.record("expected an error reply, got \(replies[0])")
            return
        }
        #expect(reply.code == .unsupportedVersion)
    }
}

/// Reading and refusing data directories of other formats, with the real `ferryd`.
@Suite("Data format", .serialized)
struct DataFormatTests {
    @Test("a format 1 data directory (no FORMAT marker, kind 1 records) is read, delivered and marked format 2")
    func readsFormatOne() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.appending("data")
        try FileManager.default.createDirectory(atPath: data + "/segments", withIntermediateDirectories: true)
        var bytes = SegmentFile.header(index: 1)
        let events = (1...5).map { TestEvents.wireEvent(name: "old-\($0)", source: "format1", sequence: UInt64($0)) }
        for event in events { LogRecord.appendFormat1Event(event.encoded(), acceptedAt: WallClock.unixMilliseconds(), to: &bytes) }
        try Data(bytes).write(to: URL(fileURLWithPath: data + "/segments/" + SegmentFile.fileName(for: 1)))

        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let delivered = try await waitForValue("the format 1 events to be delivered", timeout: .seconds(30)) { () -> [DeliveredEvent]? in
            let lines = try agent.deliveredEvents().filter { $0.source == "format1" }
            return lines.count == 5 ? lines : nil
        }
        #expect(delivered.map(\.id) == events.map(\.id.description))
        // Stored before origins existed: the line says so with null, it does not guess.
        #expect(delivered.allSatisfy { $0.line.contains(#""origin":null"#) }, "\(delivered.first?.line ?? "")")
        #expect(try DataFormat.recorded(in: data) == DataFormat.current)
        // A re-send of one of them is still a duplicate (its id came back from the old records).
        let acks = try await SessionDedupTests.send([events[0].encoded()], to: agent, version: 1)
        #expect(acks.map(\.status) == [.duplicate])
    }

    @Test("a data directory of a newer format is refused with a message naming both formats, and left untouched")
    func refusesNewerFormat() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.appending("data")
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        try Data("ferry-data 3\n".utf8).write(to: URL(fileURLWithPath: data + "/FORMAT"))
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        let exit = try await agent.waitForExit(timeout: .seconds(30))
        #expect(exit != .exited(0))
        #expect(agent.logs.contains("data format 3, written by a newer ferryd; this ferryd reads formats 1 to \(DataFormat.current)"),
                "\(agent.logs.suffix(2000))")
        #expect(try String(contentsOfFile: data + "/FORMAT", encoding: .utf8) == "ferry-data 3\n")
        #expect(!FileManager.default.fileExists(atPath: data + "/segments"))
    }
}
