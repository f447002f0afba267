import FerryTestKit
import Foundation

/// A running `ferry tail --json` process, with helpers to read what it printed.
///
/// The subscription reaches the agent asynchronously, after tail says it is listening; call
/// ``waitUntilSubscribed(timeout:)`` before relying on it seeing a particular event. It emits probe
/// events (source ``probeSource``) until one shows up in tail's output, so those probes also
/// end up in the sink: filter by source when counting.
public final class BusTail: Sendable {
    /// The source name of probe events.
    public static let probeSource = "ferry-testkit-probe"

    /// The `ferry tail` process.
    public let process: ChildProcess
    private let environment: [String: String]
    private let probeArguments: [String]

    /// Starts `ferry tail --json` (plus `--topic` for each of `topics`, `--count` if given) against
    /// the agent found through `environment` (see ``AgentProcess/environment``).
    public init(
        topics: [String] = [], count: Int? = nil, environment: [String: String], outputDirectory: String? = nil
    ) throws {
        var args = ["tail", "--json"]
        for topic in topics { args += ["--topic", topic] }
        if let count { args += ["--count", String(count)] }
        self.environment = environment
        // Probes must reach a topic this tail listens to: local-only events go to `suppressed`.
        probeArguments = topics.isEmpty || topics.contains("accepted") || !topics.contains("suppressed") ? [] : ["--local-only"]
        process = try startCLI(args, environment: environment, outputDirectory: outputDirectory, label: "ferry-tail")
    }

    /// Waits until tail prints `ferry tail: listening on …` to standard error.
    public func waitUntilListening(timeout: Duration = .seconds(20)) async throws {
        try await eventually("ferry tail to listen", timeout: timeout) {
            if let exit = process.exitStatus {
                throw FerryTestKitError("ferry tail exited (\(exit)): \(process.standardError)")
            }
            return process.standardError.contains("ferry tail: listening on")
        }
    }

    /// Waits until the agent delivers bus messages to this tail: emits probe events (one
    /// `ferry emit --wait` per attempt) until tail prints one of them.
    public func waitUntilSubscribed(timeout: Duration = .seconds(30)) async throws {
        try await waitUntilListening(timeout: timeout)
        let deadline = ContinuousClock.now + timeout
        var attempt = 0
        while !hasProbe() {
            if ContinuousClock.now >= deadline {
                throw FerryTestKitError("ferry tail saw none of \(attempt) probe events within \(timeout)\(process.diagnostics())")
            }
            attempt += 1
            let result = try await runCLI(["emit", "probe-\(attempt)", "--source", Self.probeSource, "--wait", "--timeout", "10"] + probeArguments,
                                          environment: environment, timeout: .seconds(20))
            guard result.status.isSuccess else { throw FerryTestKitError("probe emit failed: \(result)") }
            // The bus message goes out with the ack; give tail a moment to print it.
            _ = try? await eventually("probe on tail", timeout: .milliseconds(500)) { hasProbe() }
        }
    }

    private func hasProbe() -> Bool {
        (try? messages())?.contains { $0["source"] as? String == Self.probeSource } ?? false
    }

    /// Every complete JSON line tail printed so far.
    public func messages() throws -> [[String: Any]] {
        try process.outputLines.map { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw FerryTestKitError("ferry tail --json printed a line that is not a JSON object: \(line.prefix(300))")
            }
            return object
        }
    }

    /// Messages of `topic`, leaving out probe events.
    public func messages(topic: String) throws -> [[String: Any]] {
        try messages().filter { $0["topic"] as? String == topic && $0["source"] as? String != Self.probeSource }
    }

    /// Ids of the events reported on `topic` (probes left out).
    public func ids(topic: String) throws -> Set<String> {
        Set(try messages(topic: topic).compactMap { $0["id"] as? String })
    }

    /// Kills the process and removes its output if it was private.
    public func cleanup() { process.cleanup() }
}
