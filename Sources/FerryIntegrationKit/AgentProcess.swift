#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryTestKit
import Foundation
import Synchronization

/// A real `ferryd` process for integration tests, with its own data, runtime and log
/// directories.
///
/// ```swift
/// let dir = try TemporaryDirectory()
/// defer { dir.remove() }
/// let agent = try AgentProcess(in: dir)
/// defer { agent.cleanup() }
/// try await agent.waitUntilReady()
/// let result = try await runCLI(["emit", "Hello", "--wait"], environment: agent.environment)
/// ```
///
/// Each start writes the agent's standard error to its own file (``logs`` joins them). The
/// process is killed with `SIGKILL` by ``cleanup()`` and, as a safety net, when the object is
/// released, so a failing test never leaves an agent behind.
public final class AgentProcess: Sendable {
    /// `--data-dir`.
    public let dataDirectory: String
    /// `--runtime-dir`: where the sockets are.
    public let runtimeDirectory: String
    /// The file sink's directory (`--sink-dir`, or the default `<data>/delivered`).
    public let sinkDirectory: String
    /// Where each run's stdout/stderr files go.
    public let logDirectory: String
    /// Arguments added to every start (e.g. `["--max-event-bytes", "1024"]`).
    public let extraArguments: [String]
    private let explicitSinkDirectory: Bool
    private let current = Mutex<ChildProcess?>(nil)
    private let runs = Mutex<[ChildProcess]>([])

    /// An agent using `<dir>/data`, `<dir>/rt` and `<dir>/logs`, started at once unless `start`
    /// is false. `sinkDirectory` defaults to the agent's own default (`<data>/delivered`).
    public convenience init(
        in directory: TemporaryDirectory, sinkDirectory: String? = nil, extraArguments: [String] = [], start: Bool = true
    ) throws {
        try self.init(dataDirectory: directory.appending("data"), runtimeDirectory: directory.appending("rt"),
                      sinkDirectory: sinkDirectory, logDirectory: directory.appending("logs"),
                      extraArguments: extraArguments, start: start)
    }

    /// An agent with explicit directories (created as needed by the agent; `logDirectory` here).
    public init(
        dataDirectory: String, runtimeDirectory: String, sinkDirectory: String? = nil, logDirectory: String,
        extraArguments: [String] = [], start: Bool = true
    ) throws {
        precondition(runtimeDirectory.utf8.count + "/control".utf8.count < 100,
                     "Unix socket paths are limited to ~100 bytes: use a short runtime directory (\(runtimeDirectory))")
        self.dataDirectory = dataDirectory
        self.runtimeDirectory = runtimeDirectory
        self.sinkDirectory = sinkDirectory ?? dataDirectory + "/delivered"
        explicitSinkDirectory = sinkDirectory != nil
        self.logDirectory = logDirectory
        self.extraArguments = extraArguments
        try FileManager.default.createDirectory(atPath: logDirectory, withIntermediateDirectories: true)
        if start { try self.start() }
    }

    /// The file sink's delivery cursor (`<data>/cursors/file.cursor`), present once the first
    /// batch has been delivered and acknowledged.
    public var cursorPath: String { dataDirectory + "/cursors/file.cursor" }

    /// The delivery cursor of sink `name` (`<data>/cursors/<name>.cursor`).
    public func cursorPath(sink name: String) -> String { dataDirectory + "/cursors/" + name + ".cursor" }

    /// The dead-letter directory of sink `name` (`<data>/deadletter/<name>`).
    public func deadLetterDirectory(sink name: String) -> String { dataDirectory + "/deadletter/" + name }

    /// Writes `json` as a configuration file in `directory` and returns the `--config` arguments
    /// for ``init(in:sinkDirectory:extraArguments:start:)``'s `extraArguments`.
    public static func configurationArguments(_ json: String, in directory: TemporaryDirectory) throws -> [String] {
        let path = directory.appending("ferryd.json")
        try writeText(json, to: path)
        return ["--config", path]
    }

    /// Environment for CLI commands and clients so they find this agent (`FERRY_RUNTIME_DIR`).
    public var environment: [String: String] { ["FERRY_RUNTIME_DIR": runtimeDirectory] }

