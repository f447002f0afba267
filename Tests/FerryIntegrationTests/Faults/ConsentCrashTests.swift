import FerryIntegrationKit
import Foundation
import FerryProtocol
import FerryTestKit
import Testing

/// A consent change and its effects are one durable unit (docs/CONSENT.md, "Durable changes"):
/// the real `ferryd` is killed with SIGKILL at the crash points it reports while it carries out a
/// change over 320 held and 330 queued events and a dead letter, then restarted, and the data
/// directory is checked. Kill moments come from the agent's own progress report (a first run
/// without a crash lists every point and how often it is reached), never from the clock.
///
/// CI kills at every point's first, middle and last reach; `FERRY_SOAK=1` at every reach.
@Suite("Faults: crash during a consent change")
struct ConsentCrashTests {
    /// The events: A (user u-1) and B (user u-2) are analytics events, 300 + 20 held (track,
    /// undetermined) and 300 + 20 queued (identify, allow-listed); D is 10 queued diagnostics
    /// events of u-2. One dead letter of the file sink holds 3 A, 1 B and 1 D events.
    struct Markers: Sendable {
        let a = "MARK-A-\(UInt32.random(in: 0...UInt32.max))"
        let b = "MARK-B-\(UInt32.random(in: 0...UInt32.max))"
        let d = "MARK-D-\(UInt32.random(in: 0...UInt32.max))"
        var all: [String] { [a, b, d] }
    }

    /// One kind of change, as the CLI sends it, and what it must do.
    struct Change: Sendable, CustomTestStringConvertible {
        var name: String
        var arguments: [String]
        /// Which markers' events it erases (by key: "a", "b", "d").
        var erases: Set<String>
        /// Whether it queues a `consent_updated` event.
        var consentUpdated: Bool
        /// Whether it releases the held analytics events.
        var releases = false
        var testDescription: String { name }
    }

    static let changes: [Change] = [
        Change(name: "deny", arguments: ["consent", "set", "analytics", "denied"], erases: ["a", "b"], consentUpdated: true),
        Change(name: "forget", arguments: ["forget", "--user", "u-1"], erases: ["a"], consentUpdated: false),
        Change(name: "purge", arguments: ["purge"], erases: ["a", "b", "d"], consentUpdated: false),
        Change(name: "features disable", arguments: ["features", "disable", "analytics"], erases: ["a", "b"], consentUpdated: true),
        Change(name: "gdpr revocation", arguments: ["consent", "set", "--gdpr", "subject_to_gdpr=granted", "data_usage=denied"],
               erases: ["a", "b", "d"], consentUpdated: false),
        Change(name: "grant", arguments: ["consent", "set", "analytics", "granted"], erases: [], consentUpdated: true, releases: true),
    ]

    static var consent: [String: Any] { [
        "autoStart": false, "defaultConsent": "undetermined",
        "undetermined": ["policy": "hold", "allowTypes": ["identify"]],
    ] }

    static func configArguments(_ dir: TemporaryDirectory, _ consent: [String: Any], name: String = "ferryd.json") throws -> [String] {
        let path = dir.appending(name)
        try JSONSerialization.data(withJSONObject: ["consent": consent]).write(to: URL(fileURLWithPath: path))
        return ["--config", path]
    }

    static func lines(_ count: Int, name: String, type: String, user: String, marker: String, category: String? = nil) -> String {
        (1...count).map { i in
            var object: [String: Any] = ["name": name, "type": type, "userId": user, "properties": ["m": marker, "i": i]]
            if let category { object["category"] = category }
            return String(decoding: try! JSONSerialization.data(withJSONObject: object), as: UTF8.self)
        }.joined(separator: "\n") + "\n"
    }

