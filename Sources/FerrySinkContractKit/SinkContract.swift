#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation

/// The sink contract: what every sink promises, checked against the real `ferryd` and the
/// sink's real upstream (the file system, an HTTP server, a nats-server). Each function is one
/// test body; it returns when the sink keeps the promise and throws a ``ContractViolation``
/// saying how it broke it otherwise. A test suite runs each for every ``SinkFixture``, as
/// nats-server runs one storage test body against each of its stores:
///
/// ```swift
/// static let sinks: [any SinkFixture] = [FileSinkFixture(), HTTPSinkFixture(format: .envelope), …]
///
/// @Test(arguments: sinks.crashCases)
/// func exactlyOnceAcrossKill(_ sinkCase: SinkCase<String>) async throws {
///     try await SinkContract.exactlyOnceAcrossKill(sinkCase.fixture, crashAt: sinkCase.detail)
/// }
/// ```
public enum SinkContract {
    /// The crash points every sink reaches, in the delivery loop (docs/FAULTS.md): the batch done
    /// with (acknowledged or dead-lettered) with its cursor not yet stored, the cursor record
    /// written in place but not yet synced (`CursorStore`), and the cursor stored.
    public static let deliveryCrashPoints = ["delivery.done", "cursor.written", "delivery.saved"]

    /// Every event delivered exactly once; the cursor stored, so a graceful restart re-sends
    /// nothing; the crash points a delivery reaches are exactly the declared ones.
    public static func deliversEveryEventOnce(_ fixture: any SinkFixture) async throws {
        try await withRun(fixture, recordProgress: true) { run in
            try await run.emit("a", 1...25)
            try await run.expectExactlyOnce(ContractRun.names("a", 1...25))
            guard FileManager.default.fileExists(atPath: run.agent.cursorPath(sink: ContractRun.sink)) else {
                throw ContractViolation("\(fixture.name): no cursor stored after delivery")
            }
            let exit = try await run.agent.terminate()
            guard exit == .exited(0) else { throw ContractViolation("\(fixture.name): ferryd stopped with \(exit)") }
            try run.agent.start(extraEnvironment: run.progressEnvironment)
            try await run.agent.waitUntilReady()
            try await run.emit("b", 1...15)
            try await run.expectExactlyOnce(ContractRun.names("a", 1...25) + ContractRun.names("b", 1...15))

            let text = (try? String(contentsOfFile: run.progressPath, encoding: .utf8)) ?? ""
            let reached = Set(text.split(separator: "\n").compactMap { $0.split(separator: " ").first.map(String.init) })
                // Consent's and the commit's own points (the events' ingest, killed at by
                // InlineCommitCrashTests) are no delivery's.
                .filter { !$0.hasPrefix("consent.") && !$0.hasPrefix("ingest.") && !$0.hasPrefix("commit.") }
            let declared = Set(deliveryCrashPoints + fixture.crashPoints)
            guard reached == declared else {
                throw ContractViolation("\(fixture.name): a delivery reached the crash points \(reached.sorted()), the fixture declares \(declared.sorted())")
            }
        }
    }

    /// `ferryd` killed (SIGKILL) the second time it reaches `point`, with 30 events queued in
    /// batches of 10, then restarted with 10 more: the upstream holds each of the 40 exactly once.
    public static func exactlyOnceAcrossKill(_ fixture: any SinkFixture, crashAt point: String) async throws {
        // Delivery waits for `ferry start`, so the batches are the queued events, 10 by 10.
        let settings = ContractRun.Settings(autoStart: false)
        try await withRun(fixture, settings, environment: ["FERRY_CRASH_AT": point + ":2"]) { run in
            try await run.emit("k", 1...30)
            // ferryd may kill itself before it answers `ferry start` (delivery on the sink's
            // thread is that fast): a missing answer is no failure; the kill below is the check.
            _ = try? await runCLI(["start"], environment: run.agent.environment, timeout: .seconds(10))
            do {
                try await eventually("ferryd to kill itself at \(point)", timeout: .seconds(30)) { run.agent.process?.exitStatus != nil }
            } catch {
                throw ContractViolation("\(fixture.name): \(point) was not reached twice: \(error)\n--- ferryd ---\n\(run.agent.logs.suffix(2000))")
            }
            let exit = run.agent.process?.exitStatus
            guard exit == .signaled(SIGKILL) else {
                throw ContractViolation("\(fixture.name): ferryd exited with \(exit.map(String.init(describing:)) ?? "?") instead of killing itself at \(point)\n\(run.agent.logs.suffix(2000))")
            }
            let atKill = try await run.upstream.delivered().count
            try run.agent.start()
            try await run.agent.waitUntilReady()
            try await run.emit("m", 1...10)
            try await run.startDelivery()
            try await run.expectExactlyOnce(ContractRun.names("k", 1...30) + ContractRun.names("m", 1...10))
            print("[contract] \(fixture.name) killed at \(point):2 with \(atKill) of 30 events at the upstream: 40 delivered once each")
        }
    }

