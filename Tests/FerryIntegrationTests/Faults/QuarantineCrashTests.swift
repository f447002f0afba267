import FerryIntegrationKit
import FerryProtocol
import FerryTestKit
import Foundation
import Testing

/// The quarantine across `kill -9` (docs/QUALITY.md, "Quarantine"): the real `ferryd`, a plan that
/// makes two events violate it under `"onViolation": "quarantine"`, killed at each quarantine
/// crash point it reports (a first run without a crash lists them: the entry's temp file synced,
/// its rename, a replay between the log's commit and the removal), then restarted; the client
/// sends again what was not acked, the plan is fixed, `SIGHUP`, and `ferry quarantine replay
/// --all` must deliver each event exactly once and leave the quarantine empty. The first run
/// also walks the CLI: `list`, `show`, `replay` while still violating (exit 1), `drop`. CI kills
/// at each point's first reach; `FERRY_SOAK=1` at every reach. Every event carries a raw email
/// the `redact` table masks, and personal values inside text (a card in a memo, an e-mail
/// percent-encoded in a page URL's query, an address in an error message: docs/QUALITY.md,
/// "Inside text"): after each run, crashed or not, no file under the run's directory (data,
/// quarantine, replay marker, sink, runtime) and no line of ferryd's log holds any of them.
@Suite("Faults: crash in the quarantine")
struct QuarantineCrashTests {
    static let plan = #"{"events":[{"type":"track","name":"Good","properties":{"type":"object"}}]}"#
    static let fixedPlan = #"{"events":[{"type":"track","name":"Good","properties":{"type":"object"}},{"type":"track","name":"Bad","properties":{"type":"object"}}]}"#

    /// The personal value every event carries; redaction masks it before anything is written.
    static let rawEmail = "crash.victim@example.com"
    /// Personal values inside text, as the events carry them (the e-mail as its URL writes it).
    static let rawCard = "4111 1111 1111 1111", rawEncodedEmail = "crash.victim%40example.com", rawAddress = "198.51.100.23"
    /// Every raw value the events carry.
    static let rawValues = [rawEmail, rawCard, rawEncodedEmail, rawAddress]
    /// A card-shaped order reference under `properties.order`, which a `keep` rule keeps: it must
    /// reach the sink byte for byte after every crash, while its siblings are still masked.
    static let keptReference = "4242 4242 4242 4242"
    /// The properties of event `sequence`: the raw values, whole and inside text.
    static func properties(_ sequence: UInt64) -> String {
        #"{"i":\#(sequence),"order":{"ref":"\#(keptReference)"},"email":"\#(rawEmail)","memo":"paid with \#(rawCard), thanks","#
            + #""url":"https://shop.example/reset?email=\#(rawEncodedEmail)&step=2","error":"timeout from \#(rawAddress) after 3 tries"}"#
    }

    static func frames() -> (good: [UInt8], bad: [[UInt8]]) {
        let ids = EventIDGenerator()
        func event(_ name: String, _ sequence: UInt64) -> [UInt8] {
            WireEvent(id: ids.next(), timestamp: WallClock.unixMilliseconds(), sequence: sequence, pid: 1, type: .track,
                      source: "quarantine-crash", name: name, properties: Array(properties(sequence).utf8)).encoded()
        }
        return (event("Good", 1), [event("Bad", 2), event("Bad", 3)])
    }

    static func header(_ id: UInt32) -> [UInt8] { MessageHeader(kind: .events, requestID: id).encoded() }

    /// Sends `frames` in one message; nil when the agent died before answering.
    static func send(_ frames: [[UInt8]], to agent: AgentProcess, timeout: Duration = .seconds(10)) async -> [AckEntry]? {
        guard let replies = try? await RawIngestClient.exchange(runtimeDirectory: agent.runtimeDirectory,
                                                                messages: [[header(1)] + frames], timeout: timeout),
              case .ack(_, let entries) = replies.first else { return nil }
        return entries
    }

