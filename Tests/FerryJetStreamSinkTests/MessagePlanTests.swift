@testable import FerryAgent
import FerryIntegrationKit
@testable import FerryJetStreamSink
import FerryProtocol
@testable import FerryStorage
import FerryTestKit
import Foundation
import NATS
import Testing

@Suite("JetStream sink: several events per message (the plan)")
struct MessagePlanTests {
    static func ids(_ count: Int, from first: UInt64 = 1) -> [EventID] {
        (0..<UInt64(count)).map { EventID(high: 0x0190_0000_0000_7000 + first + $0, low: 0x8000_0000_0000_0000 | (first + $0)) }
    }

    static let limits = MessagePlan.Limits(eventsPerMessage: 4, maxBytes: 100)

    @Test("runs of one subject, at most eventsPerMessage events and maxBytes of body each; an oversized event goes alone")
    func cut() {
        let ids = Self.ids(12)
        let subjects = ["a", "a", "a", "a", "a", "a", "b", "b", "a", "a", "a", "a"]
        let sizes = [10, 10, 10, 10, 10, 10, 10, 10, 60, 39, 150, 10]
        let plan = MessagePlan.make(ids: ids, subjects: subjects, sizes: sizes, limits: Self.limits, recorded: [])
        // 4 by count; the rest of the "a" run; the "b" run; 60 + 1 + 39 = 100 fits; 150 alone; the last.
        #expect(plan.messages.map(\.count) == [4, 2, 2, 2, 1, 1])
        #expect(plan.ranges == [0..<4, 4..<6, 6..<8, 8..<10, 10..<11, 11..<12])
        #expect(plan.messages.map(\.firstID) == [ids[0], ids[4], ids[6], ids[8], ids[10], ids[11]])
        #expect(plan.reused == 0)
        #expect(plan.combinesEvents)
        // A message of one event is keyed by that event's id, as without batching.
        #expect(plan.messages[4].messageID == ids[10].description)
        #expect(plan.messages[0].messageID == "\(ids[0])+4")
    }

    @Test("a batch read again after a restart follows the recorded plan while it matches, then is cut anew")
    func followsRecording() {
        let ids = Self.ids(10)
        let subjects = Array(repeating: "s", count: 10), sizes = Array(repeating: 5, count: 10)
        // First attempt: 7 events were committed, cut 4 + 3.
        let first = MessagePlan.make(ids: Array(ids[0..<7]), subjects: Array(subjects[0..<7]), sizes: Array(sizes[0..<7]),
                                     limits: Self.limits, recorded: [])
        #expect(first.messages.map(\.count) == [4, 3])
        // After the restart the batch holds 10: the recorded 4 + 3 stay (same ids, same message ids), 3 new.
        let again = MessagePlan.make(ids: ids, subjects: subjects, sizes: sizes, limits: Self.limits, recorded: first.messages)
        #expect(again.messages.map(\.count) == [4, 3, 3])
        #expect(Array(again.messages.prefix(2)) == first.messages)
        #expect(again.reused == 2)
        // Cut without the record, the same 10 events make different messages: the first attempt's
        // second message would be superseded by one with another id (its events stored twice).
        let unrecorded = MessagePlan.make(ids: ids, subjects: subjects, sizes: sizes, limits: Self.limits, recorded: [])
        #expect(unrecorded.messages.map(\.count) == [4, 4, 2])
        #expect(unrecorded.messages[1].messageID != first.messages[1].messageID)
    }

