#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Testing

/// The stalling FUSE filesystem itself: it passes files through, its stall blocks real I/O in the
/// kernel until resumed, and unmounting leaves nothing behind. No test here waits on the clock:
/// "blocked" is what the daemon reports once it holds a request, and the request cannot finish
/// before the daemon answers it, which it does only after `resume()`.
@Suite("StallFS: a FUSE passthrough whose I/O can be stalled", .serialized,
       .enabled(if: StallFS.isAvailable, "needs /dev/fuse and libfuse3"))
struct StallFSTests {
    static func contents(_ path: String) -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }

    /// `write` then `close`, through POSIX calls (the mount is not stalled when this runs).
    static func append(_ text: String, to path: String, sync: Bool = false) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw FerryTestKitError("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let written = text.withCString { write(fd, $0, strlen($0)) }
        guard written == text.utf8.count else { throw FerryTestKitError("write \(path): \(String(cString: strerror(errno)))") }
        if sync { guard fsync(fd) == 0 else { throw FerryTestKitError("fsync \(path): \(String(cString: strerror(errno)))") } }
    }

    @Test("files created, appended, fsynced, renamed and deleted through the mount land in the backing directory")
    func passthrough() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fs = try await StallFS(in: dir)
        defer { fs.cleanup() }
        #expect(StallFS.mountType(at: fs.mountPoint) == "fuse.stallfs")

        try Self.append("one\n", to: fs.mountPoint + "/a.log")
        try Self.append("two\n", to: fs.mountPoint + "/a.log", sync: true)
        #expect(Self.contents(fs.backingDirectory + "/a.log") == "one\ntwo\n")
        #expect(Self.contents(fs.mountPoint + "/a.log") == "one\ntwo\n")

        try FileManager.default.createDirectory(atPath: fs.mountPoint + "/sub", withIntermediateDirectories: false)
        try Data("atomic".utf8).write(to: URL(fileURLWithPath: fs.mountPoint + "/sub/b.json"), options: .atomic)
        #expect(Self.contents(fs.backingDirectory + "/sub/b.json") == "atomic")
        #expect(rename(fs.mountPoint + "/a.log", fs.mountPoint + "/sub/a.log") == 0)
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: fs.mountPoint + "/sub")) == ["a.log", "b.json"])
        #expect(truncate(fs.mountPoint + "/sub/a.log", 4) == 0)
        #expect(Self.contents(fs.backingDirectory + "/sub/a.log") == "one\n")
        #expect(unlink(fs.mountPoint + "/sub/b.json") == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: fs.backingDirectory + "/sub") == ["a.log"])
        #expect(fs.everBlocked.isEmpty)

        try await fs.unmount()
        #expect(StallFS.mountType(at: fs.mountPoint) == nil)
        #expect(fs.process.exitStatus != nil)
        #expect(Self.contents(fs.backingDirectory + "/sub/a.log") == "one\n")
    }

    /// Holds `argv[1]` open for appending and runs the `write`/`fsync` commands read from stdin,
    /// answering each on stdout. A child process, so the test process itself never holds a
    /// descriptor on a stalled mount: every process it spawns meanwhile would inherit that
    /// descriptor until its exec, and the close at exec would wait for the stall too.
    static let holder = """
        import os, sys
        fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, b"before\\n")
        print("ready", flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "write":
                os.write(fd, b"during\\n")
                print("wrote", flush=True)
            elif command == "fsync":
                os.fsync(fd)
                print("synced", flush=True)
        os.close(fd)
        """

    @Test("while stalled, a write and an fsync on an open file stay blocked in the kernel; resume lets them finish")
    func stalledWriteAndFsyncOnAnOpenFile() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fs = try await StallFS(in: dir)
        defer { fs.cleanup() }
        let holder = try ChildProcess(executable: "/usr/bin/python3", arguments: ["-c", Self.holder, fs.mountPoint + "/events.log"],
                                      input: .pipe, outputDirectory: dir.path, label: "holder")
        defer {
            fs.cleanup()
            holder.cleanup()
        }
        try await eventually("the holder to open the file") { holder.standardOutput.contains("ready") }

        // write(2) on the open file.
        try await fs.stall()
        #expect(fs.isStalled)
        try await holder.writeInput("write\n")
        let blockedWrite = try await fs.waitUntilBlocked(operation: "write", path: "/events.log")
        // The daemon holds the request and answers only after resume(): the call cannot have returned.
        #expect(!holder.standardOutput.contains("wrote"), "write(2) returned while stallfs held it: \(blockedWrite)")
        #expect(Self.contents(fs.backingDirectory + "/events.log") == "before\n")
        try await fs.resume()
        try await eventually("the write to finish") { holder.standardOutput.contains("wrote") }
        #expect(fs.blockedOperations.isEmpty)
        #expect(Self.contents(fs.backingDirectory + "/events.log") == "before\nduring\n")

        // fsync(2) the same way.
        try await fs.stall()
        try await holder.writeInput("fsync\n")
        try await fs.waitUntilBlocked(operation: "fsync", path: "/events.log")
        #expect(!holder.standardOutput.contains("synced"))
        try await fs.resume()
        try await eventually("the fsync to finish") { holder.standardOutput.contains("synced") }

        holder.closeInput()
        #expect(try await holder.waitForExit(timeout: .seconds(20)) == .exited(0), "\(holder.standardError)")
        #expect(fs.everBlocked.map(\.name) == ["write", "fsync"])
        try await fs.unmount()
        #expect(StallFS.mountType(at: fs.mountPoint) == nil)
    }

    @Test("while stalled, a child process appending to a file stays running; it exits once resumed")
    func stalledChildProcess() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fs = try await StallFS(in: dir)
        defer { fs.cleanup() }
        try await fs.stall()
        let child = try ChildProcess(executable: "/bin/sh", arguments: ["-c", #"printf 'from child\n' >> "$1""#, "sh", fs.mountPoint + "/child.txt"],
                                     outputDirectory: dir.path, label: "sh-append")
        // A process stuck on a stalled request cannot even be SIGKILLed: unstall before killing it.
        defer {
            fs.cleanup()
            child.cleanup()
        }
        let blocked = try await fs.waitUntilBlocked(path: "/child.txt")
        #expect(child.isRunning, "the child finished although stallfs held its \(blocked)")
        #expect(!FileManager.default.fileExists(atPath: fs.backingDirectory + "/child.txt"))
        try await fs.resume()
        #expect(try await child.waitForExit(timeout: .seconds(20)) == .exited(0))
        #expect(Self.contents(fs.backingDirectory + "/child.txt") == "from child\n")
        try await fs.unmount()
        #expect(StallFS.mountType(at: fs.mountPoint) == nil)
    }

    @Test("unmounting while stalled with a request held releases it and leaves no mount and no daemon behind")
    func unmountWhileStalled() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fs = try await StallFS(in: dir)
        defer { fs.cleanup() }
        try await fs.stall()
        let child = try ChildProcess(executable: "/bin/sh", arguments: ["-c", #"echo x > "$1""#, "sh", fs.mountPoint + "/held"],
                                     outputDirectory: dir.path, label: "sh-held")
        defer {
            fs.cleanup()
            child.cleanup()
        }
        try await fs.waitUntilBlocked(path: "/held")
        try await fs.unmount()
        #expect(StallFS.mountType(at: fs.mountPoint) == nil)
        #expect(fs.process.exitStatus != nil)
        let status = try await child.waitForExit(timeout: .seconds(20))
        print("[stallfs] the held child ended with \(status) after the unmount")
        #expect(!FileManager.default.fileExists(atPath: fs.mountPoint))
    }

    @Test("cleanup() (the synchronous teardown for defer blocks) does not hang on a stalled mount with a request held")
    func cleanupWhileStalled() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fs = try await StallFS(in: dir)
        defer { fs.cleanup() }
        try await fs.stall()
        let child = try ChildProcess(executable: "/bin/sh", arguments: ["-c", #"echo x > "$1""#, "sh", fs.mountPoint + "/held"],
                                     outputDirectory: dir.path, label: "sh-held")
        defer {
            fs.cleanup()
            child.cleanup()
        }
        try await fs.waitUntilBlocked(path: "/held")
        try await runOffPool { fs.cleanup() }
        #expect(StallFS.mountType(at: fs.mountPoint) == nil)
        #expect(fs.process.exitStatus != nil)
        let status = try await child.waitForExit(timeout: .seconds(20))
        print("[stallfs] the held child ended with \(status) after cleanup()")
    }
}
