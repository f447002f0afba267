@testable import FerryFileSink
import Foundation
@testable import FerryAgent
import FerryMetrics
@testable import FerryStorage
import FerryTestKit
import FerryProtocol
import Synchronization
import ZeroMQ

/// Sends `messages` over one DEALER connection, one at a time, one reply each (FerryTestKit).
func exchange(runtimeDirectory: String, _ messages: [[[UInt8]]], timeout: Duration = .seconds(15)) async throws -> [IngestReply] {
    try await RawIngestClient.exchange(runtimeDirectory: runtimeDirectory, messages: messages, timeout: timeout)
}

func eventsHeader(_ requestID: UInt32, version: UInt8 = ferryProtocolVersion) -> [UInt8] {
    var header = MessageHeader(kind: .events, requestID: requestID).encoded()
    header[0] = version
    return header
}

/// An in-process agent running in a task.
final class InProcessAgent: Sendable {
    let agent: FerryAgent
    let task: Task<Void, any Error>

    /// Starts `agent` and waits until it serves (or fails to start).
    convenience init(_ configuration: AgentConfiguration, sink: (any Sink)? = nil, timeout: Duration = .seconds(30)) async throws {
        let first = configuration.sinks.first?.name ?? ""
        try await self.init(configuration, sinks: sink.map { [first: $0] } ?? [:], timeout: timeout)
    }

    /// Starts an agent whose sinks named in `sinks` use those implementations.
    convenience init(_ configuration: AgentConfiguration, sinks: [String: any Sink], timeout: Duration = .seconds(30)) async throws {
        let agent = FerryAgent(configuration: configuration, sinks: sinks, metrics: PrometheusBackend().agentBackend, logger: quietLogger)
        try await self.init(agent: agent, timeout: timeout)
    }

    /// Starts `agent` and waits until it serves (or fails to start).
    init(agent: FerryAgent, timeout: Duration = .seconds(30)) async throws {
        let task = Task { try await agent.run() }
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

    /// Cancels the agent and waits for run() to return.
    func stop(timeout: Duration = .seconds(30)) async throws {
        task.cancel()
        try await value(of: task, timeout: timeout, "agent run() to return after cancellation")
    }

    var counters: [String: Int] { agent.counters.snapshot }
}

/// A runtime and data directory pair for an in-process agent.
func agentConfiguration(
    _ scratch: ScratchDirectory, maxEventBytes: Int = 2048, log: LogConfiguration = LogConfiguration()
) -> AgentConfiguration {
    AgentConfiguration(
        runtimeDirectory: scratch.appending("run"), dataDirectory: scratch.appending("data"),
        maxEventBytes: maxEventBytes, log: log,
        delivery: AgentConfiguration.Delivery(retryInitialMilliseconds: 10, retryMaxMilliseconds: 200),
        sinks: [.defaultFile(delivery: AgentConfiguration.Delivery(retryInitialMilliseconds: 10, retryMaxMilliseconds: 200))])
}

/// The file sink's lines in `directory`, parsed as JSON objects, in write order.
func sinkLines(_ directory: String) throws -> [[String: Any]] {
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
        .filter { $0.hasPrefix("events-") && $0.hasSuffix(".jsonl") }.sorted()
    var objects: [[String: Any]] = []
    for name in names {
        let text = String(decoding: try readBytes(directory + "/" + name), as: UTF8.self)
        // A line still being written (no newline yet) is left out.
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast()
        for line in lines {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw TestFailure("sink line is not a JSON object: \(line)")
            }
            objects.append(object)
        }
    }
    return objects
}
