#if canImport(Glibc)
import Glibc
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Synchronization
import Testing

/// docs/DELIVERY.md, "Routes and consent per sink": a revocation applies from the sink's next
/// attempt. With the worked example's three live upstreams (`WorkedExampleUpstreams`), the real
/// `ferryd` is killed -9 at each delivery crash point around a revoke of advertising (and at the
/// revoke's own durable point), learned from a run without a crash and driven by progress, not
/// the clock; restarted, it must leave the advertising partner without any batch whose send
/// started after the revoke was acked, and the archive with every acked event exactly once.
@Suite("Revoke around a crash: kill -9 at each delivery crash point, upstream by upstream", .serialized)
struct RevokeCrashTests {
    /// Posted (one request) once advertising is granted; the partner holds its answer to the
    /// batch carrying them until the revoke is acked: that batch is on the wire across the revoke.
    static let before = [("m-before-1", "before-1"), ("m-before-2", "before-2")]
    /// Posted (one request) after the revoke was acked: never the partner's.
    static let after = [("m-after-1", "after-1"), ("m-after-2", "after-2"), ("m-after-3", "after-3")]

    /// The crash points a run goes through: those of delivery (every sink's batch done and
    /// saved, the file sink's steps, the cursor's in-place write) and the revoke's durable step.
    static func isCovered(_ name: String) -> Bool {
        name.hasPrefix("delivery.") || name.hasPrefix("sink.file.") || name == "cursor.written" || name == "consent.intent"
    }

    @Test("killed at each delivery crash point around a revoke: nothing sent to the partner after the ack, the archive exact")
    func killedAroundARevoke() async throws {
        let progressDir = try TemporaryDirectory()
        defer { progressDir.remove() }
        let learning = progressDir.appending("learn")
        let start = try await Self.run(crashAt: nil, progressPath: learning)
        // The window: from the revoke to the end of the run.
        let window = CrashPointProgress(path: learning).reached.dropFirst(start).filter { Self.isCovered($0.name) }
        var names: [String] = []
        var counts: [String: [Int]] = [:]
        for point in window {
            if counts[point.name] == nil { names.append(point.name) }
            counts[point.name, default: []].append(point.count)
        }
        #expect(names.contains("delivery.done") && names.contains("sink.file.synced") && names.contains("consent.intent"), "\(names)")
        let everyReach = ProcessInfo.processInfo.environment["FERRY_SOAK"] == "1"
        let kills = names.flatMap { name -> [String] in
            let reaches = counts[name] ?? []
            let picks = everyReach ? reaches : Array(Set([reaches.first, reaches[reaches.count / 2], reaches.last].compactMap { $0 })).sorted()
            return picks.map { "\(name):\($0)" }
        }
        print("[revoke-crash] from the revocation on: \(names.map { "\($0)×\(counts[$0]?.count ?? 0)" }.joined(separator: " ")); killing at \(kills)")
        for kill in kills {
            _ = try await Self.run(crashAt: kill, progressPath: progressDir.appending(kill))
        }
    }

    /// Holds the partner's answers until opened.
    final class Latch: Sendable {
        private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

        func wait() async {
            await withCheckedContinuation { continuation in
                let open = state.withLock { state in
                    if !state.open { state.waiters.append(continuation) }
                    return state.open
                }
                if open { continuation.resume() }
            }
        }