    /// The upstream fails as `fault` says while 20 events are emitted; delivery does what the
    /// fault's outcome promises (retried, absorbed, or dead-lettered and replayed), and in the end
    /// the upstream holds each event exactly once.
    public static func survives(_ fixture: any SinkFixture, _ fault: SinkFault) async throws {
        try await withRun(fixture) { run in
            let names = ContractRun.names("f", 1...20)
            try await run.upstream.inject(fault)
            try await run.emit("f", 1...20)
            switch fault.outcome {
            case .retried:
                try await eventually("\(fixture.name): attempts retried under \(fault)") {
                    (try await run.sinkStatus()["retried"] as? NSNumber)?.intValue ?? 0 >= 2
                }
                try await run.upstream.clear(fault)
                try await run.expectExactlyOnce(names)
            case .absorbed:
                try await run.expectExactlyOnce(names)
                try await run.upstream.clear(fault)
            case .deadLettered:
                let letters = try await waitForDeadLetters(run, events: 20)
                for letter in letters where !["permanent", "rejected"].contains(letter["reason"] as? String ?? "") {
                    throw ContractViolation("\(fixture.name): under \(fault) a dead letter's reason is \(letter["reason"] ?? "none")")
                }
                let held = try await run.upstream.delivered()
                guard held.isEmpty else { throw ContractViolation("\(fixture.name): under \(fault) the upstream holds \(held.count) events") }
                try await run.upstream.clear(fault)
                try await run.replayDeadLetters(letters)
                try await run.expectExactlyOnce(names)
            }
            let letters = try await run.deadLetters()
            guard letters.isEmpty else { throw ContractViolation("\(fixture.name): after \(fault) dead letters are left: \(letters)") }
        }
    }

    /// An upstream that stays down past `retry.maxElapsedMilliseconds`: the batches are
    /// dead-lettered (reason `max_elapsed`) with every event, the cursor moves on; once the upstream
    /// is back `ferry deadletter replay` delivers each event exactly once and removes the letters.
    public static func deadLetterAndReplay(_ fixture: any SinkFixture) async throws {
        guard let fault = fixture.faults.first(where: { $0.outcome == .retried }) else {
            throw ContractViolation("\(fixture.name): the fixture has no transient fault to keep the upstream down")
        }
        try await withRun(fixture, ContractRun.Settings(maxElapsedMilliseconds: 300)) { run in
            try await run.upstream.inject(fault)
            try await run.emit("d", 1...12)
            let letters = try await waitForDeadLetters(run, events: 12)
            for letter in letters where letter["reason"] as? String != "max_elapsed" {
                throw ContractViolation("\(fixture.name): a dead letter's reason is \(letter["reason"] ?? "none"), not max_elapsed")
            }
            try await run.upstream.clear(fault)
            // Delivery goes on after the letters: new events arrive before any replay.
            try await run.emit("e", 1...5)
            try await run.expectExactlyOnce(ContractRun.names("e", 1...5))
            try await run.replayDeadLetters(letters)
            try await run.expectExactlyOnce(ContractRun.names("d", 1...12) + ContractRun.names("e", 1...5))
            let left = try await run.deadLetters()
            guard left.isEmpty else { throw ContractViolation("\(fixture.name): replayed dead letters are left: \(left)") }
        }
    }

