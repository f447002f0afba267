import FerryIntegrationKit
import Foundation
import FerryTestKit
import Synchronization
import Testing

/// A flag one task sets and others poll.
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}

/// Fault injection with the real binaries: `ferryd` killed with SIGKILL over and over while
/// clients emit. CI runs 20 kills; `FERRY_SOAK=1` (scripts/soak) runs 500.
@Suite("Faults: crash loop", .serialized)
struct CrashLoopTests {
    /// Feeds JSON lines to an `emit --stdin` process in chunks until `stop` is set; returns how
    /// many lines it wrote (line i has seq i: one client, one source, one sequence). Paced at about
    /// `chunk` lines per `every`, so the drain after the loop stays short (the pause is pacing,
    /// not synchronisation: the pipe blocks the writer while the agent is down anyway).
    static func feedUntilStopped(
        _ process: ChildProcess, prefix: String, stop: StopFlag, chunk: Int = 20, every: Duration = .milliseconds(20)
    ) -> Task<Int, Never> {
        Task {
            var written = 0
            while !stop.isSet {
                try? await Task.sleep(for: every)
                do {
                    try await process.writeInput(TestEvents.jsonLines(count: chunk, namePrefix: prefix, first: written + 1, padding: 40))
                } catch {
                    break
                }
                written += chunk
            }
            return written
        }
    }

    @Test("kill -9 of ferryd at random moments while 4 clients emit: every acked event delivered once, no seq gap")
    func crashLoop() async throws {
        let kills = FaultSettings.scale(ci: 20, soak: 500)
        var random = FaultSettings.generator(for: "crash loop (\(kills) kills)")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let started = ContinuousClock.now

        let clients = 4
        var processes: [ChildProcess] = []
        defer { processes.forEach { $0.cleanup() } }
        for client in 1...clients {
            processes.append(try startCLI(["emit", "--stdin", "--wait", "--timeout", "180", "--source", "crash-\(client)"],
                                          input: .pipe, environment: agent.environment, outputDirectory: dir.path,
                                          label: "emit-crash-\(client)"))
        }
        let stop = StopFlag()
        let feeders = processes.enumerated().map { index, process in
            Self.feedUntilStopped(process, prefix: "crash-\(index + 1)", stop: stop)
        }

        // The loop: let the agent make a random amount of progress (sometimes none: some kills
        // land during start-up or recovery), kill it, start it again. Kill moments are tied to
        // progress the agent reports, not to time, so a slow machine changes nothing.
        var killedDuringStartUp = 0
        var acceptedAtKills: [Int] = []
        for _ in 1...kills {
            if Double.random(in: 0..<1, using: &random) < 0.15 {
                // A kill during start-up: at once, or once this run has recovered its queue but
                // before it serves.
                if Bool.random(using: &random), let process = agent.process {
                    try await eventually("this run to recover its queue") {
                        process.standardError.contains("recovered the queue") || process.exitStatus != nil
                    }
                }
                if agent.isRunning, (try? await agent.status(timeout: .milliseconds(200))) == nil { killedDuringStartUp += 1 }
            } else {
                // A kill mid-stream: once this run has accepted a random number of events.
                try await agent.waitUntilReady()
                let target = Int.random(in: 1...1500, using: &random)
                let accepted = try await waitForValue("this run to accept \(target) events", timeout: .seconds(60)) { () -> Int? in
                    let accepted = (try? await agent.status(timeout: .milliseconds(300)))?.counters["accepted"] ?? 0
                    return accepted >= target ? accepted : nil
                }
                acceptedAtKills.append(accepted)
            }
            let killed = agent.kill9()
            #expect(killed == .signaled(SIGKILL), "ferryd ended \(killed) before the kill\n\(agent.logs.suffix(3000))")
            try agent.start()
        }
        try await agent.waitUntilReady()
        let loopTime = ContinuousClock.now - started

        stop.set()
        var written: [Int] = []
        for feeder in feeders { written.append(await feeder.value) }
        processes.forEach { $0.closeInput() }
        var resent = 0
        for (index, process) in processes.enumerated() {
            let exit = try await process.waitForExit(timeout: .seconds(240))
            #expect(exit == .exited(0), "client \(index + 1): \(process.standardError.suffix(2000))")
            let counts = try #require(MultiProcessTests.parseCounts(process.standardOutput),
                                      "client \(index + 1) printed \(process.standardOutput)")
            // Every line written was acked: accepted, or duplicate of a copy stored before a kill.
            #expect(counts.accepted + counts.duplicate == written[index], "client \(index + 1): \(process.standardOutput)")
            #expect(counts.rejected == 0, "client \(index + 1): \(process.standardOutput)")
            resent += counts.duplicate
        }

