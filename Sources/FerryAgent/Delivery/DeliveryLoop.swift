import CoreMetrics
import FerryProtocol
import FerryStorage
import FerryThreads
import Logging
import Synchronization

/// Where one sink's delivery stands, for `ferry status`.
public struct DeliveryState: Sendable {
    /// What the loop is doing.
    public enum Phase: String, Sendable {
        case starting, idle, delivering, retrying, paused, stopped
    }
    /// The circuit breaker's state.
    public enum CircuitState: String, Sendable {
        /// Attempts are made.
        case closed
        /// No attempts until the open period ends.
        case open
        /// One probe attempt decides: success closes, failure re-opens.
        case halfOpen = "half_open"
    }
    /// The sink's name.
    public var sink: String
    /// What the loop is doing now.
    public var phase: Phase = .starting
    // The circuit and the failures since the last success are the breaker's
    // (``DeliveryLoop/circuitStatus``), read from there by `ferry status`.
    /// Agent ms of the last successful batch.
    public var lastSuccessAt: UInt64?
    /// The last failure's message.
    public var lastError: String?
    /// Agent ms of the next attempt while ``phase`` is `retrying` (or the circuit is open).
    public var retryAt: UInt64?
    // What the sink delivered, retried and dead-lettered is counted in the agent's metric store
    // (`SinkMetrics`, exported as `ferry_sink_*_total{sink}`), which `ferry status` reads.
}

/// One sink's delivery: reads the log from the sink's own cursor, hands batches to the sink, and
/// advances the cursor only after the sink acknowledged a batch (or the batch was dead-lettered).
///
/// A full batch is sent at once; a partial one once `batch.maxWaitMilliseconds` have passed since
/// the sink's previous delivery or since its oldest event was accepted, whichever is first
/// (``DeliveryPacing``): a trickle of events is delivered in one batch per wait, not one per commit.
/// Failures are retried with exponential backoff and full jitter (or the sink's `retry(after:)`);
/// after `circuit.failureThreshold` consecutive failures the circuit opens and no attempt is made
/// for `circuit.openMilliseconds`, then one probe decides. A permanent error, or a batch still
/// failing `retry.maxElapsedMilliseconds` after its first attempt, is written to the dead-letter
/// directory before the cursor moves past it: nothing is skipped silently. Nothing is held in
/// memory beyond the batch in hand: the backlog stays on disk.
final class DeliveryLoop: Sendable {
    let sink: any Sink
    /// The sink's configured name: its cursor file, dead-letter directory and log consumer.
    let name: String
    private let log: SegmentedLog
    private let cursorStore: CursorStore
    private let deadLetters: DeadLetterStore
    /// The sink's configuration; its batch, retry and circuit settings change on reload.
    private let settings: Mutex<AgentConfiguration.SinkConfiguration>
    private var configuration: AgentConfiguration.SinkConfiguration { settings.withLock { $0 } }
    /// This sink's instruments (`sink` label).
    let metrics: SinkMetrics
    private let logger: Logger
    /// The sink's own thread for blocking work (log reads, cursor and dead-letter writes), shared
    /// with the sink and with no other sink: a sink stalled in I/O holds back only itself. The
    /// loop itself runs there (``run()``).
    private let io: BlockingExecutor
    /// Signalled on every commit (new events) and by replay requests.
    let wakeup = AsyncSignal()
    /// Signalled by replay requests only: retry and circuit-open pauses wait on it, so a busy
    /// ingest does not wake a backing-off loop at every commit.
    private let replayRequested = AsyncSignal()
    let state: Mutex<DeliveryState>
    private let published: @Sendable (DeliveryBatch) -> Void
    private let gate: any DeliveryGate
    private let blocked: @Sendable ([StoredEvent], String) -> Void
    /// Told about events this sink passed by for a consent reason of its own (its `requiresConsent`).
    private let skippedForConsent: @Sendable ([StoredEvent], String) -> Void
    /// The sink's `requiresConsent` and `route`, compiled; `nil` (the common case) when it names
    /// neither, so the gate does no per-sink work. Changes on reload.
    private let policy: Mutex<SinkPolicy?>
    private let circuitChanged: @Sendable (CircuitChange) -> Void
    /// The sink's checkpoint as last stored with the cursor.
    private let checkpoint: Mutex<[UInt8]?>
    private let breaker: Mutex<CircuitBreaker>

