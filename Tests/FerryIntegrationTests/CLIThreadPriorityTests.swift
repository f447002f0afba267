import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// `ferry` run by a non-root user should write nothing of libdispatch's: today it does (issue 29,
/// not fixed yet, recorded as a known issue so this test fails once it is fixed and the marker
/// must go). Root cause, found with strace and gdb on Swift 6.3.1: the first use of
/// libdispatch's global queues (any hop of a task off the main thread, and `dispatch_main`,
/// which hands the main queue to the worker pool) makes a worker thread start libdispatch's
/// manager thread at QoS user-interactive, which libdispatch maps to `setpriority(…, -4)`; a
/// non-root user may not lower a nice value (`EACCES`), so every run logs "Failed to set thread
/// priority for worker thread … errno=13" (to syslog, the journal; to stderr with
/// `LIBDISPATCH_LOG=stderr`). Task priorities do not matter: the manager's QoS is libdispatch's
/// own. Needs root (to create the user); elsewhere it reports a skip.
@Suite("ferry as a non-root user", .serialized)
struct CLIThreadPriorityTests {
    @Test("ferry as a non-root user logs no thread-priority failure (LIBDISPATCH_LOG=stderr shows what would reach the journal): a known issue",
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
            for arguments in [["--version"], ["status"], ["emit", "Clicked"], ["consent", "show"]] {
                let result = try await runProcess(
                    "/usr/sbin/runuser",
                    ["-u", user, "--", "/usr/bin/env", "LIBDISPATCH_LOG=stderr", "FERRY_RUNTIME_DIR=" + runtime, binary] + arguments,
                    timeout: .seconds(60))
                withKnownIssue("libdispatch's manager thread asks for nice -4 (issue 29, not fixed)") {
                    #expect(!result.stderr.contains("thread priority"), "ferry \(arguments.joined(separator: " ")): \(result.stderr)")
                }
                if arguments == ["--version"] { #expect(result.status == .exited(0), "\(result)") }
            }
        } catch {
            _ = try? await runProcess("/usr/sbin/userdel", [user])
            throw error
        }
        _ = try? await runProcess("/usr/sbin/userdel", [user])
    }
}
