#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Ferry
import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Foundation
import Logging
import Testing

/// The consent commands and the client library's consent API against the real `ferryd`: every
/// command round-trips through the agent and its effect is checked on the agent's state, queue,
/// sink and data directory.
@Suite("Consent CLI and client library against ferryd")
struct ConsentCLIEndToEndTests {
    /// An agent started with `consent` as the config file's `consent` section.
    static func agent(_ dir: TemporaryDirectory, consent: [String: Any]) throws -> AgentProcess {
        let path = dir.appending("ferryd.json")
        try JSONSerialization.data(withJSONObject: ["consent": consent]).write(to: URL(fileURLWithPath: path))
        return try AgentProcess(in: dir, extraArguments: ["--config", path])
    }

    /// Runs `ferry args…` against `agent`, expecting `exit`; returns the result.
    @discardableResult
    static func ferry(_ agent: AgentProcess, _ args: [String], exit: Int32 = 0,
                      sourceLocation: SourceLocation = #_sourceLocation) async throws -> CommandResult {
        let result = try await runCLI(args, environment: agent.environment)
        #expect(result.status == .exited(exit), "ferry \(args.joined(separator: " ")): \(result)", sourceLocation: sourceLocation)
        return result
    }

    /// `ferry consent show --json`'s `consent` object.
    static func state(_ agent: AgentProcess) async throws -> [String: Any] {
        let result = try await ferry(agent, ["consent", "show", "--json"])
        let reply = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(reply["ok"] as? Bool == true)
        return try #require(reply["consent"] as? [String: Any])
    }