    @Test("a recorded message no longer matches when an event left the batch, the batch is shorter, or it starts elsewhere")
    func recordingMismatch() {
        let ids = Self.ids(8)
        let subjects = Array(repeating: "s", count: 8), sizes = Array(repeating: 5, count: 8)
        let recorded = MessagePlan.make(ids: ids, subjects: subjects, sizes: sizes, limits: Self.limits, recorded: []).messages
        #expect(recorded.map(\.count) == [4, 4])
        // Event 6 blocked by consent at the re-send: the first message still matches, the second is cut anew.
        var fewer = ids
        fewer.remove(at: 5)
        let blocked = MessagePlan.make(ids: fewer, subjects: Array(subjects.prefix(7)), sizes: Array(sizes.prefix(7)),
                                       limits: Self.limits, recorded: recorded)
        #expect(blocked.reused == 1)
        #expect(blocked.messages.map(\.count) == [4, 3])
        // A smaller batch (batch limits lowered by a reload): only whole recorded messages are kept.
        let shorter = MessagePlan.make(ids: Array(ids.prefix(6)), subjects: Array(subjects.prefix(6)), sizes: Array(sizes.prefix(6)),
                                       limits: Self.limits, recorded: recorded)
        #expect(shorter.reused == 1)
        #expect(shorter.messages.map(\.count) == [4, 2])
        // A later batch: the stale record is not used.
        let later = Self.ids(4, from: 100)
        let stale = MessagePlan.make(ids: later, subjects: ["s", "s", "s", "s"], sizes: [5, 5, 5, 5], limits: Self.limits, recorded: recorded)
        #expect(stale.reused == 0)
        // A template reloaded in between: the recorded run now spans two subjects and is not reused.
        let resubjected = MessagePlan.make(ids: ids, subjects: ["s", "s", "t", "t", "s", "s", "s", "s"], sizes: sizes,
                                           limits: Self.limits, recorded: recorded)
        #expect(resubjected.reused == 0)
        #expect(resubjected.messages.map(\.count) == [2, 2, 4])
    }

    @Test("the record round-trips; a damaged one is refused as corrupt")
    func journal() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.appending("cursors"), withIntermediateDirectories: true)
        let journal = MessagePlanJournal(dataDirectory: dir.path, sink: "js")
        #expect(journal.path == dir.path + "/cursors/js.messages")
        #expect(try journal.load() == [])
        let plan = MessagePlan.make(ids: Self.ids(9), subjects: Array(repeating: "s", count: 9), sizes: Array(repeating: 5, count: 9),
                                    limits: Self.limits, recorded: [])
        try journal.save(plan.messages)
        #expect(try journal.load() == plan.messages)

        let bytes = MessagePlanJournal.encode(plan.messages)
        for damaged in [Array(bytes.dropLast()), Array("XXXX".utf8) + bytes.dropFirst(4), bytes.enumerated().map { $0 == 20 ? $1 ^ 1 : $1 }, []] {
            #expect(throws: StorageError.self) { try MessagePlanJournal.decode(damaged, path: "p") }
        }
    }

    @Test("eventsPerMessage and messageMaxBytes load from the file and are checked")
    func configuration() throws {
        let config = try JetStreamSinkConfigurationTests.load(#"{"sink": {"type": "jetstream", "eventsPerMessage": 100, "messageMaxBytes": 65536}}"#)
        let settings = try #require(config.sinks.first?.settings(as: JetStreamSinkConfiguration.self))
        #expect(settings.eventsPerMessage == 100 && settings.messageMaxBytes == 65536)
        #expect(JetStreamSinkConfiguration().eventsPerMessage == 1)
        #expect(JetStreamSinkConfigurationTests.error(#"{"sink": {"type": "jetstream", "eventsPerMessage": 0}}"#)
            .contains("eventsPerMessage must be 1-10000, not 0"))
        #expect(JetStreamSinkConfigurationTests.error(#"{"sink": {"type": "jetstream", "messageMaxBytes": 10}}"#)
            .contains("messageMaxBytes must be 1024-67108864, not 10"))
    }
}

/// Several events per message against a real single-node `nats-server -js`.
@Suite("JetStream sink: several events per message (delivery)", .serialized)
struct CombinedDeliveryTests {
    static func events(_ range: ClosedRange<Int>) -> [WireEvent] { range.map { Events.make(UInt64($0), source: "combined") } }

