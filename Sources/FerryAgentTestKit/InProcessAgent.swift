import FerryAgent
import FerryMetrics
import FerryTestKit
import FerryThreads
import FerryZeroMQIngest

/// An agent running in this process, in a task: it serves the ZeroMQ ingest path (as `ferryd`
/// does) and any other paths it is given, records its metrics in a Prometheus backend of its own,
/// and logs nothing. For tests of the agent that need no child process.
package final class InProcessAgent: Sendable {
    /// The agent.
    package let agent: FerryAgent
    private let task: Task<Void, any Error>

    /// Starts an agent of `configuration` whose first sink uses `sink` (when given), serving the
    /// ZeroMQ path and then `paths`, and waits until it serves (or fails to start: its error is
    /// thrown).
    package convenience init(
        _ configuration: AgentConfiguration, sink: (any Sink)? = nil, paths: [any IngestPath] = [], timeout: Duration = .seconds(30)
    ) async throws {
        let first = configuration.sinks.first?.name ?? ""
        try await self.init(configuration, sinks: sink.map { [first: $0] } ?? [:], paths: paths, timeout: timeout)
    }

    /// Starts an agent whose sinks named in `sinks` use those implementations, serving the ZeroMQ
    /// path and then `paths`, and waits until it serves.
    package convenience init(
        _ configuration: AgentConfiguration, sinks: [String: any Sink], paths: [any IngestPath] = [],
        timeout: Duration = .seconds(30)
    ) async throws {
        let agent = try Self.agent(configuration, sinks: sinks, paths: paths)
        try await self.init(agent: agent, timeout: timeout)
    }

    /// An agent (not started) as the other initialisers start it: the ZeroMQ path, then `paths`.
    package static func agent(
        _ configuration: AgentConfiguration, sinks: [String: any Sink] = [:], paths: [any IngestPath] = []
    ) throws -> FerryAgent {
        let zeromq = try IngestPathRegistry([.zeromq]).paths(for: configuration, logger: quietLogger)
        return FerryAgent(configuration: configuration, sinks: sinks, paths: zeromq + paths,
                          metrics: PrometheusBackend().agentBackend, logger: quietLogger)
    }

    /// Starts `agent` and waits until it serves (or fails to start: its error is thrown).
    ///
    /// The agent runs on a thread of its own (`ferry-in-process`: its start-up and its code
    /// between blocking steps), not on the cooperative pool: a test process's pool is shared by
    /// every test, and tests block it with their own file work, which held up agents' start-ups
    /// under load (docs/FAULTS.md, §9). `ferryd`'s agent has its process's pool to itself.
    package init(agent: FerryAgent, timeout: Duration = .seconds(30)) async throws {
        let thread = BlockingExecutor(name: "ferry-in-process")
        let task = Task(executorPreference: thread) {
            defer { thread.shutdown() }
            try await agent.run()
        }
        self.agent = agent
        self.task = task
        do {
            // waitUntilReady() throws run()'s error if start-up fails.
            try await withTimeout(timeout, "the agent to be ready") { try await agent.waitUntilReady() }
        } catch {
            task.cancel()
            throw error
        }
    }

    /// Cancels the agent (a graceful shutdown) and waits for run() to return.
    package func stop(timeout: Duration = .seconds(30)) async throws {
        task.cancel()
        let task = self.task
        try await withTimeout(timeout, "agent run() to return after cancellation") { try await task.value }
    }

    /// The agent's counters (what `ferry status` reads).
    package var counters: [String: Int] { agent.counters.snapshot }
}
