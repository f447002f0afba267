import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// `ferry` run by a non-root user writes nothing of libdispatch's (issue 29). It used to: the
/// first libdispatch worker thread (any task job on the runtime's default executor, a
/// `Task.sleep` wake-up, `dispatch_main` handing the main queue to the pool) registers with
/// libdispatch's thread-pool monitor, a timer on the manager queue, whose thread runs at QoS
/// user-interactive and asks for nice -4 with `setpriority`; a non-root user may not lower a nice
/// value (`EACCES`), so every run logged "Failed to set thread priority for worker thread …
/// errno=13" (to syslog, the journal; to stderr with `LIBDISPATCH_LOG=stderr`). `ferry` now runs
/// Swift concurrency on its own main-thread executor (`CLIExecutor`) and libdispatch starts no
/// thread. Each command below runs as a fresh user with no agent to answer: the commands that
/// talk to one fail, after their waits (timers) where they have them, and `emit --stdin` reads
/// its input on a thread of its own. Needs root (to create the user); elsewhere it reports a skip.
@Suite("ferry as a non-root user", .serialized)
struct CLIThreadPriorityTests {
    @Test("ferry as a non-root user logs no thread-priority failure (LIBDISPATCH_LOG=stderr shows what would reach the journal)",
          .enabled(if: geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/useradd"),
                   "needs root for useradd and runuser"))
    func noThreadPriorityFailure() async throws {
        let user = "fyq" + String(UInt32.random(in: 0...0xFFFFF), radix: 16)
        let added = try await runProcess("/usr/sbin/useradd", ["--no-create-home", "--user-group", user])
        try #require(added.status == .exited(0), "\(added)")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        do {
            chmod(dir.path, 0o755)
            let binary = dir.appending("ferry")
            try FileManager.default.copyItem(atPath: try FerryBinaries.ferry(), toPath: binary)
            chmod(binary, 0o755)
            // No agent runs there: the commands that talk to one wait for its answer (a timer) and fail.
            let runtime = dir.appending("run")
            let runs: [(arguments: [String], stdin: String?)] = [
                (["--version"], nil), (["status"], nil), (["status", "--wait", "--timeout", "0.5"], nil),
                (["emit", "Clicked"], nil), (["emit", "--stdin", "--timeout", "0.5"], "{\"name\":\"Clicked\"}\n"),
                (["consent", "show"], nil), (["consent", "log"], nil), (["whoami"], nil), (["health"], nil),
                (["metrics"], nil), (["tail", "--count", "1"], nil), (["top", "--once", "--interval", "0.1"], nil), (["deadletter", "list"], nil),
            ]
            for (arguments, stdin) in runs {
                let result = try await runProcess(
                    "/usr/sbin/runuser",
                    ["-u", user, "--", "/usr/bin/env", "LIBDISPATCH_LOG=stderr", "FERRY_RUNTIME_DIR=" + runtime, binary] + arguments,
                    stdin: stdin, timeout: .seconds(60))
                let command = "ferry " + arguments.joined(separator: " ")
                #expect(!result.stderr.contains("thread priority"), "\(command): \(result.stderr)")
                #expect(!result.stderr.contains("log file opened"), "\(command) wrote a libdispatch log: \(result.stderr)")
                // No agent: the commands that need one fail with their documented status (not a
                // crash, not the runner's timeout); the others succeed.
                let succeeds = arguments == ["--version"] || arguments == ["deadletter", "list"]
                #expect(succeeds ? result.status == .exited(0) : result.status != .exited(0) && result.status != .signaled(SIGKILL),
                        "\(command): \(result)")
            }
        } catch {
            _ = try? await runProcess("/usr/sbin/userdel", [user])
            throw error
        }
        _ = try? await runProcess("/usr/sbin/userdel", [user])
    }
}
