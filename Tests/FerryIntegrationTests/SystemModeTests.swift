import FerryIntegrationKit
import FerryTestKit
import Foundation
import Synchronization
import Testing

/// A system agent shared by several users, with the kernel telling who sent what. Needs root (to
/// create users and a group and to run commands as them): elsewhere each test reports a skip.
@Suite("System mode: several users, one agent", .serialized)
struct SystemModeTests {
    /// Why these tests cannot run here, or nil.
    static var skipReason: String? {
        guard getuid() == 0 else { return "needs root (creates users and a group)" }
        for tool in ["/usr/sbin/useradd", "/usr/sbin/groupadd", "/usr/sbin/userdel", "/usr/sbin/groupdel", "/usr/sbin/runuser", "/usr/sbin/usermod"]
        where !FileManager.default.isExecutableFile(atPath: tool) {
            return "needs \(tool)"
        }
        return nil
    }

    /// Two users and a group made for one test, removed by ``remove()``.
    struct Accounts {
        let group: String
        let member: String
        let outsider: String
        let memberUID: UInt32
        let outsiderUID: UInt32

        static func create() async throws -> Accounts {
            let tag = String(UInt32.random(in: 0...0xFFFFF), radix: 16)
            let group = "fyg\(tag)", member = "fym\(tag)", outsider = "fyo\(tag)"
            try await run("/usr/sbin/groupadd", [group])
            // The member is in the group only as a supplementary group (its primary group is its own).
            try await run("/usr/sbin/useradd", ["--no-create-home", "--user-group", "--groups", group, member])
            try await run("/usr/sbin/useradd", ["--no-create-home", "--user-group", outsider])
            return Accounts(group: group, member: member, outsider: outsider,
                            memberUID: try await uid(of: member), outsiderUID: try await uid(of: outsider))
        }

        func remove() async {
            for user in [member, outsider] { _ = try? await runProcess("/usr/sbin/userdel", [user]) }
            _ = try? await runProcess("/usr/sbin/groupdel", [group])
        }

        static func uid(of user: String) async throws -> UInt32 {
            let result = try await runProcess("/usr/bin/id", ["-u", user])
            return try #require(UInt32(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(result)")
        }

        static func run(_ tool: String, _ arguments: [String]) async throws {
            let result = try await runProcess(tool, arguments)
            try #require(result.status == .exited(0), "\(tool) \(arguments): \(result)")
        }
    }

    /// Runs the copied `ferry` as `user`.
    static func ferry(as user: String, _ binary: String, _ arguments: [String]) async throws -> CommandResult {
        try await runProcess("/usr/sbin/runuser", ["-u", user, "--", binary] + arguments, timeout: .seconds(60))
    }

    /// Runs `body` with fresh accounts, a temporary directory every user can reach and a copy of
    /// `ferry` in it; the accounts are removed however `body` ends. Reports a skip without root.
    static func withAccounts(
        _ label: String, _ body: (Accounts, TemporaryDirectory, _ binary: String) async throws -> Void
    ) async throws {
        if let reason = skipReason {
            print("[skip] \(label) — \(reason)")
            return
        }
        let accounts = try await Accounts.create()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        do {
            chmod(dir.path, 0o755)
            let binary = dir.appending("ferry")
            try FileManager.default.copyItem(atPath: try FerryBinaries.ferry(), toPath: binary)
            chmod(binary, 0o755)
            try await body(accounts, dir, binary)
        } catch {
            await accounts.remove()
            throw error
        }
        await accounts.remove()
    }

