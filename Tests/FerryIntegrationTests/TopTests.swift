import Ferry
import FerryIntegrationKit
import FerryTestKit
import Foundation
import Logging
import Synchronization
import Testing

/// `ferry top` for real: `--once` for scripts, and the full-screen view in a real terminal (a
/// tmux pane of 80 × 24), read with capture-pane and driven with send-keys.
@Suite("ferry top")
struct TopTests {
    @Test("--once prints one frame that fits 80 × 24: rates, queue, held, the sink table")
    func once() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let emit = try await runCLI(["emit", "Hello", "--wait"], environment: agent.environment)
        #expect(emit.status == .exited(0), "\(emit)")

        let result = try await runCLI(["top", "--once", "--interval", "0.2"], environment: agent.environment)
        #expect(result.status == .exited(0), "\(result)")
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count <= 23, "\(result.stdout)")
        #expect(lines.allSatisfy { $0.count <= 80 }, "\(result.stdout)")
        #expect(!result.stdout.contains("\u{1B}"), "no terminal control in --once output")
        #expect(result.stdout.contains("ferryd pid \(agent.pid!)"))
        #expect(result.stdout.range(of: #"events/s accepted \d+\.\d  blocked \d+\.\d  held \d+\.\d"#, options: .regularExpression) != nil)
        #expect(result.stdout.range(of: #"held +0 events"#, options: .regularExpression) != nil, "\(result.stdout)")
        #expect(result.stdout.contains("p50 -  p99 -  fsync -"), "figures the status document lacks show -")
        #expect(result.stdout.contains("SINK          TYPE      STATE      CIRCUIT"))
        #expect(result.stdout.range(of: #"http +requests/s \S+  accepted/s \S+  connections unix 0\n"#, options: .regularExpression) != nil,
                "the HTTP API's line: the listeners it serves (no TCP listener is configured, so no tcp)\n\(result.stdout)")
        // The last column is SKIP: events the sink passed by (its route or consent requirement).
        #expect(result.stdout.range(of: #"OLDEST +DEAD +SKIP\n"#, options: .regularExpression) != nil, "\(result.stdout)")
        #expect(result.stdout.range(of: #"\nfile +file +\w+ +closed +\d+\.\d +0 +- +0 +0\n"#, options: .regularExpression) != nil, "\(result.stdout)")
    }

    @Test("--once without an agent fails with the usual message and status 2 (README.md, \"Exit status\")")
    func onceWithoutAgent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let result = try await runCLI(["top", "--once"], environment: ["FERRY_RUNTIME_DIR": dir.appending("rt")])
        #expect(result.status == .exited(2))
        #expect(result.stderr.contains("ferryd is not running"), "\(result)")
    }

    @Test("under tmux: shows the accepted rate while a client emits, q quits and the terminal is restored")
    func liveInTmux() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let tmux = try Tmux(in: dir)
        defer { tmux.kill() }
        try await tmux.start(agent: agent)

        // The first frame has no rates yet, then every refresh has them.
        try await tmux.waitUntilScreen("the first frame") { $0.contains("events/s accepted") && $0.contains("q quit") }
        let screen = try await tmux.capture()
        var rows = screen.split(separator: "\n", omittingEmptySubsequences: false)
        if rows.last == "" { rows.removeLast() }
        #expect(rows.count == 24 && rows.allSatisfy { $0.count <= 80 }, "\(screen)")
        #expect(rows.last?.hasPrefix("q quit") == true, "the key help on the bottom row of 24\n\(screen)")

        // A client emits about 200 events a second until the view shows them.
        var logger = Logger(label: "top-tests")
        logger.logLevel = .warning
        let client = try FerryClient(configuration: .init(source: "top-test", runtimeDirectory: agent.runtimeDirectory), logger: logger)
        let emitting = Task {
            while !Task.isCancelled {
                for _ in 0..<10 { _ = client.track("Tick") }
                try? await Task.sleep(for: .milliseconds(50))  // pacing the load, not a wait
            }
        }
        defer { emitting.cancel() }
        let rate = try await tmux.waitForScreen("a non-zero accepted rate and delivery rate") { screen -> Double? in
            guard let accepted = Self.number(after: #"events/s accepted "#, in: screen), accepted > 0,
                  let delivered = Self.number(after: #"\nfile +file +\w+ +closed +"#, in: screen), delivered > 0 else { return nil }
            return accepted
        }
        // The first non-zero frame may cover only the start of the emitting (and a loaded machine
        // slows it): positive and bounded by what a client pacing 200/s can send.
        #expect(rate > 0 && rate < 2000, "accepted/s \(rate)")
        emitting.cancel()
        await client.shutdown()

        try await tmux.sendKeys("q")
        let after = try await tmux.waitForScreen("ferry top to exit", history: true) { $0.contains("top exited ") ? $0 : nil }
        #expect(after.contains("top exited 0"), "\(after)")
        #expect(Self.terminalRestored(after), "\(after)")
        #expect(!after.contains("events/s"), "the alternate screen is gone\n\(after)")
    }

    @Test("under tmux: Ctrl-C quits and restores the terminal; the view survives the agent going away")
    func interruptInTmux() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let agent = try AgentProcess(in: dir)
        defer { agent.cleanup() }
        try await agent.waitUntilReady()
        let tmux = try Tmux(in: dir)
        defer { tmux.kill() }
        try await tmux.start(agent: agent)
        try await tmux.waitUntilScreen("the first frame") { $0.contains("events/s accepted") }

        _ = try await agent.terminate()
        try await tmux.waitUntilScreen("the view to say the agent is gone") { $0.contains("ferryd is not running") }

        try await tmux.sendKeys("C-c")
        let after = try await tmux.waitForScreen("ferry top to exit", history: true) { $0.contains("top exited ") ? $0 : nil }
        #expect(after.contains("top exited 130"), "\(after)")
        #expect(Self.terminalRestored(after), "\(after)")
    }

    /// Whether `stty -a`'s output (printed after `ferry top` exited) shows canonical mode and echo on.
    static func terminalRestored(_ screen: String) -> Bool {
        screen.range(of: #"(^|\s)icanon(\s|$)"#, options: .regularExpression) != nil
            && screen.range(of: #"(^|\s)echo(\s|$)"#, options: .regularExpression) != nil
    }

    /// The number right after the first match of `pattern` in `text`.
    static func number(after pattern: String, in text: String) -> Double? {
        guard let match = text.range(of: pattern + #"[0-9.]+"#, options: .regularExpression) else { return nil }
        let digits = text[match].reversed().prefix { $0.isNumber || $0 == "." }
        return Double(String(digits.reversed()))
    }
}

/// A private tmux server (its own socket in the test's directory, no configuration file) running
/// `ferry top` in an 80 × 24 pane; after top exits, the pane shows its exit status and `stty -a`.
struct Tmux {
    let socket: String

    init(in dir: TemporaryDirectory) throws {
        socket = dir.appending("tmux.sock")
    }

    func start(agent: AgentProcess) async throws {
        let ferry = try FerryBinaries.ferry()
        // The shell survives Ctrl-C (a trap, so top itself gets the default disposition back).
        let script = "trap : INT; FERRY_RUNTIME_DIR='\(agent.runtimeDirectory)' '\(ferry)' top; echo \"top exited $?\"; stty -a"
        try await run(["start-server", ";", "set-option", "-g", "remain-on-exit", "on", ";",
                       "new-session", "-d", "-s", "top", "-x", "80", "-y", "24", "sh", "-c", script])
    }

    /// The pane's visible rows, or with `history` its scrollback too (what scrolled off once
    /// top exited and the shell went on printing).
    func capture(history: Bool = false) async throws -> String {
        try await run(["capture-pane", "-p", "-t", "top"] + (history ? ["-S", "-"] : []))
    }

    func sendKeys(_ keys: String) async throws {
        try await run(["send-keys", "-t", "top", keys])
    }

    /// Waits until `screen` returns a value for the pane's text.
    @discardableResult
    func waitForScreen<T>(
        _ what: String, timeout: Duration = .seconds(30), history: Bool = false, _ screen: (String) -> T?
    ) async throws -> T {
        var last = ""
        do {
            return try await waitForValue(what, timeout: timeout, pollInterval: .milliseconds(100)) {
                last = try await capture(history: history)
                return screen(last)
            }
        } catch {
            throw FerryTestKitError("\(error)\n--- pane ---\n\(last)")
        }
    }

    func waitUntilScreen(_ what: String, timeout: Duration = .seconds(30), _ condition: (String) -> Bool) async throws {
        _ = try await waitForScreen(what, timeout: timeout) { condition($0) ? true : nil }
    }

    func kill() {
        _ = try? runBlocking(["kill-server"])
    }

    @discardableResult
    private func run(_ arguments: [String]) async throws -> String {
        let result = try await runProcess("/usr/bin/env", ["tmux", "-S", socket, "-f", "/dev/null"] + arguments, timeout: .seconds(10))
        guard result.status == .exited(0) else { throw FerryTestKitError("tmux \(arguments.first ?? "") failed: \(result)") }
        return result.stdout
    }

    /// For `defer`: runs tmux to completion without the concurrency pool.
    private func runBlocking(_ arguments: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["tmux", "-S", socket, "-f", "/dev/null"] + arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
}