    struct Run {
        let dir: TemporaryDirectory
        let agent: AgentProcess
        let planPath: String

        /// `shortWindow`: an id window of 1 s, so a replay run again after the restart cannot rely
        /// on it (the replay marker must find what was stored).
        init(crashAt: String?, progress: String? = nil, shortWindow: Bool = false) throws {
            dir = try TemporaryDirectory()
            planPath = dir.appending("plan.json")
            try Data(QuarantineCrashTests.plan.utf8).write(to: URL(fileURLWithPath: planPath))
            let config = dir.appending("ferryd.json")
            var object: [String: Any] = [
                "quality": ["plan": planPath, "onViolation": "quarantine", "allowUnplanned": false],
                "redact": ["rules": [["path": "properties.order", "action": "keep"]],
                           "detect": [["kind": "email", "action": "mask"], ["kind": "card", "action": "mask"], ["kind": "ip", "action": "mask"]]],
            ]
            if shortWindow { object["dedup"] = ["maxAgeSeconds": 1] }
            try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: config))
            agent = try AgentProcess(in: dir, extraArguments: ["--config", config], start: false)
            var environment: [String: String] = [:]
            if let crashAt { environment["FERRY_CRASH_AT"] = crashAt }
            if let progress { environment["FERRY_PROGRESS_FILE"] = progress }
            try agent.start(extraEnvironment: environment)
        }

        /// Fixes the plan and reloads it; waits until a replay stores what was quarantined.
        func fixPlanAndReload() throws {
            try Data(QuarantineCrashTests.fixedPlan.utf8).write(to: URL(fileURLWithPath: planPath))
            agent.kill(signal: SIGHUP)
        }

        func cleanup() {
            agent.cleanup()
            dir.remove()
        }
    }

    /// Replays until the reload took effect (the first replay may come before the SIGHUP is
    /// handled: it answers `violating` and changes nothing); returns the last reply.
    static func replayAll(_ agent: AgentProcess) async throws -> [String: Any] {
        var reply: [String: Any] = [:]
        try await eventually("the fixed plan in effect", timeout: .seconds(20)) {
            reply = try await agent.control(["op": "quarantine_replay", "all": true])
            let outcomes = (reply["results"] as? [[String: Any]] ?? []).compactMap { $0["outcome"] as? String }
            return !outcomes.contains("violating")
        }
        return reply
    }

    /// Every file under `directory` and `logs` that holds one of ``rawValues``, with the value.
    static func rawValuesFound(under directory: String, logs: String) -> [String] {
        rawValues.flatMap { raw in rawValueFound(under: directory, logs: logs, raw: raw).map { "\($0): \(raw)" } }
    }

    /// Every file under `directory` and `logs` that holds `rawValue` (default ``rawEmail``).
    static func rawValueFound(under directory: String, logs: String, raw rawValue: String = rawEmail) -> [String] {
        let raw = Data(rawValue.utf8)
        var found = logs.contains(rawValue) ? ["ferryd's log"] : []
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let name = enumerator?.nextObject() as? String {
            if let data = FileManager.default.contents(atPath: directory + "/" + name), data.range(of: raw) != nil { found.append(name) }
        }
        return found
    }

    /// The checks every run ends with: the quarantine empty, no temp file, each event delivered
    /// exactly once, the raw value nowhere.
    static func checkDelivered(_ agent: AgentProcess, ids: Set<String>, label: String, directory: String) async throws {
        let quarantine = agent.dataDirectory + "/quarantine"
        try await eventually("\(ids.count) events delivered (\(label))", timeout: .seconds(20)) {
            try DeliveryReport(sinkDirectory: agent.sinkDirectory).uniqueIDs.isSuperset(of: ids)
        }
        let report = try DeliveryReport(sinkDirectory: agent.sinkDirectory)
        #expect(report.duplicateIDs.isEmpty, "\(label): delivered twice: \(report.duplicateIDs)")
        #expect(report.uniqueIDs == ids, "\(label): \(report)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: quarantine)) ?? []).isEmpty, "\(label): quarantine not empty")
        let found = rawValuesFound(under: directory, logs: agent.logs)
        #expect(found.isEmpty, "\(label): a raw value in \(found)")
        #expect(!rawValueFound(under: agent.sinkDirectory, logs: "", raw: keptReference).isEmpty,
                "\(label): the kept order reference is not in the sink")
    }

    @Test("kill -9 at each quarantine crash point: nothing half-written, each event delivered once after the plan is fixed; the CLI")
    func crashPoints() async throws {
        // The run without a crash learns the points, and walks the CLI.
        let progressDir = try TemporaryDirectory()
        defer { progressDir.remove() }
        let progressPath = progressDir.appending("progress")
        let (good, bad) = Self.frames()
        var ids = Set(([good] + bad).map { EventID(bytes: $0).description })
        var progress = CrashPointProgress(path: progressPath)
        do {
            let run = try Run(crashAt: nil, progress: progressPath)
            defer { run.cleanup() }
            let agent = run.agent
            try await agent.waitUntilReady()
            let tail = try BusTail(topics: ["quarantined", "purged"], environment: agent.environment, outputDirectory: run.dir.path)
            defer { tail.cleanup() }
            try await tail.waitUntilSubscribed()
            // The tail's probe events break the plan too: dropped before the test's own.
            _ = try await agent.control(["op": "quarantine_drop", "all": true])
            let probes = try tail.messages(topic: "quarantined").count
            let entries = try #require(await Self.send([good] + bad, to: agent))
            #expect(entries.map(\.status) == [.accepted, .accepted, .accepted])
            #expect(entries.map(\.reason) == [.none, .quarantined, .quarantined])
            // The HTTP API's message through the same stage: its result says quarantined.
            let body = #"{"batch":[{"type":"track","event":"Bad","userId":"u1","messageId":"m-bad","properties":{"email":"\#(Self.rawEmail)"}}]}"#
            let response = try await httpPost(unixSocket: agent.runtimeDirectory + "/http", path: "/v1/batch", json: body)
            #expect(response.status == 200 && response.body.contains(#""status":"quarantined""#), "\(response)")
            // Each is on the bus's quarantined topic with its reason.
            try await eventually("3 quarantined events on the bus") { try tail.messages(topic: "quarantined").count >= probes + 3 }
            let published = Array(try tail.messages(topic: "quarantined").dropFirst(probes))
            #expect(published.allSatisfy { $0["reason"] as? String == "plan_violation" && $0["name"] as? String == "Bad" }, "\(published)")
            ids.formUnion(published.compactMap { $0["id"] as? String })
            #expect(ids.count == 4)
            let environment = agent.environment
            let list = try await runCLI(["quarantine", "list", "--data-dir", agent.dataDirectory], environment: environment)
            #expect(list.status == .exited(0) && list.stdout.contains("3 quarantined events") && list.stdout.contains("unplanned"), "\(list)")
            // Without --data-dir, list and show read the quarantine of the agent FERRY_RUNTIME_DIR
            // names (its --data-dir is not the default one): they ask it over the control socket.
            let found = try await runCLI(["quarantine", "list", "--json"], environment: environment)
            let rows = (try? JSONSerialization.jsonObject(with: Data(found.stdout.utf8))) as? [[String: Any]] ?? []
            #expect(found.status == .exited(0) && rows.count == 3
                    && rows.allSatisfy { ($0["path"] as? String)?.hasPrefix(agent.dataDirectory + "/quarantine/") == true }, "\(found)")
            let badID = EventID(bytes: bad[0]).description
            let shown = try await runCLI(["quarantine", "show", badID], environment: environment)
            #expect(shown.status == .exited(0) && shown.stdout.contains("[unplanned]"), "\(shown)")
            let show = try await runCLI(["quarantine", "show", badID, "--data-dir", agent.dataDirectory], environment: environment)
            #expect(show.status == .exited(0) && show.stdout.contains("[unplanned]") && show.stdout.contains(#""name":"Bad""#), "\(show)")
            // `ferry emit` reports a quarantined event as such (the ack's reason 21), apart from
            // accepted and rejected, per line and in the counts; exit status 0 (acked).
            let emitted = try await runCLI(["emit", "--stdin", "--json"], stdin: "{\"name\":\"Bad\"}\n{\"name\":\"Good\",\"properties\":{\"i\":0}}\n", environment: environment)
            let lines = emitted.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            #expect(emitted.status == .exited(0) && lines.count == 3, "\(emitted)")
            if lines.count == 3 {
                #expect(lines[0]["status"] as? String == "quarantined" && lines[0]["reason"] as? String == "quarantined", "\(lines[0])")
                #expect(lines[1]["status"] as? String == "accepted" && lines[1]["reason"] == nil, "\(lines[1])")
                let summary = lines[2]["summary"] as? [String: Int] ?? [:]
                #expect(summary["quarantined"] == 1 && summary["accepted"] == 1 && summary["rejected"] == 0, "\(summary)")
                ids.formUnion(lines[0...1].compactMap { $0["id"] as? String })
            }
            let text = try await runCLI(["emit", "Bad", "--wait"], environment: environment)
            #expect(text.status == .exited(0) && text.stdout.contains("accepted=0 duplicate=0 rejected=0 quarantined=1")
                    && text.stderr.contains("the event: quarantined"), "\(text)")
            try await eventually("5 quarantined events on the bus") { try tail.messages(topic: "quarantined").count >= probes + 5 }
            ids.formUnion(try tail.messages(topic: "quarantined").dropFirst(probes).compactMap { $0["id"] as? String })
            #expect(ids.count == 7, "\(ids)")
            let early = try await runCLI(["quarantine", "replay", "--all"], environment: environment)
            #expect(early.status == .exited(1) && early.stdout.contains("violating"), "\(early)")
            // `ferry forget --user` reaches the quarantine and says so: the HTTP message's user
            // (u1) has one event there, deleted and counted in the reply and the CLI's line.
            func quarantinedIDs() async throws -> Set<String> {
                let listed = try await runCLI(["quarantine", "list", "--json"], environment: environment)
                let rows = (try? JSONSerialization.jsonObject(with: Data(listed.stdout.utf8))) as? [[String: Any]] ?? []
                return Set(rows.compactMap { $0["id"] as? String })
            }
            let before = try await quarantinedIDs()
            let forgot = try await runCLI(["forget", "--user", "u1"], environment: environment)
            #expect(forgot.status == .exited(0) && forgot.stdout == "erased 1 event (0 queued, 0 held, 1 quarantined) for user u1\n", "\(forgot)")
            let forgotten = before.subtracting(try await quarantinedIDs())
            #expect(forgotten.count == 1, "\(before) \(forgotten)")
            ids.subtract(forgotten)
            // The purged topic counts it too (total included).
            try await eventually("the forget's purged message") { try tail.messages(topic: "purged").contains { $0["reason"] as? String == "forget" } }
            let purgedMessage = try #require(try tail.messages(topic: "purged").first { $0["reason"] as? String == "forget" })
            #expect(purgedMessage["quarantined"] as? Int == 1 && purgedMessage["total"] as? Int == 1 && purgedMessage["queued"] as? Int == 0, "\(purgedMessage)")
            let again = try await runCLI(["forget", "--user", "u1", "--json"], environment: environment)
            let purged = ((try? JSONSerialization.jsonObject(with: Data(again.stdout.utf8))) as? [String: Any])?["purged"] as? [String: Int]
            #expect(again.status == .exited(0) && (purged == nil || purged?["quarantined"] == nil), "nothing left to erase: \(again)")
            try run.fixPlanAndReload()
            _ = try await Self.replayAll(agent)
            try await Self.checkDelivered(agent, ids: ids, label: "no crash", directory: run.dir.path)
            // The points of the runs below: those reached so far (the drop below reaches more).
            progress = CrashPointProgress(path: progressPath)
            // drop: a new violating event under a plan that fails it again.
            try Data(Self.plan.utf8).write(to: URL(fileURLWithPath: run.planPath))
            agent.kill(signal: SIGHUP)
            // A new event each try: one sent before the reload is stored, and would be a duplicate.
            try await eventually("the strict plan in effect again", timeout: .seconds(20)) {
                await Self.send([Self.frames().bad[0]], to: agent)?.first?.reason == .quarantined
            }
            let drop = try await runCLI(["quarantine", "drop", "--all"], environment: environment)
            #expect(drop.status == .exited(0) && drop.stdout.contains("dropped"), "\(drop)")
            let after = try await runCLI(["quarantine", "list", "--data-dir", agent.dataDirectory], environment: environment)
            #expect(after.stdout.contains("no quarantined events"), "\(after)")
            _ = try await agent.terminate()
        }
        // CI: each point's first reach (3 kills); FERRY_SOAK=1: every reach.
        let soak = ProcessInfo.processInfo.environment["FERRY_SOAK"] == "1"
        let points = progress.killPoints(everyReach: true).filter { $0.name.hasPrefix("quarantine.") && (soak || $0.count == 1) }
        #expect(Set(points.map(\.name)) == ["quarantine.temp_synced", "quarantine.renamed", "quarantine.replayed"], "\(progress)")

        for point in points {
            let label = "\(point.name):\(point.count)"
            let run = try Run(crashAt: label, shortWindow: point.name == "quarantine.replayed")
            defer { run.cleanup() }
            let agent = run.agent
            try await agent.waitUntilReady()
            let (good, bad) = Self.frames()
            let ids = Set(([good] + bad).map { EventID(bytes: $0).description })
            var acked = await Self.send([good] + bad, to: agent, timeout: .seconds(5))
            if point.name == "quarantine.replayed" {
                #expect(acked != nil, "\(label): the events were not acked")
                try run.fixPlanAndReload()
                try await eventually("the agent to die at \(label)", timeout: .seconds(20)) {
                    _ = try? await agent.control(["op": "quarantine_replay", "all": true], timeout: .seconds(1))
                    return !agent.isRunning
                }
            } else {
                #expect(acked == nil, "\(label): acked though the agent died before the ack")
                try await agent.waitForExit(timeout: .seconds(20))
            }
            #expect(agent.process?.exitStatus == .signaled(SIGKILL), "\(label): \(agent.logs.suffix(2000))")
            // Past the 1 s id window: only the replay marker can tell what was stored.
            if point.name == "quarantine.replayed" {
                let killedAt = WallClock.unixMilliseconds()
                try await eventually("the id window (1 s) past the replay's store") { WallClock.unixMilliseconds() > killedAt + 1500 }
            }
            // Whatever is in the quarantine now is whole; no temp file survives the restart.
            try agent.start()
            try await agent.waitUntilReady()
            let names = (try? FileManager.default.contentsOfDirectory(atPath: agent.dataDirectory + "/quarantine")) ?? []
            #expect(names.allSatisfy { ($0.hasSuffix(".q") && !$0.hasPrefix(".")) || $0 == ".replay" }, "\(label): \(names)")
            #expect(!agent.logs.contains("quarantine entry skipped"), "\(label): a damaged entry after the crash")
            let found = Self.rawValuesFound(under: run.dir.path, logs: agent.logs)
            #expect(found.isEmpty, "\(label): a raw value after the kill: \(found)")
            if acked == nil {
                // The client sends again what was not acked.
                acked = await Self.send([good] + bad, to: agent)
                #expect(acked?.map(\.status) == [.accepted, .accepted, .accepted] || acked?.first?.status == .duplicate, "\(label): \(String(describing: acked))")
                try run.fixPlanAndReload()
            }
            let replay = try await Self.replayAll(agent)
            #expect(replay["ok"] as? Bool == true, "\(label): \(replay)")
            try await Self.checkDelivered(agent, ids: ids, label: label, directory: run.dir.path)
        }
    }
}