    /// `ferryd` killed during `ferry deadletter replay`, once the sink has the letter's events and
    /// before the checkpoint is stored and the letter deleted (`delivery.replayed`); restarted,
    /// the letters replayed again: the upstream holds each event exactly once, no letter is left.
    public static func replayExactlyOnceAcrossKill(_ fixture: any SinkFixture) async throws {
        guard let fault = fixture.faults.first(where: { $0.outcome == .retried }) else {
            throw ContractViolation("\(fixture.name): the fixture has no transient fault to keep the upstream down")
        }
        try await withRun(fixture, ContractRun.Settings(maxElapsedMilliseconds: 300),
                          environment: ["FERRY_CRASH_AT": "delivery.replayed:1"]) { run in
            try await run.upstream.inject(fault)
            try await run.emit("p", 1...12)
            let letters = try await waitForDeadLetters(run, events: 12)
            try await run.upstream.clear(fault)
            guard let first = letters.first?["id"] as? String else { throw ContractViolation("\(fixture.name): a dead letter without id") }
            // The agent kills itself before it answers; the command is not waited for (it would
            // wait for the answer of an agent that is gone) but stopped once the agent died.
            let replay = try startCLI(["deadletter", "replay", first], environment: run.agent.environment,
                                      outputDirectory: run.directory.path, label: "replay")
            defer { replay.cleanup() }
            try await eventually("\(fixture.name): ferryd to kill itself at delivery.replayed", timeout: .seconds(30)) {
                run.agent.process?.exitStatus != nil
            }
            guard run.agent.process?.exitStatus == .signaled(SIGKILL) else {
                throw ContractViolation("\(fixture.name): ferryd did not kill itself at delivery.replayed: \(run.agent.logs.suffix(2000))")
            }
            try run.agent.start()
            try await run.agent.waitUntilReady()
            try await run.replayDeadLetters(try await run.deadLetters())
            try await run.expectExactlyOnce(ContractRun.names("p", 1...12))
            let left = try await run.deadLetters()
            guard left.isEmpty else { throw ContractViolation("\(fixture.name): replayed dead letters are left: \(left)") }
        }
    }

    /// With `disclose` withholding origin, process details and a context key, nothing of them
    /// reaches the upstream; the event itself does.
    public static func withholdsWhatDisclosureWithholds(_ fixture: any SinkFixture) async throws {
        try await withRun(fixture, ContractRun.Settings(disclose: ContractRun.Settings.withholding)) { run in
            try await run.emit("w", 1...10)
            let records = try await run.expectExactlyOnce(ContractRun.names("w", 1...10))
            for record in records.values {
                try expectWithheld(record, run)
            }
        }
    }

    /// A reload (`SIGHUP`) changing the sink's settings (its `disclose` and batch size) applies
    /// from the next batch on, without a restart and without re-sending what was delivered.
    public static func reloadAppliesSinkSettings(_ fixture: any SinkFixture) async throws {
        try await withRun(fixture, ContractRun.Settings(disclose: ContractRun.Settings.disclosing)) { run in
            try await run.emit("r", 1...10)
            let before = try await run.expectExactlyOnce(ContractRun.names("r", 1...10))
            // The control: disclosed, everything is there, so the checks below can fail.
            for record in before.values {
                guard record.text.contains(run.secret), record.hasKey("origin"), record.hasKey("pid") else {
                    throw ContractViolation("\(fixture.name): with everything disclosed a record lacks the context, origin or pid: \(record)")
                }
            }
            let pid = run.agent.pid
            try await run.reload(ContractRun.Settings(disclose: ContractRun.Settings.withholding, batchEvents: 3))
            try await run.emit("s", 1...10)
            let after = try await run.expectExactlyOnce(ContractRun.names("r", 1...10) + ContractRun.names("s", 1...10))
            for name in ContractRun.names("s", 1...10) {
                try expectWithheld(after[name]!, run)
            }
            guard run.agent.pid == pid, run.agent.isRunning else { throw ContractViolation("\(fixture.name): the reload restarted ferryd") }
        }
    }

