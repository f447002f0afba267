import ArgumentParser
import Ferry
import FerryProtocol
import Foundation

/// `ferry status`: what the agent is doing.
struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show queue depth, bytes, oldest undelivered age, delivery state and counters.",
        discussion: """
            With --wait, waits until the agent answers (it is ready: its queue is recovered and its sockets are bound), \
            then prints its status. Exit status: 0 the agent answered; 2 no agent answered (with --wait: within --timeout); \
            1 any other error (the agent refused, its reply was unreadable); 64 bad arguments.
            """
    )

    @Flag(name: .long, help: "Print the raw status document as JSON.")
    var json = false

    @Flag(name: .long, help: "Wait until the agent answers (ready for events), then print the status.")
    var wait = false

    @Option(name: .long, help: "With --wait: give up after this many seconds (default 30) and exit 2.")
    var timeout: Double?

    @OptionGroup var agent: AgentOptions

    func validate() throws {
        if let timeout {
            guard wait else { throw ValidationError("--timeout needs --wait") }
            guard timeout.isFinite, timeout >= 0, timeout <= 86_400 else {
                throw ValidationError("--timeout must be a number of seconds from 0 to 86400")
            }
        }
    }

    func run() throws {
        let reply = try wait ? waitForAnswer(seconds: timeout ?? 30) : answer()
        if json {
            print(reply.text)
            return
        }
        let status = try Control.decode(StatusReply.self, from: reply)
        let queue = status.queue
        let age = queue.oldestUndeliveredAgeMilliseconds.map { "\($0) ms" } ?? "-"
        print("ferryd pid \(status.pid), up \(status.uptimeMilliseconds / 1000) s")
        print("  runtime dir   \(status.runtimeDirectory)")
        print("  data dir      \(status.dataDirectory)")
        print("ingest")
        print("  zeromq        \(FerryPaths.ingestEndpoint(status.runtimeDirectory))")
        for (name, address) in (status.ingestAddresses ?? [:]).sorted(by: { $0.key > $1.key }) where !address.isEmpty {
            print("  http \(name.padding(toLength: 9, withPad: " ", startingAt: 0))\(address)")
        }
        print("queue")
        print("  events        \(queue.events)")
        print("  bytes         \(queue.bytes) in \(queue.segments) segments")
        print("  oldest        \(age)")
        print("sinks")
        for sink in status.sinks {
            print("  \(sink.name) (\(sink.type)): \(sink.state), circuit \(sink.circuit)")
            print("    backlog     \(sink.backlogEvents) events")
            print("    delivered   \(sink.delivered), retried \(sink.retried), dead-lettered \(sink.deadLettered)")
            if let required = sink.requiresConsent, !required.isEmpty { print("    requires    consent to \(required.joined(separator: ", "))") }
            if let route = sink.route { print("    route       \(route)") }
            if let skipped = sink.skipped, !skipped.isEmpty {
                let reasons = skipped.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
                print("    skipped     \(skipped.values.reduce(0, +)) (\(reasons))")
            }
            print("    failures    \(sink.consecutiveFailures) consecutive")
            if let at = sink.lastSuccessAt { print("    last ok     \(Self.time(at))") }
            if let at = sink.retryAt { print("    next try    \(Self.time(at))") }
            if let error = sink.lastError { print("    last error  \(error)") }
        }
        if let paths = status.ingestPaths, !paths.isEmpty {
            print("http api")
            for (name, figures) in paths.sorted(by: { $0.key > $1.key }) {
                let outcomes = ["accepted", "duplicate", "refused", "retry"].map { "\($0) \(figures[$0] ?? 0)" }.joined(separator: ", ")
                print("  \(name): \(figures["requests"] ?? 0) requests, \(figures["connections"] ?? 0) connections; events \(outcomes)")
            }
        }
        print("counters")
        for key in status.counters.keys.sorted() { print("  \(key.padding(toLength: 20, withPad: " ", startingAt: 0))\(status.counters[key]!)") }
    }

    /// One `status` request. An agent that does not answer exits 2 (as `--wait` does when its
    /// time is up), so scripts can tell "not running" from other failures.
    private func answer() throws -> FerryControl.Reply {
        let runtime = agent.runtimeDir ?? FerryPaths.agentRuntimeDirectory()
        do {
            return try Control.request(.status(), runtimeDirectory: runtime)
        } catch CLIError.notRunning(let directory) {
            FileHandle.standardError.write(Data("ferry status: \(CLIError.notRunning(directory))\n".utf8))
            throw ExitCode(2)
        }
    }

    /// Asks `status` every 100 ms until the agent answers or `seconds` pass (then exit 2). The
    /// runtime directory is decided again on every try (unless given), so a per-user agent that
    /// comes up while this waits is found as every client would find it.
    private func waitForAnswer(seconds: Double) throws -> FerryControl.Reply {
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int(seconds * 1000))
        while true {
            let runtime = agent.runtimeDir ?? FerryPaths.agentRuntimeDirectory()
            let left = deadline - clock.now
            do {
                return try Control.request(.status(), runtimeDirectory: runtime, timeout: max(.milliseconds(100), min(left, .seconds(1))))
            } catch CLIError.notRunning(let directory) {
                if clock.now >= deadline {
                    FileHandle.standardError.write(Data("ferry status: no agent answered within \(seconds) s: \(CLIError.notRunning(directory))\n".utf8))
                    throw ExitCode(2)
                }
                let pause = min(.milliseconds(100), deadline - clock.now)
                Thread.sleep(forTimeInterval: Double(pause.components.attoseconds) / 1e18 + Double(pause.components.seconds))
            }
        }
    }

    static func time(_ ms: Int) -> String {
        ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}
