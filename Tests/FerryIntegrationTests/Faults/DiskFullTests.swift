#if canImport(Glibc)
import Glibc
#endif
import FerryIntegrationKit
import Foundation
import FerryProtocol
import FerryTestKit
import Testing

/// Whether this process can mount a tmpfs the way ``TmpfsMount`` does: really mounts a tiny one
/// with `/bin/mount` and unmounts it. False without root, without `/bin/mount`, or in a container
/// without `CAP_SYS_ADMIN`.
func canMountTmpfs() -> Bool {
    #if os(Linux)
    guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/bin/mount") else { return false }
    let point = "/tmp/ferry-tmpfs-probe-" + UUID().uuidString.lowercased()
    guard (try? FileManager.default.createDirectory(atPath: point, withIntermediateDirectories: false)) != nil else { return false }
    defer { rmdir(point) }
    let mount = Process()
    mount.executableURL = URL(fileURLWithPath: "/bin/mount")
    mount.arguments = ["-t", "tmpfs", "-o", "size=65536,mode=0700", "tmpfs", point]
    mount.standardOutput = FileHandle.nullDevice
    mount.standardError = FileHandle.nullDevice
    guard (try? mount.run()) != nil else { return false }
    mount.waitUntilExit()
    guard mount.terminationReason == .exit, mount.terminationStatus == 0 else { return false }
    if umount2(point, 0) == 0 { return true }
    _ = umount2(point, Int32(MNT_DETACH))
    return false
    #else
    return false
    #endif
}

/// Fault injection: the agent's data directory on a small tmpfs the test mounts and fills.
/// Needs root and permission to mount (as on the development machine and in CI); elsewhere the
/// test is reported as skipped (the probe ``canMountTmpfs()`` decides), never as passed.
@Suite("Faults: disk full", .serialized)
struct DiskFullTests {
    /// Sends `count` events (seq from `first`) in one message and returns the reply's entries.
    static func send(_ agent: AgentProcess, first: Int, count: Int, padding: Int = 1000) async throws -> (events: [WireEvent], entries: [AckEntry]) {
        let events = (first..<(first + count)).map {
            TestEvents.wireEvent(name: "disk-\($0)", source: "disk", sequence: UInt64($0), propertyBytes: padding)
        }
        let reply = try await RawIngestClient.exchange(
            runtimeDirectory: agent.runtimeDirectory,
            messages: [[TestEvents.header(requestID: UInt32(first))] + events.map { $0.encoded() }]
        )[0]
        let entries = try #require(reply.entries, "not an ack: \(reply)")
        return (events, entries)
    }

    @Test("disk full: clients get rejected/full, nothing acked is lost, the agent accepts again when space returns",
          .enabled(if: canMountTmpfs(), "needs root and tmpfs mounts"))
    func diskFull() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The probe mounted one: failing now is a failure, not a reason to skip.
        let mount = try await TmpfsMount(parent: dir.path, sizeBytes: FaultSettings.scale(ci: 4 << 20, soak: 24 << 20))
        defer { mount.unmount() }
        // The sink writes outside the small filesystem, so delivery keeps working while it is full.
        let agent = try AgentProcess(dataDirectory: mount.path + "/data", runtimeDirectory: dir.appending("rt"),
                                     sinkDirectory: dir.appending("delivered"), logDirectory: dir.appending("logs"))
        defer { agent.cleanup() }  // declared after the mount: runs before the unmount
        try await agent.waitUntilReady()

        var accepted: [WireEvent] = []
        var next = 1
        let cycles = FaultSettings.scale(ci: 1, soak: 20)
        for cycle in 1...cycles {
            // Leave about 256 KiB free.
            let filler = mount.path + "/filler"
            let fillerBytes = max(0, mount.freeBytes - (256 << 10))
            #expect(FileManager.default.createFile(atPath: filler, contents: Data(count: fillerBytes)))

            // Send until the agent says full; everything before that was acked accepted.
            var refusal: AckEntry?
            var acceptedThisCycle = 0
            for _ in 0..<1000 {
                let (events, entries) = try await Self.send(agent, first: next, count: 20)
                next += events.count
                for (event, entry) in zip(events, entries) {
                    if entry.status == .accepted {
                        accepted.append(event)
                        acceptedThisCycle += 1
                    } else if refusal == nil {
                        refusal = entry
                    }
                }
                if refusal != nil { break }
            }
            let refused = try #require(refusal, "cycle \(cycle): the agent never refused an event on a full disk")
            #expect(refused.status == .rejected && refused.reason == .full, "cycle \(cycle): \(refused)")
            #expect(acceptedThisCycle > 50, "cycle \(cycle)")
            let status = try await agent.status()
            #expect((status.counters["rejected_full"] ?? 0) > 0, "\(status)")
            if cycle == 1 {
                print("[fault] disk full: tmpfs of \(mount.sizeBytes >> 10) KiB filled to 256 KiB free; \(acceptedThisCycle) events accepted before the disk filled; then \(refused.status)/\(refused.reason); \(status.counters)")

                // A script using the CLI sees it too: rejected, exit status 1.
                let emit = try await runCLI(["emit", "While Full", "--prop", "pad=\(String(repeating: "x", count: 40_000))", "--wait"],
                                            environment: agent.environment)
                #expect(emit.status == .exited(1), "\(emit)")
                #expect(emit.stdout == "accepted=0 duplicate=0 rejected=1\n", "\(emit)")
            }

            // A crash while the disk is full: the agent must come back (recovery cannot write much).
            agent.kill9()
            try agent.start()
            try await agent.waitUntilReady()
            // (Larger than what the refused message needed, so it cannot fit either.)
            let stillFull = try await Self.send(agent, first: next, count: 1, padding: 40_000)
            next += 1
            #expect(stillFull.entries.map { "\($0.status)/\($0.reason)" } == ["rejected/full"], "cycle \(cycle): \(agent.logs.suffix(2000))")

            // Space returns: the agent accepts again without a restart.
            try FileManager.default.removeItem(atPath: filler)
            let retry = next
            let after = try await waitForValue("the agent to accept again", timeout: .seconds(20)) { () -> [WireEvent]? in
                let (events, entries) = try await Self.send(agent, first: retry, count: 20)
                return entries.allSatisfy { $0.status == .accepted || $0.status == .duplicate } ? events : nil
            }
            next += after.count
            accepted += after
        }

        // Nothing acked is lost, nothing delivered twice, no seq gap among the accepted.
        let report = try await waitForValue("every accepted event delivered", timeout: .seconds(30)) { () -> DeliveryReport? in
            let report = try DeliveryReport(sinkDirectory: agent.sinkDirectory)
            let status = try await agent.status()
            return report.uniqueIDs.isSuperset(of: accepted.map(\.id.description)) && status.queuedEvents == 0 ? report : nil
        }
        #expect(report.duplicateIDs.isEmpty, "\(report)")
        #expect(report.uniqueIDs == Set(accepted.map(\.id.description)), "only acked events reach the sink: \(report)")
        let delivered = report.sequences(source: "disk")
        #expect(delivered == accepted.map { Int($0.sequence) }.sorted())
        print("[fault] disk full: \(cycles) fill/crash/free cycles; \(accepted.count) events accepted in all; \(report.events.count) delivered, 0 lost, \(report.duplicateIDs.count) duplicated")
        try await agent.terminate()
    }
}
