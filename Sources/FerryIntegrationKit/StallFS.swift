#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryTestKit
import Foundation
import Synchronization

/// A FUSE filesystem (`Tests/Support/stallfs/stallfs.c`, libfuse3) that passes a backing directory
/// through and can be made to *stall*: while stalled, every file operation on it (lookups, open,
/// create, read, write, fsync, flush, rename, unlink, mkdir, …) blocks inside the daemon, so the
/// calling thread sits in the kernel exactly as on a hung disk or network filesystem. Only
/// `stat` of the mount point itself, `statfs` and the final `release` still pass.
///
/// The daemon reports what it does on standard error (see ``events``), so tests wait on
/// observable facts — "a write to /log is now blocked" — instead of on the clock.
///
/// ```swift
/// @Test(.enabled(if: StallFS.isAvailable, "needs /dev/fuse and libfuse3"))
/// func stalledSink() async throws {
///     let dir = try TemporaryDirectory()
///     defer { dir.remove() }
///     let fs = try await StallFS(in: dir)
///     defer { fs.cleanup() }   // before dir.remove(): never walk a stalled mount
///     // … point a sink at fs.mountPoint …
///     try await fs.stall()
///     let blocked = try await fs.waitUntilBlocked(operation: "write")
///     try await fs.resume()
///     try await fs.unmount()
/// }
/// ```
///
/// Cleanup order matters: a process blocked on a stalled FUSE request cannot be killed, not even
/// with SIGKILL, until the daemon answers. ``cleanup()`` resumes and unmounts first (and killing
/// the daemon aborts the connection), so run it *before* cleaning up children that use the mount
/// (`defer { fs.cleanup(); child.cleanup() }`) and before removing the temporary directory.
///
/// The executable is compiled once per test process (``executable()``) with the system C
/// compiler and `pkg-config --cflags --libs fuse3`.
public final class StallFS: Sendable, CustomStringConvertible {
    /// An operation the daemon reported blocked (`stallfs: blocked id=… op=… path=…`).
    public struct Operation: Sendable, Hashable, CustomStringConvertible {
        /// The daemon's number for this blocked operation (1, 2, … over the mount's life).
        public var id: Int
        /// The FUSE operation: `getattr`, `open`, `create`, `read`, `write`, `fsync`, `flush`,
        /// `rename`, `unlink`, `mkdir`, `rmdir`, `readdir`, `truncate`, `utimens`, `chmod`,
        /// `chown`, `fsyncdir`.
        public var name: String
        /// The path inside the mount, starting with `/` (for `rename`, the source).
        public var path: String

        public var description: String { "\(name) \(path) (#\(id))" }
    }

    /// Where the filesystem is mounted (resolved with `realpath`, as `/proc/self/mountinfo`
    /// shows it).
    public let mountPoint: String
    /// The directory whose contents the mount shows; read it directly to see what landed.
    public let backingDirectory: String
    /// The `stallfs` daemon.
    public let process: ChildProcess

    private let cleanedUp = Atomic<Bool>(false)

    // MARK: Mounting

    /// Mounts a new stallfs on `<directory>/<name>` over the backing directory
    /// `<directory>/<name>.backing` (both created), and returns once the kernel shows the mount
    /// and the daemon has answered FUSE's `INIT`.
    public convenience init(in directory: TemporaryDirectory, name: String = "stallfs",
                            timeout: Duration = .seconds(30)) async throws {
        try await self.init(parent: directory.path, name: name, timeout: timeout)
    }

