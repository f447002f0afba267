import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// The file sink's delivery is two durable steps — its lines (write, `fdatasync`), then its
/// checkpoint with the cursor (an in-place write and `fdatasync`) — and the real `ferryd`,
/// killed -9 at each of its crash points (driven by progress, not time), must still leave every
/// event in the files exactly once after a restart.
@Suite("File sink: killed -9 between its steps, exactly once", .serialized)
struct FileSinkCrashTests {
    /// The crash points of one delivery, in order, each taken at the second batch (the first
    /// in-place cursor save belongs to the first batch).
    static let points = ["sink.file.written", "sink.file.synced", "cursor.written"]

    @Test("killed at a crash point of the second batch, restarted: every event once, in order", arguments: points)
    func killedMidDelivery(_ point: String) async throws {
        try await killAtSecondBatch(point, sinkKeys: "")
    }

    /// The sink keeps its file open; it opens one when it starts delivering and when it rolls to
    /// a new file. With files of at most 1 KiB the second batch rolls: killed with the new file
    /// created (empty) and nothing written through it, the restart removes it (it is past the
    /// checkpoint) and every event is there once, in order.
    @Test("killed right after rolling to a new file (sink.file.opened), restarted: every event once, in order")
    func killedAfterOpeningANewFile() async throws {
        try await killAtSecondBatch("sink.file.opened", sinkKeys: #", "maxFileBytes": 1024"#)
    }

    private func killAtSecondBatch(_ point: String, sinkKeys: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // Batches of 5 and delivery held until `ferry start`: 12 queued events make batches of
        // 5, 5 and 2, each sent at once (full, or the leftover of a backlog).
        let arguments = try AgentProcess.configurationArguments("""
            {"consent": {"autoStart": false},
             "sinks": [{"name": "file", "type": "file", "batch": {"maxEvents": 5, "maxWaitMilliseconds": 200}\(sinkKeys)}]}
            """, in: dir)
        let agent = try AgentProcess(in: dir, extraArguments: arguments, start: false)
        defer { agent.cleanup() }
        try agent.start(extraEnvironment: ["FERRY_CRASH_AT": "\(point):2"])
        try await agent.waitUntilReady()
        let emitted = try await runCLI(["emit", "--stdin", "--wait", "--source", "crash-it"],
                                       stdin: TestEvents.jsonLines(count: 12, namePrefix: "e"), environment: agent.environment)
        #expect(emitted.status == .exited(0), "\(emitted)")
        // ferryd may kill itself before it answers `ferry start` (delivery is that fast): a
        // missing answer is no failure; the kill below is the check that delivery started.
        _ = try? await runCLI(["start"], environment: agent.environment, timeout: .seconds(10))
        try await eventually("ferryd to kill itself at \(point)", timeout: .seconds(30)) { agent.process?.exitStatus != nil }
        #expect(agent.process?.exitStatus == .signaled(SIGKILL), "\(agent.logs.suffix(2000))")
        let atKill = try agent.deliveredEvents().count
        #expect(atKill >= 5 && atKill <= 10, "the kill landed in the second batch: \(atKill) lines")

        try agent.start()
        try await agent.waitUntilReady()
        let restarted = try await runCLI(["start"], environment: agent.environment)
        #expect(restarted.status == .exited(0), "\(restarted)")
        try await eventually("12 lines in the sink", timeout: .seconds(30)) { (try? agent.deliveredEvents().count) == 12 }
        let names = try agent.deliveredEvents().map(\.name)
        #expect(names == (1...12).map { "e-\($0)" }, "each event once, in order: \(names)")
        _ = try await agent.terminate()
    }
}
