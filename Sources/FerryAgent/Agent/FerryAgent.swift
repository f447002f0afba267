#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryStorage
import FerryThreads
import Logging
import ServiceLifecycle
import Synchronization
import ZeroMQ

/// The Ferry agent: ingest by the paths it is given (the ZeroMQ socket of `FerryZeroMQIngest`,
/// the HTTP API of `FerryHTTPIngest`: ``IngestPathKind``), a durable group-committed log,
/// delivery to one or more sinks (each with its own loop, cursor, retry policy and circuit
/// breaker), an event bus and a control socket.
///
/// It is the composition root: it builds the parts (``AgentStartup`` recovers the files, then the
/// commit pipeline, delivery loops, sockets and access policy), wires them together (the bus
/// callbacks, ``ControlRouter`` for control requests) and runs them until shutdown. What the
/// parts decide lives with them: ``ReloadPlan`` for reloads, ``AgentStatusReport`` for
/// `status`, ``AgentGauges`` for the gauges, ``DeadLetterReplayer`` for replays.
///
/// It is a swift-service-lifecycle `Service`: ``run()`` does all the work and returns after a
/// graceful shutdown (SIGTERM/SIGINT through a `ServiceGroup`, or cancellation), having stopped
/// intake, acked everything already written and closed its files and sockets.
///
/// ```swift
/// let agent = try FerryAgent(configuration: AgentConfiguration(sinks: [.defaultFile()]),  // FerryFileSink
///                            ingestPathKinds: IngestPathRegistry([.zeromq]), logger: logger)
/// let group = ServiceGroup(services: [agent], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
/// try await group.run()
/// ```
public final class FerryAgent: Service, Sendable, CustomStringConvertible {
    /// `FerryAgent`: what logs (and service-lifecycle) print for the agent; cheap, unlike the
    /// reflection `"\(agent)"` would otherwise fall back to.
    public var description: String { "FerryAgent" }
    /// The configuration the agent runs with.
    public let configuration: AgentConfiguration
    /// The agent's metrics: the store of its counters (what `ferry status` reads), exported with
    /// its gauges and histograms through its backend's factory.
    public let counters: AgentMetrics
    private let logger: Logger
    /// Sink implementations that replace what their configuration describes, by sink name.
    private let sinkOverrides: [String: any Sink]
    /// The ingest paths (``IngestPath``), built by their kinds.
    private let paths: [any IngestPath]
    private let startedAt = WallClock.unixMilliseconds()
    /// The running agent's parts; nil until start-up is done. Its one owner.
    private let running = Mutex<RunningAgent?>(nil)
    /// The configuration in effect: ``configuration`` plus the reloads applied since.
    private let live: Mutex<AgentConfiguration>
    private let readyWaiters = Mutex<ReadyState>(ReadyState())
    /// Where a reload reads the configuration, and what follows an applied one (``setReloadSource(load:applied:)``).
    private let reloadSource = Mutex<(load: @Sendable () throws -> AgentConfiguration, applied: @Sendable (AgentConfiguration) -> Void)?>(nil)

    private struct ReadyState {
        var outcome: Result<Void, any Error>?
        var waiters: [CheckedContinuation<Void, any Error>] = []
    }

    /// Creates an agent that serves no ingest path (see
    /// ``init(configuration:sinks:ingestPathKinds:metrics:logger:)``). Nothing starts until ``run()``. `sink`, if given, replaces the first
    /// configured sink's implementation (it keeps that sink's name, cursor and policies).
    /// `metrics` is where the agent's metrics are exported (`ferryd` passes the Prometheus
    /// backend of `FerryMetrics`; ``AgentMetricsBackend/discarding`` exports nothing). Status
    /// counters are the agent's own state and read the true values with either.
    public convenience init(
        configuration: AgentConfiguration, sink: (any Sink)? = nil, metrics: AgentMetricsBackend = .discarding, logger: Logger
    ) {
        let first = configuration.sinks.first?.name ?? ""
        self.init(configuration: configuration, sinks: sink.map { [first: $0] } ?? [:], metrics: metrics, logger: logger)
    }