    /// Mounts a new stallfs on `<parent>/<name>` over `<parent>/<name>.backing`.
    public init(parent: String, name: String = "stallfs", timeout: Duration = .seconds(30)) async throws {
        if let reason = Self.unavailableReason { throw FerryTestKitError("stallfs cannot run here: \(reason)") }
        let executable = try await Self.executable()
        let mount = parent + "/" + name
        let backing = parent + "/" + name + ".backing"
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: true)
        mountPoint = Self.realPath(mount)
        backingDirectory = Self.realPath(backing)
        process = try ChildProcess(executable: executable, arguments: [backingDirectory, mountPoint],
                                   outputDirectory: parent, label: name)
        do {
            let outcome = try await waitForValue("stallfs mounted on \(mountPoint)", timeout: timeout) { () -> MountOutcome? in
                if let status = process.exitStatus { return .exited(status) }
                let ready = events.contains { $0.hasPrefix("ready ") }
                return ready && Self.mountType(at: mountPoint) == "fuse.stallfs" ? .mounted : nil
            }
            if case .exited(let status) = outcome {
                throw FerryTestKitError("stallfs exited (\(status)) before it was mounted\(process.diagnostics())")
            }
        } catch {
            cleanup()
            throw error
        }
    }

    private enum MountOutcome { case mounted, exited(ExitStatus) }

    public var description: String { "stallfs on \(mountPoint) over \(backingDirectory) (pid \(process.pid))" }

    // MARK: Stalling

    /// Stalls the filesystem and returns once the daemon confirmed it: from then on every file
    /// operation blocks until ``resume(timeout:)``. Not to be called concurrently with
    /// ``resume(timeout:)``.
    public func stall(timeout: Duration = .seconds(10)) async throws {
        try await control(SIGUSR1, expecting: "stalled", timeout: timeout)
    }

    /// Resumes the filesystem and returns once the daemon confirmed it: blocked operations
    /// continue, new ones pass.
    public func resume(timeout: Duration = .seconds(10)) async throws {
        try await control(SIGUSR2, expecting: "resumed", timeout: timeout)
    }

    /// Sends the resume signal without waiting for the daemon to confirm (for `defer` blocks).
    public func resumeWithoutWaiting() {
        process.signal(SIGUSR2)
    }

    /// Whether the daemon last confirmed a stall (rather than a resume, or nothing).
    public var isStalled: Bool { lastAcknowledgement?.kind == "stalled" }

    private func control(_ signal: Int32, expecting kind: String, timeout: Duration) async throws {
        let before = lastAcknowledgement?.count ?? 0
        guard process.isRunning else { throw FerryTestKitError("\(self): the daemon is not running\(process.diagnostics())") }
        process.signal(signal)
        try await eventually("\(self) to report \(kind)", timeout: timeout) {
            guard let last = lastAcknowledgement, last.count > before else { return false }
            guard last.kind == kind else {
                throw FerryTestKitError("the daemon reported \(last.kind) after the \(kind) signal (signals crossed?)")
            }
            return true
        }
    }

    /// The last `stalled n=N` / `resumed n=N` line.
    private var lastAcknowledgement: (kind: String, count: Int)? {
        for line in events.reversed() {
            let parts = line.split(separator: " ")
            guard parts.count == 2, parts[0] == "stalled" || parts[0] == "resumed", parts[1].hasPrefix("n="),
                  let count = Int(parts[1].dropFirst(2)) else { continue }
            return (String(parts[0]), count)
        }
        return nil
    }

    // MARK: Observing

    /// The daemon's event lines so far, without the `stallfs: ` prefix (`ready backing=…`,
    /// `stalled n=1`, `blocked id=1 op=write path=/log`, `released id=1 op=write path=/log`, …).
    public var events: [String] {
        ChildProcess.completeLines(process.standardError).compactMap { line in
            line.hasPrefix("stallfs: ") ? String(line.dropFirst("stallfs: ".count)) : nil
        }
    }

    /// Every operation that was ever blocked on this mount, in order.
    public var everBlocked: [Operation] { parseOperations(kind: "blocked") }

    /// The operations blocked right now (reported blocked and not yet released).
    public var blockedOperations: [Operation] {
        let released = Set(parseOperations(kind: "released").map(\.id))
        return everBlocked.filter { !released.contains($0.id) }
    }

    /// Waits until an operation matching `operation` (a FUSE operation name, see
    /// ``Operation/name``) and `path` (inside the mount, starting with `/`) is blocked right now,
    /// and returns it. `nil` matches anything.
    @discardableResult
    public func waitUntilBlocked(operation: String? = nil, path: String? = nil,
                                 timeout: Duration = .seconds(20)) async throws -> Operation {
        let what = "an operation\(operation.map { " \($0)" } ?? "")\(path.map { " on \($0)" } ?? "") blocked in \(self)"
        do {
            return try await waitForValue(what, timeout: timeout) {
                guard process.isRunning else { throw FerryTestKitError("the daemon exited") }
                return blockedOperations.first { (operation == nil || $0.name == operation) && (path == nil || $0.path == path) }
            }
        } catch let timeout as EventuallyTimeout {
            throw FerryTestKitError("\(timeout); events so far:\n\(events.suffix(40).joined(separator: "\n"))")
        }
    }

    private func parseOperations(kind: String) -> [Operation] {
        events.compactMap { line in
            // "<kind> id=I op=OP path=PATH", PATH last and possibly with spaces.
            let parts = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
            guard parts.count == 4, parts[0] == kind, parts[1].hasPrefix("id="), parts[2].hasPrefix("op="),
                  parts[3].hasPrefix("path="), let id = Int(parts[1].dropFirst(3)) else { return nil }
            return Operation(id: id, name: String(parts[2].dropFirst(3)), path: String(parts[3].dropFirst(5)))
        }
    }

    // MARK: Unmounting

    /// Resumes, unmounts (`fusermount3 -u`, else `umount`, else a lazy `umount -l` when
    /// something still holds the mount busy), waits for the daemon to exit (terminating it if
    /// it does not), and removes the empty mount point. Throws if a mount is left behind.
    /// Idempotent; ``cleanup()`` is the synchronous, best-effort variant.
    public func unmount(timeout: Duration = .seconds(20)) async throws {
        guard !cleanedUp.exchange(true, ordering: .acquiringAndReleasing) else { return }
        defer { process.cleanup() }
        // Blocked operations finish first, so the mount is not busy because of us.
        if process.isRunning, (try? await control(SIGUSR2, expecting: "resumed", timeout: .seconds(5))) != nil {
            try? await eventually("blocked operations released", timeout: .seconds(5)) { blockedOperations.isEmpty }
        }
        var unmounted = false
        if let fusermount = Self.findExecutable("fusermount3") {
            let result = try? await runProcess(fusermount, ["-u", mountPoint], timeout: timeout)
            unmounted = result?.status == .exited(0)
        }
        if !unmounted { unmounted = Self.unmountSyscall(mountPoint, lazy: false) }
        if unmounted {
            // The kernel closes the connection: the daemon's loop ends and it exits by itself.
            if (try? await process.waitForExit(timeout: timeout)) == nil { process.signal(SIGTERM) }
        } else {
            _ = Self.unmountSyscall(mountPoint, lazy: true)
            process.signal(SIGTERM)  // a detached mount lives on while busy; ending the daemon aborts it
        }
        if (try? await process.waitForExit(timeout: .seconds(5))) == nil { process.kill9() }
        if Self.mountType(at: mountPoint) != nil {
            _ = Self.unmountSyscall(mountPoint, lazy: true)
            throw FerryTestKitError("\(self) was still mounted after unmounting\(process.diagnostics())")
        }
        _ = rmdir(mountPoint)
    }

    /// Best-effort synchronous teardown for `defer` blocks and failures: resumes, unmounts (lazily
    /// if busy), kills the daemon (which aborts any request still pending) and removes the mount
    /// point. Idempotent; also run when the object is released.
    public func cleanup() {
        guard !cleanedUp.exchange(true, ordering: .acquiringAndReleasing) else { return }
        process.signal(SIGUSR2)
        if Self.mountType(at: mountPoint) != nil {
            if !Self.unmountSyscall(mountPoint, lazy: false) && !Self.unmountSyscall(mountPoint, lazy: true),
               let fusermount = Self.findExecutable("fusermount3") {
                _ = Self.runSynchronously(fusermount, ["-u", "-z", mountPoint], timeout: .seconds(20))
            }
        }
        process.cleanup()
        _ = rmdir(mountPoint)
    }

    deinit { cleanup() }

    /// The filesystem type mounted exactly at `path` (`fuse.stallfs`, `tmpfs`, …) according to
    /// `/proc/self/mountinfo`, or `nil` if nothing is mounted there. The topmost mount wins.
    public static func mountType(at path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: "/proc/self/mountinfo") else { return nil }
        var found: String?
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            // "<id> <parent> <maj:min> <root> <mount point> <options> [optional…] - <fstype> <source> <super options>"
            let halves = line.split(separator: " - ", maxSplits: 1, omittingEmptySubsequences: false)
            guard halves.count == 2 else { continue }
            let fields = halves[0].split(separator: " ")
            guard fields.count >= 5, unescapeMountInfo(fields[4]) == path,
                  let type = halves[1].split(separator: " ").first else { continue }
            found = String(type)
        }
        return found
    }

    /// Undoes mountinfo's octal escapes (`\040` for a space, …).
    private static func unescapeMountInfo(_ field: Substring) -> String {
        guard field.contains("\\") else { return String(field) }
        var bytes: [UInt8] = []
        let utf8 = Array(field.utf8)
        var index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "\\"), index + 3 < utf8.count,
               let value = UInt8(String(decoding: utf8[(index + 1)...(index + 3)], as: UTF8.self), radix: 8) {
                bytes.append(value)
                index += 4
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `umount2(2)`, lazily (`MNT_DETACH`) or not; whether it succeeded.
    private static func unmountSyscall(_ path: String, lazy: Bool) -> Bool {
        #if os(Linux)
        return umount2(path, lazy ? Int32(MNT_DETACH) : 0) == 0
        #else
        return false
        #endif
    }

    private static func realPath(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    // MARK: Availability and building

    /// Whether stallfs can run here: Linux with `/dev/fuse` openable, a C compiler (`cc`/`clang`),
    /// `pkg-config` knowing `fuse3` (libfuse3-dev), the C source, and root or `fusermount3`.
    /// For `.enabled(if: StallFS.isAvailable, "needs /dev/fuse and libfuse3")`.
    public static var isAvailable: Bool { unavailableReason == nil }

    /// Why ``isAvailable`` is false, for messages; `nil` when it is available.
    public static let unavailableReason: String? = {
        #if os(Linux)
        let fd = open("/dev/fuse", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return "cannot open /dev/fuse: \(String(cString: strerror(errno)))" }
        close(fd)
        guard compiler != nil else { return "no C compiler (cc or clang) on PATH" }
        guard let pkgConfig = findExecutable("pkg-config") else { return "no pkg-config on PATH" }
        guard runSynchronously(pkgConfig, ["--exists", "fuse3"], timeout: .seconds(20)) == .exited(0) else {
            return "pkg-config does not know fuse3 (install libfuse3-dev)"
        }
        guard geteuid() == 0 || findExecutable("fusermount3") != nil else { return "not root and no fusermount3 (install fuse3)" }
        guard FileManager.default.fileExists(atPath: sourcePath) else { return "the stallfs source is not at \(sourcePath)" }
        return nil
        #else
        return "stallfs needs Linux FUSE"
        #endif
    }()

    /// `Tests/Support/stallfs/stallfs.c` in this source tree, or `$FERRY_STALLFS_SOURCE`.
    public static var sourcePath: String {
        if let explicit = ProcessInfo.processInfo.environment["FERRY_STALLFS_SOURCE"], !explicit.isEmpty { return explicit }
        return URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Tests/Support/stallfs/stallfs.c").path
    }

    /// The compiled `stallfs` executable: built on first use into a temporary directory (removed
    /// when the process exits) and reused for the rest of the test process.
    public static func executable() async throws -> String {
        try await build.value
    }

    private static let build = Task<String, any Error> { try await compile() }
    private static let buildDirectory = Mutex<TemporaryDirectory?>(nil)

    private static func compile() async throws -> String {
        guard let compiler else { throw FerryTestKitError("no C compiler (cc or clang) on PATH") }
        guard let pkgConfig = findExecutable("pkg-config") else { throw FerryTestKitError("no pkg-config on PATH") }
        let flags = try await runProcess(pkgConfig, ["--cflags", "--libs", "fuse3"], timeout: .seconds(30))
        guard flags.status.isSuccess else { throw FerryTestKitError("pkg-config --cflags --libs fuse3 failed: \(flags)") }
        let directory = try TemporaryDirectory(prefix: "fy-stallfs-")
        buildDirectory.withLock { $0 = directory }
        atexit { StallFS.removeBuildDirectory() }
        let output = directory.appending("stallfs")
        let arguments = ["-std=gnu11", "-O2", "-Wall", "-o", output, sourcePath]
            + flags.stdout.split(whereSeparator: \.isWhitespace).map(String.init)
        let result = try await runProcess(compiler, arguments, timeout: .seconds(180))
        guard result.status.isSuccess, FileManager.default.isExecutableFile(atPath: output) else {
            throw FerryTestKitError("compiling stallfs failed: \(compiler) \(arguments.joined(separator: " "))\n\(result)")
        }
        return output
    }

    private static func removeBuildDirectory() {
        buildDirectory.withLock { $0?.remove() }
    }

    /// The system C compiler: `cc`, else the `clang` that comes with the Swift toolchain.
    static var compiler: String? { findExecutable("cc") ?? findExecutable("clang") }

    /// The first executable `name` on `$PATH` (then the usual system directories).
    static func findExecutable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        return directories.lazy.map { $0 + "/" + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Runs a short command to completion without the concurrency pool (for the synchronous
    /// availability check and `cleanup()`); `nil` if it could not start or outlived `timeout`.
    static func runSynchronously(_ executable: String, _ arguments: [String], timeout: Duration) -> ExitStatus? {
        guard let child = try? ChildProcess(executable: executable, arguments: arguments) else { return nil }
        defer { child.cleanup() }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let status = child.exitStatus { return status }
            usleep(2_000)
        }
        return nil
    }
}
