import FerryProtocol
import FerryStorage
import FerryThreads
import Logging
import Synchronization

/// One sink's side of the erasure outbox: sends the requests pending with the sink
/// (``Sink/erase(_:)``), oldest first, one at a time, retried like batches — the sink's
/// `retry` backoff (``RetryBackoff``), its own ``CircuitBreaker`` with the sink's `circuit`
/// settings, the sink's classification of failures (``SinkError/Disposition``), `Retry-After`
/// as a lower bound — and hands each outcome (sent, or failed for good) to the commit thread,
/// which audits it and settles it in the outbox in one journaled change (``ConsentWorker``).
///
/// Runs beside the sink's delivery loop, as long as it. A request whose outcome was not yet
/// settled when the agent stopped is sent again at the next start, with the same id.
final class ErasureSender: Sendable {
    let sink: any Sink
    /// The sink's configured name.
    let name: String
    private let outbox: ErasureOutbox
    private let settings: Mutex<AgentConfiguration.SinkConfiguration>
    private let breaker: Mutex<CircuitBreaker>
    private let io: BlockingExecutor
    private let logger: Logger
    private let metrics: AgentMetrics
    /// Hands an outcome to the commit thread; returns once it is durable, throws if it cannot be.
    private let settle: @Sendable (ErasureOutcome) async throws -> Void
    /// Signalled when a request is added to the outbox, and after every consent change (one may
    /// let the sender go); not by event commits, so a busy ingest costs it nothing.
    let wakeup: AsyncSignal
    /// The consent gate: nothing is sent while delivery is paused (before `ferry start` with
    /// `autoStart: false`, or in no-op mode), as no batch is.
    private let gate: any DeliveryGate

    /// A sender for `sink`, configured as `configuration` (its retry and circuit settings), with
    /// `io` the sink's thread for the outbox's writes.
    init(sink: any Sink, configuration: AgentConfiguration.SinkConfiguration, outbox: ErasureOutbox, io: BlockingExecutor,
         gate: any DeliveryGate = OpenDeliveryGate(), wakeup: AsyncSignal = AsyncSignal(), metrics: AgentMetrics, logger: Logger,
         settle: @escaping @Sendable (ErasureOutcome) async throws -> Void) {
        self.gate = gate
        self.wakeup = wakeup
        self.sink = sink
        name = configuration.name
        self.outbox = outbox
        settings = Mutex(configuration)
        breaker = Mutex(CircuitBreaker(configuration.circuit))
        self.io = io
        self.metrics = metrics
        var logger = logger
        logger[metadataKey: "sink"] = "\(configuration.name)"
        self.logger = logger
        self.settle = settle
        outbox.subscribe(wakeup)
        _ = metrics.erasureRequests(sink: configuration.name, outcome: "sent")  // every series at 0 from the start
    }

    /// New retry and circuit settings (a reload).
    func reconfigure(retry: AgentConfiguration.SinkConfiguration.Retry, circuit: AgentConfiguration.SinkConfiguration.Circuit) {
        settings.withLock {
            $0.retry = retry
            $0.circuit = circuit
        }
        breaker.withLock { $0.reconfigure(circuit) }
    }

    /// Sends until the task is cancelled.
    func run() async {
        while !Task.isCancelled {
            guard !gate.isPaused(sink: name, policy: nil), let request = outbox.pending(for: name).first else {
                await wakeup.wait()
                continue
            }
            guard await send(request) else { return }
        }
    }

    /// Sends `request` until it is sent or failed for good and its outcome is settled; false
    /// when cancelled first.
    private func send(_ request: SinkErasure) async -> Bool {
        var attempts = outbox.status(of: request.id, sink: name)?.attempts ?? 0
        var firstAttemptAt: UInt64?
        while !Task.isCancelled {
            let admission = breaker.withLock { $0.admit(now: WallClock.unixMilliseconds()) }
            if let wait = admission.wait {
                guard await sleep(.milliseconds(Int(min(wait, UInt64(Int.max))))) else { return false }
                continue
            }
            attempts += 1
            let now = WallClock.unixMilliseconds()
            if firstAttemptAt == nil { firstAttemptAt = now }
            let failure: SinkError
            do {
                let reference = try await sink.erase(request)
                _ = breaker.withLock { $0.succeeded() }
                logger.notice("erasure sent upstream", metadata: ["request": "\(request.id)", "attempts": "\(attempts)"])
                return await finish(ErasureOutcome(id: request.id, sink: name, state: .sent, attempts: attempts, reference: reference))
            } catch {
                failure = error as? SinkError ?? SinkError(.retry(after: nil), "\(error)")
            }
            let retry = settings.withLock { $0.retry }
            if failure.disposition == .permanent {
                // The change it returns is not announced: only a delivery loop's circuit is
                // published (topic `circuit`, docs/DELIVERY.md); this breaker's state is read by admit.
                _ = breaker.withLock { $0.failedPermanently() }
                logger.error("erasure refused upstream", metadata: ["request": "\(request.id)", "error": "\(failure.message)"])
                return await finish(ErasureOutcome(id: request.id, sink: name, state: .failed, attempts: attempts, error: failure.message))
            }
            let after = WallClock.unixMilliseconds()
            _ = breaker.withLock { $0.failed(now: after) }
            if let elapsed = retry.maxElapsedMilliseconds, after - (firstAttemptAt ?? after) >= UInt64(elapsed) {
                let message = failure.message + " (still failing after retry.maxElapsedMilliseconds)"
                return await finish(ErasureOutcome(id: request.id, sink: name, state: .failed, attempts: attempts, error: message))
            }
            metrics.erasureRequests(sink: name, outcome: "retried").increment()
            let outbox = self.outbox, name = self.name, id = request.id, message = failure.message
            do {
                try await io.run { try outbox.recordAttempt(id, sink: name, error: message, at: after) }
            } catch {
                logger.error("cannot record an erasure attempt", metadata: ["error": "\(error)"])
            }
            var delay = RetryBackoff.delay(attempt: attempts, retry: retry)
            if case .retry(let at?) = failure.disposition { delay = max(at, delay) }
            let (circuit, openUntil) = breaker.withLock { ($0.state, $0.openUntil) }
            if circuit == .open { delay = max(delay, .milliseconds(Int(openUntil > after ? openUntil - after : 0))) }
            logger.warning("erasure failed; will retry", metadata: [
                "request": "\(request.id)", "attempt": "\(attempts)", "error": "\(failure.message)",
            ])
            guard await sleep(delay) else { return false }
        }
        return false
    }

    /// Settles `outcome` through the commit thread, retrying until it is durable; false when
    /// cancelled first (it is sent again at the next start).
    private func finish(_ outcome: ErasureOutcome) async -> Bool {
        var failures = 0
        while !Task.isCancelled {
            do {
                try await settle(outcome)
                metrics.erasureRequests(sink: name, outcome: outcome.state.rawValue).increment()
                return true
            } catch {
                failures += 1
                logger.error("cannot record an erasure outcome; retrying", metadata: ["error": "\(error)"])
                guard await sleep(RetryBackoff.delay(attempt: failures, retry: settings.withLock { $0.retry })) else { return false }
            }
        }
        return false
    }

    /// Sleeps for `duration`; false when cancelled.
    private func sleep(_ duration: Duration) async -> Bool {
        do {
            try await Task.sleep(for: duration)
            return true
        } catch {
            return false
        }
    }
}
