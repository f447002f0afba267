@testable import FerryAgent
import FerryAgentTestKit
import FerryTestKit
@testable import FerryStorage
import FerryProtocol
import Foundation
import Testing

@Suite("FerryAgent in process, over a raw DEALER socket")
struct AgentEndToEndTests {
    @Test("acks accepted / duplicate / rejected per event, error replies per message, the sink gets the accepted events")
    func ingestToSink() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let configuration = agentConfiguration(scratch, maxEventBytes: 2048)
        let running = try await InProcessAgent(configuration)

        let good = Events.frames(5)
        let a = Events.make(10).encoded(), b = Events.make(11).encoded()
        let garbage: [UInt8] = [0xDE, 0xAD, 0xBE, 0xEF, 1, 2, 3]
        var unknownType = Events.make(12).encoded()
        unknownType[36] = 99
        var wrongLength = Events.make(13).encoded()
        wrongLength.append(0) // one byte more than its header declares
        let c = Events.make(14).encoded()
        let tooLarge = Events.make(15, padding: 4096).encoded()
        let d = Events.make(16).encoded()
        let messages: [[[UInt8]]] = [
            [eventsHeader(1)] + good,
            [eventsHeader(2)] + good,
            [eventsHeader(3), a, garbage, unknownType, wrongLength, b],
            [eventsHeader(4), c, tooLarge],
            [eventsHeader(5, version: 3), d],
            [eventsHeader(6)],
            [Array(eventsHeader(7).prefix(5)), d],
            [eventsHeader(8), d],
        ]
        let replies = try await exchange(runtimeDirectory: configuration.runtimeDirectory, messages)
        try #require(replies.count == messages.count)

