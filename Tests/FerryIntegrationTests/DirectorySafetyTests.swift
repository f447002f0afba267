#if canImport(Glibc)
import Glibc
#endif
import FerryIntegrationKit
import Foundation
import FerryTestKit
import Testing

/// Issue 11, section 1: ferryd refuses a runtime or data directory (or a file in it) that
/// another user could tamper with, says which path, whose it is and how to fix it, exits 78
/// and changes nothing. Each test starts a real ferryd on the bad layout.
@Suite("Unsafe directories and files are refused")
struct DirectorySafetyTests {
    /// Waits for ferryd (expected to refuse) to exit and returns its log.
    @discardableResult
    private func expectRefusal(_ agent: AgentProcess, mentioning needles: [String]) async throws -> String {
        let status = try await agent.waitForExit(timeout: .seconds(30))
        let log = agent.logs
        #expect(status == .exited(78), "\(log)")
        for needle in needles { #expect(log.contains(needle), "log lacks \"\(needle)\":\n\(log)") }
        #expect(log.contains("Fix:"), "\(log)")
        return log
    }

    private func mode(_ path: String) -> (mode: mode_t, uid: uid_t, isLink: Bool)? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        return (st.st_mode & 0o7777, st.st_uid, st.st_mode & S_IFMT == S_IFLNK)
    }

    @Test("a runtime directory owned by another user is refused, not chmod'ed and used (needs root: creates a user)",
          .enabled(if: geteuid() == 0, "needs root to create a second user and chown a directory to it"))
    func foreignRuntimeDirectory() async throws {
        let other = try otherUser()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let runtime = dir.appending("rt")
        #expect(mkdir(runtime, 0o755) == 0)
        #expect(chown(runtime, other.uid, other.gid) == 0)
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await expectRefusal(agent, mentioning: [runtime, "owned by uid \(other.uid) (\(other.name))", "uid 0"])
        // Untouched: same owner and mode, nothing inside, no data directory made.
        let after = mode(runtime)
        #expect(after?.uid == other.uid && after?.mode == 0o755)
        #expect(try FileManager.default.contentsOfDirectory(atPath: runtime).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: agent.dataDirectory))
    }

    @Test("a runtime directory that is a symbolic link is refused and its target left alone")
    func symlinkedRuntimeDirectory() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let elsewhere = try dir.subdirectory("elsewhere")
        #expect(symlink(elsewhere, dir.appending("rt")) == 0)
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await expectRefusal(agent, mentioning: [dir.appending("rt"), "symbolic link to \(elsewhere)", "owned by uid"])
        #expect(mode(dir.appending("rt"))?.isLink == true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: agent.dataDirectory))
    }

    @Test("a data directory writable by others is refused with chmod go-w as the fix, and left as it was")
    func worldWritableDataDirectory() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let data = try dir.subdirectory("data")
        #expect(chmod(data, 0o777) == 0)
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await expectRefusal(agent, mentioning: [data, "mode 0777", "owner uid", "chmod go-w \(data)"])
        #expect(mode(data)?.mode == 0o777)
        #expect(try FileManager.default.contentsOfDirectory(atPath: data).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: agent.runtimeDirectory))
    }

    @Test("a parent writable by others is refused unless it is sticky like /tmp")
    func parentWritableByOthers() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let open = try dir.subdirectory("open")
        #expect(chmod(open, 0o777) == 0)
        let refused = try AgentProcess(dataDirectory: open + "/data", runtimeDirectory: dir.appending("rt"),
                                       logDirectory: dir.appending("logs"))
        defer { refused.cleanup() }
        try await expectRefusal(refused, mentioning: ["its parent \(open)", "mode 0777", "chmod go-w \(open)"])
        #expect(!FileManager.default.fileExists(atPath: open + "/data"))

        #expect(chmod(open, 0o1777) == 0)
        let accepted = try AgentProcess(dataDirectory: open + "/data", runtimeDirectory: dir.appending("rt"),
                                        logDirectory: dir.appending("logs2"))
        defer { accepted.cleanup() }
        try await accepted.waitUntilReady()
        try await accepted.terminate()
    }

    @Test("a symbolic link in place of a file in the data directory is refused; the file it points to is not touched",
          arguments: ["consent/state.json", "cursors/file.cursor", "dedup.snapshot"])
    func symlinkedFileInDataDirectory(file: String) async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let emitted = try await runCLI(["emit", "before", "--wait"], environment: agent.environment)
        #expect(emitted.status == .exited(0), "\(emitted)")
        try await agent.terminate()

        // The file moves out of the data directory and a link takes its place.
        let path = agent.dataDirectory + "/" + file
        let outside = dir.appending("outside")
        if FileManager.default.fileExists(atPath: path) {
            #expect(rename(path, outside) == 0)
        } else {
            try Data("victim\n".utf8).write(to: URL(fileURLWithPath: outside))
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: outside))
        #expect(symlink(outside, path) == 0)

        try agent.start()
        try await expectRefusal(agent, mentioning: [path, "symbolic link to \(outside)", "rm \(path)"])
        #expect(try Data(contentsOf: URL(fileURLWithPath: outside)) == before)
        #expect(mode(path)?.isLink == true)
    }

    @Test("socket files get explicit modes (0600) and the directories 0700, whatever the umask")
    func socketModes() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        for name in ["ingest", "events", "control"] {
            var st = stat()
            #expect(lstat(agent.runtimeDirectory + "/" + name, &st) == 0)
            #expect(st.st_mode & S_IFMT == S_IFSOCK)
            #expect(st.st_mode & 0o7777 == 0o600, "\(name): \(String(st.st_mode & 0o7777, radix: 8))")
        }
        #expect(mode(agent.runtimeDirectory)?.mode == 0o700)
        #expect(mode(agent.dataDirectory)?.mode == 0o700)
        try await agent.terminate()
    }
}

/// A second local user for ownership tests, created once (`useradd --system`) when missing.
struct OtherUser {
    var name: String
    var uid: uid_t
    var gid: gid_t
}

func otherUser(_ name: String = "ferry-test-other") throws -> OtherUser {
    if getpwnam(name) == nil {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/useradd")
        process.arguments = ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
        try process.run()
        process.waitUntilExit()
    }
    guard let entry = getpwnam(name) else { throw FerryTestKitError("cannot create user \(name) with useradd") }
    return OtherUser(name: name, uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid)
}
