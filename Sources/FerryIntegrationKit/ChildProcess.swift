#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryTestKit
import FerryThreads
import Foundation
import Synchronization

/// How a child process ended.
public enum ExitStatus: Sendable, Hashable, CustomStringConvertible {
    /// It called `exit` with this code.
    case exited(Int32)
    /// A signal killed it.
    case signaled(Int32)
    /// Someone else reaped it, so its status is unknown.
    case unknown

    /// The exit code, if it exited normally.
    public var code: Int32? {
        if case .exited(let code) = self { return code }
        return nil
    }

    /// Whether it exited with status 0.
    public var isSuccess: Bool { self == .exited(0) }

    public var description: String {
        switch self {
        case .exited(let code): "exit \(code)"
        case .signaled(let signal): "killed by signal \(signal)"
        case .unknown: "unknown exit status"
        }
    }

    init(waitStatus status: Int32) {
        let low = status & 0x7F
        if low == 0 {
            self = .exited((status >> 8) & 0xFF)
        } else {
            self = .signaled(low)
        }
    }
}

/// A child process started with `posix_spawn`, with its standard output and error captured to
/// files and its standard input taken from a file, `/dev/null`, or a pipe the test writes to.
///
/// The process is always cleaned up: ``cleanup()`` (also run when the object is released) sends
/// `SIGKILL` if it is still running and reaps it, so a failing test never leaks processes.
/// Waiting is done by polling `waitpid(WNOHANG)` against a deadline, never by fixed sleeps.
public final class ChildProcess: Sendable, CustomStringConvertible {
    /// Where standard input comes from.
    public enum Input: Sendable {
        /// `/dev/null`.
        case null
        /// These bytes (written to a file first, so the child can read them at its own pace).
        case bytes([UInt8])
        /// A pipe: write with ``ChildProcess/writeInput(_:)``, end with ``ChildProcess/closeInput()``.
        case pipe
    }

    /// The process id.
    public let pid: pid_t
    /// The executable and its arguments, for messages.
    public let commandLine: [String]
    /// The file that receives the child's standard output.
    public let stdoutPath: String
    /// The file that receives the child's standard error.
    public let stderrPath: String

    private struct State {
        var exit: ExitStatus?
        var inputFD: CInt?
    }
    private let state: Mutex<State>
    private let ownedDirectory: TemporaryDirectory?

    /// Starts `executable` with `arguments`.
    ///
    /// - Parameters:
    ///   - environment: variables added to (or replacing those of) this process's environment.
    ///   - input: where standard input comes from.
    ///   - outputDirectory: where the stdout/stderr files go; a private temporary directory
    ///     (removed by ``cleanup()``) if `nil`.
    ///   - label: a file-name prefix for the output files.
    public init(
        executable: String, arguments: [String], environment: [String: String] = [:], input: Input = .null,
        outputDirectory: String? = nil, label: String? = nil
    ) throws {
        Self.ignoreSIGPIPE
        let owned = outputDirectory == nil ? try TemporaryDirectory() : nil
        let directory = outputDirectory ?? owned!.path
        let name = label ?? (executable.split(separator: "/").last.map(String.init) ?? "child")
        var unique = 0
        var base = "\(directory)/\(name)"
        while FileManager.default.fileExists(atPath: base + ".stdout") {
            unique += 1
            base = "\(directory)/\(name)-\(unique)"
        }
        stdoutPath = base + ".stdout"
        stderrPath = base + ".stderr"
        commandLine = [executable] + arguments
        ownedDirectory = owned

        var stdinPath = "/dev/null"
        var pipeFDs: [CInt] = [-1, -1]
        switch input {
        case .null: break
        case .bytes(let bytes):
            stdinPath = base + ".stdin"
            try writeBytes(bytes, to: stdinPath)
        case .pipe:
            // Close-on-exec on both ends: other children must not inherit the write end, or the
            // reader would never see end-of-file (closefrom below covers the window between
            // pipe() and fcntl() where glibc has it).
            guard pipe(&pipeFDs) == 0 else {
                throw FerryTestKitError("pipe failed: \(String(cString: strerror(errno)))")
            }
            _ = fcntl(pipeFDs[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(pipeFDs[1], F_SETFD, FD_CLOEXEC)
        }
        defer { if pipeFDs[0] >= 0 { close(pipeFDs[0]) } }

        var merged = ProcessInfo.processInfo.environment
        for (key, value) in environment { merged[key] = value }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if pipeFDs[0] >= 0 {
            posix_spawn_file_actions_adddup2(&actions, pipeFDs[0], 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, stdinPath, O_RDONLY, 0)
        }
        posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        // Nothing but stdin/stdout/stderr reaches the child (glibc >= 2.34).
        if let closeFrom = Self.addCloseFrom { _ = closeFrom(&actions, 3) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Children start with default signal handling and nothing blocked, whatever the test
        // runner changed (it ignores SIGPIPE, see above).
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let argv: [UnsafeMutablePointer<CChar>?] = commandLine.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            if pipeFDs[1] >= 0 { close(pipeFDs[1]) }
            owned?.remove()
            throw FerryTestKitError("cannot start \(executable): \(String(cString: strerror(result)))")
        }
        self.pid = pid
        state = Mutex(State(exit: nil, inputFD: pipeFDs[1] >= 0 ? pipeFDs[1] : nil))
    }

    /// Writing to the pipe of a child that died must fail with EPIPE, not kill the test runner.
    private static let ignoreSIGPIPE: Void = {
        #if canImport(Glibc)
        _ = Glibc.signal(SIGPIPE, SIG_IGN)
        #else
        _ = Darwin.signal(SIGPIPE, SIG_IGN)
        #endif
    }()

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, CInt) -> CInt

    /// `posix_spawn_file_actions_addclosefrom_np`, looked up at run time (the Swift Glibc module
    /// does not export the GNU extension).
    private static let addCloseFrom: AddCloseFrom? = {
        #if os(Linux)
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: AddCloseFrom.self)
        #else
        return nil
        #endif
    }()

