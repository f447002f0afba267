#if canImport(Glibc)
import Glibc
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// docs/CONSENT.md, "Worked example: three upstreams, three purposes", run with the real `ferryd`
/// and three live upstreams: a file archive, FerryIntegrationKit's Segment collector (analytics)
/// and an HTTP test server as the advertising partner. Events arrive over both ingest paths
/// (ZeroMQ with `ferry emit`, and Segment's JSON through the local HTTP API with
/// `context.consent.categoryPreferences`); each upstream is checked event by event, exactly once.
@Suite("Worked example: consent and routes per sink, end to end")
struct WorkedExampleTests {
    @Test("grant analytics, grant advertising, revoke advertising, forget: each upstream receives what its purpose allows, once")
    func workedExample() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let upstreams = try await WorkedExampleUpstreams.start(in: dir)
        let (collector, partner, api, archiveDirectory) = (upstreams.collector, upstreams.partner, upstreams.api, upstreams.archiveDirectory)
        let agent = try AgentProcess(in: dir, extraArguments: upstreams.configuration)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        defer { Task { await upstreams.shutdown() } }
        let tail = try BusTail(topics: ["blocked"], environment: agent.environment, outputDirectory: dir.path)
        defer { tail.cleanup() }
        try await tail.waitUntilListening()

        // What each upstream holds, by event name (`ferry tail`'s probes are none of them:
        // the subscription above is not probed).
        func archive() throws -> [String] { try upstreams.archive() }
        func segment() -> [String] { upstreams.segment() }
        func ads() -> [String] { upstreams.ads() }
        func status(_ sink: String) async throws -> [String: Any] { try await WorkedExampleUpstreams.status(sink, of: agent) }
        func emit(_ line: String) async throws {
            let result = try await runCLI(["emit", "--stdin", "--wait", "--source", "shop"], stdin: line + "\n", environment: agent.environment)
            #expect(result.status == .exited(0), "\(result)")
        }
        func post(_ messageID: String, _ name: String, preferences: String) async throws {
            let answer = await WorkedExampleUpstreams.post([(messageID, name)], preferences: preferences, to: agent)
            #expect(answer?.contains(#""accepted":1"#) == true, "\(answer ?? "no answer")")
        }
        func setConsent(_ category: String, _ value: String) async throws {
            #expect(try await WorkedExampleUpstreams.setConsent(category, value, on: agent), "consent set \(category) \(value)")
        }

