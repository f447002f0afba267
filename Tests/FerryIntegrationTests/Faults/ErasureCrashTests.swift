import FerryIntegrationKit
import Foundation
import FerryTestKit
import Testing

/// `ferry forget --user` is one durable unit with its upstream erasure (docs/CONSENT.md, "Erasure
/// upstream"): the real `ferryd`, with a file sink that delivered the user's events, is killed -9
/// at each crash point the forget and its erasure reach — learnt from a first run's progress
/// report, never from the clock — then restarted, and either nothing happened (the caller sends
/// the request again) or the restarted agent completes both: the user's events erased in the
/// queue, the erasure recorded, sent to the sink (its lines overwritten) and audited once.
/// Redaction is on (the email detector masks) and every event carries a raw email: after each
/// kill, after each restart and at the end, no file under the test's directory (the data
/// directories with their consent journal and erasure outbox `consent/erasures.json`, the sink's
/// files, the logs) and no line of ferryd's log holds it (issue 31: "tested by grepping everything
/// Ferry wrote after kill -9 at each crash point").
@Suite("Faults: crash during a forget and its upstream erasure", .serialized)
struct ErasureCrashTests {
    static let marker = "MARK-U1-\(UInt32.random(in: 0...UInt32.max))"
    static let keep = "MARK-U2-\(UInt32.random(in: 0...UInt32.max))"

    /// The personal value every event carries; redaction masks it before anything is written.
    static let rawEmail = "erasure.victim@example.com"

    /// The agent's configuration: the email detector masks every email.
    static let config = #"{"redact":{"detect":[{"kind":"email","action":"mask"}]}}"#

    static func lines(_ user: String, _ marker: String, _ count: Int) -> String {
        (1...count).map { #"{"name":"Viewed","type":"track","userId":"\#(user)","properties":{"m":"\#(marker)","i":\#($0),"email":"\#(rawEmail)"}}"# }
            .joined(separator: "\n") + "\n"
    }

    static func copy(_ source: String, to destination: String) throws {
        try? FileManager.default.removeItem(atPath: destination)
        try FileManager.default.copyItem(atPath: source, toPath: destination)
    }

    @Test("killed at every point of the forget and its erasure, restarted: both or neither, then both once")
    func killedAtEachPoint() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let config = try AgentProcess.configurationArguments(Self.config, in: dir)
        // The raw value nowhere: no file under the test's directory, no line of `agent`'s log.
        func expectNoRawValue(_ agent: AgentProcess, _ label: String) {
            let found = QuarantineCrashTests.rawValueFound(under: dir.path, logs: agent.logs, raw: Self.rawEmail)
            #expect(found.isEmpty, "\(label): the raw value in \(found)")
        }
        // The template: 3 events of u-1 and 2 of u-2 delivered to the file sink.
        let template = try AgentProcess(dataDirectory: dir.appending("template"), runtimeDirectory: dir.appending("t"),
                                        logDirectory: dir.appending("tlogs"), extraArguments: config)
        do {
            try await template.waitUntilReady()
            let emitted = try await runCLI(["emit", "--stdin", "--wait"], stdin: Self.lines("u-1", Self.marker, 3) + Self.lines("u-2", Self.keep, 2),
                                           environment: template.environment)
            #expect(emitted.status == .exited(0), "\(emitted)")
            try await eventually("5 lines delivered") { (try? template.deliveredEvents().count) == 5 }
            // Delivered masked: the check below can fail (the lines hold the masked email).
            #expect(!filesContaining("@e***.com", under: template.dataDirectory + "/delivered").isEmpty)
            expectNoRawValue(template, "template")
            _ = try await template.terminate()
        }
        template.cleanup()

        // A first run without a fault: the points reached, in order.
        let learnData = dir.appending("learn")
        try Self.copy(template.dataDirectory, to: learnData)
        let learn = try AgentProcess(dataDirectory: learnData, runtimeDirectory: dir.appending("l"), logDirectory: dir.appending("llogs"),
                                     extraArguments: config, start: false)
        defer { learn.cleanup() }
        let progressPath = dir.appending("progress")
        try learn.start(extraEnvironment: ["FERRY_PROGRESS_FILE": progressPath])
        try await learn.waitUntilReady()
        let forgot = try await runCLI(["forget", "--user", "u-1"], environment: learn.environment)
        #expect(forgot.status == .exited(0), "\(forgot)")
        try await eventually("the erasure sent") { Self.done(try await learn.control(["op": "forget_status"])) }
        expectNoRawValue(learn, "no crash")
        _ = try await learn.terminate()
        let progress = CrashPointProgress(path: progressPath)
        // Every point the forget and its erasure reach (each one's first reach): the consent
        // change's (intent, audit, state, the queue's erasure, done), the erasure outbox's and the
        // file sink's. ConsentCrashTests kills at the consent points of every kind of change
        // without redaction; here each kill also proves the raw value was never written.
        let points = progress.names.filter { $0.hasPrefix("consent.") || $0.hasPrefix("sink.file.erase") }
        #expect(points.contains("consent.erasure.recorded") && points.contains("consent.erasure.settled")
                && points.contains("sink.file.erase.pass2"), "\(progress)")