    @Test("a supplementary group member's event carries its uid in origin; an outsider is refused with nothing stored; only root changes consent")
    func usersAndGroups() async throws {
        try await Self.withAccounts("System mode: several users, one agent") { accounts, dir, binary in
            let config = """
                {"mode": "system", "access": {"ingest": {"groups": ["\(accounts.group)"]},
                 "control": {"users": ["root"]}, "events": {"groups": ["\(accounts.group)"]}}}
                """
            let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(config, in: dir))
            defer { agent.cleanup() }
            try await agent.waitUntilReady()
            let runtime = ["--runtime-dir", agent.runtimeDirectory]

            // The member (in the group only as a supplementary group) emits and waits for the ack.
            let sent = try await Self.ferry(as: accounts.member, binary, ["emit", "member-event", "--source", "sys-member", "--wait"] + runtime)
            #expect(sent.status == .exited(0), "\(sent)")
            let delivered = try await waitForValue("the member's event in the sink", timeout: .seconds(30)) { () -> DeliveredEvent? in
                try agent.deliveredEvents().first { $0.source == "sys-member" }
            }
            let line = try #require(try JSONSerialization.jsonObject(with: Data(delivered.line.utf8)) as? [String: Any])
            let origin = try #require(line["origin"] as? [String: Any], "\(delivered.line)")
            #expect((origin["uid"] as? NSNumber)?.uint32Value == accounts.memberUID, "\(origin)")
            #expect(origin["comm"] as? String == "ferry", "\(origin)")

            // The outsider gets the refusal, and nothing of it is stored.
            let refused = try await Self.ferry(as: accounts.outsider, binary, ["emit", "outsider-event", "--source", "sys-outsider", "--wait", "--timeout", "10"] + runtime)
            #expect(refused.status != .exited(0), "\(refused)")
            #expect(refused.stderr.contains("access_denied") || refused.stderr.contains("access denied"), "\(refused)")
            let status = try await agent.status()
            #expect(status.counters["access_denied"] ?? 0 >= 1, "\(status.counters)")
            #expect(try agent.deliveredEvents().allSatisfy { $0.source != "sys-outsider" })
            let segments = filesContaining("outsider-event", under: agent.dataDirectory)
            #expect(segments.isEmpty, "the refused event reached the disk: \(segments)")

            // A non-admin cannot change consent; root can.
            let denied = try await Self.ferry(as: accounts.member, binary, ["consent", "set", "analytics", "denied"] + runtime)
            #expect(denied.status != .exited(0), "\(denied)")
            #expect(denied.stderr.contains("access denied"), "\(denied)")
            let state = try await agent.consentState()
            #expect((state["consent"] as? [String: Any])?["analytics"] as? String != "denied")
            let granted = try await runCLI(["consent", "set", "analytics", "denied"] + runtime)
            #expect(granted.status == .exited(0), "\(granted)")

            // whoami tells each what it may do.
            let who = try await Self.ferry(as: accounts.outsider, binary, ["whoami", "--json"] + runtime)
            #expect(who.stdout.contains("\"ingest\":false"), "\(who)")

            // A reload (SIGHUP) that lets the outsider in applies to its next message.
            let opened = """
                {"mode": "system", "access": {"ingest": {"groups": ["\(accounts.group)"], "users": ["\(accounts.outsider)"]},
                 "control": {"users": ["root"]}, "events": {"groups": ["\(accounts.group)"]}}}
                """
            _ = try AgentProcess.configurationArguments(opened, in: dir)
            agent.kill(signal: SIGHUP)
            try await eventually("the reload", timeout: .seconds(20)) { agent.logs.contains("changed=access") }
            let admitted = try await Self.ferry(as: accounts.outsider, binary, ["emit", "late-event", "--source", "sys-outsider-late", "--wait"] + runtime)
            #expect(admitted.status == .exited(0), "\(admitted)")
        }
    }

    @Test("a user added to an allowed group is let in by the next reload, though no key changed (systemctl reload)")
    func reloadReadsGroupMembers() async throws {
        try await Self.withAccounts("a reload reads group members again") { accounts, dir, binary in
            let config = """
                {"mode": "system", "access": {"ingest": {"groups": ["\(accounts.group)"]},
                 "control": {"groups": ["\(accounts.group)"]}, "events": {"groups": ["\(accounts.group)"]}}}
                """
            let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(config, in: dir))
            defer { agent.cleanup() }
            try await agent.waitUntilReady()
            let runtime = ["--runtime-dir", agent.runtimeDirectory]
            let emit = ["emit", "joined-event", "--source", "sys-joined", "--wait", "--timeout", "10"] + runtime

            let before = try await Self.ferry(as: accounts.outsider, binary, emit)
            #expect(before.status != .exited(0), "\(before)")
            #expect(before.stderr.contains("access denied"), "\(before)")

            // The outsider joins the group (supplementary, in the group database); the file is
            // unchanged, so the reload changes no key. Its log line is the moment it is applied.
            try await Accounts.run("/usr/sbin/usermod", ["--append", "--groups", accounts.group, accounts.outsider])
            agent.kill(signal: SIGHUP)
            try await eventually("the reload", timeout: .seconds(20)) { agent.logs.contains("changed=nothing") }
            let after = try await Self.ferry(as: accounts.outsider, binary, emit)
            #expect(after.status == .exited(0), "\(after)")
            let consent = try await Self.ferry(as: accounts.outsider, binary, ["consent", "set", "analytics", "denied"] + runtime)
            #expect(consent.status == .exited(0), "\(consent)")
        }
    }

    @Test("ferry tail works for a user the policy lets watch the bus but not send events")
    func tailForWatcherOnly() async throws {
        try await Self.withAccounts("ferry tail for a watcher") { accounts, dir, binary in
            let config = """
                {"mode": "system", "access": {"ingest": {"groups": ["\(accounts.group)"]},
                 "control": {"users": ["root"]}, "events": {"users": ["*"]}}}
                """
            let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(config, in: dir))
            defer { agent.cleanup() }
            try await agent.waitUntilReady()
            let runtime = ["--runtime-dir", agent.runtimeDirectory]
            // The outsider may not send (nor ask `status`), but may watch.
            let finished = TailFinished()
            let tail = Task {
                defer { finished.set() }
                return try await Self.ferry(as: accounts.outsider, binary,
                                            ["tail", "--topic", "accepted", "--count", "1", "--idle-timeout", "30", "--json"] + runtime)
            }
            // The subscription reaches the agent asynchronously: emit until the tail has seen one
            // (it exits after --count 1), with a deadline.
            var index = 0
            try await eventually("the watcher's tail to see an event", timeout: .seconds(30), pollInterval: .milliseconds(200)) {
                if finished.isSet { return true }
                index += 1
                let sent = try await Self.ferry(as: accounts.member, binary, ["emit", "watched-\(index)", "--source", "sys-watched", "--wait"] + runtime)
                #expect(sent.status == .exited(0), "\(sent)")
                return finished.isSet
            }
            let tailed = try await tail.value
            #expect(tailed.status == .exited(0), "\(tailed)")
            #expect(!tailed.stderr.contains("not running"), "\(tailed)")
            #expect(tailed.stdout.contains("watched-"), "\(tailed)")
        }
    }

    @Test("fair share: one user's flood is answered full for that user alone; another user's events are still accepted")
    func fairShare() async throws {
        try await Self.withAccounts("System mode fair share") { accounts, dir, binary in
            // Delivery not started, so the queue only grows; each uid may hold 40% of 1 MiB.
            let config = """
                {"mode": "system", "log": {"segmentMaxBytes": 65536, "retentionMaxBytes": 1048576, "uidSharePercent": 40},
                 "consent": {"autoStart": false}, "access": {"events": {"users": ["root"]}}}
                """
            let agent = try AgentProcess(in: dir, extraArguments: try AgentProcess.configurationArguments(config, in: dir))
            defer { agent.cleanup() }
            try await agent.waitUntilReady()
            let runtime = ["--runtime-dir", agent.runtimeDirectory]
            let input = dir.appending("flood.jsonl")
            try TestEvents.jsonLines(count: 3000, namePrefix: "flood", padding: 300).write(toFile: input, atomically: true, encoding: .utf8)
            chmod(input, 0o644)
            let flood = try await runProcess("/usr/sbin/runuser", ["-u", accounts.member, "--", "/bin/sh", "-c",
                "\(binary) emit --stdin --wait --source flooder \(runtime.joined(separator: " ")) < \(input)"], timeout: .seconds(120))
            let counts = try #require(MultiProcessTests.parseCounts(flood.stdout.split(separator: "\n").last.map(String.init) ?? ""), "\(flood)")
            #expect(counts.rejected > 0, "the flood was never cut off: \(flood.stdout)")
            #expect(counts.accepted > 500, "\(flood.stdout)")
            let neighbour = try await runProcess("/usr/sbin/runuser", ["-u", accounts.outsider, "--", "/bin/sh", "-c",
                "printf '%s\\n' '{\"name\":\"n1\"}' '{\"name\":\"n2\"}' | \(binary) emit --stdin --wait --source neighbour \(runtime.joined(separator: " "))"])
            #expect(neighbour.status == .exited(0), "\(neighbour)")
            #expect(neighbour.stdout.contains("accepted=2"), "\(neighbour)")
            let status = try await agent.status()
            let bytes = try #require((status.object["queue"] as? [String: Any])?["bytes"] as? NSNumber).intValue
            #expect(bytes <= 1_048_576 * 45 / 100 + 65536, "the flooder held \(bytes) bytes")
        }
    }
}

/// Set once a background `ferry tail` has exited.
private final class TailFinished: Sendable {
    private let done = Mutex(false)
    func set() { done.withLock { $0 = true } }
    var isSet: Bool { done.withLock { $0 } }
}
