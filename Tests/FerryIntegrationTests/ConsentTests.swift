import FerryIntegrationKit
import Foundation
import FerryTestKit
import Testing

/// The consent behaviours of `../shared/DESIGN.md`, end to end through the real `ferryd` and
/// `ferry` binaries: each test is named after the seed row it proves.
@Suite("Consent, end to end")
struct ConsentTests {
    /// Starts an agent whose config file holds `consent` (and `extra` top-level keys).
    static func agent(_ dir: TemporaryDirectory, consent: [String: Any], extra: [String: Any] = [:]) throws -> AgentProcess {
        let path = dir.appending("ferryd.json")
        var config = extra
        config["consent"] = consent
        try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: path))
        return try AgentProcess(in: dir, extraArguments: ["--config", path])
    }

    /// `ferry emit NAME … --wait`, returning its summary line.
    @discardableResult
    static func emit(_ agent: AgentProcess, _ name: String, _ arguments: [String] = []) async throws -> String {
        let result = try await runCLI(["emit", name, "--wait", "--timeout", "20"] + arguments, environment: agent.environment)
        #expect(result.status == .exited(0), "\(result)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func delivered(_ agent: AgentProcess, named name: String) throws -> [DeliveredEvent] {
        try agent.deliveredEvents().filter { $0.name == name }
    }

    static func heldEvents(_ agent: AgentProcess) async throws -> Int {
        (try await agent.consentState()["held_events"] as? NSNumber)?.intValue ?? -1
    }

    // MARK: 000 Convert

    struct TruthRow: Sendable, CustomTestStringConvertible {
        var networkTracking: Bool
        var trackingEnabled: Bool
        var localOnly: Bool
        var delivered: Bool { networkTracking && trackingEnabled && !localOnly }
        var testDescription: String {
            "kill switch \(networkTracking ? "off" : "ON"), tracking \(trackingEnabled ? "on" : "off"), local-only \(localOnly)"
        }
    }

    static let truthTable: [TruthRow] = [false, true].flatMap { network in
        [false, true].flatMap { tracking in [false, true].map { TruthRow(networkTracking: network, trackingEnabled: tracking, localOnly: $0) } }
    }

    @Test("000 Convert truth table: kill switch × runtime toggle × per-event flag ⇒ delivered or not", arguments: truthTable)
    func convertTruthTable(row: TruthRow) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["networkTracking": row.networkTracking])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await agent.control(["op": "set_tracking", "enabled": row.trackingEnabled])

        let summary = try await Self.emit(agent, "Purchase", row.localOnly ? ["--local-only"] : [])
        if row.delivered {
            #expect(summary == "accepted=1 duplicate=0 rejected=0")
            try await eventually("the event delivered") { try Self.delivered(agent, named: "Purchase").count == 1 }
        } else {
            // Never queued: acked blocked/suppressed, nothing in the queue, so nothing can be delivered.
            #expect(summary == (row.localOnly ? "accepted=0 duplicate=0 rejected=0 suppressed=1" : "accepted=0 duplicate=0 rejected=0 blocked=1"))
            let status = try await agent.status()
            #expect(status.queuedEvents == 0)
            #expect(status.counters["accepted"] == 0)
            #expect(try Self.delivered(agent, named: "Purchase").isEmpty)
        }
    }

    @Test("000 Convert: tracking off drops new events (no replay when back on) while queued ones keep draining")
    func trackingToggle() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["autoStart": false])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        #expect(try await Self.emit(agent, "Queued Before") == "accepted=1 duplicate=0 rejected=0")
        try await agent.control(["op": "set_tracking", "enabled": false])
        #expect(try await Self.emit(agent, "While Off") == "accepted=0 duplicate=0 rejected=0 blocked=1")
        try await agent.control(["op": "start"])
        try await eventually("the event queued before to drain") { try Self.delivered(agent, named: "Queued Before").count == 1 }
        try await agent.control(["op": "set_tracking", "enabled": true])
        #expect(try await Self.emit(agent, "After On") == "accepted=1 duplicate=0 rejected=0")
        try await eventually("the new event delivered") { try Self.delivered(agent, named: "After On").count == 1 }
        #expect(try Self.delivered(agent, named: "While Off").isEmpty)
    }

    @Test("000 Convert: the once-key mark is written before the gate — a suppressed conversion still counts, across a restart")
    func onceKeyBeforeGate() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: [:])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        #expect(try await Self.emit(agent, "Converted", ["--once-key", "order-42", "--local-only"])
                == "accepted=0 duplicate=0 rejected=0 suppressed=1")
        #expect(try await Self.emit(agent, "Converted", ["--once-key", "order-42"]) == "accepted=0 duplicate=1 rejected=0")
        try await agent.control(["op": "set_tracking", "enabled": false])
        #expect(try await Self.emit(agent, "Converted", ["--once-key", "order-43"]) == "accepted=0 duplicate=0 rejected=0 blocked=1")
        try await agent.control(["op": "set_tracking", "enabled": true])
        #expect(try await Self.emit(agent, "Converted", ["--once-key", "order-43"]) == "accepted=0 duplicate=1 rejected=0")
        #expect(try await Self.emit(agent, "Converted", ["--once-key", "order-44"]) == "accepted=1 duplicate=0 rejected=0")

        _ = try await agent.terminate()
        try await agent.restart()
        for key in ["order-42", "order-43", "order-44"] {
            #expect(try await Self.emit(agent, "Converted", ["--once-key", key]) == "accepted=0 duplicate=1 rejected=0", "\(key)")
        }
        #expect(try await Self.emit(agent, "Converted", ["--once-key", "order-45"]) == "accepted=1 duplicate=0 rejected=0")
        // The keys themselves are never written, only their hashes.
        #expect(filesContaining("order-4", under: dir.appending("data") + "/consent").isEmpty)
    }

    // MARK: 001 FunnelMob

    @Test("001 FunnelMob: undetermined + hold ⇒ held on disk across a restart ⇒ delivered on grant")
    func holdThenGrant() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["defaultConsent": "undetermined", "undetermined": ["policy": "hold", "allowTypes": []]])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        for i in 1...3 { #expect(try await Self.emit(agent, "Held \(i)") == "accepted=0 duplicate=0 rejected=0 held=1") }
        #expect(try await Self.heldEvents(agent) == 3)
        #expect(try await agent.status().queuedEvents == 0)

        _ = agent.kill9()
        try await agent.restart()
        #expect(try await Self.heldEvents(agent) == 3)
        #expect(try agent.deliveredEvents().filter { $0.name.hasPrefix("Held") }.isEmpty)

        let reply = try await agent.control(["op": "set_consent", "category": "analytics", "status": "granted"])
        #expect((reply["consent"] as? [String: Any])?["held_events"] as? Int == 0)
        try await eventually("the held events delivered") {
            try agent.deliveredEvents().filter { $0.name.hasPrefix("Held") }.count == 3
        }
        // And the consent change itself went upstream.
        try await eventually("consent_updated delivered") { try !Self.delivered(agent, named: "consent_updated").isEmpty }
        let update = try #require(try Self.delivered(agent, named: "consent_updated").last)
        #expect(update.source == "ferryd")
        #expect(update.properties["change"] as? String == "consent.analytics")
    }

    @Test("001 FunnelMob: undetermined + hold ⇒ purged on deny, the bytes gone from the data dir")
    func holdThenDeny() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["defaultConsent": "undetermined", "undetermined": ["policy": "hold", "allowTypes": []]])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let marker = "HELD-MARKER-\(UInt32.random(in: 0...UInt32.max))"
        for _ in 1...3 { try await Self.emit(agent, "Held", ["--prop", "secret=\(marker)"]) }
        #expect(!filesContaining(marker, under: dir.appending("data")).isEmpty)
        let reply = try await agent.control(["op": "set_consent", "category": "analytics", "status": "denied"])
        let purged = try #require(reply["purged"] as? [String: Any])
        #expect(purged["held"] as? Int == 3)
        #expect(filesContaining(marker, under: dir.appending("data")).isEmpty)
        #expect(try await Self.emit(agent, "After Deny") == "accepted=0 duplicate=0 rejected=0 blocked=1")
    }

    @Test("001 FunnelMob: held events past the max hold age are purged")
    func holdExpiry() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: [
            "defaultConsent": "undetermined", "undetermined": ["policy": "hold", "allowTypes": [], "maxHoldAgeSeconds": 1],
        ])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await Self.emit(agent, "Short Lived", ["--prop", "x=EXPIRING-MARKER"])
        try await eventually("the held event to expire", timeout: .seconds(20)) { try await Self.heldEvents(agent) == 0 }
        #expect(filesContaining("EXPIRING-MARKER", under: dir.appending("data")).isEmpty)
    }

    @Test("001 FunnelMob: data usage revoked for a GDPR subject ⇒ delivery stops, the queue is purged, bytes gone; ad fields are stamped, not gating")
    func gdprRevocation() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["autoStart": false])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let marker = "GDPR-MARKER-\(UInt32.random(in: 0...UInt32.max))"
        for _ in 1...5 { try await Self.emit(agent, "Pending", ["--prop", "m=\(marker)", "--user", "u-1"]) }
        #expect(try await agent.status().queuedEvents == 5)
        // The ad fields alone change nothing but the stamp.
        try await agent.control(["op": "set_gdpr", "fields": ["subject_to_gdpr": "granted", "ad_storage": "denied", "ads_personalization": "denied"]])
        let queued = try await agent.status().queuedEvents ?? 0
        #expect(queued >= 5)

        let reply = try await agent.control(["op": "set_gdpr", "fields": ["data_usage": "denied"]])
        // Everything pending goes: the 5 events and the consent_updated event the ad-field change queued.
        #expect((reply["purged"] as? [String: Any])?["queued"] as? Int == 6)
        #expect(filesContaining(marker, under: dir.appending("data")).isEmpty)
        #expect(try await agent.status().queuedEvents == 0)
        #expect(try await Self.emit(agent, "Denied") == "accepted=0 duplicate=0 rejected=0 blocked=1")

        try await agent.control(["op": "set_gdpr", "fields": ["data_usage": "granted"]])
        try await agent.control(["op": "start"])
        try await Self.emit(agent, "Granted Again")
        let event = try await waitForValue("the event delivered") { try Self.delivered(agent, named: "Granted Again").first }
        let stamp = try #require(event.object["consent"] as? [String: Any])
        #expect(stamp["ad_storage"] as? String == "denied")
        #expect(stamp["ad_personalization"] as? String == "denied")  // the stamp's Consent Mode v2 name
        #expect(stamp["data_usage"] as? String == "granted")
        #expect(stamp["subject_to_gdpr"] as? String == "granted")
        #expect(try Self.delivered(agent, named: "Pending").isEmpty)
    }

    @Test("001 FunnelMob autoStart false: events accepted and queued, no delivery until `start`")
    func autoStartFalse() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["autoStart": false])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await Self.emit(agent, "Before Start")
        try await eventually("delivery to report paused") { try await agent.status().deliveryState == "paused" }
        #expect(try await agent.status().queuedEvents == 1)
        #expect(try agent.deliveredEvents().isEmpty)
        #expect(try await agent.consentState()["delivery_started"] as? Bool == false)
        let reply = try await agent.control(["op": "start"])
        #expect(reply["delivery_started"] as? Bool == true)
        try await eventually("delivered after start") { try Self.delivered(agent, named: "Before Start").count == 1 }
    }

    // MARK: 003 Contentful

    @Test("003 Contentful: before consent only allow-listed types pass (default identify, screen); [] is strict")
    func allowList() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["defaultConsent": "undetermined", "undetermined": ["policy": "drop"]])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        #expect(try await Self.emit(agent, "Who", ["--type", "identify", "--user", "u1"]) == "accepted=1 duplicate=0 rejected=0")
        #expect(try await Self.emit(agent, "Home", ["--type", "screen"]) == "accepted=1 duplicate=0 rejected=0")
        #expect(try await Self.emit(agent, "Clicked") == "accepted=0 duplicate=0 rejected=0 blocked=1")
        try await eventually("allow-listed events delivered") {
            try !Self.delivered(agent, named: "Who").isEmpty && !Self.delivered(agent, named: "Home").isEmpty
        }
        _ = try await agent.terminate()

        let strictDir = try TemporaryDirectory()
        defer { strictDir.remove() }
        let strict = try Self.agent(strictDir, consent: ["defaultConsent": "undetermined", "undetermined": ["policy": "drop", "allowTypes": []]])
        defer { strict.cleanup() }
        try await strict.waitUntilReady()
        #expect(try await Self.emit(strict, "Who", ["--type", "identify"]) == "accepted=0 duplicate=0 rejected=0 blocked=1")
    }

    @Test("003 Contentful split consent: persistence consent governs whether the anonymous id survives a restart")
    func splitConsent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: [:])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let first = try #require(try await agent.consentState()["anonymous_id"] as? String)
        _ = try await agent.terminate()
        try await agent.restart()
        #expect(try await agent.consentState()["anonymous_id"] as? String == first)

        // Event consent stays granted while persistence consent is withdrawn.
        let reply = try await agent.control(["op": "set_persistence", "status": "denied"])
        let state = try #require(reply["consent"] as? [String: Any])
        let second = try #require(state["anonymous_id"] as? String)
        #expect(second != first)
        #expect((state["consent"] as? [String: Any])?["analytics"] as? String == "granted")
        #expect(filesContaining(first, under: dir.appending("data") + "/consent").isEmpty)
        #expect(filesContaining(second, under: dir.appending("data") + "/consent").isEmpty)
        _ = try await agent.terminate()
        try await agent.restart()
        let third = try #require(try await agent.consentState()["anonymous_id"] as? String)
        #expect(third != second && third != first)
        #expect(try await Self.emit(agent, "Still Tracked") == "accepted=1 duplicate=0 rejected=0")
    }

    @Test("003 Contentful: blocked and suppressed events go to their bus topics with the reason, no replay to late subscribers")
    func blockedEventStream() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["initialConsent": ["advertising": "denied"]])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await Self.emit(agent, "Early Blocked", ["--category", "advertising"])

        let tail = try BusTail(topics: ["blocked", "suppressed"], environment: agent.environment, outputDirectory: dir.path)
        defer { tail.cleanup() }
        try await tail.waitUntilSubscribed()
        try await Self.emit(agent, "Ad Click", ["--category", "advertising"])
        try await Self.emit(agent, "Private", ["--local-only"])
        try await eventually("both on the bus") {
            try tail.messages(topic: "blocked").contains { $0["name"] as? String == "Ad Click" }
                && tail.messages(topic: "suppressed").contains { $0["name"] as? String == "Private" }
        }
        let blocked = try #require(try tail.messages(topic: "blocked").first { $0["name"] as? String == "Ad Click" })
        #expect(blocked["reason"] as? String == "consent_denied")
        let suppressed = try #require(try tail.messages(topic: "suppressed").first { $0["name"] as? String == "Private" })
        #expect(suppressed["reason"] as? String == "local_only")
        #expect(try !tail.messages().contains { $0["name"] as? String == "Early Blocked" })
    }

    // MARK: 004 Airship

    @Test("004 Airship: no feature enabled ⇒ no-op mode, nothing written to the data dir, clients told `blocked`")
    func noOpMode() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["enabledFeatures": []])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let data = dir.appending("data")
        let before = directoryFingerprint(data)
        #expect(try await Self.emit(agent, "Nothing", ["--once-key", "k1"]) == "accepted=0 duplicate=0 rejected=0 blocked=1")
        #expect(try await Self.emit(agent, "Nothing", ["--local-only"]) == "accepted=0 duplicate=0 rejected=0 blocked=1")
        let status = try await agent.status()
        #expect(status.counters["blocked"] == 2)
        #expect(status.queuedEvents == 0)
        // With no feature enabled the consent gate pauses delivery: the loop waits without reading
        // the log, `paused` (`starting` until it first asks the gate, hence the wait).
        try await eventually("delivery to report paused") { try await agent.status().deliveryState == "paused" }
        #expect(directoryFingerprint(data) == before)
        #expect(filesContaining("Nothing", under: data).isEmpty)
    }

    @Test("004 Airship: runtime feature changes persist across restarts, and resetEnabledFeatures restores the config")
    func featuresPersist() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["enabledFeatures": ["analytics", "advertising"]])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await agent.control(["op": "disable_features", "features": ["advertising"]])
        try await agent.control(["op": "enable_features", "features": ["push"]])
        _ = try await agent.terminate()
        try await agent.restart()
        #expect(try await agent.consentState()["enabled_features"] as? [String] == ["analytics", "push"])
        #expect(try await Self.emit(agent, "Ad", ["--category", "advertising"]) == "accepted=0 duplicate=0 rejected=0 blocked=1")
        _ = try await agent.terminate()
        agent.cleanup()

        let reset = try Self.agent(dir, consent: ["enabledFeatures": ["analytics", "advertising"], "resetEnabledFeatures": true])
        defer { reset.cleanup() }
        try await reset.waitUntilReady()
        #expect(try await reset.consentState()["enabled_features"] as? [String] == ["advertising", "analytics"])
    }

    @Test("004 Airship: disabling analytics deletes pending analytics events from disk; other categories stay")
    func disablePurgesCategory() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["autoStart": false])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let marker = "ANALYTICS-MARKER-\(UInt32.random(in: 0...UInt32.max))"
        for _ in 1...4 { try await Self.emit(agent, "Analytics", ["--prop", "m=\(marker)"]) }
        try await Self.emit(agent, "Crash Report", ["--category", "diagnostics"])
        let reply = try await agent.control(["op": "disable_features", "features": ["analytics"]])
        #expect((reply["purged"] as? [String: Any])?["queued"] as? Int == 4)
        #expect(filesContaining(marker, under: dir.appending("data")).isEmpty)
        try await agent.control(["op": "start"])
        try await eventually("the diagnostics event delivered") { try !Self.delivered(agent, named: "Crash Report").isEmpty }
        #expect(try Self.delivered(agent, named: "Analytics").isEmpty)
    }

    // MARK: Beyond the seeds

    @Test("purge of everything pending and by category, and forget --user: pending and held bytes gone, counts reported on the bus")
    func purgeAndForget() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["autoStart": false, "initialConsent": ["push": "undetermined"],
                                                  "undetermined": ["policy": "hold", "allowTypes": []]])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let tail = try BusTail(topics: ["purged", "suppressed"], environment: agent.environment, outputDirectory: dir.path)
        defer { tail.cleanup() }
        try await tail.waitUntilSubscribed()
        let data = dir.appending("data")
        for _ in 1...3 { try await Self.emit(agent, "Mine", ["--user", "alice", "--prop", "m=ALICE-MARKER"]) }
        try await Self.emit(agent, "Held Push", ["--user", "alice", "--category", "push", "--prop", "m=ALICE-HELD-MARKER"])
        try await Self.emit(agent, "Theirs", ["--user", "bob", "--prop", "m=BOB-MARKER"])
        #expect(try await Self.heldEvents(agent) == 1)

        let forget = try await agent.control(["op": "forget", "user_id": "alice"])
        let forgotten = try #require(forget["purged"] as? [String: Any])
        #expect(forgotten["queued"] as? Int == 3)
        #expect(forgotten["held"] as? Int == 1)
        #expect(filesContaining("ALICE-MARKER", under: data).isEmpty)
        #expect(filesContaining("ALICE-HELD-MARKER", under: data).isEmpty)
        #expect(!filesContaining("BOB-MARKER", under: data).isEmpty)
        // The audit log records that an erasure happened, never whose.
        #expect(filesContaining("alice", under: data).isEmpty)

        let purge = try await agent.control(["op": "purge"])
        #expect((purge["purged"] as? [String: Any])?["queued"] as? Int == 1)
        #expect(filesContaining("BOB-MARKER", under: data).isEmpty)
        try await eventually("purge counts on the bus") { try tail.messages(topic: "purged").count >= 2 }
        #expect(try tail.messages(topic: "purged").map { $0["total"] as? Int } == [4, 1])
        #expect(try await agent.status().queuedEvents == 0)
    }

    @Test("the consent audit log records who changed what and its hash chain detects an edited line")
    func auditChain() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: [:])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        try await agent.control(["op": "set_consent", "category": "advertising", "status": "denied", "actor": "settings-ui"])
        try await agent.control(["op": "set_tracking", "enabled": false])
        try await agent.control(["op": "set_tracking", "enabled": true])
        let log = try await agent.control(["op": "consent_log"])
        #expect(log["verified"] as? Bool == true)
        let entries = try #require(log["entries"] as? [[String: Any]])
        #expect(entries.count == 3)
        #expect(entries[0]["change"] as? String == "consent.advertising")
        #expect(entries[0]["old"] as? String == "\"granted\"")
        #expect(entries[0]["new"] as? String == "\"denied\"")
        #expect(entries[0]["actor"] as? String == "settings-ui")
        #expect(entries[0]["pid"] as? Int == Int(getpid()))
        #expect(entries[0]["uid"] as? Int == Int(getuid()))
        #expect((entries[0]["process"] as? String)?.isEmpty == false)

        // Edit one line: the chain breaks there.
        let path = dir.appending("data") + "/consent/audit.log"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try text.replacingOccurrences(of: "\\\"denied\\\"", with: "\\\"granted\\\"").write(toFile: path, atomically: false, encoding: .utf8)
        let tampered = try await agent.control(["op": "consent_log"])
        #expect(tampered["verified"] as? Bool == false)
        #expect((tampered["problem"] as? String)?.contains("line 1") == true, "\(tampered)")

        // Cutting the last line off is caught too (the state records the head).
        try text.split(separator: "\n").dropLast().map { $0 + "\n" }.joined().write(toFile: path, atomically: false, encoding: .utf8)
        let cut = try await agent.control(["op": "consent_log"])
        #expect(cut["verified"] as? Bool == false)
    }

    @Test("bad control values get a clear error listing the valid ones, and change nothing")
    func badValues() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: [:])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let env = agent.runtimeDirectory
        let unknownCategory = try await controlJSON(runtimeDirectory: env, ["op": "set_consent", "category": "telemetry", "status": "granted"])
        #expect(unknownCategory["ok"] as? Bool == false)
        #expect((unknownCategory["valid"] as? [String])?.contains("analytics") == true)
        let badStatus = try await controlJSON(runtimeDirectory: env, ["op": "set_consent", "category": "analytics", "status": "maybe"])
        #expect(badStatus["valid"] as? [String] == ["undetermined", "granted", "denied"])
        let badField = try await controlJSON(runtimeDirectory: env, ["op": "set_gdpr", "fields": ["consent": "granted"]])
        #expect((badField["valid"] as? [String])?.contains("data_usage") == true)
        let badOp = try await controlJSON(runtimeDirectory: env, ["op": "nope"])
        #expect((badOp["valid"] as? [String])?.contains("forget") == true)
        let log = try await agent.control(["op": "consent_log"])
        #expect((log["entries"] as? [Any])?.isEmpty == true)
    }
}