    /// Creates an agent whose sinks named in `overrides` use the given implementations instead of
    /// the ones their configuration describes (for tests and embedding), recording its metrics
    /// into `metrics`. It serves no ingest path (see ``init(configuration:sinks:ingestPathKinds:metrics:logger:)``).
    public convenience init(
        configuration: AgentConfiguration, sinks overrides: [String: any Sink], metrics: AgentMetricsBackend = .discarding,
        logger: Logger
    ) {
        self.init(configuration: configuration, sinks: overrides, paths: [], metrics: metrics, logger: logger)
    }

    /// Creates an agent that serves the ingest paths the kinds of `ingestPathKinds` build from
    /// `configuration` (`ferryd` registers the ZeroMQ socket of `FerryZeroMQIngest` and the local
    /// HTTP API of `FerryHTTPIngest`): each is started once the commit pipeline runs and stopped
    /// with the agent (``IngestPath``). Throws
    /// ``AgentError`` (code `configuration`) when a kind cannot serve what the configuration asks.
    public convenience init(
        configuration: AgentConfiguration, sinks overrides: [String: any Sink] = [:], ingestPathKinds: IngestPathRegistry,
        metrics: AgentMetricsBackend = .discarding, logger: Logger
    ) throws {
        self.init(configuration: configuration, sinks: overrides, paths: try ingestPathKinds.paths(for: configuration, logger: logger),
                  metrics: metrics, logger: logger)
    }

    /// Creates an agent that serves `paths` (for tests and embedding).
    package init(
        configuration: AgentConfiguration, sinks overrides: [String: any Sink], paths: [any IngestPath],
        metrics: AgentMetricsBackend = .discarding, logger: Logger
    ) {
        self.paths = paths
        self.configuration = configuration
        live = Mutex(configuration)
        self.logger = logger
        sinkOverrides = overrides
        counters = AgentMetrics(backend: metrics)
        // Each path's instruments, at 0 from the start (every family in the exposition).
        for path in paths {
            if let metricSet = path.metricSet { _ = counters.ingestPath(path.name, metricSet) }
        }
    }