        // 1. Before the banner is answered: held on disk, nobody receives anything.
        try await emit(#"{"type":"identify","userId":"u-42","properties":{"plan":"pro"}}"#)
        try await emit(#"{"name":"Product Viewed","userId":"u-42"}"#)
        #expect(try await agent.status().object["consent"].flatMap { ($0 as? [String: Any])?["held_events"] as? Int } == 2)

        // 2. Analytics granted: the held events go to the archive and the analytics collector;
        // the partner waits (advertising undetermined under hold), skipping nothing.
        try await setConsent("analytics", "granted")
        try await eventually("archive and analytics have step 2") {
            try archive() == ["", "Product Viewed", "consent_updated"] && segment() == ["(identify)", "Product Viewed", "consent_updated"]
        }
        try await eventually("the partner's sink paused") { try await status("ads")["state"] as? String == "paused" }
        #expect(ads().isEmpty)

        // 3. Advertising granted: the partner gets the track events, the identify is off its route.
        try await setConsent("advertising", "granted")
        try await eventually("the partner has step 3") { ads() == ["Product Viewed", "consent_updated", "consent_updated"] }
        try await eventually("archive and analytics have step 3") {
            try archive().count == 4 && segment().count == 4
        }

        // 4. Two purchases over the HTTP API, one whose own preferences refuse advertising.
        try await post("m-order", "Order Completed", preferences: #"{"analytics":true,"advertising":true}"#)
        try await post("m-news", "Newsletter Opened", preferences: #"{"advertising":false}"#)
        try await eventually("step 4 everywhere") {
            try archive().suffix(2) == ["Order Completed", "Newsletter Opened"] && segment().suffix(2) == ["Order Completed", "Newsletter Opened"]
                && ads().last == "Order Completed"
        }
        try await eventually("the newsletter skipped for the partner") {
            (try await status("ads")["skipped"] as? [String: Any])?["category_preferences"] as? Int == 1
        }

        // 5. Advertising revoked: the partner learns of it, then gets nothing more.
        try await setConsent("advertising", "denied")
        try await emit(#"{"name":"Order Refunded","userId":"u-42"}"#)
        try await eventually("step 5 in the archive and analytics") {
            try archive().suffix(2) == ["consent_updated", "Order Refunded"] && segment().suffix(2) == ["consent_updated", "Order Refunded"]
        }
        try await eventually("the refund skipped for the partner") {
            (try await status("ads")["skipped"] as? [String: Any])?["consent_denied"] as? Int == 1
        }
        #expect(try await agent.status().queuedEvents == 0)

        // Event by event, exactly once, upstream by upstream.
        #expect(try archive() == ["", "Product Viewed", "consent_updated", "consent_updated", "Order Completed", "Newsletter Opened",
                                  "consent_updated", "Order Refunded"])
        #expect(segment() == ["(identify)", "Product Viewed", "consent_updated", "consent_updated", "Order Completed", "Newsletter Opened",
                              "consent_updated", "Order Refunded"])
        #expect(ads() == ["Product Viewed", "consent_updated", "consent_updated", "Order Completed", "consent_updated"])
        #expect(Set(collector.accepted.map(\.messageID)).count == collector.accepted.count, "no message twice at the collector")
        let adsStatus = try await status("ads")
        #expect(adsStatus["skipped"] as? [String: Int] == ["route": 1, "category_preferences": 1, "consent_denied": 1], "\(adsStatus)")
        #expect(adsStatus["requires_consent"] as? [String] == ["advertising"])
        #expect(try await status("archive")["skipped"] as? [String: Int] == [:])
        let blocked = try tail.messages(topic: "blocked")
        #expect(blocked.map { "\($0["sink"] as? String ?? "-") \($0["reason"] as? String ?? "-") \($0["name"] as? String ?? "-")" }
            == ["ads category_preferences Newsletter Opened", "ads consent_denied Order Refunded"], "\(blocked)")
        let text = try await runCLI(["status"], environment: agent.environment)
        #expect(text.stdout.contains("    skipped     3 (category_preferences 1, consent_denied 1, route 1)"), "\(text)")
        #expect(text.stdout.contains("    requires    consent to advertising"), "\(text)")
        #expect(text.stdout.contains("    route       include types=track"), "\(text)")

        // 6. Forgotten: each upstream that received the user's events is asked to erase them.
        let forgot = try await runCLI(["forget", "--user", "u-42"], environment: agent.environment)
        #expect(forgot.status == .exited(0), "\(forgot)")
        try await eventually("every erasure sent", timeout: .seconds(30)) {
            let reply = try await agent.control(["op": "forget_status"])
            let sinks = ((reply["erasures"] as? [[String: Any]])?.last?["sinks"] as? [[String: Any]]) ?? []
            return Set(sinks.filter { $0["state"] as? String == "sent" }.compactMap { $0["sink"] as? String }) == ["archive", "analytics", "ads"]
        }
        let archived = deliveredFiles(in: archiveDirectory).compactMap { FileManager.default.contents(atPath: $0) }
        #expect(!archived.isEmpty && archived.allSatisfy { !String(decoding: $0, as: UTF8.self).contains("u-42") },
                "the user's lines are overwritten in the archive")
        #expect(try deliveredEventObjects(in: archiveDirectory).filter { $0["name"] as? String == "consent_updated" }.count == 3,
                "the other lines are kept")
        #expect(api.requests().contains { ($0["body"] as? [String: Any])?["subjectIds"] as? [String] == ["u-42"] })
        #expect(partner.requests.contains { $0.json?["type"] as? String == "erasure" && $0.json?["userId"] as? String == "u-42" })
    }
}