    /// The circuit's state and the failed attempts since the last success, as the breaker has
    /// them (the one place they are kept).
    var circuitStatus: (state: DeliveryState.CircuitState, consecutiveFailures: Int) {
        breaker.withLock { ($0.state, $0.consecutiveFailures) }
    }
    private let replays = Mutex<ReplayQueue>(ReplayQueue())

    private struct ReplayQueue {
        var stopped = false
        var requests: [(id: String, continuation: CheckedContinuation<Int, any Error>)] = []
    }

    /// `gate` is asked before every attempt; `blocked` is told about events it refused. `io` is
    /// the sink's thread for blocking work (a new one when `nil`).
    /// `checkpoint` is the sink's checkpoint at start, stored again when the cursor moves without
    /// the sink writing (a batch skipped whole or dead-lettered).
    init(
        sink: any Sink, configuration: AgentConfiguration.SinkConfiguration, log: SegmentedLog,
        cursorStore: CursorStore, deadLetters: DeadLetterStore, counters: AgentMetrics, logger: Logger,
        checkpoint: [UInt8]? = nil, gate: any DeliveryGate = OpenDeliveryGate(), io: BlockingExecutor? = nil,
        blocked: @escaping @Sendable ([StoredEvent], String) -> Void = { _, _ in },
        skippedForConsent: @escaping @Sendable ([StoredEvent], String) -> Void = { _, _ in },
        circuitChanged: @escaping @Sendable (CircuitChange) -> Void = { _ in },
        published: @escaping @Sendable (DeliveryBatch) -> Void
    ) {
        self.sink = sink
        name = configuration.name
        self.gate = gate
        self.blocked = blocked
        self.skippedForConsent = skippedForConsent
        policy = Mutex(configuration.policy)
        self.circuitChanged = circuitChanged
        self.checkpoint = Mutex(checkpoint)
        self.log = log
        self.cursorStore = cursorStore
        self.deadLetters = deadLetters
        settings = Mutex(configuration)
        metrics = counters.sink(configuration.name)
        var logger = logger
        logger[metadataKey: "sink"] = "\(configuration.name)"
        self.logger = logger
        self.published = published
        self.io = io ?? BlockingExecutor(name: "ferry-sink-" + configuration.name)
        breaker = Mutex(CircuitBreaker(configuration.circuit))
        state = Mutex(DeliveryState(sink: configuration.name))
    }

    /// The sink's consent requirement and route in effect (they change on reload).
    var routing: (requiresConsent: [String], route: AgentConfiguration.SinkConfiguration.Route?) {
        settings.withLock { ($0.requiresConsent, $0.route) }
    }

    /// Takes new batch, retry, circuit, disclosure, consent requirement and route settings (a
    /// configuration reload); they apply from the next batch, attempt, retry pause or breaker
    /// decision on.
    func reconfigure(batch: AgentConfiguration.SinkConfiguration.Batch, retry: AgentConfiguration.SinkConfiguration.Retry,
                     circuit: AgentConfiguration.SinkConfiguration.Circuit,
                     disclose: AgentConfiguration.SinkConfiguration.Disclose = .init(),
                     requiresConsent: [String] = [], route: AgentConfiguration.SinkConfiguration.Route? = nil) {
        let updated = settings.withLock {
            $0.batch = batch
            $0.retry = retry
            $0.circuit = circuit
            $0.disclose = disclose
            $0.requiresConsent = requiresConsent
            $0.route = route
            return $0.policy
        }
        policy.withLock { $0 = updated }
        breaker.withLock { $0.reconfigure(circuit) }
        wakeup.signal()
    }

    /// Runs until the task is cancelled. A batch being delivered when cancellation comes is
    /// finished or abandoned (and re-delivered after restart), never half-acknowledged.
    ///
    /// The loop runs on the sink's own thread (``io``, as its task executor preference): the log
    /// read, the sink's blocking work and the cursor save of a batch are plain calls there
    /// (``BlockingExecutor/run(_:)`` runs them inline), so a batch costs no round trip through
    /// the Swift pool; the loop sleeps on that thread's queue until a commit, a replay request or
    /// its batch deadline wakes it.
    func run() async {
        await withTaskExecutorPreference(io) {
            await loop()
        }
    }