    /// `ferry forget --user` reaches the upstream (docs/CONSENT.md, "Erasure upstream"), with the
    /// sink's documented effect: 12 events of 6 users delivered; the upstream fails (the fixture's
    /// first transient fault) while the user `u-2` is forgotten, and the request stays pending,
    /// retried (`forget_status`: attempts, last error); once the fault is cleared it is sent,
    /// the upstream accepted it exactly once, and where the sink's erasure deletes (file lines,
    /// JetStream subjects) the user's events are gone and every other one is still there. Then
    /// `ferryd` restarts and delivers 3 more events: the request is not sent again.
    public static func erasureReachesUpstream(_ fixture: any SinkFixture) async throws {
        guard let fault = fixture.faults.first(where: { $0.outcome == .retried }) else {
            throw ContractViolation("\(fixture.name): the fixture has no transient fault to fail the erasure with")
        }
        try await withRun(fixture, ContractRun.Settings(erasure: true)) { run in
            let name = fixture.name
            try await run.emit("x", 1...6)
            try await run.emit("y", 1...6)
            let all = ContractRun.names("x", 1...6) + ContractRun.names("y", 1...6)
            try await run.expectExactlyOnce(all)
            let user = "u-2", hers = ["x-2", "y-2"]

            try await run.upstream.inject(fault)
            let forgot = try await runCLI(["forget", "--user", user], environment: run.agent.environment)
            guard forgot.status == .exited(0) else { throw ContractViolation("\(name): ferry forget: \(forgot)") }
            do {
                try await eventually("\(name): the erasure retried under \(fault)", timeout: .seconds(30)) {
                    guard let sink = try await run.erasureStatus() else { return false }
                    return sink["state"] as? String == "pending" && (sink["attempts"] as? NSNumber)?.intValue ?? 0 >= 2 && sink["last_error"] is String
                }
            } catch {
                let status = try? await run.erasureStatus()
                throw ContractViolation("\(name): \(error); forget_status: \(status.map(String.init(describing:)) ?? "no request for the sink")\n\(run.agent.logs.suffix(2000))")
            }
            try await run.upstream.clear(fault)
            do {
                try await eventually("\(name): the erasure sent once the upstream is back", timeout: .seconds(30)) {
                    try await run.erasureStatus()?["state"] as? String == "sent"
                }
            } catch {
                let status = try? await run.erasureStatus()
                throw ContractViolation("\(name): \(error); forget_status: \(status.map(String.init(describing:)) ?? "none")\n\(run.agent.logs.suffix(2000))")
            }
            let sent = try await run.upstream.erasures(of: user)
            guard sent == 1 else { throw ContractViolation("\(name): the upstream accepted the erasure of \(user) \(sent) times, not once") }
            let kept = run.upstream.erasureDeletes ? all.filter { !hers.contains($0) } : all
            let held = Set(try await run.upstream.delivered().map(\.name))
            guard held == Set(kept) else {
                throw ContractViolation("\(name): after the erasure the upstream holds \(held.sorted()), not \(kept.sorted())")
            }

            // A restart: the request is settled and never sent again.
            let exit = try await run.agent.terminate()
            guard exit == .exited(0) else { throw ContractViolation("\(name): ferryd stopped with \(exit)") }
            try run.agent.start()
            try await run.agent.waitUntilReady()
            // Events of other users (the user's new events would be new lines of hers).
            try await run.emit("z", 3...5)
            try await run.expectExactlyOnce(kept + ContractRun.names("z", 3...5))
            let again = try await run.upstream.erasures(of: user)
            guard again == 1 else { throw ContractViolation("\(name): after a restart the upstream accepted the erasure \(again) times") }
            guard try await run.erasureStatus()?["state"] as? String == "sent" else {
                throw ContractViolation("\(name): after a restart the request is no longer sent: \(String(describing: try? await run.erasureStatus()))")
            }
        }
    }