    public var description: String { "\(commandLine.joined(separator: " ")) (pid \(pid))" }

    // MARK: Standard input

    /// Writes `bytes` to the child's standard input pipe (blocking until the pipe took them all;
    /// run it off the concurrency pool for large writes, e.g. with ``writeInput(_:)-async``).
    public func writeInputBlocking(_ bytes: [UInt8]) throws {
        guard let fd = state.withLock({ $0.inputFD }) else {
            throw FerryTestKitError("\(self): standard input is not an open pipe")
        }
        let error = writeAll(fd, bytes)
        guard error == 0 else {
            throw FerryTestKitError("\(self): writing standard input failed: \(String(cString: strerror(error)))")
        }
    }

    /// Writes `bytes` to the child's standard input pipe on a dedicated thread.
    public func writeInput(_ bytes: [UInt8]) async throws {
        try await runOffPool { try self.writeInputBlocking(bytes) }
    }

    /// Writes `text` (UTF-8) to the child's standard input pipe.
    public func writeInput(_ text: String) async throws {
        try await writeInput(Array(text.utf8))
    }

    /// Closes the standard input pipe: the child sees end-of-file.
    public func closeInput() {
        if let fd = state.withLock({ state -> CInt? in
            defer { state.inputFD = nil }
            return state.inputFD
        }) {
            close(fd)
        }
    }

    // MARK: Signals and exit

    /// The exit status if the process has ended (reaps it), else `nil`.
    public var exitStatus: ExitStatus? {
        state.withLock { state in
            if state.exit == nil { state.exit = Self.reap(pid, blocking: false) }
            return state.exit
        }
    }

    /// Whether the process is still running.
    public var isRunning: Bool { exitStatus == nil }

    /// Sends `signal` if the process has not been reaped yet (a reaped pid may be reused).
    public func signal(_ signal: Int32) {
        state.withLock { state in
            if state.exit == nil { state.exit = Self.reap(pid, blocking: false) }
            if state.exit == nil { _ = kill(pid, signal) }
        }
    }