    private func loop() async {
        defer {
            cursorStore.close()
            state.withLock { $0.phase = .stopped }
            let pending = replays.withLock { queue in
                queue.stopped = true
                defer { queue.requests = [] }
                return queue.requests
            }
            for request in pending {
                request.continuation.resume(throwing: AgentError(code: .delivery, message: "the agent is stopping"))
            }
        }
        // When to send what was read (``DeliveryPacing``); the loop only applies its decisions.
        var pacing = DeliveryPacing(batch: configuration.batch, startedAt: WallClock.unixMilliseconds())
        while !Task.isCancelled {
            await serveReplays()
            pacing.batch = configuration.batch
            // Paused (delivery not started, or no feature enabled): wait for the consent change
            // without reading; reading a full batch at every commit made a paused sink's cost grow
            // with its backlog (callgrind: most of ferryd's instructions at one event per message).
            if gate.isPaused(sink: name, policy: policy.withLock { $0 }) {
                state.withLock { $0.phase = .paused }
                await wakeup.wait()
                continue
            }
            let read: (events: [StoredEvent], next: LogPosition)
            do {
                read = try await readBatch(from: log.cursor(for: name), maxEvents: configuration.batch.maxEvents,
                                           maxBytes: configuration.batch.maxBytes)
            } catch {
                logger.error("cannot read the log", metadata: ["error": "\(error)"])
                guard await pause(.milliseconds(configuration.retry.maxMilliseconds)) else { return }
                continue
            }
            if read.events.isEmpty {
                state.withLock { $0.phase = .idle }
                await wakeup.wait()
                continue
            }
            guard let full = await fill(read, pacing: pacing) else { return }
            switch await deliverWithRetry(DeliveryBatch(events: full.events)) {
            case .cancelled:
                return
            case .paused:
                state.withLock { $0.phase = .paused }
                await wakeup.wait()
                continue
            case .delivered(let sent, let stored):
                let kept = sent.events.isEmpty ? checkpoint.withLock { $0 } : stored
                await advance(full, checkpoint: kept)
                let now = WallClock.unixMilliseconds()
                pacing.delivered(at: now)
                guard !sent.events.isEmpty else { continue }
                metrics.delivered.increment(by: sent.events.count)
                for event in sent.events {
                    metrics.deliveryLatency.recordMilliseconds(now >= event.acceptedAt ? now - event.acceptedAt : 0)
                }
                state.withLock {
                    $0.phase = .delivering
                    $0.lastSuccessAt = now
                    $0.retryAt = nil
                }
                published(sent)
            case .deadLettered:
                await advance(full, checkpoint: checkpoint.withLock { $0 })
                pacing.delivered(at: WallClock.unixMilliseconds())
            }
        }
    }

    private func readBatch(from position: LogPosition, maxEvents: Int, maxBytes: Int) async throws -> (events: [StoredEvent], next: LogPosition) {
        let log = self.log
        return try await io.run { try log.read(from: position, maxEvents: maxEvents, maxBytes: maxBytes) }
    }

    /// Waits until `pacing` says to send what was read: a full batch at once, a partial one at its
    /// deadline (``DeliveryPacing``). The wait sleeps until the deadline; a commit ends it early
    /// only when what it committed could fill the batch (a look at the log's end, no read), so a
    /// trickle costs one read per delivery, not one per commit. `nil` when cancelled.
    private func fill(_ first: (events: [StoredEvent], next: LogPosition),
                      pacing: DeliveryPacing) async -> (events: [StoredEvent], next: LogPosition)? {
        let batch = pacing.batch
        var read = first
        while let pending = DeliveryPacing.Pending(read.events),
              case .wait(let deadline) = pacing.decide(pending, now: WallClock.unixMilliseconds()) {
            let now = WallClock.unixMilliseconds()
            let log = self.log, next = read.next
            await wakeup.wait(timeout: .milliseconds(Int(min(deadline > now ? deadline - now : 0, UInt64(Int.max))))) {
                pacing.shouldRead(pending, committedBytesAhead: Self.bytesAhead(of: next, end: log.endPosition))
            }
            if Task.isCancelled { return nil }
            // Nothing committed since the last read, or too little to fill the batch before its
            // deadline (a signal from before the wait): decide again (at the deadline: deliver).
            let ahead = Self.bytesAhead(of: read.next, end: log.endPosition)
            if ahead == 0 { continue }
            if WallClock.unixMilliseconds() < deadline && !pacing.shouldRead(pending, committedBytesAhead: ahead) { continue }
            do {
                let more = try await readBatch(from: read.next, maxEvents: batch.maxEvents - pending.events,
                                               maxBytes: max(1, batch.maxBytes - pending.bytes))
                // A single event larger than what is left waits for the next batch.
                if pending.bytes + more.events.reduce(0, { $0 + $1.size }) > batch.maxBytes && more.events.count == 1 { break }
                read.events += more.events
                read.next = more.next
            } catch {
                break
            }
        }
        return read
    }

