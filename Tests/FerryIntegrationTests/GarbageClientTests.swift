import FerryIntegrationKit
import Foundation
import FerryProtocol
import FerryTestKit
import Testing

/// A hostile or broken client on the ingest socket gets clear error replies and rejections; the
/// agent keeps serving it and everyone else.
@Suite("Garbage on the ingest socket")
struct GarbageClientTests {
    @Test("random frames, bad headers, version 3, oversized and truncated events get errors; another client is unaffected")
    func garbageAndAGoodClient() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        // The well-behaved client streams while the garbage goes in.
        let goodCount = 400
        let good = try startCLI(["emit", "--stdin", "--wait", "--timeout", "60", "--source", "good-client"],
                                input: .pipe, environment: agent.environment, outputDirectory: dir.path)
        defer { good.cleanup() }
        try await good.writeInput(TestEvents.jsonLines(count: goodCount / 2, namePrefix: "good"))

        var random = SystemRandomNumberGenerator()
        func randomBytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) } }
        let valid1 = TestEvents.wireEvent(name: "raw-valid-1", source: "raw-client", sequence: 1)
        let valid2 = TestEvents.wireEvent(name: "raw-valid-2", source: "raw-client", sequence: 2)
        let oversized = TestEvents.wireEvent(name: "raw-oversized", source: "raw-client", sequence: 3, propertyBytes: 100 * 1024)
        let truncatedSource = TestEvents.wireEvent(name: "raw-truncated", source: "raw-client", sequence: 4, propertyBytes: 40)
        let truncated = Array(truncatedSource.encoded().dropLast(7))
        var badType = TestEvents.wireEvent(name: "raw-bad-type", source: "raw-client", sequence: 5).encoded()
        badType[36] = 0xEE
        let afterGarbage = TestEvents.wireEvent(name: "raw-after-garbage", source: "raw-client", sequence: 6)
        #expect(oversized.encoded().count > 64 * 1024)

        let messages: [[[UInt8]]] = [
            /* 0 */ [randomBytes(37), randomBytes(100)],                                  // random bytes
            /* 1 */ [[]],                                                                 // empty header frame
            /* 2 */ [[1, 1, 0]],                                                          // header too short
            /* 3 */ [TestEvents.header(requestID: 77, version: 3), valid1.encoded()],     // a future version
            /* 4 */ [TestEvents.header(requestID: 78, kind: .ack), valid1.encoded()],      // kind not for ingest
            /* 5 */ [[1, 9, 0, 0, 79, 0, 0, 0], valid1.encoded()],                        // unknown kind 9
            /* 6 */ [TestEvents.header(requestID: 80)],                                   // no event frames
            /* 7 */ [TestEvents.header(requestID: 81), valid1.encoded(), oversized.encoded(), truncated,
                     randomBytes(10), randomBytes(300), badType, valid2.encoded()],        // mixed batch
            /* 8 */ [TestEvents.header(requestID: 82), valid1.encoded()],                 // re-send: duplicate
            /* 9 */ [TestEvents.header(requestID: 83), afterGarbage.encoded()],           // still served
        ]
        let replies = try await RawIngestClient.exchange(runtimeDirectory: agent.runtimeDirectory, messages: messages)
        try #require(replies.count == messages.count, "\(replies)")

        func errorCode(_ reply: IngestReply) -> ErrorCode? {
            if case .error(_, let error) = reply { return error.code }
            return nil
        }
        func errorMessage(_ reply: IngestReply) -> String {
            if case .error(_, let error) = reply { return error.message }
            return ""
        }
        #expect([ErrorCode.unsupportedVersion, .malformedMessage].contains(errorCode(replies[0])), "\(replies[0])")
        #expect(errorCode(replies[1]) == .malformedMessage, "\(replies[1])")
        #expect(errorCode(replies[2]) == .malformedMessage, "\(replies[2])")
        #expect(replies[2].requestID == 0)
        #expect(errorCode(replies[3]) == .unsupportedVersion, "\(replies[3])")
        #expect(replies[3].requestID == 77, "the request id is echoed even for a refused version")
        #expect(errorMessage(replies[3]).contains("version 3"), "\(replies[3])")
        #expect(errorCode(replies[4]) == .unknownKind, "\(replies[4])")
        #expect(replies[4].requestID == 78)
        #expect(errorCode(replies[5]) == .unknownKind, "\(replies[5])")
        #expect(errorCode(replies[6]) == .malformedMessage, "\(replies[6])")
        #expect(replies[6].requestID == 80)

        guard case .ack(let mixedID, let mixed) = replies[7] else {
            Issue.record("expected an ack for the mixed batch, got \(replies[7])")
            return
        }
        #expect(mixedID == 81)
        try #require(mixed.count == 7, "\(replies[7])")
        #expect(mixed[0] == AckEntry(id: valid1.id, status: .accepted))
        #expect(mixed[1] == AckEntry(id: oversized.id, status: .rejected, reason: .tooLarge))
        #expect(mixed[2] == AckEntry(id: truncatedSource.id, status: .rejected, reason: .malformed))
        #expect(mixed[3] == AckEntry(id: .zero, status: .rejected, reason: .malformed), "a frame too short for an id")
        #expect(mixed[4].status == .rejected && mixed[4].reason == .malformed)
        #expect(mixed[5] == AckEntry(id: EventID(bytes: badType), status: .rejected, reason: .malformed))
        #expect(mixed[6] == AckEntry(id: valid2.id, status: .accepted))
        #expect(replies[8] == .ack(requestID: 82, entries: [AckEntry(id: valid1.id, status: .duplicate)]))
        #expect(replies[9] == .ack(requestID: 83, entries: [AckEntry(id: afterGarbage.id, status: .accepted)]))

        // The good client finishes with everything accepted.
        try await good.writeInput(TestEvents.jsonLines(count: goodCount / 2, namePrefix: "good", first: goodCount / 2 + 1))
        good.closeInput()
        let goodExit = try await good.waitForExit(timeout: .seconds(60))
        #expect(goodExit == .exited(0), "\(good.standardError)")
        #expect(good.standardOutput == "accepted=\(goodCount) duplicate=0 rejected=0\n")

        // Exactly the accepted events reach the sink; the agent is alive and counted the refusals.
        let expectedRaw: Set = [valid1.id.description, valid2.id.description, afterGarbage.id.description]
        let report = try await waitForValue("good and valid raw events delivered") { () -> DeliveryReport? in
            let report = try DeliveryReport(sinkDirectory: agent.sinkDirectory)
            return report.events.count >= goodCount + expectedRaw.count ? report : nil
        }
        #expect(report.events.count == goodCount + expectedRaw.count, "\(report)")
        #expect(report.duplicateIDs.count == 0, "duplicated ids, e.g. \(report.duplicateIDs.prefix(5))")
        #expect(report.sequenceProblem(source: "good-client", count: goodCount) == nil)
        #expect(Set(report.events(source: "raw-client").map(\.id)) == expectedRaw)
        #expect(agent.isRunning)
        let status = try await agent.status()
        #expect(status.ok)
        #expect(status.counters["malformed_messages"] == 7, "\(status)")
        #expect(status.counters["rejected"] == 5, "\(status)")
        #expect(status.counters["duplicate"] == 1, "\(status)")
        #expect(status.counters["accepted"] == goodCount + expectedRaw.count, "\(status)")
    }
}
