import Ferry
import FerryProtocol
import FerryTestKit
import Foundation
import Logging
import Testing

/// The control client: replies as documented in docs/PROTOCOL.md, errors, and the requests it puts
/// on the wire.
@Suite("FerryControl")
struct FerryControlTests {
    static func reply(_ text: String) throws -> FerryControl.Reply { try FerryControl.Reply(json: Array(text.utf8)) }

    @Test("consent_state decodes into ConsentSnapshot with every documented field")
    func decodesConsentState() throws {
        let state = try Self.reply(ControlSamples.consentState).decode(ConsentUpdate.self)
        #expect(state.purged == nil)
        let consent = state.consent
        #expect(consent.networkTracking && consent.trackingEnabled)
        #expect(consent.categories == ["advertising", "analytics", "diagnostics", "personalization", "push"])
        #expect(consent.enabledFeatures == ["analytics", "push"])
        #expect(!consent.isNoOp)
        #expect(consent.consent == ["analytics": .granted, "advertising": .denied, "personalization": .undetermined,
                                    "diagnostics": .undetermined, "push": .granted])
        #expect(consent.persistence == .undetermined)
        #expect(consent.gdpr == GDPRRecord(subjectToGDPR: .granted, dataUsage: .granted, adsPersonalization: .denied, adStorage: .unset))
        #expect(!consent.deliveryStarted)
        #expect(consent.anonymousID == "0190f5c2-7a3b-7c4d-8e5f-0123456789ab")
        #expect(consent.heldEvents == 3)
        #expect(consent.auditEntries == 2)
        #expect(consent.auditHead == ControlSamples.head)
    }

    @Test("a consent change carries the new state and, when it erased events, purged")
    func decodesPurged() throws {
        let update = try Self.reply(ControlSamples.setConsentDenied).decode(ConsentUpdate.self)
        #expect(update.purged == PurgeReport(queued: 7, held: 2))
        #expect(update.purged?.total == 9)
        #expect(update.consent.categories.count == 5)
    }

    @Test("consent_log decodes its entries, verified flag and problem")
    func decodesAuditLog() throws {
        let log = try Self.reply(ControlSamples.consentLog).decode(ConsentAuditLog.self)
        #expect(log.verified)
        #expect(log.problem == nil)
        #expect(log.entries.map(\.seq) == [1, 2])
        let first = log.entries[0]
        #expect(first.at == 1_700_000_000_000)
        #expect(first.uid == 1000 && first.pid == 4242)
        #expect(first.process == "ferry" && first.actor == "settings-ui")
        #expect(first.change == "consent.analytics")
        #expect(first.old == #""undetermined""#)
        #expect(first.new == #""granted""#)
        #expect(first.prev == String(repeating: "0", count: 64))
        #expect(log.entries[1].actor == nil)
        #expect(log.entries[1].change == "tracking" && log.entries[1].old == "true" && log.entries[1].new == "false")
        #expect(log.entries[1].prev == first.hash)
        #expect(log.entries[1].hash == ControlSamples.head)

        let broken = try Self.reply(ControlSamples.brokenConsentLog).decode(ConsentAuditLog.self)
        #expect(!broken.verified)
        #expect(broken.problem == "entry 2: prev does not match the hash of entry 1")
    }

    @Test("a refusal carries the agent's message and its valid list")
    func refusal() throws {
        let error = #expect(throws: FerryClientError.self) { try Self.reply(ControlSamples.unknownCategory) }
        #expect(error?.code == .refused)
        #expect(error?.message == #"unknown category "analytcs""#)
        #expect(error?.valid == ["advertising", "analytics", "diagnostics", "personalization", "push", "all"])
        #expect(error?.description == #"refused: unknown category "analytcs" (valid: advertising, analytics, diagnostics, personalization, push, all)"#)

        let plain = #expect(throws: FerryClientError.self) { try Self.reply(#"{"ok":false,"error":"unknown op \"x\""}"#) }
        #expect(plain?.code == .refused)
        #expect(plain?.valid == [])
        #expect(plain?.description == #"refused: unknown op "x""#)
    }

    @Test("a reply that is not a JSON object with ok, or lacks a documented field, is a bad reply", arguments: [
        "", "not json", "[1,2]", #"{"error":"x"}"#, #"{"ok":"yes"}"#,
    ])
    func badReply(text: String) throws {
        let error = #expect(throws: FerryClientError.self) { try Self.reply(text) }
        #expect(error?.code == .badReply)
    }

    @Test("a reply missing a field is a bad reply naming the type")
    func missingField() throws {
        let reply = try Self.reply(#"{"ok":true,"consent":{"tracking_enabled":true}}"#)
        let error = #expect(throws: FerryClientError.self) { try reply.decode(ConsentUpdate.self) }
        #expect(error?.code == .badReply)
        #expect(error?.message.contains("ConsentUpdate") == true)
    }

    @Test("status decodes into JSON values")
    func status() throws {
        let status = try Self.reply(ControlSamples.reply(to: "status")).decode([String: FerryValue].self)
        #expect(status["pid"] == .int(4242))
        #expect(status["queue"] == ["events": 0, "oldest_undelivered_age_ms": nil])
        #expect(status["ok"] == .bool(true))
    }

    @Test("each request is the documented JSON object", arguments: [
        (FerryControl.Request.consentState(), #"{"op":"consent_state"}"#),
        (.setTracking(false), #"{"enabled":false,"op":"set_tracking"}"#),
        (.setConsent(.denied, for: "all"), #"{"category":"all","op":"set_consent","status":"denied"}"#),
        (.setPersistence(.granted), #"{"op":"set_persistence","status":"granted"}"#),
        (.setGDPR(["data_usage": .denied, "subject_to_gdpr": .granted]),
         #"{"fields":{"data_usage":"denied","subject_to_gdpr":"granted"},"op":"set_gdpr"}"#),
        (.enableFeatures(["analytics", "push"]), #"{"features":["analytics","push"],"op":"enable_features"}"#),
        (.disableFeatures(["all"]), #"{"features":["all"],"op":"disable_features"}"#),
        (.purge(category: nil), #"{"op":"purge"}"#),
        (.purge(category: "advertising"), #"{"category":"advertising","op":"purge"}"#),
        (.forget(userID: "u-\"42\""), #"{"op":"forget","user_id":"u-\"42\""}"#),
        (.start(), #"{"op":"start"}"#),
        (.consentLog(limit: nil), #"{"op":"consent_log"}"#),
        (.consentLog(limit: 20), #"{"limit":20,"op":"consent_log"}"#),
        (.status(), #"{"op":"status"}"#),
    ])
    func requestJSON(request: FerryControl.Request, expected: String) {
        #expect(String(decoding: request.encoded(), as: UTF8.self) == expected)
    }

    @Test("no agent: agentNotRunning naming the endpoint, with no runtime directory and with a stale socket file")
    func agentNotRunning() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let missing = FerryControl(runtimeDirectory: dir.appending("none"))
        let error = await #expect(throws: FerryClientError.self) { try await missing.consentState() }
        #expect(error?.code == .agentNotRunning)
        #expect(error?.endpoint == "ipc://\(dir.path)/none/control")
        #expect(error?.description.contains("ferryd is not running") == true)
        #expect(error?.description.contains("ipc://\(dir.path)/none/control") == true)

        // A socket file nobody listens on (an agent that crashed).
        let stale = dir.appending("rt")
        try FileManager.default.createDirectory(atPath: stale, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: stale + "/control", contents: nil))
        // Found at once by a plain connect(2), without waiting out the (default, 60 s) reply timeout.
        let control = FerryControl(runtimeDirectory: stale)
        let noAnswer = await #expect(throws: FerryClientError.self) { try await control.setTracking(true) }
        #expect(noAnswer?.code == .agentNotRunning)
        #expect(noAnswer?.endpoint == "ipc://\(stale)/control")
        #expect(noAnswer?.message.contains("stale socket") == true, "\(String(describing: noAnswer))")

        // FerryClient's methods report the same.
        var logger = Logger(label: "ferry-tests")
        logger.logLevel = .critical
        let client = try FerryClient(configuration: .init(source: "t", runtimeDirectory: dir.appending("none")), logger: logger)
        let viaClient = await #expect(throws: FerryClientError.self) { try await client.forget(userID: "u1") }
        #expect(viaClient?.code == .agentNotRunning)
        await client.shutdown()
    }

    @Test("every method sends its op on the control socket, with the actor, and decodes the documented reply")
    func everyMethodOnTheWire() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let runtime = dir.appending("rt")
        let fake = try FakeControlAgent(runtimeDirectory: runtime) { op, _ in ControlSamples.reply(to: op) }
        defer { fake.stop() }
        let control = FerryControl(runtimeDirectory: runtime, actor: "settings-ui")

        #expect(try await control.consentState().heldEvents == 3)
        #expect(try await control.setTracking(false).trackingEnabled)
        #expect(try await control.setConsent(.denied, for: "advertising").purged == PurgeReport(queued: 7, held: 2))
        #expect(try await control.setPersistenceConsent(.granted).persistence == .undetermined)
        _ = try await control.setGDPR(subjectToGDPR: .granted, dataUsage: .denied)
        _ = try await control.enableFeatures(["analytics"])
        #expect(try await control.disableFeatures(["all"]).purged?.total == 9)
        #expect(try await control.purge() == PurgeReport(queued: 12, held: 1))
        #expect(try await control.forget(userID: "u-42").total == 13)
        try await control.start()
        #expect(try await control.consentLog(limit: 5).entries.count == 2)
        #expect(try await control.status()["pid"] == .int(4242))

        let requests = fake.requestObjects
        #expect(requests.map { $0["op"] as? String } == [
            "consent_state", "set_tracking", "set_consent", "set_persistence", "set_gdpr", "enable_features",
            "disable_features", "purge", "forget", "start", "consent_log", "status",
        ])
        #expect(requests.allSatisfy { $0["actor"] as? String == "settings-ui" })
        #expect(requests[1]["enabled"] as? Bool == false)
        #expect(requests[2]["category"] as? String == "advertising" && requests[2]["status"] as? String == "denied")
        #expect(requests[4]["fields"] as? [String: String] == ["subject_to_gdpr": "granted", "data_usage": "denied"])
        #expect(requests[7]["category"] == nil)
        #expect(requests[8]["user_id"] as? String == "u-42")
        #expect((requests[10]["limit"] as? NSNumber)?.intValue == 5)

        // A refusal reaches the caller with the valid list.
        let refusing = try FakeControlAgent(runtimeDirectory: dir.appending("rt2")) { _, _ in ControlSamples.unknownCategory }
        defer { refusing.stop() }
        let error = await #expect(throws: FerryClientError.self) {
            try await FerryControl(runtimeDirectory: dir.appending("rt2")).setConsent(.granted, for: "analytcs")
        }
        #expect(error?.code == .refused)
        #expect(error?.valid.contains("analytics") == true)
    }

    @Test("FerryClient's consent methods go to the control socket of its runtime directory")
    func clientDelegates() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let runtime = dir.appending("rt")
        let fake = try FakeControlAgent(runtimeDirectory: runtime) { op, _ in ControlSamples.reply(to: op) }
        defer { fake.stop() }
        var logger = Logger(label: "ferry-tests")
        logger.logLevel = .critical
        let client = try FerryClient(configuration: .init(source: "t", runtimeDirectory: runtime), logger: logger)
        #expect(client.control.runtimeDirectory == runtime)

        _ = try await client.consentState()
        try await client.setTracking(true)
        try await client.setConsent(.granted, for: "all")
        try await client.setPersistenceConsent(.denied)
        try await client.setGDPR(["ad_storage": .granted])
        try await client.setGDPR(adsPersonalization: .denied)
        try await client.enableFeatures(["all"])
        try await client.disableFeatures(["push"])
        try await client.purge(category: "push")
        try await client.forget(userID: "u1")
        try await client.start()
        _ = try await client.consentLog()
        await client.shutdown()

        let requests = fake.requestObjects
        #expect(requests.map { $0["op"] as? String } == [
            "consent_state", "set_tracking", "set_consent", "set_persistence", "set_gdpr", "set_gdpr", "enable_features",
            "disable_features", "purge", "forget", "start", "consent_log",
        ])
        #expect(requests[5]["fields"] as? [String: String] == ["ads_personalization": "denied"])
        #expect(requests[8]["category"] as? String == "push")
        #expect(requests.allSatisfy { $0["actor"] == nil })
    }
}
