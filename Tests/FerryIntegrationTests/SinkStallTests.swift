#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// One sink's own I/O stalls for real — its output directory is on a FUSE file system that holds
/// every request while stalled — and the other sink keeps delivering, `ferry status` answers while
/// the stalled request is still held, and nothing is lost or repeated once the stall ends.
@Suite("A sink stalled in I/O holds back no other (real stall in a FUSE file system)")
struct SinkStallTests {
    @Test("for 5 s of stalled output files: the other sink delivers everything, status answers; then both exactly once",
          .enabled(if: StallFS.isAvailable, "needs /dev/fuse and libfuse3"))
    func stalledSinkHoldsBackNoOther() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fs = try await StallFS(in: dir, name: "stuck")
        // The stuck sink writes through the mount; the test reads its files from the backing
        // directory, which a stall does not hold.
        let stuckDirectory = fs.mountPoint + "/out", stuckFiles = fs.backingDirectory + "/out"
        let healthyDirectory = dir.appending("out-healthy")
        let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments("""
        {"sinks": [
          {"name": "stuck", "type": "file", "directory": "\(stuckDirectory)", "batch": {"maxEvents": 50}},
          {"name": "healthy", "type": "file", "directory": "\(healthyDirectory)", "batch": {"maxEvents": 50}}
        ]}
        """, in: dir))
        // A process blocked on a held FUSE request ignores even SIGKILL: release the file system
        // before the agent is killed and before the directory is removed.
        defer {
            fs.cleanup()
            agent.cleanup()
        }
        try await agent.waitUntilReady()
        var sent = 0
        func emit(_ count: Int) async throws {
            let result = try await runCLI(["emit", "--stdin", "--wait", "--source", "stall"],
                                          stdin: TestEvents.jsonLines(count: count, namePrefix: "stall", first: sent + 1),
                                          environment: agent.environment, timeout: .seconds(30))
            #expect(result.status == .exited(0), "\(result.stderr)")
            sent += count
        }

        try await emit(20)
        try await eventually("both sinks to deliver the first 20 events", timeout: .seconds(30)) {
            try deliveredEvents(in: stuckFiles).count == 20 && deliveredEvents(in: healthyDirectory).count == 20
        }

        try await fs.stall()
        try await emit(20)
        // The stuck sink's next write is now held inside the kernel.
        let held = try await fs.waitUntilBlocked(timeout: .seconds(30))
        let stalledAt = ContinuousClock.now
        var rounds = 0
        // Keep going for 5 s of stall: every round's events reach the healthy sink while the
        // stuck sink's request stays held.
        repeat {
            try await eventually("the healthy sink to deliver all \(sent) events while the other is stalled", timeout: .seconds(30)) {
                try deliveredEvents(in: healthyDirectory).count == sent
            }
            let status = try await runCLI(["status", "--json"], environment: agent.environment, timeout: .seconds(30))
            #expect(status.status == .exited(0), "\(status.stderr)")
            #expect(fs.blockedOperations.contains(held), "the status answer did not wait for the held request \(held)")
            let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
            let sinks = Dictionary(uniqueKeysWithValues: (object?["sinks"] as? [[String: Any]] ?? []).compactMap { sink in
                (sink["name"] as? String).map { ($0, sink) }
            })
            #expect((sinks["healthy"]?["backlog_events"] as? NSNumber)?.intValue == 0)
            #expect(((sinks["stuck"]?["backlog_events"] as? NSNumber)?.intValue ?? 0) > 0, "\(status.stdout)")
            try await emit(10)
            rounds += 1
        } while ContinuousClock.now - stalledAt < .seconds(5)
        #expect(try deliveredEvents(in: stuckFiles).count == 20, "the stalled sink wrote nothing while stalled")
        print("[measure] stalled sink: \(rounds) rounds in \(ContinuousClock.now - stalledAt); healthy sink delivered \(sent) events meanwhile")

        try await fs.resume()
        for directory in [stuckFiles, healthyDirectory] {
            let report = try await waitForValue("every event in \(directory)", timeout: .seconds(60)) { () -> DeliveryReport? in
                let report = try DeliveryReport(sinkDirectory: directory)
                return report.events.count >= sent ? report : nil
            }
            #expect(report.events.count == sent, "\(report)")
            #expect(report.duplicateIDs.isEmpty, "duplicated ids, e.g. \(report.duplicateIDs.prefix(5))")
            // Each `ferry emit` run is its own client (its sequence starts at 1): check the names.
            #expect(Set(report.events.map(\.name)) == Set((1...sent).map { "stall-\($0)" }))
        }
        #expect(try await agent.terminate() == .exited(0))
    }
}