        #expect(replies[0] == .ack(requestID: 1, entries: good.map { AckEntry(id: Events.id(of: $0), status: .accepted) }))
        #expect(replies[1] == .ack(requestID: 2, entries: good.map { AckEntry(id: Events.id(of: $0), status: .duplicate) }))
        #expect(replies[2] == .ack(requestID: 3, entries: [
            AckEntry(id: Events.id(of: a), status: .accepted),
            AckEntry(id: .zero, status: .rejected, reason: .malformed),
            AckEntry(id: Events.id(of: unknownType), status: .rejected, reason: .malformed),
            AckEntry(id: Events.id(of: wrongLength), status: .rejected, reason: .malformed),
            AckEntry(id: Events.id(of: b), status: .accepted),
        ]))
        #expect(replies[3] == .ack(requestID: 4, entries: [
            AckEntry(id: Events.id(of: c), status: .accepted),
            AckEntry(id: Events.id(of: tooLarge), status: .rejected, reason: .tooLarge),
        ]))
        guard case .error(let requestID, let versionError) = replies[4] else {
            Issue.record("a version 3 header got \(replies[4]), expected an error reply")
            return
        }
        #expect(requestID == 5)
        #expect(versionError.code == .unsupportedVersion)
        guard case .error(6, let emptyError) = replies[5] else {
            Issue.record("a message without events got \(replies[5])")
            return
        }
        #expect(emptyError.code == .malformedMessage)
        guard case .error(_, let shortHeader) = replies[6] else {
            Issue.record("a 5-byte header got \(replies[6])")
            return
        }
        #expect(shortHeader.code == .malformedMessage)
        // The connection is still served after the refusals, and the refused event was not stored.
        #expect(replies[7] == .ack(requestID: 8, entries: [AckEntry(id: Events.id(of: d), status: .accepted)]))

        let accepted = good + [a, b, c, d]
        let sinkDirectory = configuration.fileSinkDirectory
        try await waitUntil("\(accepted.count) events in the file sink") {
            try sinkLines(sinkDirectory).count >= accepted.count
        }
        let lines = try sinkLines(sinkDirectory)
        #expect(lines.map { $0["id"] as? String } == accepted.map { Events.id(of: $0).description })
        #expect(lines.allSatisfy { $0["source"] as? String == "agent-tests" && $0["accepted_at"] is NSNumber })

        let counters = running.counters
        #expect(counters["accepted"] == accepted.count)
        #expect(counters["duplicate"] == good.count)
        #expect(counters["rejected"] == 4)
        #expect(counters["malformed_messages"] == 3)
        try await waitUntil("delivered counter") { running.counters["delivered"] == accepted.count }
        let status = try #require(running.agent.status())
        #expect(status.queue.events == 0)
        #expect(status.recovery.events == 0)

        try await running.stop()
        #expect(try sinkLines(sinkDirectory).count == accepted.count)
    }

    @Test("event-model fields: valid ones reach the sink, an invalid one rejects its event alone with a reason")
    func eventModelFields() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let configuration = agentConfiguration(scratch)
        let running = try await InProcessAgent(configuration)

        var good = Events.make(1)
        good.anonymousID = "anon-7"
        good.groupID = "acme"
        good.previousID = "old"
        good.context = Array(#"{"locale":"fr-FR"}"#.utf8)
        var longID = Events.make(2)
        longID.groupID = String(repeating: "g", count: EventExtension.maxIdentifierBytes + 1)
        var notObject = Events.make(3)
        notObject.context = Array("[1,2]".utf8)
        var badUTF8 = Events.make(4)
        badUTF8.anonymousID = "\u{1}"
        var badUTF8Frame = badUTF8.encoded()
        badUTF8Frame[badUTF8Frame.count - 1] = 0xFF
        let plain = Events.make(5).encoded()
        let replies = try await exchange(runtimeDirectory: configuration.runtimeDirectory, [
            [eventsHeader(1), good.encoded(), longID.encoded(), notObject.encoded(), badUTF8Frame, plain],
        ])
        #expect(replies == [.ack(requestID: 1, entries: [
            AckEntry(id: good.id, status: .accepted),
            AckEntry(id: longID.id, status: .rejected, reason: .invalidField),
            AckEntry(id: notObject.id, status: .rejected, reason: .invalidField),
            AckEntry(id: badUTF8.id, status: .rejected, reason: .invalidUTF8),
            AckEntry(id: Events.id(of: plain), status: .accepted),
        ])])
        let sinkDirectory = configuration.fileSinkDirectory
        try await waitUntil("2 events in the file sink") { try sinkLines(sinkDirectory).count >= 2 }
        let lines = try sinkLines(sinkDirectory)
        #expect(lines.count == 2)
        #expect(lines[0]["anonymous_id"] as? String == "anon-7")
        #expect(lines[0]["group_id"] as? String == "acme")
        #expect(lines[0]["previous_id"] as? String == "old")
        #expect((lines[0]["context"] as? [String: Any])?["locale"] as? String == "fr-FR")
        #expect(lines[1]["anonymous_id"] == nil && lines[1]["context"] == nil)
        try await running.stop()
    }

    @Test("after a restart the dedup window, the queue and the sink carry on: no duplicates, nothing lost")
    func restart() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let configuration = agentConfiguration(scratch)
        let sinkDirectory = configuration.fileSinkDirectory
        let first = Events.frames(20)

        let agent1 = try await InProcessAgent(configuration)
        let replies1 = try await exchange(runtimeDirectory: configuration.runtimeDirectory, [[eventsHeader(1)] + first])
        #expect(replies1.first?.entries?.allSatisfy { $0.status == .accepted } == true)
        try await waitUntil("the first events delivered") { try sinkLines(sinkDirectory).count == first.count }
        try await agent1.stop()

        let agent2 = try await InProcessAgent(configuration)
        #expect(agent2.agent.recoveryReport?.records == first.count)
        #expect(agent2.agent.recoveryReport?.isClean == true)
        let second = Events.frames(5)
        let replies2 = try await exchange(runtimeDirectory: configuration.runtimeDirectory,
                                          [[eventsHeader(1)] + Array(first.prefix(3)) + second])
        let statuses = replies2.first?.entries?.map(\.status)
        #expect(statuses == [.duplicate, .duplicate, .duplicate] + Array(repeating: .accepted, count: 5),
                "ids from before the restart are still known: \(replies2)")
        try await waitUntil("the second events delivered") { try sinkLines(sinkDirectory).count >= first.count + second.count }
        try await agent2.stop()
        let ids = try sinkLines(sinkDirectory).map { $0["id"] as? String ?? "" }
        #expect(ids == (first + second).map { Events.id(of: $0).description }, "each event exactly once, in order")
    }

    @Test("a clean stop leaves a dedup snapshot covering the whole log: after restart, ids of older segments are still duplicates")
    func cleanStopSnapshotCoversLog() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let configuration = agentConfiguration(scratch, log: LogConfiguration(segmentMaxBytes: 4096))
        let first = Events.frames(60, padding: 100)

        let agent1 = try await InProcessAgent(configuration)
        let replies1 = try await exchange(runtimeDirectory: configuration.runtimeDirectory, [[eventsHeader(1)] + first])
        #expect(replies1.first?.entries?.allSatisfy { $0.status == .accepted } == true)
        try await agent1.stop()

        // (Delivered segments may be deleted by then: their ids live on in the snapshot.)
        let segments = segmentFiles(configuration.dataDirectory + "/segments")
        let last = try #require(segments.last)
        let snapshot = try #require(DedupWindow.parseSnapshotCoverage(try readBytes(configuration.dataDirectory + "/dedup.snapshot")))
        #expect(snapshot.covered == LogPosition(segment: UInt64(last.split(separator: "/").last!.dropLast(4))!, offset: fileSize(last)))
        #expect(snapshot.entries.map(\.id) == first.map(Events.id(of:)))

        let agent2 = try await InProcessAgent(configuration)
        let second = Events.frames(2)
        let replies2 = try await exchange(runtimeDirectory: configuration.runtimeDirectory,
                                          [[eventsHeader(2)] + Array(first.prefix(2)) + second])
        #expect(replies2.first?.entries?.map(\.status) == [.duplicate, .duplicate, .accepted, .accepted])
        try await agent2.stop()
    }

    @Test("a second agent on the same directories refuses to start")
    func singleInstance() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let configuration = agentConfiguration(scratch)
        let running = try await InProcessAgent(configuration)
        do {
            let second = try await InProcessAgent(configuration)
            Issue.record("a second agent started")
            try await second.stop()
        } catch let error as AgentError {
            #expect(error.code == .alreadyRunning)
        }
        // The first one still serves.
        let frame = Events.make(1).encoded()
        let replies = try await exchange(runtimeDirectory: configuration.runtimeDirectory, [[eventsHeader(1), frame]])
        #expect(replies == [.ack(requestID: 1, entries: [AckEntry(id: Events.id(of: frame), status: .accepted)])])
        try await running.stop()
    }
}