        let total = written.reduce(0, +)
        let report = try await waitForValue("every event delivered", timeout: .seconds(120)) { () -> DeliveryReport? in
            let report = try DeliveryReport(sinkDirectory: agent.sinkDirectory)
            let status = try await agent.status()
            return report.uniqueIDs.count >= total && status.queuedEvents == 0 ? report : nil
        }
        let duplicates = report.events.count - report.uniqueIDs.count
        print("[fault] crash loop: \(kills) kills (\(killedDuringStartUp) during start-up) in \(loopTime); \(total) events from \(clients) clients \(written); \(resent) re-sent events answered duplicate; sink: \(report.events.count) lines, \(duplicates) duplicates; accepted counter at kills: \(acceptedAtKills.prefix(5))…")
        #expect(report.uniqueIDs.count == total, "\(report)")
        #expect(duplicates == 0, "duplicated ids in the sink, e.g. \(report.duplicateIDs.prefix(5))")
        for client in 1...clients {
            let problem = report.sequenceProblem(source: "crash-\(client)", count: written[client - 1])
            #expect(problem == nil, "\(problem ?? "")")
        }
        let inspect = try await runCLI(["queue", "inspect", "--data-dir", agent.dataDirectory], environment: agent.environment)
        #expect(inspect.status == .exited(0), "a kill -9 never leaves damage behind a committed record: \(inspect)")
        print("[fault] crash loop total time \(ContinuousClock.now - started)")
    }

    @Test("kill -9 of ferryd while 16 clients emit as fast as they can: 0 duplicates, nothing lost (sessions, not the id window)")
    func crashLoopSixteenClientsFullSpeed() async throws {
        let kills = FaultSettings.scale(ci: 8, soak: 200)
        let linesPerClient = FaultSettings.scale(ci: 2_000, soak: 50_000)
        var random = FaultSettings.generator(for: "16-client crash loop (\(kills) kills)")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // A small id window (1000 ids, far less than the 32 000 events in flight across the loop):
        // re-sends after a kill must be caught by the session table.
        let config = #"{"dedup": {"maxEntries": 1000, "maxAgeSeconds": 900}, "log": {"segmentMaxBytes": 1048576}}"#
        let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(config, in: dir))
        defer { agent.cleanup() }
        try await agent.waitUntilReady()

        let clients = 16
        var processes: [ChildProcess] = []
        defer { processes.forEach { $0.cleanup() } }
        for client in 1...clients {
            processes.append(try startCLI(["emit", "--stdin", "--wait", "--timeout", "300", "--source", "fast-\(client)"],
                                          input: .pipe, environment: agent.environment, outputDirectory: dir.path,
                                          label: "emit-fast-\(client)"))
        }
        // Full speed: each feeder writes its lines in large chunks with no pause (the pipe blocks
        // it while its client cannot keep up or the agent is down). Each holds back the second
        // half of its lines until the first kill (or the loop's end), so at least one kill lands
        // mid-stream however fast the machine runs the clients and however late a status answers
        // under load (CI once saw the clients finish before any answer reached a kill target).
        let firstKillDone = StopFlag()
        // However the loop below ends (a throw too), the feeders are released.
        defer { firstKillDone.set() }
        let feeders = processes.enumerated().map { index, process in
            Task { () -> Int in
                var written = 0
                while written < linesPerClient {
                    if written >= linesPerClient / 2, !firstKillDone.isSet {
                        _ = try? await waitForValue("the first kill", timeout: .seconds(300)) { firstKillDone.isSet ? true : nil }
                    }
                    let count = min(500, linesPerClient - written)
                    do {
                        try await process.writeInput(TestEvents.jsonLines(count: count, namePrefix: "fast-\(index + 1)", first: written + 1))
                    } catch {
                        break
                    }
                    written += count
                }
                process.closeInput()
                return written
            }
        }

        // Kills at random progress points while the clients send; stop early if they are done.
        var performed = 0
        for _ in 1...kills {
            try await agent.waitUntilReady(timeout: .seconds(60))
            let target = Int.random(in: 200...3000, using: &random)
            let reached = try await waitForValue("this run to accept \(target) events or the clients to finish", timeout: .seconds(120)) { () -> Bool? in
                let counters = (try? await agent.status(timeout: .seconds(1)))?.counters ?? [:]
                if (counters["accepted"] ?? 0) + (counters["duplicate"] ?? 0) >= target { return true }
                return processes.allSatisfy { !$0.isRunning } ? false : nil
            }
            guard reached else { break }
            let killed = agent.kill9()
            #expect(killed == .signaled(SIGKILL), "ferryd ended \(killed) before the kill\n\(agent.logs.suffix(3000))")
            performed += 1
            firstKillDone.set()
            try agent.start()
        }
        firstKillDone.set()
        try await agent.waitUntilReady(timeout: .seconds(60))
        var written: [Int] = []
        for feeder in feeders { written.append(await feeder.value) }
        var resent = 0
        for (index, process) in processes.enumerated() {
            let exit = try await process.waitForExit(timeout: .seconds(300))
            #expect(exit == .exited(0), "client \(index + 1): \(process.standardError.suffix(2000))")
            let counts = try #require(MultiProcessTests.parseCounts(process.standardOutput),
                                      "client \(index + 1) printed \(process.standardOutput)")
            #expect(counts.accepted + counts.duplicate == written[index], "client \(index + 1): \(process.standardOutput)")
            resent += counts.duplicate
        }
        let total = written.reduce(0, +)
        let report = try await waitForValue("every event delivered", timeout: .seconds(180)) { () -> DeliveryReport? in
            let report = try DeliveryReport(sinkDirectory: agent.sinkDirectory)
            let status = try await agent.status()
            return report.uniqueIDs.count >= total && status.queuedEvents == 0 ? report : nil
        }
        let duplicates = report.events.count - report.uniqueIDs.count
        print("[fault] 16-client crash loop: \(performed) kills; \(total) events; \(resent) re-sent events answered duplicate; sink: \(report.events.count) lines, \(duplicates) duplicates")
        #expect(performed >= 1, "the clients finished before the first kill; raise linesPerClient")
        #expect(report.uniqueIDs.count == total, "\(report)")
        #expect(duplicates == 0, "duplicated ids in the sink, e.g. \(report.duplicateIDs.prefix(5))")
        for client in 1...clients {
            let problem = report.sequenceProblem(source: "fast-\(client)", count: written[client - 1])
            #expect(problem == nil, "\(problem ?? "")")
        }
    }
}