    /// Bytes committed in `position`'s segment after it, up to the log's `end`; `nil` when the
    /// log has moved on to a later segment (unknown: read to find out).
    static func bytesAhead(of position: LogPosition, end: LogPosition) -> Int? {
        guard end.segment == position.segment else { return end.segment < position.segment ? 0 : nil }
        return end.offset > position.offset ? Int(end.offset - position.offset) : 0
    }

    /// Stores the cursor after `read` with `checkpoint`, then lets the log know.
    ///
    /// Crash points (docs/FAULTS.md), reached by every sink: `delivery.done` once the batch is
    /// done with (the sink acknowledged it, or it was dead-lettered) and its cursor not yet stored;
    /// `delivery.saved` once the cursor and checkpoint are stored.
    private func advance(_ read: (events: [StoredEvent], next: LogPosition), checkpoint stored: [UInt8]?) async {
        checkpoint.withLock { $0 = stored }
        do {
            let store = cursorStore, next = read.next
            try await io.run {
                try CrashPoints.reach("delivery.done")
                try store.save(next, checkpoint: stored)
                try CrashPoints.reach("delivery.saved")
            }
        } catch {
            // The sink has the batch but the cursor did not move: it will be delivered again
            // after a restart (at-least-once); the file sink's checkpoint makes that harmless.
            logger.error("cannot persist the delivery cursor", metadata: ["error": "\(error)"])
        }
        log.markDelivered(read.events, next: read.next, consumer: name)
    }

    private enum Outcome {
        case delivered(DeliveryBatch, checkpoint: [UInt8]?)
        case deadLettered
        case paused
        case cancelled
    }

    /// Delivers one batch, retrying until it succeeds or is dead-lettered, asking the circuit
    /// breaker and the gate before every attempt. Events the gate blocks are reported and left
    /// out; an all-blocked batch is "delivered" empty.
    private func deliverWithRetry(_ original: DeliveryBatch) async -> Outcome {
        var attempts = 0
        var pending = original
        var firstAttemptAt: UInt64?
        var screened = false
        while !Task.isCancelled {
            let admission = breaker.withLock { $0.admit(now: WallClock.unixMilliseconds()) }
            if let wait = admission.wait {
                state.withLock {
                    $0.phase = .retrying
                    $0.retryAt = WallClock.unixMilliseconds() + wait
                }
                guard await pause(.milliseconds(Int(min(wait, UInt64(Int.max))))) else { return .cancelled }
                continue
            }
            if let change = admission.changed { announce(change) }
            var batch: DeliveryBatch
            switch gate.admit(pending, sink: name, policy: policy.withLock { $0 }) {
            case .paused:
                return .paused
            case .deliver(let admitted, let refused, let reason, let skipped):
                if !refused.isEmpty { blocked(refused, reason) }
                if !skipped.isEmpty { skip(skipped) }
                batch = admitted
                // What the body may say about the host: the sink's `disclose`, as configured now.
                batch.disclosure = configuration.disclosure
                pending.events = admitted.events
            }
            if !screened {
                // What the sink can never deliver is dead-lettered event by event, before the
                // first attempt; the rest goes on. Rejections depend on the events alone, so
                // once per batch is enough.
                screened = true
                let rejections = sink.rejections(in: batch)
                if !rejections.isEmpty {
                    for rejection in rejections {
                        let single = batch.with(events: [rejection.event])
                        guard case .deadLettered = await deadLetter(single, SinkError(.permanent, rejection.reason),
                                                                    reason: "rejected", attempts: 0) else { return .cancelled }
                    }
                    let rejected = Set(rejections.map(\.event.decodedID))
                    batch.events.removeAll { rejected.contains($0.decodedID) }
                    pending.events = batch.events
                }
            }
            if batch.events.isEmpty { return .delivered(batch, checkpoint: nil) }
            state.withLock { $0.phase = attempts == 0 ? .delivering : .retrying }
            attempts += 1
            let startedAt = WallClock.unixMilliseconds()
            if firstAttemptAt == nil { firstAttemptAt = startedAt }
            do {
                let stored = try await sink.deliver(batch)
                if let change = breaker.withLock({ $0.succeeded() }) { announce(change) }
                return .delivered(batch, checkpoint: stored)
            } catch {
                let sinkError = error as? SinkError ?? SinkError(.retry(after: nil), "\(error)")
                let now = WallClock.unixMilliseconds()
                metrics.failures.increment()
                state.withLock { $0.lastError = sinkError.message }
                if sinkError.disposition == .permanent {
                    if let change = breaker.withLock({ $0.failedPermanently() }) { announce(change, error: sinkError.message) }
                    return await deadLetter(batch, sinkError, reason: "permanent", attempts: attempts)
                }
                if let change = breaker.withLock({ $0.failed(now: now) }) { announce(change, error: sinkError.message) }
                if let elapsed = configuration.retry.maxElapsedMilliseconds, now - (firstAttemptAt ?? now) >= UInt64(elapsed) {
                    return await deadLetter(batch, sinkError, reason: "max_elapsed", attempts: attempts)
                }
                var delay = backoff(attempt: attempts)
                // Retry-After is a lower bound: never earlier than asked, and never a tight loop
                // when an upstream keeps answering `Retry-After: 0`.
                if case .retry(let after?) = sinkError.disposition { delay = max(after, delay) }
                let (circuit, openUntil) = breaker.withLock { ($0.state, $0.openUntil) }
                if circuit == .open {
                    // No attempt while open; the upstream's Retry-After may ask for longer.
                    delay = max(delay, .milliseconds(Int(openUntil > now ? openUntil - now : 0)))
                }
                metrics.retried.increment()
                logger.warning("delivery failed; will retry", metadata: [
                    "attempt": "\(attempts)", "error": "\(sinkError.message)", "circuit": "\(circuit.rawValue)",
                    "retry_in_ms": "\(Self.milliseconds(delay))",
                ])
                state.withLock {
                    $0.phase = .retrying
                    $0.retryAt = now + UInt64(Self.milliseconds(delay))
                }
                guard await pause(delay) else { return .cancelled }
            }
        }
        return .cancelled
    }

