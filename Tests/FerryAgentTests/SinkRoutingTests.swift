@testable import FerryFileSink
import FerryAgentTestKit
import Foundation
@testable import FerryAgent
import FerryIntegrationKit
@testable import FerryStorage
import FerryProtocol
import FerryTestKit
import Testing

/// Consent and routes per sink in a running agent: what each sink receives, what it passes by and
/// how that is counted and published (docs/DELIVERY.md, "Routes and consent per sink").
@Suite("Routes and consent per sink in the agent")
struct SinkRoutingTests {
    typealias Route = AgentConfiguration.SinkConfiguration.Route
    typealias Match = AgentConfiguration.SinkConfiguration.Match

    /// A test event: `type`, `name`, optionally a context.
    static func frame(_ name: String, type: EventType = .track, user: String = "", context: String? = nil) -> [UInt8] {
        var event = Events.make(1, name: name)
        event.type = type
        event.userID = user
        if let context { event.context = Array(context.utf8) }
        return event.encoded()
    }

    /// The names of what `sink` received, in order (`ferry tail`'s subscription probes left out).
    static func names(_ sink: ScriptedSink) -> [String] {
        sink.events.compactMap { try? $0.decoded() }.filter { $0.source != BusTail.probeSource }.map(\.name)
    }

    @Test("archive, analytics and advertising sinks: each gets what its route and consent allow; skips counted, published, shown")
    func threeSinks() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let archive = ScriptedSink(name: "archive"), analytics = ScriptedSink(name: "analytics"), ads = ScriptedSink(name: "ads")
        var analyticsSink = scriptedSinkConfiguration("analytics", scratch)
        analyticsSink.route = Route(include: Match(categories: ["analytics"]), exclude: Match(names: ["Debug *"]))
        var adsSink = scriptedSinkConfiguration("ads", scratch)
        adsSink.requiresConsent = ["advertising"]
        adsSink.route = Route(include: Match(types: ["track"]))
        var configuration = multiSinkConfiguration(scratch, [scriptedSinkConfiguration("archive", scratch), analyticsSink, adsSink])
        configuration.consent.initialConsent = ["advertising": .undetermined]
        let running = try await InProcessAgent(configuration, sinks: ["archive": archive, "analytics": analytics, "ads": ads])
        let runtime = configuration.runtimeDirectory
        let tail = try BusTail(environment: ["FERRY_RUNTIME_DIR": runtime], outputDirectory: scratch.path)
        defer { tail.cleanup() }
        try await tail.waitUntilSubscribed()
        func received(_ sink: ScriptedSink, after: Int) -> [String] { Array(Self.names(sink).dropFirst(after)) }
        let base = (archive: 0, analytics: 0)

        // Advertising undetermined (hold): the ads sink waits, the others go on.
        try await running.send([Self.frame("Order Completed"), Self.frame("", type: .identify, user: "u-1"), Self.frame("Debug Ping")])
        try await waitUntil("archive has the three") { received(archive, after: base.archive).count == 3 }
        try await waitUntil("analytics has two") { received(analytics, after: base.analytics).count == 2 }
        #expect(received(analytics, after: base.analytics) == ["Order Completed", ""])
        try await waitUntil("ads paused") { running.sinkStatus("ads")?.state == "paused" }
        #expect(ads.events.isEmpty, "nothing sent, nothing skipped while advertising is undetermined")
        #expect(running.sinkStatus("ads")?.skipped == [:])
        #expect(running.sinkStatus("analytics")?.skipped == ["route": 1])

        // Granted: the ads sink resumes with the track events (the identify is off its route),
        // then the consent change itself.
        let granted = try await controlJSON(runtime, ["op": "set_consent", "category": "advertising", "status": "granted"])
        #expect(granted["ok"] as? Bool == true)
        try await waitUntil("ads caught up") { Self.names(ads).contains("consent_updated") }
        #expect(Self.names(ads) == ["Order Completed", "Debug Ping", "consent_updated"])

        // The event's own preferences refuse advertising: archive and analytics only.
        let refusing = #"{"consent":{"categoryPreferences":{"advertising":false,"analytics":true}}}"#
        try await running.send([Self.frame("Cart Viewed", context: refusing)], requestID: 2)
        try await waitUntil("analytics has the cart") { received(analytics, after: base.analytics).contains("Cart Viewed") }
        try await waitUntil("ads skipped it") { running.sinkStatus("ads")?.skipped?["category_preferences"] == 1 }
        #expect(!Self.names(ads).contains("Cart Viewed"))

