import FerryIntegrationKit
import Foundation
import FerryProtocol
import FerryTestKit
import Synchronization
import Testing

/// Hostile and slow peers against the real `ferryd`, each while a well-behaved `ferry emit`
/// client sends: the agent's memory stays bounded and the well-behaved client's events are all
/// accepted and delivered.
@Suite("Faults: hostile peers", .serialized)
struct HostilePeerTests {
    /// The bound asserted on the agent's peak resident memory (VmHWM).
    static let memoryBound = 256 << 20

    /// Runs `hostile` against a fresh agent while a polite client emits, then checks the polite
    /// client and the agent's memory. Returns the agent's peak memory.
    func withPoliteClient(
        _ name: String, hostile: @escaping @Sendable (AgentProcess) async throws -> [HostilePeer.Result]
    ) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let pid = try #require(agent.pid)
        let baseline = try #require(ProcessMemory(pid: pid))

        let polite = try startCLI(["emit", "--stdin", "--wait", "--timeout", "120", "--source", "polite"],
                                  input: .pipe, environment: agent.environment, outputDirectory: dir.path, label: "emit-polite")
        defer { polite.cleanup() }
        let feederStop = StopFlag()
        let feeder = CrashLoopTests.feedUntilStopped(polite, prefix: "polite", stop: feederStop)
        let started = ContinuousClock.now
        let results = try await hostile(agent)
        let hostileTime = ContinuousClock.now - started
        feederStop.set()
        let written = await feeder.value
        polite.closeInput()
        let exit = try await polite.waitForExit(timeout: .seconds(150))
        #expect(exit == .exited(0), "\(polite.standardError.suffix(2000))")
        #expect(polite.standardOutput == "accepted=\(written) duplicate=0 rejected=0\n", "\(polite.standardOutput)")

        let report = try await waitForValue("the polite client's events delivered", timeout: .seconds(120)) { () -> DeliveryReport? in
            let status = try await agent.status()
            guard status.queuedEvents == 0 else { return nil }
            return try DeliveryReport(sinkDirectory: agent.sinkDirectory)
        }
        #expect(report.sequenceProblem(source: "polite", count: written) == nil, "\(report.sequenceProblem(source: "polite", count: written) ?? "")")
        #expect(report.duplicateIDs.isEmpty)
        // VmHWM is the kernel's own record of the peak: no sampling needed.
        let final = try #require(ProcessMemory(pid: pid), "ferryd died\n\(agent.logs.suffix(3000))")
        #expect(agent.isRunning)
        let status = try await agent.status()
        print("[fault] \(name): \(results.map(\.description).joined(separator: "; ")) in \(hostileTime); polite client: \(written) events accepted and delivered; ferryd memory: baseline \(baseline), final \(final); counters \(status.counters)")
        #expect(final.peakResidentBytes < Self.memoryBound, "ferryd peak memory \(final) exceeds \(Self.memoryBound >> 20) MiB")
    }

    @Test("a client that sends but never reads its acks: memory bounded, a polite client unaffected")
    func neverReadsAcks() async throws {
        let messages = FaultSettings.scale(ci: 2000, soak: 100_000)
        try await withPoliteClient("never reads acks") { agent in
            let ids = EventIDGenerator()
            let template = TestEvents.wireEvent(name: "deaf", source: "deaf", sequence: 1, propertyBytes: 150).encoded()
            let deadline = ContinuousClock.now + .seconds(FaultSettings.scale(ci: 20, soak: 600))
            return [try await HostilePeer.flood(runtimeDirectory: agent.runtimeDirectory, count: messages, readsReplies: false,
                                                deadline: deadline) { i in
                HostilePeer.eventsMessage(requestID: UInt32(i), template: template, count: 16, ids: ids)
            }]
        }
    }

    @Test("a client flooding max-size batches at full speed: memory bounded, a polite client unaffected")
    func floodsMaxBatches() async throws {
        let rounds = FaultSettings.scale(ci: 6, soak: 30)
        try await withPoliteClient("flood") { agent in
            let ids = EventIDGenerator()
            // The most events one message may carry, small; and batches of the largest events.
            let small = TestEvents.wireEvent(name: "flood", source: "flood", sequence: 1, propertyBytes: 60).encoded()
            let large = TestEvents.wireEvent(name: "flood-large", source: "flood", sequence: 1,
                                             propertyBytes: (64 << 10) - 200).encoded()
            let deadline = ContinuousClock.now + .seconds(FaultSettings.scale(ci: 30, soak: 900))
            async let wide = HostilePeer.flood(runtimeDirectory: agent.runtimeDirectory, count: rounds * 2, readsReplies: true,
                                               deadline: deadline) { i in
                HostilePeer.eventsMessage(requestID: UInt32(i), template: small, count: 4096, ids: ids)
            }
            async let heavy = HostilePeer.flood(runtimeDirectory: agent.runtimeDirectory, count: rounds * 4, readsReplies: false,
                                                deadline: deadline) { i in
                HostilePeer.eventsMessage(requestID: UInt32(i), template: large, count: 64, ids: ids)
            }
            return try await [wide, heavy]
        }
    }

    @Test("an upstream that never answers: ingest goes on, the backlog stays on disk, memory stays bounded, the circuit opens; all delivered once it answers")
    func upstreamNeverAnswers() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let answering = Atomic<Bool>(false)
        let server = try await HTTPTestServer.start { _ in answering.load(ordering: .relaxed) ? .ok : .never }
        let path = dir.appending("ferryd.json")
        try Data("""
            {"sinks": [{"name": "collector", "type": "http", "url": "\(server.url())", "requestTimeoutMilliseconds": 300,
                        "batch": {"maxEvents": 100},
                        "retry": {"initialMilliseconds": 20, "maxMilliseconds": 200},
                        "circuit": {"failureThreshold": 3, "openMilliseconds": 500}}]}
            """.utf8).write(to: URL(fileURLWithPath: path))
        let agent = try AgentProcess(in: dir, extraArguments: ["--config", path])
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let pid = try #require(agent.pid)

        // The polite client is served while the upstream hangs: every event acked.
        let count = 20_000
        let emit = try await runCLI(["emit", "--stdin", "--wait", "--timeout", "120", "--source", "polite"],
                                    stdin: TestEvents.jsonLines(count: count, namePrefix: "stuck"), environment: agent.environment,
                                    timeout: .seconds(150))
        #expect(emit.stdout == "accepted=\(count) duplicate=0 rejected=0\n", "\(emit)")
        let stuck = try await waitForValue("the circuit to open") { () -> [String: Any]? in
            let sinks = try await agent.status().object["sinks"] as? [[String: Any]] ?? []
            return sinks.first { $0["circuit"] as? String == "open" }
        }
        #expect((stuck["backlog_events"] as? NSNumber)?.intValue ?? 0 >= count - 100, "\(stuck)")
        let memory = try #require(ProcessMemory(pid: pid))
        print("[measure] upstream never answers: \(count) events queued on disk, ferryd \(memory)")
        #expect(memory.peakResidentBytes < Self.memoryBound, "\(memory)")

        // Once it answers, everything goes out, each event once.
        answering.store(true, ordering: .relaxed)
        try await eventually("the backlog delivered", timeout: .seconds(120)) { try await agent.status().queuedEvents == 0 }
        let names = server.requests.filter { $0.json != nil }.flatMap { $0.batchEvents.compactMap { $0["name"] as? String } }
        #expect(Set(names).count == count)
    }
}
