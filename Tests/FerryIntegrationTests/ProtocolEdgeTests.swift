import FerryIntegrationKit
import Foundation
import FerryProtocol
import FerryTestKit
import Testing

/// What docs/PROTOCOL.md promises where it was silent before: the request id of an error reply to
/// a short header, reserved flag bits, undeclared category codes, the consent topics' payloads and
/// readiness (`ferry status --wait`), each against the real ferryd.
@Suite("Protocol edges, as documented")
struct ProtocolEdgeTests {
    static func errorReply(_ reply: IngestReply) -> ErrorReply? {
        if case .error(_, let error) = reply { return error }
        return nil
    }

    @Test("an error reply carries bytes 4-7 of a header of 8 bytes or more, else request id 0; non-zero header flags are refused")
    func headerEdges() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let event = TestEvents.wireEvent(name: "ok", source: "raw", sequence: 1).encoded()
        let replies = try await RawIngestClient.exchange(runtimeDirectory: agent.runtimeDirectory, messages: [
            /* 0 */ [[2, 1, 0, 0, 5], event],                       // 5 bytes: no request id to read
            /* 1 */ [[2, 1, 0, 0, 7, 0, 0], event],                 // 7 bytes
            /* 2 */ [[2, 1, 0, 0, 9, 0, 0, 0, 0xFF], event],        // 9 bytes: id 9, still refused
            /* 3 */ [[2, 1, 0x01, 0x00, 10, 0, 0, 0], event],       // flags bit 0
            /* 4 */ [[1, 1, 0x00, 0x80, 11, 0, 0, 0], event],       // flags bit 15, version 1
            /* 5 */ [TestEvents.header(requestID: 12), event],      // still served
        ])
        try #require(replies.count == 6, "\(replies)")
        for (index, expectedID) in [(0, UInt32(0)), (1, 0), (2, 9), (3, 10), (4, 11)] {
            #expect(Self.errorReply(replies[index])?.code == .malformedMessage, "\(index): \(replies[index])")
            #expect(replies[index].requestID == expectedID, "\(index): \(replies[index])")
        }
        #expect(Self.errorReply(replies[3])?.message.contains("flags 0x1 are reserved") == true, "\(replies[3])")
        #expect(Self.errorReply(replies[4])?.message.contains("flags 0x8000 are reserved") == true, "\(replies[4])")
        #expect(replies[5].entries?.map(\.status) == [.accepted], "\(replies[5])")
        // Nothing of the refused messages was stored: the event is in once.
        try await eventually("the event delivered") { try agent.deliveredEvents().map(\.name) == ["ok"] }
    }

    @Test("an event flag bit the agent does not know is rejected unsupported_field; the rest of the message is processed")
    func reservedEventFlags() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        var unknownBit = TestEvents.wireEvent(name: "bit-1", source: "raw", sequence: 1)
        unknownBit.flags = EventFlags(rawValue: 1 << 1)
        var highBit = TestEvents.wireEvent(name: "bit-14", source: "raw", sequence: 2)
        highBit.flags = [.localOnly, EventFlags(rawValue: 1 << 14)]
        var localOnly = TestEvents.wireEvent(name: "local", source: "raw", sequence: 3)
        localOnly.flags = .localOnly
        let plain = TestEvents.wireEvent(name: "plain", source: "raw", sequence: 4)
        let replies = try await RawIngestClient.exchange(runtimeDirectory: agent.runtimeDirectory, messages: [
            [TestEvents.header(requestID: 1), unknownBit.encoded(), highBit.encoded(), localOnly.encoded(), plain.encoded()],
            [TestEvents.header(requestID: 2), unknownBit.encoded()],
        ])
        #expect(replies[0].entries == [
            AckEntry(id: unknownBit.id, status: .rejected, reason: .unsupportedField),
            AckEntry(id: highBit.id, status: .rejected, reason: .unsupportedField),
            AckEntry(id: localOnly.id, status: .suppressed, reason: .localOnly),
            AckEntry(id: plain.id, status: .accepted),
        ], "\(replies[0])")
        #expect(replies[1].entries == [AckEntry(id: unknownBit.id, status: .rejected, reason: .unsupportedField)],
                "final: the same bytes get the same answer")
        try await eventually("the plain event delivered") { try agent.deliveredEvents().map(\.name) == ["plain"] }
        #expect(try await agent.status().counters["rejected"] == 3)
    }

    @Test("undeclared category codes are acked blocked and published with reason unknown_category; declared ones pass")
    func undeclaredCategories() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try ConsentTests.agent(dir, consent: ["categories": ["crm": 20], "enabledFeatures": ["all"]])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let tail = try BusTail(topics: ["blocked", "suppressed"], environment: agent.environment, outputDirectory: dir.path)
        defer { tail.cleanup() }
        try await tail.waitUntilSubscribed()
        func event(_ name: String, category: UInt8, sequence: UInt64) -> WireEvent {
            var event = TestEvents.wireEvent(name: name, source: "raw", sequence: sequence)
            event.category = category
            return event
        }
        let undeclared = event("code-200", category: 200, sequence: 1)
        let reserved = event("code-255", category: 255, sequence: 2)
        let builtIn = event("code-4", category: 4, sequence: 3)
        let declared = event("code-20", category: 20, sequence: 4)
        let replies = try await RawIngestClient.exchange(runtimeDirectory: agent.runtimeDirectory, messages: [
            [TestEvents.header(requestID: 1), undeclared.encoded(), reserved.encoded(), builtIn.encoded(), declared.encoded()],
        ])
        let statuses = try #require(replies.first?.entries).map(\.status)
        #expect(statuses == [.blocked, .blocked, .accepted, .accepted], "\(replies)")
        #expect(try #require(replies.first?.entries).map(\.reason) == [.unknownCategory, .unknownCategory, .none, .none])
        try await eventually("both blocked on the bus") {
            Set(try tail.messages(topic: "blocked").compactMap { $0["name"] as? String }) == ["code-200", "code-255"]
        }
        for message in try tail.messages(topic: "blocked") {
            #expect(message["reason"] as? String == "unknown_category", "\(message)")
        }
        try await eventually("the declared ones delivered") {
            Set(try agent.deliveredEvents().map(\.name)) == ["code-4", "code-20"]
        }
    }

    @Test("held, consent and purged messages carry exactly the documented fields")
    func consentTopics() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try ConsentTests.agent(dir, consent: ["initialConsent": ["push": "undetermined"],
                                                          "undetermined": ["policy": "hold", "allowTypes": []]])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let tail = try BusTail(topics: ["held", "consent", "purged", "suppressed"], environment: agent.environment, outputDirectory: dir.path)
        defer { tail.cleanup() }
        try await tail.waitUntilSubscribed()
        let before = WallClock.unixMilliseconds()
        try await ConsentTests.emit(agent, "Held Push", ["--category", "push"])
        try await agent.control(["op": "set_consent", "category": "push", "status": "denied"])
        try await eventually("held, consent and purged on the bus") {
            try !tail.messages(topic: "held").isEmpty && !tail.messages(topic: "consent").isEmpty && !tail.messages(topic: "purged").isEmpty
        }
        let held = try #require(try tail.messages(topic: "held").first)
        #expect(Set(held.keys) == ["topic", "id", "type", "name", "source", "pid", "seq", "timestamp", "session", "at", "reason", "origin"],
                "\(held)")
        #expect(held["name"] as? String == "Held Push")
        #expect(held["reason"] as? String == "consent_undetermined")

        let consent = try #require(try tail.messages(topic: "consent").first)
        #expect(Set(consent.keys) == ["topic", "change", "old", "new", "at", "seq"], "\(consent)")
        #expect(consent["change"] as? String == "consent.push")
        #expect(consent["old"] as? String == #""undetermined""#)
        #expect(consent["new"] as? String == #""denied""#)
        let seq = try #require(consent["seq"] as? Int)
        #expect(try await agent.consentState()["audit_entries"] as? Int == seq)

        let purged = try #require(try tail.messages(topic: "purged").first)
        #expect(Set(purged.keys) == ["topic", "queued", "held", "total", "reason", "at"], "\(purged)")
        #expect(purged["held"] as? Int == 1 && purged["queued"] as? Int == 0 && purged["total"] as? Int == 1)
        #expect(purged["reason"] as? String == "consent.push")
        let at = try #require((purged["at"] as? NSNumber)?.uint64Value)
        #expect(at >= before && at == (consent["at"] as? NSNumber)?.uint64Value, "the change's time")
    }

    // MARK: Readiness

    @Test("ferry status --wait started before the agent returns 0 once it is up; without --wait a missing agent exits 2")
    func statusWaitsForTheAgent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir, start: false)
        defer { agent.cleanup() }
        let plain = try await runCLI(["status"], environment: agent.environment)
        #expect(plain.status == .exited(2), "\(plain)")
        #expect(plain.stderr.contains("ferryd is not running"), "\(plain)")

        let waiting = try startCLI(["status", "--wait", "--timeout", "60", "--json"], environment: agent.environment,
                                   outputDirectory: dir.path, label: "status-wait")
        defer { waiting.cleanup() }
        // It is really waiting: it asked at least once and got no agent (no socket yet).
        try await eventually("status --wait to be running") { waiting.isRunning }
        #expect(!FileManager.default.fileExists(atPath: agent.runtimeDirectory + "/control"))
        try agent.start()
        let exit = try await waiting.waitForExit(timeout: .seconds(60))
        #expect(exit == .exited(0), "\(waiting.standardError)")
        let status = try #require(try JSONSerialization.jsonObject(with: Data(waiting.standardOutput.utf8)) as? [String: Any])
        #expect((status["pid"] as? NSNumber)?.int32Value == agent.pid)
        // Ready means ready: an event sent right after is accepted.
        let emit = try await runCLI(["emit", "Right After", "--wait", "--timeout", "5"], environment: agent.environment)
        #expect(emit.stdout == "accepted=1 duplicate=0 rejected=0\n", "\(emit)")
    }

    @Test("ferry status --wait gives up after --timeout with exit 2, also on a stale socket left by kill -9")
    func statusWaitTimesOut() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let never = try await runCLI(["status", "--wait", "--timeout", "1"], environment: ["FERRY_RUNTIME_DIR": dir.appending("none")])
        #expect(never.status == .exited(2), "\(never)")
        #expect(never.stderr.contains("no agent answered within 1.0 s"), "\(never)")
        #expect(never.duration >= .seconds(1), "it waited the whole timeout")
        #expect(never.stdout.isEmpty)

        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        agent.kill9()
        #expect(FileManager.default.fileExists(atPath: agent.runtimeDirectory + "/control"), "the socket file survives")
        let stale = try await runCLI(["status", "--wait", "--timeout", "1"], environment: agent.environment)
        #expect(stale.status == .exited(2), "\(stale)")

        let usage = try await runCLI(["status", "--timeout", "1"], environment: agent.environment)
        #expect(usage.status == .exited(64), "\(usage)")
        #expect(usage.stderr.contains("--timeout needs --wait"), "\(usage)")
    }
}