    /// Builds the data directory every run starts from: the events above, accepted by a real
    /// agent that is then stopped, plus the dead letter.
    static func makeTemplate(_ dir: TemporaryDirectory, markers: Markers, heldA: Int = 300) async throws -> String {
        let agent = try AgentProcess(dataDirectory: dir.appending("template"), runtimeDirectory: dir.appending("trt"),
                                     logDirectory: dir.appending("tlogs"), extraArguments: try configArguments(dir, consent, name: "template.json"))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        var input = lines(heldA, name: "Held A", type: "track", user: "u-1", marker: markers.a)
        input += lines(20, name: "Held B", type: "track", user: "u-2", marker: markers.b)
        input += lines(300, name: "Queued A", type: "identify", user: "u-1", marker: markers.a)
        input += lines(20, name: "Queued B", type: "identify", user: "u-2", marker: markers.b)
        input += lines(10, name: "Queued D", type: "identify", user: "u-2", marker: markers.d, category: "diagnostics")
        let total = heldA + 350
        let emitted = try await runCLI(["emit", "--stdin", "--wait", "--timeout", "60"], stdin: input, environment: agent.environment)
        // Held events are acked as held (`held=N`), the others accepted.
        #expect(emitted.stdout == "accepted=\(total - heldA - 20) duplicate=0 rejected=0 held=\(heldA + 20)\n", "\(emitted)")
        #expect(try await agent.consentState()["held_events"] as? Int == heldA + 20)
        try await agent.terminate()

        func event(_ name: String, user: String, marker: String, category: UInt8) -> WireEvent {
            WireEvent(id: EventIDGenerator().next(), timestamp: WallClock.unixMilliseconds(), sequence: 1, pid: 1, type: .track,
                      category: category, source: "dead", name: name, userID: user, properties: Array(#"{"m":"\#(marker)"}"#.utf8))
        }
        let analytics = ConsentCategories.code(of: "analytics")!, diagnostics = ConsentCategories.code(of: "diagnostics")!
        try writeDeadLetter(dataDirectory: agent.dataDirectory, sink: "file", events: [
            event("Dead A", user: "u-1", marker: markers.a, category: analytics),
            event("Dead A", user: "u-1", marker: markers.a, category: analytics),
            event("Dead A", user: "u-1", marker: markers.a, category: analytics),
            event("Dead B", user: "u-2", marker: markers.b, category: analytics),
            event("Dead D", user: "u-2", marker: markers.d, category: diagnostics),
        ])
        return agent.dataDirectory
    }

    /// The ids of every live event (queue, held area, dead letters) carrying `marker`.
    static func ids(carrying marker: String, data: String) throws -> Set<String> {
        var ids = Set<String>()
        for directory in ["segments", "held"] {
            for record in try logRecords(in: data + "/" + directory) where record.properties?.contains(marker) == true {
                ids.insert(record.id)
            }
        }
        let deadLetters = data + "/deadletter/file"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: deadLetters)) ?? [] {
            let object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: deadLetters + "/" + name))) as? [String: Any]
            for event in object?["events"] as? [[String: Any]] ?? [] where (event["properties"] as? [String: Any])?["m"] as? String == marker {
                if let id = event["id"] as? String { ids.insert(id) }
            }
        }
        return ids
    }

    /// The ids of the events (`frames`) in every dead letter. (A dead letter's own id, its
    /// batch's idempotency key, is made from its first event's id, as an erased record keeps
    /// the id of its event: an id is not the event.)
    static func deadLetterEventIDs(_ data: String) throws -> Set<String> {
        var ids = Set<String>()
        let root = data + "/deadletter"
        for sink in (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: root + "/" + sink)) ?? [] where name.hasSuffix(".json") {
                let object = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: root + "/" + sink + "/" + name)))
                for frame in (object as? [String: Any])?["frames"] as? [[String: Any]] ?? [] {
                    if let id = frame["id"] as? String { ids.insert(id) }
                }
                for event in (object as? [String: Any])?["events"] as? [[String: Any]] ?? [] {
                    if let id = event["id"] as? String { ids.insert(id) }
                }
            }
        }
        return ids
    }

    /// One run's outcome, for the checks.
    struct Run {
        let agent: AgentProcess
        let data: String
        let progress: CrashPointProgress
        let killed: Bool
    }

    /// Copies the template, starts `ferryd` with `environment`, sends `change` with the CLI and
    /// waits until the agent kills itself (or, with no crash asked for, the CLI succeeds). Then
    /// starts it again (with `restartEnvironment`, and then again without anything if that run
    /// dies too) and waits until it is ready.
    static func run(_ change: [String]?, template: String, in dir: TemporaryDirectory, config: [String],
                    environment: [String: String], restartEnvironment: [String: String] = [:]) async throws -> Run {
        let data = dir.appending("data")
        try FileManager.default.copyItem(atPath: template, toPath: data)
        let progressPath = dir.appending("progress")
        let agent = try AgentProcess(dataDirectory: data, runtimeDirectory: dir.appending("rt"), logDirectory: dir.appending("logs"),
                                     extraArguments: config, start: false)
        try agent.start(extraEnvironment: environment.merging(["FERRY_PROGRESS_FILE": progressPath]) { $1 })
        var killed = false
        if let change {
            try await agent.waitUntilReady()
            let cli = try startCLI(change, environment: agent.environment, outputDirectory: dir.path, label: "change")
            defer { cli.cleanup() }
            try await eventually("the change to finish or the agent to die", timeout: .seconds(60)) {
                !agent.isRunning || cli.exitStatus != nil
            }
            if agent.isRunning {
                #expect(cli.exitStatus == .exited(0), "ferry \(change): \(cli.standardOutput) \(cli.standardError)")
            } else {
                killed = true
            }
        } else {
            // The agent's own work (hold expiry) runs without a request.
            if environment["FERRY_CRASH_AT"] != nil {
                try await agent.waitForExit(timeout: .seconds(60))
                killed = true
            } else {
                try await agent.waitUntilReady()
            }
        }
        let progress = CrashPointProgress(path: progressPath)
        if killed {
            #expect(agent.process?.exitStatus == .signaled(SIGKILL), "\(agent.logs.suffix(2000))")
            try agent.start(extraEnvironment: restartEnvironment)
            if !restartEnvironment.isEmpty {
                // A second crash, inside the recovery's redo of the change.
                try await agent.waitForExit(timeout: .seconds(60))
                #expect(agent.process?.exitStatus == .signaled(SIGKILL), "the restart did not crash: \(agent.logs.suffix(2000))")
                try agent.start()
            }
            try await agent.waitUntilReady()
        }
        return Run(agent: agent, data: data, progress: progress, killed: killed)
    }

    /// The checks after a run: the change happened with all its effects, or not at all.
    static func check(_ run: Run, change: Change, markers: Markers, covered: [String: Set<String>], heldIDs: Set<String>,
                      durable: Bool, label: String) async throws {
        let data = run.data, agent = run.agent
        let where_ = "\(change.name) \(label)"
        // Nothing is left to finish: the journal is gone before the agent serves.
        #expect(!FileManager.default.fileExists(atPath: data + "/consent/pending"), "\(where_): journal left")
        let log = try await agent.control(["op": "consent_log"])
        #expect(log["verified"] as? Bool == true, "\(where_): audit chain \(log["problem"] ?? "")")
        let entries = (log["entries"] as? [[String: Any]]) ?? []
        let state = try await agent.consentState()
        #expect(state["audit_entries"] as? Int == entries.count, "\(where_)")
        #expect(entries.count == (durable ? 1 : 0), "\(where_): \(entries.count) audit entries")

        let queue = try logRecords(in: data + "/segments"), held = try logRecords(in: data + "/held")
        let updates = queue.filter { !$0.erased && $0.name == "consent_updated" }.count
        #expect(updates == (durable && change.consentUpdated ? 1 : 0), "\(where_): \(updates) consent_updated events")

        let deadLetterEvents = try Self.deadLetterEventIDs(data)
        for (key, marker) in [("a", markers.a), ("b", markers.b), ("d", markers.d)] {
            let erased = durable && change.erases.contains(key)
            let files = filesContaining(marker, under: data)
            if erased {
                #expect(files.isEmpty, "\(where_): marker \(key) still in \(files)")
                let ids = covered[key] ?? []
                let live = (queue + held).filter { !$0.erased && ids.contains($0.id) }
                #expect(live.isEmpty, "\(where_): \(live.count) live records of \(key)")
                let kept = ids.intersection(deadLetterEvents)
                #expect(kept.isEmpty, "\(where_): dead letters keep \(kept)")
            } else {
                #expect(files.contains { $0.hasPrefix("segments/") }, "\(where_): marker \(key) lost from the queue: \(files)")
                #expect(files.contains { $0.hasPrefix("deadletter/") }, "\(where_): marker \(key) lost from dead letters")
            }
        }

        let heldLive = held.filter { !$0.erased }.count
        var heldExpected = 320
        if durable {
            if change.releases { heldExpected = 0 }
            if change.erases.contains("a") { heldExpected -= 300 }
            if change.erases.contains("b") { heldExpected -= 20 }
        }
        #expect(heldLive == heldExpected, "\(where_): \(heldLive) live held records")
        #expect(state["held_events"] as? Int == heldExpected, "\(where_): held_events \(state["held_events"] ?? "")")

        if change.releases {
            let queuedIDs = queue.filter { !$0.erased }.map(\.id)
            let released = queuedIDs.filter { heldIDs.contains($0) }
            if durable {
                #expect(released.count == heldIDs.count && Set(released) == heldIDs,
                        "\(where_): \(released.count) released records for \(heldIDs.count) held events")
                // Delivered exactly once.
                try await agent.control(["op": "start"])
                let expected = 320 + 330 + 1
                try await eventually("every event delivered", timeout: .seconds(60)) { try agent.deliveredEvents().count >= expected }
                let delivered = try DeliveryReport(sinkDirectory: agent.sinkDirectory)
                #expect(delivered.events.count == expected, "\(where_): \(delivered)")
                #expect(delivered.duplicateIDs.isEmpty, "\(where_): duplicates \(delivered.duplicateIDs.prefix(5))")
                let missing = heldIDs.subtracting(delivered.uniqueIDs)
                #expect(missing.isEmpty, "\(where_): \(missing.count) held events not delivered")
            } else {
                #expect(released.isEmpty, "\(where_)")
            }
        }
    }

    @Test("kill -9 at every reported point of a consent change: all effects or none, never refused events left, releases once",
          arguments: changes)
    func crashInsideChange(change: Change) async throws {
        let started = ContinuousClock.now
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let markers = Markers()
        let template = try await Self.makeTemplate(dir, markers: markers)
        let config = try Self.configArguments(dir, Self.consent)
        var covered: [String: Set<String>] = [:]
        for (key, marker) in [("a", markers.a), ("b", markers.b), ("d", markers.d)] {
            covered[key] = try Self.ids(carrying: marker, data: template)
        }
        #expect(covered["a"]?.count == 603 && covered["b"]?.count == 41 && covered["d"]?.count == 11)
        let heldIDs = Set(try logRecords(in: template + "/held").map(\.id))

        // The run without a crash: the points and how often each is reached.
        let learnDir = try TemporaryDirectory()
        defer { learnDir.remove() }
        let learn = try await Self.run(change.arguments, template: template, in: learnDir, config: config, environment: [:])
        defer { learn.agent.cleanup() }
        try await Self.check(learn, change: change, markers: markers, covered: covered, heldIDs: heldIDs, durable: true, label: "no crash")
        let points = learn.progress.killPoints(everyReach: FaultSettings.isSoak)
        #expect(learn.progress.names.first == "consent.intent.written" && learn.progress.names.last == "consent.done",
                "\(learn.progress)")

        // Every point (sampled), and one crash inside the recovery's redo of an interrupted change.
        var runs = points.map { (point: $0, restart: [String: String]()) }
        if let erase = learn.progress.names.first(where: { $0 == "consent.erase.queued" || $0 == "consent.release.append" }),
           let count = learn.progress.counts[erase] {
            runs.append(((erase, count / 2), ["FERRY_CRASH_AT": "\(erase):\(count / 4)"]))
        }
        for (point, restart) in runs {
            let runDir = try TemporaryDirectory()
            defer { runDir.remove() }
            let run = try await Self.run(change.arguments, template: template, in: runDir, config: config,
                                         environment: ["FERRY_CRASH_AT": "\(point.name):\(point.count)"], restartEnvironment: restart)
            defer { run.agent.cleanup() }
            #expect(run.killed, "\(change.name): no crash at \(point.name):\(point.count)")
            try await Self.check(run, change: change, markers: markers, covered: covered, heldIDs: heldIDs,
                                 durable: point.name != "consent.intent.written",
                                 label: "killed at \(point.name):\(point.count)" + (restart.isEmpty ? "" : " and at \(restart.values.first!) in recovery"))
        }
        print("[fault] consent crash (\(change.name)): points \(learn.progress); \(runs.count) kills; \(ContinuousClock.now - started)")
    }

    @Test("hold expiry killed at every reported point: the expired events are gone before the agent serves again")
    func crashInsideHoldExpiry() async throws {
        let started = ContinuousClock.now
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let markers = Markers()
        let template = try await Self.makeTemplate(dir, markers: markers)
        var expiring = Self.consent
        expiring["undetermined"] = ["policy": "hold", "allowTypes": ["identify"], "maxHoldAgeSeconds": 1]
        let config = try Self.configArguments(dir, expiring)
        // The held events must be older than the maximum age before the runs start.
        #expect(try logRecords(in: template + "/held").count == 320)
        try await eventually("the held events to be older than 1 s", timeout: .seconds(10)) {
            let attributes = try FileManager.default.attributesOfItem(atPath: template + "/held")
            return Date().timeIntervalSince(attributes[.modificationDate] as? Date ?? Date()) > 1.5
        }

        func check(_ run: Run, label: String, durable: Bool = true) async throws {
            if !durable {
                // The expiry never happened; the restarted agent expires the events itself.
                try await eventually("hold expiry \(label): expired after the restart") {
                    try logRecords(in: run.data + "/held").allSatisfy { $0.erased }
                }
            }
            // Expired events are gone already when the agent answers: finished before it served.
            let held = try logRecords(in: run.data + "/held")
            let live = held.filter { !$0.erased }.count
            #expect(live == 0, "hold expiry \(label): \(held.filter { !$0.erased }.count) held events left")
            #expect(filesContaining(markers.a, under: run.data + "/held").isEmpty, "hold expiry \(label)")
            #expect(filesContaining(markers.b, under: run.data + "/held").isEmpty, "hold expiry \(label)")
            #expect(!FileManager.default.fileExists(atPath: run.data + "/consent/pending"), "hold expiry \(label)")
            // The queue is untouched.
            #expect(!filesContaining(markers.b, under: run.data + "/segments").isEmpty, "hold expiry \(label)")
        }

        let learnDir = try TemporaryDirectory()
        defer { learnDir.remove() }
        let learn = try await Self.run(nil, template: template, in: learnDir, config: config, environment: [:])
        defer { learn.agent.cleanup() }
        try await eventually("the learning run to expire the held events") {
            CrashPointProgress(path: learnDir.appending("progress")).names.contains("consent.done")
        }
        try await check(learn, label: "no crash")
        let progress = CrashPointProgress(path: learnDir.appending("progress"))
        let points = progress.killPoints(everyReach: FaultSettings.isSoak)
        for point in points {
            let runDir = try TemporaryDirectory()
            defer { runDir.remove() }
            let run = try await Self.run(nil, template: template, in: runDir, config: config,
                                         environment: ["FERRY_CRASH_AT": "\(point.name):\(point.count)"])
            defer { run.agent.cleanup() }
            try await check(run, label: "killed at \(point.name):\(point.count)", durable: point.name != "consent.intent.written")
        }
        print("[fault] consent crash (hold expiry): points \(progress); \(points.count) kills; \(ContinuousClock.now - started)")
    }

    @Test("a request that failed half-way (injected I/O error) is finished by repeating it, not ignored")
    func repeatedRequestFinishes() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let markers = Markers()
        let template = try await Self.makeTemplate(dir, markers: markers)
        let data = dir.appending("data")
        try FileManager.default.copyItem(atPath: template, toPath: data)
        let agent = try AgentProcess(dataDirectory: data, runtimeDirectory: dir.appending("rt"), logDirectory: dir.appending("logs"),
                                     extraArguments: try Self.configArguments(dir, Self.consent), start: false)
        defer { agent.cleanup() }
        try agent.start(extraEnvironment: ["FERRY_FAIL_AT": "consent.erase.held:150"])
        try await agent.waitUntilReady()

        let failed = try await runCLI(["consent", "set", "analytics", "denied"], environment: agent.environment)
        #expect(failed.status == .exited(1), "\(failed)")
        #expect(failed.stderr.contains("not all its effects are done"), "\(failed)")
        #expect(failed.stderr.contains("injected failure"), "\(failed)")
        // The change happened: the state says so at once.
        #expect((try await agent.consentState()["consent"] as? [String: String])?["analytics"] == "denied")

        let repeated = try await runCLI(["consent", "set", "analytics", "denied"], environment: agent.environment)
        #expect(repeated.status == .exited(0), "\(repeated)")
        #expect(filesContaining(markers.a, under: data).isEmpty)
        #expect(filesContaining(markers.b, under: data).isEmpty)
        #expect(!filesContaining(markers.d, under: data).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: data + "/consent/pending"))
        #expect(try await agent.consentState()["held_events"] as? Int == 0)
        let log = try await agent.control(["op": "consent_log"])
        #expect(log["verified"] as? Bool == true)
        #expect((log["entries"] as? [Any])?.count == 1)
        #expect(try logRecords(in: data + "/segments").filter { !$0.erased && $0.name == "consent_updated" }.count == 1)
    }
}