    /// Counts the events this sink passes by (``SinkPolicy``), and reports its consent skips.
    /// The cursor moves over them with the rest of the batch: not a dead letter, not retried.
    private func skip(_ skipped: [SinkSkip]) {
        var byReason: [SinkSkipReason: [StoredEvent]] = [:]
        for skip in skipped { byReason[skip.reason, default: []].append(skip.event) }
        for (reason, events) in byReason.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            metrics.skipped(reason).increment(by: events.count)
            if reason.isConsent { skippedForConsent(events, reason.rawValue) }
        }
    }

    /// Writes `batch` to the dead-letter directory, retrying the write itself (never dropping the
    /// batch) until it is durable or the loop is cancelled.
    private func deadLetter(_ batch: DeliveryBatch, _ error: SinkError, reason: String, attempts: Int) async -> Outcome {
        let letter = DeadLetter(sink: name, batch: batch, error: error, reason: reason, attempts: attempts)
        let store = deadLetters
        var failures = 0
        while !Task.isCancelled {
            do {
                try await io.run { try store.write(letter) }
                metrics.deadLettered.increment(by: batch.events.count)
                state.withLock { $0.retryAt = nil }
                logger.error("batch dead-lettered", metadata: [
                    "id": "\(letter.id)", "events": "\(batch.events.count)", "reason": "\(reason)",
                    "error": "\(error.message)", "path": "\(store.path(sink: name, id: letter.id))",
                ])
                return .deadLettered
            } catch {
                failures += 1
                logger.error("cannot write a dead letter; keeping the batch", metadata: ["error": "\(error)"])
                guard await pause(backoff(attempt: failures)) else { return .cancelled }
            }
        }
        return .cancelled
    }

    private func announce(_ change: (DeliveryState.CircuitState, DeliveryState.CircuitState), error: String? = nil) {
        let (failures, openUntil) = breaker.withLock { ($0.failures, $0.openUntil) }
        let now = WallClock.unixMilliseconds()
        metrics.circuitOpen.record(change.1 == .closed ? 0 : 1)
        if change.1 == .open {
            logger.warning("circuit open", metadata: ["failures": "\(failures)", "until": "\(openUntil)"])
        } else {
            logger.notice("circuit \(change.1.rawValue)")
        }
        circuitChanged(CircuitChange(sink: name, from: change.0, to: change.1, at: now, consecutiveFailures: failures,
                                     error: error, retryAt: change.1 == .open ? openUntil : nil))
    }

    // MARK: Replay of dead letters

    /// Hands dead letter `id` to the sink once more (through this loop, so its checkpoint is
    /// stored with the cursor). On success the file is deleted and the event count returned; on
    /// failure the file stays and the error is thrown.
    func replay(id: String) async throws -> Int {
        try await withCheckedThrowingContinuation { continuation in
            let accepted = replays.withLock { queue -> Bool in
                guard !queue.stopped else { return false }
                queue.requests.append((id, continuation))
                return true
            }
            if accepted {
                wakeup.signal()
                replayRequested.signal()
            } else {
                continuation.resume(throwing: AgentError(code: .delivery, message: "the agent is stopping"))
            }
        }
    }

    private func serveReplays() async {
        let requests = replays.withLock { queue in
            defer { queue.requests = [] }
            return queue.requests
        }
        for request in requests {
            do {
                request.continuation.resume(returning: try await replayOnce(id: request.id))
            } catch {
                request.continuation.resume(throwing: error)
            }
        }
    }

    private func replayOnce(id: String) async throws -> Int {
        let store = deadLetters, name = self.name
        guard let letter = try await io.run({ try store.load(sink: name, id: id) }) else {
            throw AgentError(code: .delivery, message: "no dead letter \(id) for sink \(name)")
        }
        var batch = letter.batch
        // The sink's requirement and route as they are now, not as they were when it failed.
        switch gate.admit(batch, sink: name, policy: policy.withLock { $0 }) {
        case .paused:
            throw AgentError(code: .delivery, message: "delivery to \(name) is paused; the dead letter is kept")
        case .deliver(let admitted, let refused, let reason, let skipped):
            if !refused.isEmpty { blocked(refused, reason) }
            if !skipped.isEmpty { skip(skipped) }
            batch = admitted
            batch.disclosure = configuration.disclosure
        }
        var stored = checkpoint.withLock { $0 }
        if !batch.events.isEmpty {
            do {
                stored = try await sink.deliver(batch)
            } catch {
                let message = (error as? SinkError)?.message ?? "\(error)"
                logger.warning("dead letter replay failed; kept", metadata: ["id": "\(id)", "error": "\(message)"])
                throw AgentError(code: .delivery, message: "sink \(name) could not deliver it (\(message)); the dead letter is kept")
            }
            // The upstream took it: the circuit and `last ok` say so now, not at the next batch.
            if let change = breaker.withLock({ $0.succeeded() }) { announce(change) }
            state.withLock { $0.lastSuccessAt = WallClock.unixMilliseconds() }
        }
        // The sink's state moved: store its checkpoint with the unchanged cursor before the dead
        // letter goes, so a crash in between repeats the replay rather than losing it.
        // Crash point `delivery.replayed` (docs/FAULTS.md): the sink has the letter's events, the
        // checkpoint is not stored, the letter not deleted.
        let cursor = log.cursor(for: name), cursorStore = self.cursorStore, kept = stored
        try await io.run {
            try CrashPoints.reach("delivery.replayed")
            try cursorStore.save(cursor, checkpoint: kept)
        }
        checkpoint.withLock { $0 = kept }
        _ = try await io.run { try store.remove(sink: name, id: id) }
        metrics.delivered.increment(by: batch.events.count)
        logger.notice("dead letter replayed", metadata: ["id": "\(id)", "events": "\(batch.events.count)"])
        if !batch.events.isEmpty { published(batch) }
        return batch.events.count
    }

    // MARK: Timing

    /// Exponential backoff with full jitter: uniform in [0, min(cap, initial·2^attempt)].
    func backoff(attempt: Int) -> Duration {
        RetryBackoff.delay(attempt: attempt, retry: configuration.retry)
    }

    private static func milliseconds(_ duration: Duration) -> Int {
        Int(duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
    }

    /// Sleeps for `duration`, serving replay requests meanwhile (woken by signals, not polling);
    /// returns false when cancelled.
    private func pause(_ duration: Duration) async -> Bool {
        let deadline = ContinuousClock.now + duration
        while !Task.isCancelled {
            await serveReplays()
            let remaining = deadline - ContinuousClock.now
            if remaining <= .zero { return true }
            await replayRequested.wait(timeout: remaining)
        }
        return false
    }
}
