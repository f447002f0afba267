import FerryStorage
import FerryThreads
import Logging

// The agent's wiring of the upstream erasures (docs/CONSENT.md, "Erasure upstream"): the
// outbox, opened at start, and one sender per sink, which settles each outcome through the
// commit thread as a consent change (audited, journaled).

extension AgentStartup {
    /// Opens `<data>/consent/erasures.json` for the configured sinks.
    static func openErasureOutbox(_ configuration: AgentConfiguration) throws -> ErasureOutbox {
        let directory = configuration.dataDirectory + "/consent"
        try FileIO.makeDirectory(directory, mode: 0o700)
        return try ErasureOutbox(path: directory + "/erasures.json", sinks: configuration.sinks.map {
            ErasureOutbox.SinkInfo(name: $0.name, batchMaxBytes: $0.batch.maxBytes)
        })
    }
}

extension FerryAgent {
    /// One ``ErasureSender`` per sink; each settles outcomes as the consent command
    /// ``ConsentCommand/erasureOutcome(_:)`` (actor: the agent itself).
    static func makeErasureSenders(
        sinks: [any Sink], configured: [AgentConfiguration.SinkConfiguration], threads: [BlockingExecutor],
        outbox: ErasureOutbox, gate: any DeliveryGate, wakeups: [AsyncSignal], pipeline: CommitPipeline, metrics: AgentMetrics,
        logger: Logger
    ) -> [ErasureSender] {
        zip(zip(sinks, wakeups), zip(configured, threads)).map { sinkAndWakeup, pair in
            let (sink, wakeup) = sinkAndWakeup
            return ErasureSender(sink: sink, configuration: pair.0, outbox: outbox, io: pair.1, gate: gate, wakeup: wakeup,
                                 metrics: metrics, logger: logger) { outcome in
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    let submitted = pipeline.submit(.erasureOutcome(outcome), by: .agent) { result in
                        continuation.resume(with: result.map { _ in () }.mapError { $0 as any Error })
                    }
                    if !submitted {
                        continuation.resume(throwing: AgentError(code: .io, message: "the agent is stopping"))
                    }
                }
            }
        }
    }
}