    /// The arguments `ferryd` is started with.
    public var arguments: [String] {
        var args = ["--data-dir", dataDirectory, "--runtime-dir", runtimeDirectory]
        if explicitSinkDirectory { args += ["--sink-dir", sinkDirectory] }
        return args + extraArguments
    }

    /// Starts `ferryd`, with `extraEnvironment` added to its environment for this run only (e.g.
    /// `FERRY_CRASH_AT`). Throws if this agent's process is already running.
    public func start(extraEnvironment: [String: String] = [:]) throws {
        try current.withLock { current in
            if let running = current, running.isRunning {
                throw FerryTestKitError("ferryd (pid \(running.pid)) is already running")
            }
            let process = try ChildProcess(executable: try FerryBinaries.ferryd(), arguments: arguments,
                                           environment: environment.merging(extraEnvironment) { $1 },
                                           outputDirectory: logDirectory, label: "ferryd")
            current = process
            runs.withLock { $0.append(process) }
        }
    }

    /// The current process, if started.
    public var process: ChildProcess? { current.withLock { $0 } }

    /// The current process id, if started.
    public var pid: pid_t? { process?.pid }

    /// Whether the current process is running.
    public var isRunning: Bool { process?.isRunning ?? false }

    /// Polls the control socket until the agent answers `status` with `"ok": true`. Throws (with
    /// the agent's log) if it exits first or `timeout` passes.
    @discardableResult
    public func waitUntilReady(timeout: Duration = .seconds(30)) async throws -> AgentStatus {
        guard let process else { throw FerryTestKitError("ferryd was never started") }
        let deadline = ContinuousClock.now + timeout
        while true {
            if let exit = process.exitStatus {
                throw FerryTestKitError("ferryd exited (\(exit)) before it was ready\n--- ferryd log ---\n\(logs.suffix(4000))")
            }
            if let status = try? await controlStatus(runtimeDirectory: runtimeDirectory, timeout: .milliseconds(500)),
               status.ok, status.pid == Int(process.pid) {
                return status
            }
            if ContinuousClock.now >= deadline {
                throw FerryTestKitError("ferryd not ready after \(timeout)\n--- ferryd log ---\n\(logs.suffix(4000))")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The agent's status document.
    public func status(timeout: Duration = .seconds(3)) async throws -> AgentStatus {
        try await controlStatus(runtimeDirectory: runtimeDirectory, timeout: timeout)
    }

    /// Sends `signal` to the current process.
    public func kill(signal: Int32) {
        process?.signal(signal)
    }

    /// `SIGTERM` (graceful stop), then waits for the exit.
    @discardableResult
    public func terminate(timeout: Duration = .seconds(20)) async throws -> ExitStatus {
        guard let process else { throw FerryTestKitError("ferryd was never started") }
        process.signal(SIGTERM)
        return try await process.waitForExit(timeout: timeout)
    }

    /// `SIGKILL` (a crash: no shutdown code runs) and reaps the process.
    @discardableResult
    public func kill9() -> ExitStatus {
        process?.kill9() ?? .unknown
    }

    /// Waits until the current process exits.
    @discardableResult
    public func waitForExit(timeout: Duration) async throws -> ExitStatus {
        guard let process else { throw FerryTestKitError("ferryd was never started") }
        return try await process.waitForExit(timeout: timeout)
    }

    /// Stops the agent gracefully if it runs, starts it again and waits until it is ready.
    @discardableResult
    public func restart(timeout: Duration = .seconds(30)) async throws -> AgentStatus {
        if isRunning { try await terminate(timeout: timeout) }
        try start()
        return try await waitUntilReady(timeout: timeout)
    }

    /// The standard error of every run so far, oldest first.
    public var logs: String {
        runs.withLock { $0 }.enumerated().map { index, run in
            "=== ferryd run \(index + 1) (pid \(run.pid)) ===\n" + run.standardError
        }.joined(separator: "\n")
    }

    /// The events the file sink has written so far.
    public func deliveredEvents() throws -> [DeliveredEvent] {
        try FerryIntegrationKit.deliveredEvents(in: sinkDirectory)
    }

    /// Kills the current process (`SIGKILL`) if it still runs. Idempotent; leaves the
    /// directories for the test's ``TemporaryDirectory`` to remove.
    public func cleanup() {
        for run in runs.withLock({ $0 }) { run.kill9() }
    }

    deinit { cleanup() }
}