    /// Suspends until the agent is bound and serving; throws the error ``run()`` failed with if
    /// it ends first (for example because another agent owns the directories). For in-process
    /// tests and embedding.
    public func waitUntilReady() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let outcome = readyWaiters.withLock { state -> Result<Void, any Error>? in
                if let outcome = state.outcome { return outcome }
                state.waiters.append(continuation)
                return nil
            }
            if let outcome { continuation.resume(with: outcome) }
        }
    }

    private func settleReadiness(_ outcome: Result<Void, any Error>) {
        let waiters = readyWaiters.withLock { state -> [CheckedContinuation<Void, any Error>] in
            guard state.outcome == nil else { return [] }
            state.outcome = outcome
            defer { state.waiters = [] }
            return state.waiters
        }
        waiters.forEach { $0.resume(with: outcome) }
    }

    /// The configuration in effect: the one the agent started with, plus the reloads applied.
    public var currentConfiguration: AgentConfiguration { live.withLock { $0 } }

    /// The keys a reload (``reload(_:)``, `ferryd` on SIGHUP) applies without a restart.
    /// HTTP sink credentials (`tokenFile`, `tokenEnvironment`, `writeKeyFile`) are read again on every reload.
    public static let reloadableKeys = ReloadPlan.reloadableKeys

    /// Applies the reloadable parts of `newConfiguration` (see ``reloadableKeys``) to the running
    /// agent and returns the key paths that changed. A change to any other key needs a restart:
    /// the reload is then refused whole, nothing changes, and the error lists those keys. The
    /// log level is the caller's to apply (the agent does not own the log handler). The access
    /// policy's users and groups are looked up again on every reload, so group membership
    /// changes take effect even when no key changed.
    @discardableResult
    public func reload(_ newConfiguration: AgentConfiguration) async throws -> [String] {
        try newConfiguration.validate()
        let plan = ReloadPlan(from: currentConfiguration, to: newConfiguration)
        guard plan.restartOnly.isEmpty else {
            throw AgentError(code: .configuration, message: "these keys need a restart: \(plan.restartOnly.joined(separator: ", ")); the running configuration is kept")
        }
        // The plan and the redaction key are read again on every reload (a fixed plan file is
        // picked up by a SIGHUP that changes no key); one that does not load refuses the reload
        // whole, and the gate in effect stays.
        let quality: QualityStage?
        do {
            quality = try await BlockingExecutor.runDetached(name: "ferry-quality-reload") { try QualityStage.load(newConfiguration) }
        } catch let error as AgentError {
            throw AgentError(code: .configuration, message: "\(error.message); the running configuration and quality gate are kept")
        }
        if let access = running.withLock({ $0?.access }) {
            // Resolved off the caller's thread like at start; checks switch to it at once. Every
            // reload looks the names up again, changed or not: a user just added to a group is
            // let in by `systemctl reload`, without waiting for the periodic refresh.
            let policy = plan.access
            try await BlockingExecutor.runDetached(name: "ferry-access-reload") {
                if let policy { access.update(policy) } else { access.refresh() }
            }
        }
        let deliveries = running.withLock { $0?.deliveries } ?? []
        for update in plan.sinks {
            if let delivery = deliveries.first(where: { $0.name == update.name }) {
                delivery.reconfigure(batch: update.batch, retry: update.retry, circuit: update.circuit, disclose: update.disclose,
                                     requiresConsent: update.requiresConsent, route: update.route)
                // Recorded after the switch: every event written from here on meets the new policy only.
                if let running = running.withLock({ $0 }) {
                    running.history.record(sink: update.name, policy: SinkPolicy(requiresConsent: update.requiresConsent, route: update.route),
                                           from: running.log.endPosition)
                }
                running.withLock { $0?.erasureSenders }?.first { $0.name == update.name }?
                    .reconfigure(retry: update.retry, circuit: update.circuit)
                await delivery.sink.reloadCredentials()
            }
        }
        running.withLock { $0 }?.quality.replace(with: quality)
        live.withLock { $0 = newConfiguration }
        // The plan and key files were read again whether or not a key changed: say what is in
        // effect, so an edited plan file does not look ignored (`changed=nothing`).
        let gate = quality?.description ?? "off"
        logger.notice("configuration reloaded", metadata: [
            "changed": "\(plan.changed.isEmpty ? "nothing" : plan.changed.joined(separator: ","))", "quality": "\(gate)",
        ])
        return plan.changed
    }

    /// Sets where ``reloadFromSource()`` reads the configuration (`ferryd`: its file, then its
    /// flags) and what it does once a configuration is applied (`ferryd`: sets the log level).
    public func setReloadSource(
        load: @escaping @Sendable () throws -> AgentConfiguration, applied: @escaping @Sendable (AgentConfiguration) -> Void
    ) {
        reloadSource.withLock { $0 = (load, applied) }
    }

    /// Reads the configuration again from the source ``setReloadSource(load:applied:)`` set and
    /// applies it (``reload(_:)``): SIGHUP and the control op `reload` (`ferry reload`). A file
    /// that does not load, or a change that needs a restart, is refused whole and the running
    /// configuration kept; one log line says what happened, and the reply says it to the caller.
    public func reloadFromSource() async -> ReloadReply {
        guard let source = reloadSource.withLock({ $0 }) else {
            return .refused(["this agent has no configuration source to read again (only ferryd reloads)"])
        }
        let configuration: AgentConfiguration
        do {
            configuration = try source.load()
        } catch {
            let message = (error as? AgentError)?.message ?? "\(error)"
            logger.error("reload refused: the configuration is invalid; keeping the running one", metadata: ["error": "\(message)"])
            return .refused(message.split(separator: "\n").map(String.init))
        }
        do {
            let changed = try await reload(configuration)
            source.applied(configuration)
            return .applied(changed: changed)
        } catch {
            let message = (error as? AgentError)?.message ?? "\(error)"
            logger.error("reload refused: \(message)")
            return .refused(message.split(separator: "\n").map(String.init))
        }
    }

    /// What recovery found at start, once running.
    public var recoveryReport: RecoveryReport? { running.withLock { $0?.recovery } }

    public func run() async throws {
        do {
            try await serve()
        } catch let error as StorageError where error.code == .unsafePath {
            let refusal = AgentError(code: .unsafePath, message: error.message, cause: error)
            settleReadiness(.failure(refusal))
            throw refusal
        } catch {
            // Waiters must not hang when start-up fails.
            settleReadiness(.failure(error))
            throw error
        }
        settleReadiness(.failure(AgentError(code: .configuration, message: "the agent stopped before it was ready")))
    }

    private func serve() async throws {
        try configuration.validate()
        CrashPoints.configureFromEnvironment()
        // Start-up and shutdown file work of this run: a thread of its own, shared with nothing.
        let io = BlockingExecutor(name: "ferry-agent-io")
        defer { io.shutdown() }
        let configuration = self.configuration, logger = self.logger

        // Directories and the single-instance locks, then recovery.
        let locks = try await io.run { try AgentStartup.lockDirectories(configuration) }
        defer { locks.forEach { close($0) } }
        let configuredSinks = configuration.sinks
        let cursorStores = configuredSinks.map { CursorStore(dataDirectory: configuration.dataDirectory, sink: $0.name) }
        let minimumDedupSeconds = paths.map(\.minimumDedupSeconds).max() ?? 0
        let recovered = try await io.run {
            try AgentStartup.recover(configuration: configuration, cursorStores: cursorStores,
                                     minimumDedupSeconds: minimumDedupSeconds, logger: logger)
        }
        let log = recovered.log, report = recovered.report
        AgentStartup.logRecovery(report, logger: logger)

        // Everything that publishes or acks is built with its queue to the socket thread, before
        // the threads that use it start: the bus and the acks need no late binding.
        let wakeup = try SocketWakeup()
        defer { wakeup.close() }
        let bus = EventBus(wakeup: wakeup)
        // The quality gate (plan, redaction) and the quarantine, before consent (an unfinished
        // erasure reaches the quarantine): a plan that does not load stops the start; an
        // unreadable quarantine entry is reported and skipped.
        let quarantine = QuarantineStore(dataDirectory: configuration.dataDirectory, maxBytes: configuration.quality.quarantineMaxBytes)
        let quality = try await io.run { () throws -> QualityStageHolder in
            for problem in try quarantine.open() { logger.warning("quarantine entry skipped", metadata: ["problem": "\(problem)"]) }
            return QualityStageHolder(try QualityStage.load(configuration))
        }
        // Consent: the persisted state (or the configured start), once-key marks, the held area.
        let recoveredDedup = recovered.dedup
        // The upstream erasures `forget` recorded (docs/CONSENT.md, "Erasure upstream").
        let erasures = try await io.run { try AgentStartup.openErasureOutbox(configuration) }
        // Who may have received what (`forget`, `recipients`): each sink's policy judges every
        // event from the log's end now on; what came before may have met another.
        let history = RecipientHistory()
        for sink in configuredSinks { history.record(sink: sink.name, policy: sink.policy, from: log.endPosition) }
        let (engine, workerBox, dedup) = try await io.run { () throws -> (ConsentEngine, UncheckedBox<ConsentWorker>, DedupWindow) in
            try AgentStartup.loadConsent(configuration: configuration, log: log, dedup: recoveredDedup, bus: bus,
                                         erasures: erasures, quarantine: quarantine, history: history, logger: logger)
        }
        let auditLog = AuditLog(path: configuration.dataDirectory + "/consent/audit.log")

        // Each sink gets a thread of its own for blocking work, shared with its delivery loop.
        let sinkThreads = configuredSinks.map { BlockingExecutor(name: "ferry-sink-" + $0.name) }
        defer { sinkThreads.forEach { $0.shutdown() } }
        let sinks = zip(configuredSinks, sinkThreads).map { configured, thread in
            sinkOverrides[configured.name]
                ?? configured.makeSink(dataDirectory: configuration.dataDirectory, logger: logger, io: thread)
        }
        var startCheckpoints: [[UInt8]?] = []
        for (sink, (configured, (store, checkpoint))) in zip(sinks, zip(configuredSinks, zip(cursorStores, recovered.checkpoints))) {
            let initialCheckpoint = try await sink.recover(checkpoint: checkpoint)
            if checkpoint == nil {
                // First start (or a lost cursor): record where the sink stands before it receives
                // anything, so output of a batch cut short by a crash is recognised and cut back.
                let start = log.cursor(for: configured.name)
                try await io.run { try store.save(start, checkpoint: initialCheckpoint) }
            }
            startCheckpoints.append(checkpoint ?? initialCheckpoint)
        }

        let deadLetters = DeadLetterStore(dataDirectory: configuration.dataDirectory)
        let counters = self.counters
        let deliveries = configuredSinks.enumerated().map { index, configured in
            let sinkName = configured.name
            return DeliveryLoop(
                sink: sinks[index], configuration: configured, log: log, cursorStore: cursorStores[index],
                deadLetters: deadLetters, counters: counters, logger: logger, checkpoint: startCheckpoints[index],
                gate: engine, io: sinkThreads[index],
                blocked: { events, reason in
                    let live = events.filter { !$0.isErased }
                    counters.blockedAtSend.increment(by: live.count)
                    bus.publishEvents(.blocked, live, at: WallClock.unixMilliseconds(), reason: reason, sink: sinkName)
                },
                // This sink's own consent skips (its `requiresConsent`): on the bus with its name,
                // counted by the sink (`ferry_sink_skipped_total`), not as blocked for every sink.
                skippedForConsent: { events, reason in
                    bus.publishEvents(.blocked, events, at: WallClock.unixMilliseconds(), reason: reason, sink: sinkName)
                },
                circuitChanged: { change in bus.publishCircuit(change) }
            ) { batch in
                bus.publishEvents(.delivered, batch.events, at: WallClock.unixMilliseconds(), sink: sinkName, origins: true)
            }
        }
        // Each erasure sender is woken by consent changes too (one may let it go).
        let erasureWakeups = configuredSinks.map { _ in AsyncSignal() }
        let pipeline = CommitPipeline(
            log: log, configuration: configuration, counters: counters, bus: bus,
            committedSignals: deliveries.map(\.wakeup), consentSignals: erasureWakeups, faults: .planted, quarantine: quarantine, logger: logger)
        let erasureSenders = Self.makeErasureSenders(
            sinks: sinks, configured: configuredSinks, threads: sinkThreads, outbox: erasures, gate: engine,
            wakeups: erasureWakeups, pipeline: pipeline, metrics: counters, logger: logger)
        // The access policy, resolved against the user and group databases here (never on a
        // socket thread) and refreshed in the background.
        let access = await io.run { AccessControl(policy: configuration.access, logger: logger) }
        access.startRefreshing()
        running.withLock {
            $0 = RunningAgent(sinks: configuredSinks, log: log, deliveries: deliveries, recovery: report, pipeline: pipeline,
                         consent: engine, auditLog: auditLog, access: access, erasures: erasures,
                         erasureSenders: erasureSenders, quality: quality, quarantine: quarantine, history: history)
        }

        // Control requests are answered on a thread of their own: status, the audit log and
        // /proc reads never block the socket thread, and no sink's I/O holds them up.
        let controlThread = BlockingExecutor(name: "ferry-control")
        let control = makeControlRouter()
        defer { controlThread.shutdown() }
        // The stages every ingest path's requests go through: admission, the stages of each
        // event, the commit, the bus, the ack.
        let stages = IngestStages(configuration: configuration, commit: pipeline, access: access, bus: bus, metrics: counters,
                                  quality: quality)
        let context = try ZMQContext()
        let sockets = AgentSockets(
            context: context, configuration: configuration, bus: bus, wakeup: wakeup, replies: ControlReplyQueue(wakeup: wakeup),
            logger: logger, controlThread: controlThread
        ) { [control] request, peer, reply in
            control.handle(request, peer: peer, reply: reply)
        }
        let recoveredSessions = recovered.sessions
        // The commit thread's log writer opens the active segment (on a first start creates it,
        // writes its header and fsyncs the directory): file work, done here and never on the
        // cooperative pool, where an fsync behind other processes' syncs held up every task of
        // the process (FAULTS.md, "Bugs the suites found").
        try await io.run {
            let worker = workerBox.take()
            let sessions = try AgentStartup.completeSessions(recoveredSessions, heldLog: worker.heldLog)
            try pipeline.start(dedup: dedup, sessions: sessions, consent: worker)
        }
        // The ingest paths are bound before the bus and control sockets: once `status` answers,
        // every path is served. Each goes through its gateway, the one door into the stages.
        var started: [any IngestPath] = []
        for listener in paths {
            do {
                let gateway = IngestGateway(path: listener.name, stages: stages,
                                            metrics: listener.metricSet.map { counters.ingestPath(listener.name, $0) }, counters: counters)
                try await listener.start(gateway)
                started.append(listener)
            } catch {
                for other in started { other.stopIntake() }
                await pipeline.stop()
                for other in started { await other.stop() }
                await io.run { context.terminate() }
                throw error as? AgentError ?? AgentError(code: .socket, message: "cannot start \(listener.name): \(error)")
            }
        }
        do {
            try await io.run { try sockets.start() }
        } catch {
            for listener in started { listener.stopIntake() }
            await pipeline.stop()
            for listener in started { await listener.stop() }
            await io.run { context.terminate() }
            throw error
        }
        logger.info("ferryd ready", metadata: [
            "ingest": "\(paths.map(\.name).joined(separator: ","))",
            "data": "\(configuration.dataDirectory)", "sinks": "\(configuredSinks.map(\.name).joined(separator: ","))",
        ])
        settleReadiness(.success(()))
        let verifier = AgentStartup.verifySealedSegments(log, logger: logger) { [weak self] found in
            self?.running.withLock { $0?.recovery.merge(found) }
        }

        // Serve until graceful shutdown (or cancellation), then stop in order: intake, commit
        // (acks of what was written go out), the paths, the bus and control sockets, delivery.
        // The delivery loops run until then, each on its own so a slow sink never holds back
        // another; a batch cut short is delivered again after restart.
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for delivery in deliveries { group.addTask { await delivery.run() } }
                for sender in erasureSenders { group.addTask { await sender.run() } }
            }
        }
        logger.info("ferryd stopping")
        for listener in started { listener.stopIntake() }
        stages.stopIntake()
        await pipeline.stop()
        for listener in started { await listener.stop() }
        await sockets.stop()
        for sink in sinks { try? await sink.shutdown() }
        await verifier.stop()
        await access.stop()
        await io.run { context.terminate() }
        logger.info("ferryd stopped", metadata: ["accepted": "\(counters.snapshot["accepted"] ?? 0)"])
    }

    // MARK: Control, status and metrics

    /// The router of control requests, over this agent's parts (held weakly: a request arriving
    /// as the agent goes away is answered "agent starting" rather than keeping it alive).
    private func makeControlRouter() -> ControlRouter {
        ControlRouter(mode: configuration.mode, metrics: counters, running: { [weak self] in self?.running.withLock { $0 } },
                      status: statusReport, gauges: AgentGauges(metrics: counters),
                      replayer: DeadLetterReplayer(dataDirectory: configuration.dataDirectory),
                      reload: { [weak self] in await self?.reloadFromSource() ?? .refused(["the agent is stopping"]) })
    }

    private var statusReport: AgentStatusReport {
        AgentStatusReport(configuration: configuration, startedAt: startedAt, metrics: counters, paths: paths)
    }

    /// The status document served to `ferry status --json`; nil until the agent runs.
    public func status() -> StatusReply? {
        running.withLock { $0 }.map { statusReport.reply($0) }
    }

    /// The agent's metrics in the Prometheus text exposition, with the gauges of its state
    /// (queue, held events, sink backlogs) brought up to date first. `ferry metrics` and
    /// `GET /metrics` serve this.
    public func metricsExposition() -> [UInt8] {
        if let running = running.withLock({ $0 }) { AgentGauges(metrics: counters).update(from: running) }
        return counters.backend.exposition()
    }

    /// A control reply (or an audit log line) as JSON: encoded from its FerryProtocol type, then
    /// written with its keys sorted as `JSONSerialization` sorts them (numerically and ignoring
    /// case, unlike `JSONEncoder`'s `.sortedKeys`), so the bytes are those of every earlier version.
    static func json(_ value: some Encodable) -> [UInt8] { controlReplyJSON(value) }
}