    @Test("consent show/set (category, all, persistence, --gdpr), tracking, features, start and log round-trip through ferryd")
    func roundTrips() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["autoStart": false, "defaultConsent": "undetermined"])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        // show: JSON and text.
        var state = try await Self.state(agent)
        #expect(state["delivery_started"] as? Bool == false)
        #expect((state["consent"] as? [String: String])?["analytics"] == "undetermined")
        #expect(state["categories"] as? [String] == ["advertising", "analytics", "diagnostics", "personalization", "push"])
        let shown = try await Self.ferry(agent, ["consent", "show"])
        #expect(shown.stdout.contains("waiting for `ferry start`"), "\(shown)")
        #expect(shown.stdout.contains("analytics           undetermined"), "\(shown)")

        // `all`, with the agent's JSON reply.
        let all = try await Self.ferry(agent, ["consent", "set", "all", "denied", "--json"])
        let allReply = try #require(try JSONSerialization.jsonObject(with: Data(all.stdout.utf8)) as? [String: Any])
        #expect(Set(((allReply["consent"] as? [String: Any])?["consent"] as? [String: String])?.values.map { $0 } ?? []) == ["denied"])
        let undetermined = try await Self.ferry(agent, ["consent", "set", "all", "undetermined"])
        #expect(undetermined.stdout == "consent undetermined for all categories (advertising, analytics, diagnostics, personalization, push)\n",
                "\(undetermined)")

        // An undetermined track event is held; granting releases it to the queue.
        let emitted = try await runCLI(["emit", "Held One", "--wait", "--timeout", "20"], environment: agent.environment)
        #expect(emitted.stdout == "accepted=0 duplicate=0 rejected=0 held=1\n", "\(emitted)")
        #expect(try await Self.state(agent)["held_events"] as? Int == 1)
        let granted = try await Self.ferry(agent, ["consent", "set", "analytics", "granted", "--actor", "e2e"])
        #expect(granted.stdout == "consent granted for analytics\n", "\(granted)")
        state = try await Self.state(agent)
        #expect(state["held_events"] as? Int == 0)
        #expect((state["consent"] as? [String: String])?["analytics"] == "granted")
        #expect(try await agent.status().queuedEvents ?? 0 >= 1)

        // The agent validates categories and the CLI prints its valid list.
        let unknown = try await Self.ferry(agent, ["consent", "set", "nosuch", "granted"], exit: 1)
        #expect(unknown.stderr.contains(#"the agent refused: unknown category "nosuch""#), "\(unknown)")
        #expect(unknown.stderr.contains("valid: advertising, analytics, diagnostics, personalization, push, all"), "\(unknown)")


        let persistence = try await Self.ferry(agent, ["consent", "set", "--persistence", "denied"])
        #expect(persistence.stdout == "persistence consent denied\n", "\(persistence)")
        let gdpr = try await Self.ferry(agent, ["consent", "set", "--gdpr", "ad_storage=granted", "ads_personalization=denied"])
        #expect(gdpr.stdout == "gdpr subject_to_gdpr=unset data_usage=unset ads_personalization=denied ad_storage=granted\n", "\(gdpr)")
        let gdprState = try #require(try await Self.state(agent)["gdpr"] as? [String: String])
        #expect(gdprState == ["subject_to_gdpr": "unset", "data_usage": "unset", "ads_personalization": "denied", "ad_storage": "granted"])

        // tracking: off drops new events, status reports it, on again.
        #expect(try await Self.ferry(agent, ["tracking", "off"]).stdout == "tracking off\n")
        #expect(try await Self.ferry(agent, ["tracking"]).stdout == "tracking off\n")
        #expect(try await Self.ferry(agent, ["tracking", "status"]).stdout == "tracking off\n")
        let dropped = try await runCLI(["emit", "Dropped", "--wait", "--timeout", "20"], environment: agent.environment)
        #expect(dropped.stdout == "accepted=0 duplicate=0 rejected=0 blocked=1\n", "\(dropped)")
        #expect(try await Self.ferry(agent, ["tracking", "on"]).stdout == "tracking on\n")
        #expect(try await Self.state(agent)["tracking_enabled"] as? Bool == true)

        // features.
        let disabled = try await Self.ferry(agent, ["features", "disable", "push"])
        #expect(disabled.stdout.contains("push                  disabled"), "\(disabled)")
        #expect(try await Self.state(agent)["enabled_features"] as? [String] == ["advertising", "analytics", "diagnostics", "personalization"])
        try await Self.ferry(agent, ["features", "enable", "push"])
        let listed = try await Self.ferry(agent, ["features", "list"])
        #expect(listed.stdout.contains("push                  enabled"), "\(listed)")
        #expect(!listed.stdout.contains("disabled"), "\(listed)")
        let badFeature = try await Self.ferry(agent, ["features", "enable", "nosuch"], exit: 1)
        #expect(badFeature.stderr.contains("the agent refused"), "\(badFeature)")
        #expect(badFeature.stderr.contains(#"unknown feature "nosuch""#), "\(badFeature)")
        #expect(badFeature.stderr.contains("valid: advertising, analytics, diagnostics, personalization, push, all, none"), "\(badFeature)")

        // start: the released event is delivered.
        #expect(try await Self.ferry(agent, ["start"]).stdout == "delivery started\n")
        try await eventually("the released event delivered") { try agent.deliveredEvents().contains { $0.name == "Held One" } }
        #expect(try await Self.state(agent)["delivery_started"] as? Bool == true)
        #expect(try await Self.ferry(agent, ["consent", "show"]).stdout.contains("delivery            started"))

        // log: every change, with who did it, and a verified chain.
        let log = try await Self.ferry(agent, ["consent", "log"])
        #expect(log.stdout.contains(#"consent.analytics: "undetermined" -> "granted"  by uid \#(getuid()) pid "#), "\(log)")
        #expect(log.stdout.contains(#"ferry actor "e2e""#), "\(log)")
        #expect(log.stdout.contains("tracking: true -> false"), "\(log)")
        #expect(log.stdout.contains("start: null -> true"), "\(log)")
        #expect(log.stdout.hasSuffix("hash chain verified (\(log.stdoutLines.count - 1) entries shown)\n"), "\(log)")
        let limited = try await Self.ferry(agent, ["consent", "log", "--limit", "2", "--json"])
        let limitedReply = try #require(try JSONSerialization.jsonObject(with: Data(limited.stdout.utf8)) as? [String: Any])
        #expect((limitedReply["entries"] as? [Any])?.count == 2)
        #expect(limitedReply["verified"] as? Bool == true)

        // Editing a line of the audit log breaks the chain: exit 1 and the problem shown.
        let auditPath = agent.dataDirectory + "/consent/audit.log"
        let original = try String(contentsOfFile: auditPath, encoding: .utf8)
        #expect(original.contains(#""actor":"e2e""#))
        try original.replacingOccurrences(of: #""actor":"e2e""#, with: #""actor":"eve""#)
            .write(toFile: auditPath, atomically: false, encoding: .utf8)
        let broken = try await Self.ferry(agent, ["consent", "log"], exit: 1)
        #expect(broken.stdout.contains("HASH CHAIN BROKEN: line ") && broken.stdout.contains("was modified"), "\(broken)")
        #expect(broken.stderr.contains("the consent audit log does not verify"), "\(broken)")
        try await Self.ferry(agent, ["consent", "log", "--json"], exit: 1)
    }

    @Test("a killed agent (stale control socket) is reported as not running by every consent command")
    func killedAgent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        agent.kill9()
        for args in [["consent", "show"], ["consent", "set", "all", "denied"], ["purge"], ["forget", "--user", "u"]] {
            // Not running is 2 for every command (README.md, "Exit status").
            let result = try await Self.ferry(agent, args, exit: 2)
            #expect(result.stderr.contains("ferryd is not running"), "\(result)")
        }
    }

    @Test("ferry forget erases exactly one user's events from disk; ferry purge by category and all")
    func purgeAndForget() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["autoStart": false])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        let lines = (0..<3).map { #"{"name":"Forget Me","userId":"u-forget","properties":{"m":"FORGETMARK-\#($0)"}}"# }
            + (0..<2).map { #"{"name":"Keep","userId":"u-keep","properties":{"m":"KEEPMARK-\#($0)"}}"# }
        let emit = try await runCLI(["emit", "--stdin", "--wait", "--timeout", "20"], stdin: lines.joined(separator: "\n") + "\n",
                                    environment: agent.environment)
        #expect(emit.stdout == "accepted=5 duplicate=0 rejected=0\n", "\(emit)")
        #expect(!filesContaining("FORGETMARK-", under: agent.dataDirectory).isEmpty)

        let forgot = try await Self.ferry(agent, ["forget", "--user", "u-forget"])
        #expect(forgot.stdout == "erased 3 events (3 queued, 0 held) for user u-forget\n", "\(forgot)")
        #expect(filesContaining("FORGETMARK-", under: agent.dataDirectory).isEmpty)
        #expect(!filesContaining("KEEPMARK-", under: agent.dataDirectory).isEmpty)

        let none = try await Self.ferry(agent, ["purge", "--category", "advertising"])
        #expect(none.stdout == "erased 0 events (0 queued, 0 held) (category advertising)\n", "\(none)")
        let unknown = try await Self.ferry(agent, ["purge", "--category", "nosuch"], exit: 1)
        #expect(unknown.stderr.contains("valid: advertising, analytics,"), "\(unknown)")

        let purged = try await Self.ferry(agent, ["purge", "--json"])
        let reply = try #require(try JSONSerialization.jsonObject(with: Data(purged.stdout.utf8)) as? [String: Any])
        #expect((reply["purged"] as? [String: Int]) == ["queued": 2, "held": 0])
        #expect(filesContaining("KEEPMARK-", under: agent.dataDirectory).isEmpty)
        #expect(try await agent.status().queuedEvents == 0)
    }

    @Test("FerryClient and FerryControl: every consent method against ferryd, refusals with valid, actor and caller in the audit log")
    func clientLibrary() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try Self.agent(dir, consent: ["autoStart": false, "defaultConsent": "undetermined"])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        var logger = Logger(label: "ferry-tests")
        logger.logLevel = .warning
        let client = try FerryClient(configuration: .init(source: "consent-lib", runtimeDirectory: agent.runtimeDirectory), logger: logger)

        var state = try await client.consentState()
        #expect(!state.deliveryStarted)
        #expect(state.consent["analytics"] == .undetermined)
        #expect(state.categories.contains("analytics"))

        // Held, then forgotten by user id.
        #expect(await client.send(Event(name: "Held", userID: "u1")).status == .accepted)
        #expect(try await client.consentState().heldEvents == 1)
        #expect(try await client.forget(userID: "u1") == PurgeReport(queued: 0, held: 1))

        // Held, then erased by denying its category.
        #expect(await client.send(Event(name: "Held Again", userID: "u2")).status == .accepted)
        let denied = try await client.setConsent(.denied, for: "analytics")
        #expect(denied.consent.consent["analytics"] == .denied)
        #expect(denied.purged == PurgeReport(queued: 0, held: 1))
        #expect(await client.send(Event(name: "Refused")).status == .blocked)

        let refusal = await #expect(throws: FerryClientError.self) { try await client.setConsent(.granted, for: "nosuch") }
        #expect(refusal?.code == .refused)
        #expect(refusal?.message == #"unknown category "nosuch""#)
        #expect(refusal?.valid.contains("analytics") == true && refusal?.valid.contains("all") == true)

        #expect(try await client.setConsent(.granted, for: "all").consent.consent.values.allSatisfy { $0 == .granted })
        #expect(try await client.setTracking(false).trackingEnabled == false)
        #expect(try await client.setTracking(true).trackingEnabled == true)
        #expect(try await client.setPersistenceConsent(.denied).persistence == .denied)
        let gdpr = try await client.setGDPR(subjectToGDPR: .granted, dataUsage: .granted, adStorage: .denied)
        #expect(gdpr.consent.gdpr == GDPRRecord(subjectToGDPR: .granted, dataUsage: .granted, adStorage: .denied))
        #expect(gdpr.purged == nil)
        #expect(try await client.setGDPR(["ads_personalization": .granted]).consent.gdpr.adsPersonalization == .granted)
        let badField = await #expect(throws: FerryClientError.self) { try await client.setGDPR(["ad_consent": .granted]) }
        #expect(badField?.valid == GDPRRecord.fieldNames)

        state = try await client.disableFeatures(["advertising"]).consent
        #expect(!state.enabledFeatures.contains("advertising"))
        state = try await client.enableFeatures(["all"])
        #expect(Set(state.enabledFeatures) == Set(state.categories))

        // Queued (delivery not started), then purged.
        #expect(await client.send(Event(name: "Queued")).status == .accepted)
        let purged = try await client.purge(category: "analytics")
        #expect(purged.queued >= 1 && purged.held == 0)

        try await client.start()
        #expect(try await client.consentState().deliveryStarted)
        await client.shutdown()

        // FerryControl with an actor: the audit log names it and the caller (this process).
        let control = FerryControl(runtimeDirectory: agent.runtimeDirectory, actor: "lib-test")
        try await control.setConsent(.denied, for: "push")
        let log = try await control.consentLog(limit: 1)
        #expect(log.verified)
        #expect(log.problem == nil)
        let entry = try #require(log.entries.first)
        #expect(entry.change == "consent.push")
        #expect(entry.old == #""granted""# && entry.new == #""denied""#)
        #expect(entry.actor == "lib-test")
        #expect(entry.uid == Int(getuid()))
        #expect(entry.pid == Int(getpid()))
        let all = try await control.consentLog()
        #expect(all.entries.count == entry.seq)
        #expect(all.entries.last == entry)
        #expect(zip(all.entries.dropFirst(), all.entries).allSatisfy { $0.prev == $1.hash })
        #expect(try await control.consentState().auditHead == entry.hash)

        let status = try await control.status()
        #expect(status["pid"] == .int(Int64(agent.pid ?? -1)))

        // The agent gone: agentNotRunning naming the endpoint.
        agent.kill9()
        let gone = await #expect(throws: FerryClientError.self) {
            try await FerryControl(runtimeDirectory: agent.runtimeDirectory).consentState()
        }
        #expect(gone?.code == .agentNotRunning)
        #expect(gone?.message.contains("stale socket") == true, "\(String(describing: gone))")
        #expect(gone?.endpoint == "ipc://\(agent.runtimeDirectory)/control")
    }
}