    /// Polls until the process ends and returns how. Throws if `timeout` passes first (the
    /// process keeps running; ``cleanup()`` will kill it).
    @discardableResult
    public func waitForExit(timeout: Duration) async throws -> ExitStatus {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let status = exitStatus { return status }
            if ContinuousClock.now >= deadline {
                throw FerryTestKitError("\(self) still running after \(timeout)\(diagnostics())")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Sends SIGKILL and reaps the process.
    @discardableResult
    public func kill9() -> ExitStatus {
        state.withLock { state in
            if state.exit == nil { state.exit = Self.reap(pid, blocking: false) }
            if state.exit == nil {
                _ = kill(pid, SIGKILL)
                state.exit = Self.reap(pid, blocking: true)
            }
            return state.exit!
        }
    }

    /// Kills the process if it still runs, reaps it, closes the input pipe and removes the
    /// private output directory (if one was made). Idempotent.
    public func cleanup() {
        kill9()
        closeInput()
        ownedDirectory?.remove()
    }

    deinit { cleanup() }

    private static func reap(_ pid: pid_t, blocking: Bool) -> ExitStatus? {
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, blocking ? 0 : WNOHANG)
            if result == pid { return ExitStatus(waitStatus: status) }
            if result == 0 { return nil }
            if errno == EINTR { continue }
            return .unknown  // ECHILD: already reaped elsewhere
        }
    }

    // MARK: Output

    /// Everything the process wrote to standard output so far.
    public var standardOutput: String { Self.read(stdoutPath) }

    /// Everything the process wrote to standard error so far.
    public var standardError: String { Self.read(stderrPath) }

    /// The complete lines of standard output so far (a line still being written is left out).
    public var outputLines: [String] { Self.completeLines(standardOutput) }

    static func read(_ path: String) -> String {
        guard let data = FileManager.default.contents(atPath: path) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    static func completeLines(_ text: String) -> [String] {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        lines.removeLast()  // after the last newline: empty, or a partial line
        return lines.filter { !$0.isEmpty }
    }

    /// stdout and stderr excerpts for failure messages.
    func diagnostics() -> String {
        let out = standardOutput, err = standardError
        return "\n--- stdout (\(out.utf8.count) bytes, tail) ---\n\(String(out.suffix(2000)))\n--- stderr (tail) ---\n\(String(err.suffix(4000)))"
    }
}

// MARK: Running the CLI

/// What a finished command produced.
public struct CommandResult: Sendable, CustomStringConvertible {
    /// How it ended.
    public var status: ExitStatus
    /// Its standard output.
    public var stdout: String
    /// Its standard error.
    public var stderr: String
    /// How long it ran.
    public var duration: Duration

    /// The complete lines of ``stdout``.
    public var stdoutLines: [String] { stdout.split(separator: "\n").map(String.init) }

    public var description: String {
        "\(status) after \(duration)\n--- stdout ---\n\(stdout.suffix(4000))\n--- stderr ---\n\(stderr.suffix(4000))"
    }
}

/// Runs `executable` to completion and returns its status and output. Throws if it runs longer
/// than `timeout` (it is then killed).
public func runProcess(
    _ executable: String, _ arguments: [String], stdin: String? = nil, environment: [String: String] = [:],
    timeout: Duration = .seconds(60)
) async throws -> CommandResult {
    let start = ContinuousClock.now
    let child = try ChildProcess(executable: executable, arguments: arguments, environment: environment,
                                 input: stdin.map { .bytes(Array($0.utf8)) } ?? .null)
    defer { child.cleanup() }
    let status = try await child.waitForExit(timeout: timeout)
    return CommandResult(status: status, stdout: child.standardOutput, stderr: child.standardError,
                         duration: ContinuousClock.now - start)
}

/// Runs the `ferry` CLI with `args` to completion.
///
/// - Parameters:
///   - stdin: text fed to standard input (`/dev/null` if `nil`).
///   - environment: added to this process's environment; pass `FERRY_RUNTIME_DIR` (see
///     ``AgentProcess/environment``) so the CLI finds the test's agent.
///   - timeout: the command is killed and an error thrown if it runs longer.
public func runCLI(
    _ args: [String], stdin: String? = nil, environment: [String: String] = [:], timeout: Duration = .seconds(60)
) async throws -> CommandResult {
    try await runProcess(try FerryBinaries.ferry(), args, stdin: stdin, environment: environment, timeout: timeout)
}

/// Starts a long-running `ferry` command (`tail`, `emit --stdin` fed through a pipe, …) and
/// returns it running. Clean it up with ``ChildProcess/cleanup()``.
public func startCLI(
    _ args: [String], input: ChildProcess.Input = .null, environment: [String: String] = [:],
    outputDirectory: String? = nil, label: String? = nil
) throws -> ChildProcess {
    try ChildProcess(executable: try FerryBinaries.ferry(), arguments: args, environment: environment, input: input,
                     outputDirectory: outputDirectory, label: label ?? "ferry-\(args.first ?? "cli")")
}