        let started = ContinuousClock.now
        for point in points {
            let data = dir.appending("run")
            try Self.copy(template.dataDirectory, to: data)
            let agent = try AgentProcess(dataDirectory: data, runtimeDirectory: dir.appending("r"), logDirectory: dir.appending("rlogs-" + point),
                                         extraArguments: config, start: false)
            defer { agent.cleanup() }
            try agent.start(extraEnvironment: ["FERRY_CRASH_AT": point + ":1"])
            try await agent.waitUntilReady()
            // The caller gets no answer from an agent killed mid-change: it is not waited for.
            let caller = try startCLI(["forget", "--user", "u-1"], environment: agent.environment)
            defer { caller.cleanup() }
            try await eventually("ferryd to kill itself at \(point)", timeout: .seconds(20)) { agent.process?.exitStatus != nil }
            #expect(agent.process?.exitStatus == .signaled(SIGKILL), "\(point): \(agent.logs.suffix(1500))")
            expectNoRawValue(agent, "\(point): after the kill")

            try agent.start()
            try await agent.waitUntilReady()
            expectNoRawValue(agent, "\(point): after the restart")
            let status = try await agent.control(["op": "forget_status"])
            let recorded = !((status["erasures"] as? [Any]) ?? []).isEmpty
            if point == "consent.intent.written" {
                // Not durable: nothing happened, neither the purge nor the request.
                #expect(!recorded, "\(point)")
                #expect(!filesContaining(Self.marker, under: data + "/segments").isEmpty, "\(point)")
                let again = try await runCLI(["forget", "--user", "u-1"], environment: agent.environment)
                #expect(again.status == .exited(0), "\(again)")
            } else {
                // Durable: the restart finished the purge and the request is there.
                #expect(recorded, "\(point): \(status)")
                #expect(filesContaining(Self.marker, under: data + "/segments").isEmpty, "\(point)")
            }
            try await eventually("\(point): the erasure sent after the restart") { Self.done(try await agent.control(["op": "forget_status"])) }
            // Both, once: the user's marker is nowhere, u-2's lines stay, one request, one
            // forget and one erasure outcome in the verified audit chain, the user id gone from
            // the outbox.
            #expect(filesContaining(Self.marker, under: data).isEmpty, "\(point): \(filesContaining(Self.marker, under: data))")
            #expect(filesContaining(Self.keep, under: data + "/delivered").count == 1, "\(point)")
            #expect(filesContaining("u-1", under: data + "/consent").isEmpty, "\(point)")
            let final = try await agent.control(["op": "forget_status"])
            #expect((final["erasures"] as? [Any])?.count == 1, "\(point): \(final)")
            let log = try await agent.control(["op": "consent_log"])
            #expect(log["verified"] as? Bool == true, "\(point)")
            let changes = ((log["entries"] as? [[String: Any]]) ?? []).compactMap { $0["change"] as? String }
            #expect(changes == ["forget", "erasure"], "\(point): \(changes)")
            _ = try await agent.terminate()
            expectNoRawValue(agent, "\(point): at the end")
        }
        print("[fault] erasure crash: points \(progress); \(points.count) kills; \(ContinuousClock.now - started)")
    }

    /// Whether the `forget_status` reply has requests and all are done.
    static func done(_ reply: [String: Any]) -> Bool {
        guard let erasures = reply["erasures"] as? [[String: Any]], !erasures.isEmpty else { return false }
        return erasures.allSatisfy { $0["done"] as? Bool == true }
    }
}