        func open() {
            let waiters = state.withLock { state in
                state.open = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    /// A value set by a command's task and read by the run.
    final class Shared<Value: Sendable>: Sendable {
        private let state: Mutex<Value>
        init(_ value: Value) { state = Mutex(value) }
        var value: Value { state.withLock { $0 } }
        func set(_ value: Value) { state.withLock { $0 = value } }
    }

    /// One run: grant analytics and advertising, post ``before`` (the partner's answer held),
    /// revoke advertising (the ack noted), release the partner, post ``after``, everything
    /// delivered; `ferryd` armed to die at `crashAt` and restarted (unarmed) whenever it is found
    /// dead. Checks each upstream; returns how many progress lines preceded the revoke.
    static func run(crashAt: String?, progressPath: String) async throws -> Int {
        let label = crashAt ?? "no crash"
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let latch = Latch()
        let upstreams = try await WorkedExampleUpstreams.start(in: dir) { request in
            if request.batchEvents.contains(where: { ($0["name"] as? String)?.hasPrefix("before-") == true }) { await latch.wait() }
            return .ok
        }
        defer {
            latch.open()
            Task { await upstreams.shutdown() }
        }
        let agent = try AgentProcess(in: dir, extraArguments: upstreams.configuration, start: false)
        defer { agent.cleanup() }
        try agent.start(extraEnvironment: ["FERRY_PROGRESS_FILE": progressPath].merging(crashAt.map { ["FERRY_CRASH_AT": $0] } ?? [:]) { $1 })
        try await agent.waitUntilReady()

        do {
            return try await script(crashAt: crashAt, label: label, agent: agent, upstreams: upstreams, latch: latch, progressPath: progressPath)
        } catch {
            Issue.record("\(label): \(error)\nferryd's log: \(agent.logs.suffix(4000))")
            throw error
        }
    }

    private static func script(crashAt: String?, label: String, agent: AgentProcess, upstreams: WorkedExampleUpstreams, latch: Latch,
                               progressPath: String) async throws -> Int {
        var deaths: [FerryIntegrationKit.ExitStatus] = []
        // The partner's request count when the revoke's answer came, and at each restart after it.
        let ackedAt = Shared<Int?>(nil)
        var restartedAt: [Int] = []
        func restartIfDead() async throws -> Bool {
            guard let status = agent.process?.exitStatus else { return false }
            deaths.append(status)
            if ackedAt.value != nil { restartedAt.append(upstreams.adsRequests().count) }
            try agent.start()
            try await agent.waitUntilReady()
            return true
        }
        /// Runs `command` until it succeeds, restarting the agent whenever it dies under it (a
        /// CLI command waits for an agent to come back: it may then finish with the new one).
        func command(_ what: String, _ body: @escaping @Sendable () async throws -> Bool) async throws {
            for _ in 0..<3 {
                let result = Shared<Bool?>(nil)
                let task = Task { result.set((try? await body()) ?? false) }
                repeat {
                    try await eventually("\(what) answered or ferryd gone (\(label))", timeout: .seconds(90)) {
                        result.value != nil || agent.process?.exitStatus != nil
                    }
                } while try await restartIfDead()
                await task.value
                if result.value == true { return }
            }
            throw FerryTestKitError("\(what) never succeeded (\(label))")
        }
        /// Waits for `condition`, restarting the agent whenever it is found dead.
        func until(_ what: String, _ condition: () async throws -> Bool) async throws {
            repeat {
                try await eventually("\(what) (\(label))", timeout: .seconds(30)) {
                    if agent.process?.exitStatus != nil { return true }
                    return (try? await condition()) == true
                }
            } while try await restartIfDead()
        }
        func count(_ names: [String], _ name: String) -> Int { names.filter { $0 == name }.count }
        func holds(_ names: [String], _ events: [(String, String)]) -> Bool { events.allSatisfy { names.contains($0.1) } }

        // Before the window: both granted, the partner's batch with `before` held on the wire.
        try await command("grant analytics") { try await WorkedExampleUpstreams.setConsent("analytics", "granted", on: agent) }
        try await command("grant advertising") { try await WorkedExampleUpstreams.setConsent("advertising", "granted", on: agent) }
        try await until("both grants everywhere") {
            try count(upstreams.archive(), "consent_updated") == 2 && count(upstreams.segment(), "consent_updated") == 2
                && count(upstreams.ads(), "consent_updated") == 2
        }
        try await command("post before") { await WorkedExampleUpstreams.post(before, to: agent)?.contains(#""accepted":2"#) == true }
        try await until("before in the archive and analytics, on the wire to the partner") {
            try holds(upstreams.archive(), before) && holds(upstreams.segment(), before) && holds(upstreams.ads(), before)
        }
        let windowStart = CrashPointProgress(path: progressPath).reached.count

        // The window.
        try await command("revoke advertising") {
            guard try await WorkedExampleUpstreams.setConsent("advertising", "denied", on: agent) else { return false }
            ackedAt.set(upstreams.adsRequests().count)
            return true
        }
        let acked = ackedAt.value ?? 0
        try await until("the revoke's consent_updated in the archive and analytics") {
            try count(upstreams.archive(), "consent_updated") >= 3 && count(upstreams.segment(), "consent_updated") >= 3
        }
        latch.open()
        // (Perhaps before the ack: killed at the revoke's durable step, the restarted agent
        // finishes the change and delivers it while the CLI waits for it to come back.)
        try await until("the revoke's consent_updated at the partner") { count(upstreams.ads(), "consent_updated") >= 3 }
        try await command("post after") {
            guard let answer = await WorkedExampleUpstreams.post(after, to: agent) else { return false }
            return answer.contains(#""accepted":3"#) || answer.contains(#""duplicate":"#)
        }
        try await until("after in the archive and analytics, nothing queued") {
            let queued = try await agent.status().queuedEvents
            return try holds(upstreams.archive(), after) && holds(upstreams.segment(), after) && queued == 0
        }

        // Killed once where asked (the restarted agent is not armed), never otherwise.
        #expect(deaths == (crashAt == nil ? [] : [.signaled(SIGKILL)]), "\(label): \(deaths)")
        // The partner: nothing posted after the revoke; after its ack, only consent_updated,
        // but for one batch of `before` arriving before any restart (on the wire at the ack).
        let requests = upstreams.adsRequests()
        #expect(!requests.joined().contains { $0.hasPrefix("after-") }, "\(label): \(requests)")
        let late = requests.enumerated().dropFirst(acked).filter { $0.element.contains { $0 != "consent_updated" } }
        let firstRestart = restartedAt.first ?? Int.max
        #expect(late.count <= 1 && late.allSatisfy { $0.offset < firstRestart && $0.element.allSatisfy { $0.hasPrefix("before-") || $0 == "consent_updated" } },
                "\(label): acked at request \(acked), restarted at \(restartedAt): \(requests)")
        // The archive: every acked event exactly once; analytics: every one.
        let archived = try deliveredEvents(in: upstreams.archiveDirectory)
        #expect(archived.map(\.name).filter { $0 != "consent_updated" } == (before + after).map(\.1), "\(label): \(archived.map(\.name))")
        #expect(Set(archived.map(\.id)).count == archived.count, "\(label): a line twice")
        #expect(holds(upstreams.segment(), before + after), "\(label): \(upstreams.segment())")
        _ = try await agent.terminate()
        return windowStart
    }
}