        // Revoked: the ads sink gets the change (an upstream must learn of it), then nothing more.
        _ = try await controlJSON(runtime, ["op": "set_consent", "category": "advertising", "status": "denied"])
        try await waitUntil("ads told of the revocation") { Self.names(ads).filter { $0 == "consent_updated" }.count == 2 }
        try await running.send([Self.frame("Order Refunded")], requestID: 3)
        try await waitUntil("archive has the refund") { received(archive, after: base.archive).contains("Order Refunded") }
        try await waitUntil("ads skipped it") { running.sinkStatus("ads")?.skipped?["consent_denied"] == 1 }
        #expect(!Self.names(ads).contains("Order Refunded"))
        #expect(received(archive, after: base.archive).filter { $0 != "consent_updated" }
            == ["Order Completed", "", "Debug Ping", "Cart Viewed", "Order Refunded"], "the archive gets everything once")
        #expect(Self.names(ads).filter { $0 == "Order Completed" }.count == 1, "exactly once")

        // Counted per sink and reason, shown in status, exported, and a consent skip published.
        let ads1 = try #require(running.sinkStatus("ads"))
        #expect(ads1.skipped == ["route": 1, "category_preferences": 1, "consent_denied": 1])
        #expect(ads1.requiresConsent == ["advertising"] && ads1.route == "include types=track")
        let exposition = String(decoding: running.agent.metricsExposition(), as: UTF8.self)
        #expect(exposition.contains(#"ferry_sink_skipped_total{sink="ads",reason="consent_denied"} 1"#), "\(exposition)")
        #expect(exposition.contains(#"ferry_sink_skipped_total{sink="archive",reason="route"} 0"#))
        try await waitUntil("the consent skips on the blocked topic") {
            try tail.messages(topic: "blocked").filter { $0["sink"] as? String == "ads" }.count == 2
        }
        let blocked = try tail.messages(topic: "blocked").filter { $0["sink"] as? String == "ads" }
        #expect(blocked.map { $0["reason"] as? String } == ["category_preferences", "consent_denied"])
        #expect(try tail.messages(topic: "blocked").allSatisfy { $0["sink"] as? String == "ads" }, "a route skip is not a consent block")
        #expect(running.counters["blocked_at_send"] == 0, "a skip of one sink is not a send-time block of the event")
        try await running.stop()
    }

    @Test("reload: a new route applies from the sink's next attempt; a bad one is refused, naming the key, and the old one stays")
    func reload() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let narrow = ScriptedSink(name: "narrow")
        var sink = scriptedSinkConfiguration("narrow", scratch)
        sink.route = Route(include: Match(names: ["Order *"]))
        let configuration = multiSinkConfiguration(scratch, [sink])
        let running = try await InProcessAgent(configuration, sinks: ["narrow": narrow])
        try await running.send([Self.frame("Order Completed"), Self.frame("Cart Viewed")])
        try await waitUntil("the cart skipped") { running.sinkStatus("narrow")?.skipped?["route"] == 1 }
        #expect(Self.names(narrow) == ["Order Completed"])

        var bad = configuration
        bad.sinks[0].requiresConsent = ["adverts"]
        bad.sinks[0].route = Route(include: Match(names: ["Cart *"]))
        await #expect { try await running.agent.reload(bad) } throws: { error in
            "\(error)".contains(#"sinks[0]: sink "narrow": requiresConsent: unknown category "adverts""#)
        }
        var empty = configuration
        empty.sinks[0].route = Route()
        await #expect { try await running.agent.reload(empty) } throws: { error in "\(error)".contains("route: empty") }
        #expect(running.sinkStatus("narrow")?.route == #"include names="Order *""#, "the running route stays")
        try await running.send([Self.frame("Cart Emptied")], requestID: 2)
        try await waitUntil("the second cart skipped") { running.sinkStatus("narrow")?.skipped?["route"] == 2 }

        var wider = configuration
        wider.sinks[0].route = Route(include: Match(names: ["Order *", "Cart *"]))
        let changed = try await running.agent.reload(wider)
        #expect(changed == ["sinks[0].route"])
        try await running.send([Self.frame("Cart Viewed")], requestID: 3)
        try await waitUntil("the cart delivered") { Self.names(narrow) == ["Order Completed", "Cart Viewed"] }
        #expect(running.sinkStatus("narrow")?.skipped?["route"] == 2)
        try await running.stop()
    }

    @Test("a dead letter replayed meets the sink's rules as they are at replay time")
    func replayFollowsTheRulesInForce() async throws {
        let scratch = try ScratchDirectory(short: true)
        defer { scratch.remove() }
        let sink = ScriptedSink(name: "collector", mode: .fail(.badRequest))
        let configuration = multiSinkConfiguration(scratch, [scriptedSinkConfiguration("collector", scratch)])
        let running = try await InProcessAgent(configuration, sinks: ["collector": sink])
        try await running.send([Self.frame("Order Completed"), Self.frame("Cart Viewed")])
        let store = DeadLetterStore(dataDirectory: configuration.dataDirectory)
        let id = try await waitForValue("a dead letter") { try store.ids(sink: "collector").first }

        var narrowed = configuration
        narrowed.sinks[0].route = Route(exclude: Match(names: ["Cart *"]))
        try await running.agent.reload(narrowed)
        sink.set(.accept)
        let replayed = try await controlJSON(configuration.runtimeDirectory, ["op": "deadletter_replay", "sink": "collector", "id": id])
        #expect(replayed["ok"] as? Bool == true, "\(replayed)")
        #expect(Self.names(sink) == ["Order Completed"], "the route in force now keeps the cart out")
        #expect(running.sinkStatus("collector")?.skipped == ["route": 1])
        #expect(try store.ids(sink: "collector").isEmpty)
        try await running.stop()
    }
}