    /// Consent and routes per sink (docs/DELIVERY.md, "Routes and consent per sink"): the sink
    /// requires `advertising` and its route excludes the names `n-*`. While advertising is
    /// granted every event on the route arrives exactly once; the route's and the event's own
    /// `categoryPreferences` refusals are skipped and counted (`sinks[].skipped`). A revocation
    /// made while a batch is failing in memory (the upstream down) stops it at the sink's next
    /// attempt, before the upstream is back: none of its events reaches the upstream, the
    /// revocation's `consent_updated` does, and later events are skipped as `consent_denied`,
    /// counted, not dead-lettered.
    public static func consentAndRoutePerSink(_ fixture: any SinkFixture) async throws {
        guard let fault = fixture.faults.first(where: { $0.outcome == .retried }) else {
            throw ContractViolation("\(fixture.name): the fixture has no transient fault to hold a batch in memory")
        }
        let routing = #""requiresConsent": ["advertising"], "route": {"exclude": {"names": ["n-*"]}}"#
        try await withRun(fixture, ContractRun.Settings(batchEvents: 5, routing: routing)) { run in
            let name = fixture.name
            let consent: Set<String> = ["consent_updated"]
            func skipped() async throws -> [String: Int] {
                (try await run.sinkStatus()["skipped"] as? [String: Any] ?? [:]).compactMapValues { ($0 as? NSNumber)?.intValue }
            }
            func expectSkipped(_ expected: [String: Int]) async throws {
                do {
                    try await eventually("\(name): skipped \(expected)", timeout: .seconds(30)) { try await skipped() == expected }
                } catch {
                    throw ContractViolation("\(name): the sink's skips are \(String(describing: try? await skipped())), not \(expected)")
                }
            }
            try await run.emit("g", 1...6)
            try await run.emit("n", 1...4)
            try await run.emit("c-1", context: #"{"consent":{"categoryPreferences":{"advertising":false}}}"#)
            try await run.emit("c-2", context: #"{"consent":{"categoryPreferences":{"advertising":true}}}"#)
            try await run.expectExactlyOnce(ContractRun.names("g", 1...6) + ["c-2"], besides: consent)
            try await expectSkipped(["route": 4, "category_preferences": 1])

            // A batch failing in memory, then the revocation: the next attempt skips it.
            try await run.upstream.inject(fault)
            try await run.emit("r", 1...5)
            try await eventually("\(name): the batch retried under \(fault)") {
                (try await run.sinkStatus()["retried"] as? NSNumber)?.intValue ?? 0 >= 2
            }
            try await run.setConsent("advertising", "denied")
            // Skipped at the next attempt, with the upstream still down: nothing of the batch is
            // sent once the upstream is back (an attempt already under way when the revocation
            // came fails with the upstream down, so nothing is on the wire here).
            try await expectSkipped(["route": 4, "category_preferences": 1, "consent_denied": 5])
            try await run.upstream.clear(fault)
            try await run.emit("h", 1...3)
            try await expectSkipped(["route": 4, "category_preferences": 1, "consent_denied": 8])
            // Nothing of the failed batch arrives, for any sink: a failed attempt leaves nothing
            // behind (the JetStream sink closes a connection that keeps publishes while it
            // reconnects, docs/JETSTREAM.md).
            try await run.expectExactlyOnce(ContractRun.names("g", 1...6) + ["c-2", "consent_updated"])
            let letters = try await run.deadLetters()
            guard letters.isEmpty else { throw ContractViolation("\(name): skipped events were dead-lettered: \(letters)") }
        }
    }

    private static func expectWithheld(_ record: DeliveredRecord, _ run: ContractRun) throws {
        let name = run.fixture.name
        guard !record.text.contains(run.secret), !record.hasKey("contract_secret") else {
            throw ContractViolation("\(name): the withheld context key reached the upstream: \(record)")
        }
        for key in ["origin", "pid", "seq", "session"] where record.hasKey(key) {
            throw ContractViolation("\(name): \(key) reached the upstream though withheld: \(record)")
        }
        guard record.text.contains(run.visible) else {
            throw ContractViolation("\(name): the event's properties did not reach the upstream: \(record)")
        }
    }

    /// Waits until dead letters hold `events` events and the queue is empty.
    private static func waitForDeadLetters(_ run: ContractRun, events: Int) async throws -> [[String: Any]] {
        do {
            return try await waitForValue("\(run.fixture.name): \(events) events dead-lettered", timeout: .seconds(30), pollInterval: .milliseconds(100)) {
                let letters = try await run.deadLetters()
                let count = letters.reduce(0) { $0 + (($1["events"] as? NSNumber)?.intValue ?? 0) }
                guard count >= events, try await run.agent.status().queuedEvents == 0 else { return nil }
                return letters
            }
        } catch {
            throw ContractViolation("\(run.fixture.name): \(error)\n--- ferryd ---\n\(run.agent.logs.suffix(2000))")
        }
    }
}
