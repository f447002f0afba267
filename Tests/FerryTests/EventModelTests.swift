import Ferry
import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Foundation
import Logging
import Testing

/// The Segment-style helpers, anonymousId and context, and the reasons of blocked, suppressed
/// and once-key duplicate receipts: the client library against a real `ferryd`.
@Suite("FerryClient event model against ferryd")
struct EventModelTests {
    static func makeClient(_ agent: AgentProcess, anonymousID: String = "") throws -> FerryClient {
        var logger = Logger(label: "ferry-tests")
        logger.logLevel = .warning
        return try FerryClient(
            configuration: .init(source: "model", runtimeDirectory: agent.runtimeDirectory, anonymousID: anonymousID),
            logger: logger)
    }

    @Test("track, screen, page, identify, group and alias arrive in the file sink with their ids and context")
    func sixHelpers() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let client = try Self.makeClient(agent, anonymousID: "anon-config")

        let ids = [
            client.track("Order Completed", properties: ["total": 42.5], userID: "u1", context: ["locale": "fr-FR"]),
            client.screen("Home"),
            client.page("Pricing", properties: ["path": "/pricing"], anonymousID: "anon-call",
                        context: ["page": ["url": "https://example.com/pricing"]]),
            client.identify(userID: "u1", traits: ["email": "a@example.com"]),
            client.group("acme", traits: ["plan": "enterprise"], userID: "u1"),
            client.alias(userID: "u1", previousID: "anon-config"),
        ]
        try await client.flush(timeout: .seconds(20))
        await client.shutdown()

        let lines = try await waitForValue("six events in the sink") { () -> [[String: Any]]? in
            let events = try agent.deliveredEvents()
            return events.count >= 6 ? events.map(\.object) : nil
        }
        #expect(lines.map { $0["id"] as? String } == ids.map(\.description))
        #expect(lines.map { $0["type"] as? String } == ["track", "screen", "page", "identify", "group", "alias"])
        // The configuration's anonymousId on every event, unless the call gave its own.
        #expect(lines.map { $0["anonymous_id"] as? String }
            == ["anon-config", "anon-config", "anon-call", "anon-config", "anon-config", "anon-config"])
        #expect((lines[0]["context"] as? [String: Any])?["locale"] as? String == "fr-FR")
        #expect(((lines[2]["context"] as? [String: Any])?["page"] as? [String: Any])?["url"] as? String
            == "https://example.com/pricing")
        #expect(lines[1]["context"] == nil)
        #expect(lines[4]["group_id"] as? String == "acme")
        #expect((lines[4]["properties"] as? [String: Any])?["plan"] as? String == "enterprise")
        #expect(lines[5]["previous_id"] as? String == "anon-config")
        #expect(lines[5]["user_id"] as? String == "u1")
        #expect(lines.enumerated().allSatisfy { $0.offset == 4 || $0.element["group_id"] == nil })
        #expect(lines.enumerated().allSatisfy { $0.offset == 5 || $0.element["previous_id"] == nil })
    }

    @Test("an invalid context or a too long id is rejected with reason invalidField; the others arrive")
    func invalidFields() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let client = try Self.makeClient(agent)
        let notObject = try await withTimeout(.seconds(20), "send") {
            await client.send(Event(name: "Bad", propertiesJSON: [], contextJSON: Array("[1,2]".utf8)))
        }
        #expect(notObject.status == .rejected(.invalidField) && notObject.reason == .invalidField)
        let long = try await withTimeout(.seconds(20), "send") {
            await client.send(Event(type: .group, name: "", groupID: String(repeating: "g", count: 1025)))
        }
        #expect(long.status == .rejected(.invalidField))
        let fine = try await withTimeout(.seconds(20), "send") {
            await client.send(Event(type: .group, name: "", groupID: String(repeating: "g", count: 1024)))
        }
        #expect(fine.status == .accepted && fine.reason == .none)
        await client.shutdown()
    }

    @Test("blocked, suppressed and once-key duplicate receipts carry the agent's reason")
    func consentReasons() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let client = try Self.makeClient(agent)
        func send(_ event: Event) async throws -> Receipt {
            try await withTimeout(.seconds(20), "send") { await client.send(event) }
        }
        let local = try await send(Event(name: "Local", localOnly: true))
        #expect(local.status == .suppressed && local.reason == .localOnly)
        let first = try await send(Event(name: "Converted", onceKey: "order-1"))
        #expect(first.status == .accepted && first.reason == .none)
        let again = try await send(Event(name: "Converted", onceKey: "order-1"))
        #expect(again.status == .duplicate && again.reason == .onceKey)

        _ = try await client.setTracking(false)
        let blocked = try await send(Event(name: "While off"))
        #expect(blocked.status == .blocked && blocked.reason == .trackingDisabled)
        _ = try await client.setTracking(true)
        _ = try await client.setConsent(.denied, for: "analytics")
        let denied = try await send(Event(name: "Denied"))
        #expect(denied.status == .blocked && denied.reason == .consentDenied)
        #expect(client.statistics.blocked == 2 && client.statistics.suppressed == 1)
        await client.shutdown()
    }

    @Test("an event held until consent is decided is acked accepted with reason held")
    func heldReason() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let config = dir.appending("ferryd.json")
        try Data(#"{"consent": {"initialConsent": {"push": "undetermined", "analytics": "granted"}, "undetermined": {"policy": "hold", "allowTypes": []}}}"#.utf8)
            .write(to: URL(fileURLWithPath: config))
        let agent = try AgentProcess(in: dir, extraArguments: ["--config", config])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let client = try Self.makeClient(agent)
        let held = try await withTimeout(.seconds(20), "send") { await client.send(Event(name: "Held", category: 5)) }
        #expect(held.status == .accepted && held.reason == .held)
        let queued = try await withTimeout(.seconds(20), "send") { await client.send(Event(name: "Queued", category: 1)) }
        #expect(queued.status == .accepted && queued.reason == .none)
        await client.shutdown()
    }
}