    /// The events of each stream message: one JSON object per line of the body.
    static func expand(_ messages: [ReceivedMessage]) throws -> [[String: Any]] {
        try messages.flatMap { message in
            let lines = message.payload.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            #expect(lines.count == Int(message.headers["Ferry-Events"] ?? "1"), "Ferry-Events counts the lines")
            return try lines.map { try #require(try JSONSerialization.jsonObject(with: Data($0)) as? [String: Any]) }
        }
    }

    @Test("a batch becomes messages of several events, each line the one-event body; a re-sent batch follows the recorded cut")
    func combinedAndResent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let server = try NATSServerProcess(in: dir)
        defer { server.cleanup() }
        try await server.waitUntilReady()
        let data = dir.appending("data")
        try FileManager.default.createDirectory(atPath: data + "/cursors", withIntermediateDirectories: true)
        let configuration = {
            var configuration = JetStreamSinkConfiguration(servers: server.urls)
            configuration.eventsPerMessage = 5
            return configuration
        }()

        // The first attempt holds 7 events: 5 + 2. Then the agent "crashes" before its cursor moves.
        let all = Self.events(1...10)
        let stored = JetStreamSinkDeliveryTests.stored(all)
        let first = JetStreamSink(configuration: configuration, dataDirectory: data, logger: quietLogger)
        let firstBatch = DeliveryBatch(events: Array(stored.prefix(7)), consent: ["ad_storage": "denied"])
        _ = try await first.deliver(firstBatch)
        try await first.shutdown()
        var messages = try await server.streamMessages("FERRY")
        #expect(messages.map { $0.headers["Ferry-Events"] } == ["5", "2"])
        #expect(messages.map(\.messageID) == ["\(all[0].id)+5", "\(all[5].id)+2"])
        // Each line is exactly the body a one-event message carries.
        let single = JetStreamSink.messages(for: firstBatch, template: try SubjectTemplate(configuration.subjectTemplate))
        #expect(messages[0].payload == Array(single[0..<5].map(\.payload).joined(separator: [UInt8(ascii: "\n")])))
        #expect(messages[1].subject == single[5].subject)

        // After the restart the batch from the same cursor holds 10: the recorded 5 + 2 are re-sent
        // as they were (duplicates at the server), the 3 new events make a third message.
        let second = JetStreamSink(configuration: configuration, dataDirectory: data, logger: quietLogger)
        _ = try await second.deliver(DeliveryBatch(events: stored, consent: ["ad_storage": "denied"]))
        try await second.shutdown()
        messages = try await server.streamMessages("FERRY")
        #expect(messages.map { $0.headers["Ferry-Events"] } == ["5", "2", "3"])
        let names = try Self.expand(messages).compactMap { $0["id"] as? String }
        #expect(names == all.map(\.id.description), "every event once, in order")

        // Without the record (a fresh data directory), the same re-send is cut 5 + 5: the second
        // message has a new id and events 6 and 7 are in the stream twice. This is what the record prevents.
        let fresh = dir.appending("fresh")
        try FileManager.default.createDirectory(atPath: fresh + "/cursors", withIntermediateDirectories: true)
        let unrecorded = JetStreamSink(configuration: configuration, dataDirectory: fresh, logger: quietLogger)
        _ = try await unrecorded.deliver(DeliveryBatch(events: stored))
        try await unrecorded.shutdown()
        let twice = try Self.expand(try await server.streamMessages("FERRY")).compactMap { $0["id"] as? String }
        #expect(twice.count == 15, "the 5 + 5 cut stored \(twice.count - 10) events again")
    }

    @Test("without a data directory, several events per message is a permanent error (nothing unrecorded is published)")
    func needsDataDirectory() async throws {
        var configuration = JetStreamSinkConfiguration(servers: ["nats://127.0.0.1:1"], connectTimeoutMilliseconds: 100)
        configuration.eventsPerMessage = 2
        let sink = JetStreamSink(configuration: configuration, logger: quietLogger)
        // The connection is made first (and keeps retrying in the background); the error is about the directory.
        do {
            _ = try await sink.deliver(DeliveryBatch(events: JetStreamSinkDeliveryTests.stored(Self.events(1...2))))
            Issue.record("delivered without a data directory")
        } catch let error as SinkError {
            #expect(error.disposition == .permanent, "\(error)")
            #expect(error.message.contains("data directory"), "\(error)")
        }
        try await sink.shutdown()
    }
}
