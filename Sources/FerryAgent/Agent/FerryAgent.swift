#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryStorage
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import ZeroMQ

/// The Ferry agent: ingest over ZeroMQ IPC, a durable group-committed log, delivery to one or
/// more sinks (each with its own loop, cursor, retry policy and circuit breaker), an event bus and
/// a control socket.
///
/// It is a swift-service-lifecycle `Service`: ``run()`` does all the work and returns after a
/// graceful shutdown (SIGTERM/SIGINT through a `ServiceGroup`, or cancellation), having stopped
/// intake, acked everything already written and closed its files and sockets.
///
/// ```swift
/// let agent = FerryAgent(configuration: AgentConfiguration(), logger: logger)
/// let group = ServiceGroup(services: [agent], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
/// try await group.run()
/// ```
public final class FerryAgent: Service, Sendable, CustomStringConvertible {
    /// `FerryAgent`: what logs (and service-lifecycle) print for the agent; cheap, unlike the
    /// reflection `"\(agent)"` would otherwise fall back to.
    public var description: String { "FerryAgent" }
    /// The configuration the agent runs with.
    public let configuration: AgentConfiguration
    /// The agent's metrics (swift-metrics instruments made by its backend's factory) and the
    /// status counters read back from them.
    public let counters: AgentCounters
    private let logger: Logger
    /// Sink implementations that replace what their configuration describes, by sink name.
    private let sinkOverrides: [String: any Sink]
    private let startedAt = WallClock.unixMilliseconds()
    private let running = Mutex<Running?>(nil)
    /// The configuration in effect: ``configuration`` plus the reloads applied since.
    private let live: Mutex<AgentConfiguration>
    private let readyWaiters = Mutex<ReadyState>(ReadyState())

    private struct ReadyState {
        var outcome: Result<Void, any Error>?
        var waiters: [CheckedContinuation<Void, any Error>] = []
    }

    private struct Running: Sendable {
        var sinks: [AgentConfiguration.SinkConfiguration]
        var log: SegmentedLog
        var deliveries: [DeliveryLoop]
        var recovery: RecoveryReport
        var pipeline: CommitPipeline
        var consent: ConsentEngine
        var auditLog: AuditLog
        var access: AccessControl
    }

    /// Creates an agent. Nothing starts until ``run()``. `sink`, if given, replaces the first
    /// configured sink's implementation (it keeps that sink's name, cursor and policies).
    /// `metrics` is where the agent's metrics go and where its status counters are read from
    /// (`ferryd` passes the Prometheus backend of `FerryMetrics`; ``AgentMetricsBackend/discarding``
    /// records nothing, and status counters then read 0).
    public convenience init(
        configuration: AgentConfiguration, sink: (any Sink)? = nil, metrics: AgentMetricsBackend = .discarding, logger: Logger
    ) {
        let first = configuration.sinks.first?.name ?? ""
        self.init(configuration: configuration, sinks: sink.map { [first: $0] } ?? [:], metrics: metrics, logger: logger)
    }

    /// Creates an agent whose sinks named in `overrides` use the given implementations instead of
    /// the ones their configuration describes (for tests and embedding), recording its metrics
    /// into `metrics`.
    public init(
        configuration: AgentConfiguration, sinks overrides: [String: any Sink], metrics: AgentMetricsBackend = .discarding,
        logger: Logger
    ) {
        self.configuration = configuration
        live = Mutex(configuration)
        self.logger = logger
        sinkOverrides = overrides
        counters = AgentCounters(backend: metrics)
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
    public static let reloadableKeys = [
        "logLevel", "delivery", "sinks[].batch", "sinks[].retry", "sinks[].circuit", "access.ingest", "access.control",
    ]

    /// Applies the reloadable parts of `newConfiguration` (see ``reloadableKeys``) to the running
    /// agent and returns the key paths that changed. A change to any other key needs a restart:
    /// the reload is then refused whole, nothing changes, and the error lists those keys. The
    /// log level is the caller's to apply (the agent does not own the log handler).
    @discardableResult
    public func reload(_ newConfiguration: AgentConfiguration) async throws -> [String] {
        try newConfiguration.validate()
        let current = currentConfiguration
        let restartOnly = Self.restartOnlyChanges(from: current, to: newConfiguration)
        guard restartOnly.isEmpty else {
            throw AgentError(code: .configuration, message: "these keys need a restart: \(restartOnly.joined(separator: ", ")); the running configuration is kept")
        }
        var changed: [String] = []
        if newConfiguration.access != current.access {
            // Resolved off the caller's thread like at start; checks switch to it at once.
            let policy = newConfiguration.access
            if let access = running.withLock({ $0?.access }) {
                try await BlockingExecutor.runDetached(name: "ferry-access-reload") { access.update(policy) }
            }
            changed.append("access")
        }
        if newConfiguration.logLevel != current.logLevel { changed.append("logLevel") }
        if newConfiguration.delivery != current.delivery { changed.append("delivery") }
        let deliveries = running.withLock { $0?.deliveries } ?? []
        for (index, (old, new)) in zip(current.sinks, newConfiguration.sinks).enumerated() {
            if old.batch != new.batch { changed.append("sinks[\(index)].batch") }
            if old.retry != new.retry { changed.append("sinks[\(index)].retry") }
            if old.circuit != new.circuit { changed.append("sinks[\(index)].circuit") }
            if let delivery = deliveries.first(where: { $0.name == new.name }) {
                delivery.reconfigure(batch: new.batch, retry: new.retry, circuit: new.circuit)
                await delivery.sink.reloadCredentials()
            }
        }
        live.withLock { $0 = newConfiguration }
        logger.notice("configuration reloaded", metadata: ["changed": "\(changed.isEmpty ? "nothing" : changed.joined(separator: ","))"])
        return changed
    }

    /// The key paths that differ between `old` and `new` and need a restart.
    static func restartOnlyChanges(from old: AgentConfiguration, to new: AgentConfiguration) -> [String] {
        var keys: [String] = []
        if old.runtimeDirectory != new.runtimeDirectory { keys.append("runtimeDirectory") }
        if old.dataDirectory != new.dataDirectory { keys.append("dataDirectory") }
        if old.maxEventBytes != new.maxEventBytes { keys.append("maxEventBytes") }
        if old.log != new.log { keys.append("log") }
        if old.dedup != new.dedup { keys.append("dedup") }
        if old.consent != new.consent { keys.append("consent") }
        if old.mode != new.mode { keys.append("mode") }
        // The ingest and control rules reload; the bus is guarded by its socket file's group and
        // mode, set when it is bound.
        if old.access.events != new.access.events { keys.append("access.events") }
        if old.sinks.map(\.name) != new.sinks.map(\.name) {
            keys.append("sinks (names or order)")
        } else {
            for (index, (a, b)) in zip(old.sinks, new.sinks).enumerated() where a.settings.anyHashable != b.settings.anyHashable {
                keys.append("sinks[\(index)] (\(a.name)): settings of type \(a.type)")
            }
        }
        return keys
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

        // Directories and the single-instance locks. Both directories, and everything in them,
        // are checked before anything is created or changed (PathSafety has the rule).
        // A system agent's runtime directory is searchable by every user (its sockets have modes
        // of their own) and its lock readable, so clients can tell whether it runs.
        let system = configuration.mode == .system
        let locks = try await io.run { () throws -> [CInt] in
            for directory in [configuration.runtimeDirectory, configuration.dataDirectory] {
                try PathSafety.checkDirectory(directory)
                try PathSafety.checkContents(of: directory)
            }
            try FileIO.makeDirectory(configuration.runtimeDirectory, mode: system ? 0o755 : 0o700)
            try FileIO.makeDirectory(configuration.dataDirectory, mode: 0o700)
            return [
                try Self.lock(configuration.runtimeDirectory + "/" + FerryPaths.lockFileName, mode: system ? 0o644 : 0o600),
                try Self.lock(configuration.dataDirectory + "/ferryd.lock", mode: 0o600),
            ]
        }
        defer { locks.forEach { close($0) } }

        // Recovery: the data format, the sinks' cursors, the dedup and session snapshots, then the
        // segments.
        let configuredSinks = configuration.sinks
        let cursorStores = configuredSinks.map { CursorStore(dataDirectory: configuration.dataDirectory, sink: $0.name) }
        let (log, recoveredDedup, recoveredSessions, report, checkpoints) = try await io.run {
            () throws -> (SegmentedLog, DedupWindow, SessionTable, RecoveryReport, [[UInt8]?]) in
            let formatFound: Int?
            do {
                formatFound = try DataFormat.prepare(configuration.dataDirectory)
            } catch let error as StorageError {
                throw AgentError(code: .configuration, message: error.message)
            }
            try FileIO.makeDirectory(configuration.dataDirectory + "/cursors", mode: 0o700)
            var stored: [(position: LogPosition, checkpoint: [UInt8]?)?] = []
            for store in cursorStores {
                do {
                    stored.append(try store.load())
                } catch {
                    logger.warning("delivery cursor unreadable; delivering from the oldest segment",
                                   metadata: ["path": "\(store.path)", "error": "\(error)"])
                    stored.append(nil)
                }
            }
            var cursors: [String: LogPosition?] = [:]
            // updateValue: assigning a nil position through the subscript would drop the consumer.
            for (sink, position) in zip(configuredSinks, stored) { cursors.updateValue(position?.position, forKey: sink.name) }
            var dedup = DedupWindow(maxEntries: configuration.dedup.maxEntries,
                                    maxAgeMilliseconds: UInt64(configuration.dedup.maxAgeSeconds) * 1000)
            let snapshotPath = configuration.dataDirectory + "/dedup.snapshot"
            // Where the dedup snapshot stops covering the log (a clean stop writes one covering
            // all of it): only the records after it are read for the window.
            var dedupFrom: LogPosition?
            if let bytes = try FileIO.readFile(snapshotPath) {
                if let covered = dedup.load(snapshot: bytes) {
                    dedupFrom = covered
                } else {
                    logger.warning("dedup snapshot damaged; ignoring it", metadata: ["path": "\(snapshotPath)"])
                }
            }
            // The session table: its snapshot covers the log up to a position; the records after
            // it are scanned. Without a usable snapshot a format 2 log is scanned whole (a format
            // 1 log has no sessions).
            var sessions = Self.emptySessionTable(configuration.dedup)
            let sessionsPath = configuration.dataDirectory + "/" + CommitPipeline.sessionsSnapshotName
            var sessionsFrom: LogPosition? = formatFound == nil ? nil : LogPosition(segment: 0, offset: 0)
            if let bytes = try FileIO.readFile(sessionsPath) {
                if let covered = sessions.restore(snapshot: bytes) {
                    sessionsFrom = covered
                } else {
                    logger.warning("session snapshot damaged; rebuilding it from the whole log", metadata: ["path": "\(sessionsPath)"])
                    sessions = Self.emptySessionTable(configuration.dedup)
                }
            }
            var report = RecoveryReport()
            let log = try SegmentedLog(
                directory: configuration.dataDirectory + "/segments", configuration: configuration.log,
                cursors: cursors, logger: logger, recovered: &report,
                dedupWindow: configuration.dedup.maxEntries, dedupFrom: dedupFrom, sessionsFrom: sessionsFrom,
                seedDedup: { id, at in dedup.insert(id, at: at) },
                seedSession: { record in
                    sessions.insert(session: record.session, sequence: record.sequence, at: record.acceptedAt, source: record.source)
                })
            let now = WallClock.unixMilliseconds()
            dedup.expire(now: now)
            return (log, dedup, sessions, report, stored.map { $0?.checkpoint })
        }
        if report.isClean {
            logger.info("recovered the queue", metadata: ["segments": "\(report.segments)", "events": "\(report.records)"])
        } else {
            logger.warning("recovered the queue with damage", metadata: [
                "segments": "\(report.segments)", "events": "\(report.records)",
                "corrupt_regions": "\(report.corruptRegions)", "corrupt_bytes": "\(report.corruptBytes)",
                "truncated_bytes": "\(report.truncatedBytes)",
            ])
        }

        // Everything that publishes or acks is built with the mailbox, before the threads that
        // use it start: the bus and the acks need no late binding.
        let mailbox = try SocketMailbox()
        defer { mailbox.close() }
        // Consent: the persisted state (or the configured start), once-key marks, the held area.
        let (engine, workerBox, dedup) = try await io.run { [recoveredDedup] () throws -> (ConsentEngine, UncheckedBox<ConsentWorker>, DedupWindow) in
            try Self.loadConsent(configuration: configuration, log: log, dedup: recoveredDedup, mailbox: mailbox, logger: logger)
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
        for (sink, (configured, (store, checkpoint))) in zip(sinks, zip(configuredSinks, zip(cursorStores, checkpoints))) {
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
                    guard mailbox.wants(.blocked) else { return }
                    let now = WallClock.unixMilliseconds()
                    for event in live {
                        if let json = BusMessage.event(topic: .blocked, frame: event.frame, at: now, reason: reason, sink: sinkName) {
                            mailbox.publish(.blocked, json)
                        }
                    }
                },
                circuitChanged: { change in
                    guard mailbox.wants(.circuit) else { return }
                    mailbox.publish(.circuit, BusMessage.circuit(change))
                }
            ) { batch in
                guard mailbox.wants(.delivered) else { return }
                let now = WallClock.unixMilliseconds()
                for event in batch.events {
                    if let json = BusMessage.event(topic: .delivered, frame: event.frame, at: now, sink: sinkName,
                                                   origin: EventOrigin(metadata: event.metadata)) {
                        mailbox.publish(.delivered, json)
                    }
                }
            }
        }
        let pipeline = CommitPipeline(
            log: log, configuration: configuration, counters: counters, mailbox: mailbox,
            committedSignals: deliveries.map(\.wakeup), faults: .planted, logger: logger)
        // The access policy, resolved against the user and group databases here (never on a
        // socket thread) and refreshed in the background.
        let access = await io.run { AccessControl(policy: configuration.access, logger: logger) }
        access.startRefreshing()
        running.withLock {
            $0 = Running(sinks: configuredSinks, log: log, deliveries: deliveries, recovery: report, pipeline: pipeline,
                         consent: engine, auditLog: auditLog, access: access)
        }

        // Control requests are answered on a thread of their own: status, the audit log and
        // /proc reads never block the socket thread, and no sink's I/O holds them up.
        let controlThread = BlockingExecutor(name: "ferry-control")
        defer { controlThread.shutdown() }
        let context = try ZMQContext()
        let server = IngestServer(
            context: context, configuration: configuration, pipeline: pipeline, mailbox: mailbox, counters: counters,
            logger: logger, controlThread: controlThread, access: access
        ) { [weak self] request, peer, reply in
            guard let self else { return reply(Self.json(ControlRefusal("agent stopping"))) }
            self.handleControl(request, peer: peer, reply: reply)
        }
        let worker = workerBox.take()
        let heldLog = worker.heldLog
        let sessions = try await io.run { try Self.completeSessions(recoveredSessions, heldLog: heldLog) }
        try pipeline.start(dedup: dedup, sessions: sessions, consent: worker)
        do {
            try await io.run { try server.start() }
        } catch {
            await pipeline.stop()
            await io.run { context.terminate() }
            throw error
        }
        logger.info("ferryd ready", metadata: [
            "ingest": "\(FerryPaths.ingestEndpoint(configuration.runtimeDirectory))",
            "data": "\(configuration.dataDirectory)", "sinks": "\(configuredSinks.map(\.name).joined(separator: ","))",
        ])
        settleReadiness(.success(()))
        let verifier = verifySealedSegments(log)

        // Serve until graceful shutdown (or cancellation), then stop in order: intake, commit
        // (acks of what was written go out), sockets, delivery.
        // The delivery loops run until then, each on its own so a slow sink never holds back
        // another; a batch cut short is delivered again after restart.
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for delivery in deliveries { group.addTask { await delivery.run() } }
            }
        }
        logger.info("ferryd stopping")
        server.stopIntake()
        await pipeline.stop()
        await server.stop()
        for sink in sinks { try? await sink.shutdown() }
        await verifier.stop()
        await access.stop()
        await io.run { context.terminate() }
        logger.info("ferryd stopped", metadata: ["accepted": "\(counters.snapshot["accepted"] ?? 0)"])
    }

    static func emptySessionTable(_ dedup: AgentConfiguration.Dedup) -> SessionTable {
        SessionTable(idleMilliseconds: UInt64(dedup.sessionIdleSeconds) * 1000, maxSessions: dedup.maxSessions,
                     lossGraceMilliseconds: UInt64(dedup.lossGraceSeconds) * 1000)
    }

    /// Adds the sessions of the held area's events (held events are not in the main log the
    /// session snapshot covers) and starts every session's idle clock now.
    static func completeSessions(_ sessions: SessionTable, heldLog: SegmentedLog) throws -> SessionTable {
        var sessions = sessions
        var position = heldLog.startPosition
        while true {
            let (events, next) = try heldLog.read(from: position, maxEvents: 4096, maxBytes: 4 << 20)
            for event in events {
                guard let header = event.isErased ? nil : try? event.header(), let session = header.session else { continue }
                sessions.insert(session: session, sequence: header.sequence, at: event.acceptedAt, source: header.source(in: event.frame))
            }
            if events.isEmpty || next == position { break }
            position = next
        }
        sessions.touchAll(now: WallClock.unixMilliseconds())
        return sessions
    }

    /// Loads (or creates) the consent state, checks the audit chain, loads the once-key marks and
    /// recovers the held area (whose events join the dedup window).
    static func loadConsent(
        configuration: AgentConfiguration, log: SegmentedLog, dedup: DedupWindow, mailbox: SocketMailbox, logger: Logger
    ) throws -> (ConsentEngine, UncheckedBox<ConsentWorker>, DedupWindow) {
        let consentConfiguration = configuration.consent
        let directory = configuration.dataDirectory + "/consent"
        try FileIO.makeDirectory(directory, mode: 0o700)
        let stateFile = ConsentStateFile(path: directory + "/state.json")
        // A change interrupted by a crash: it happened (its journal is durable), so its state is
        // the state, and its effects are finished below before anything is accepted or delivered.
        let journalFile = ConsentJournalFile(path: directory + "/pending")
        var pending = try journalFile.load()
        // A damaged state file stops the agent: falling back to the configured defaults could
        // deliver what a user refused.
        let stored: PersistedConsent?
        if pending?.state == nil {
            stored = try stateFile.load()
        } else {
            stored = try? stateFile.load()  // replaced by the journal's state below anyway
        }
        var persisted = pending?.state ?? stored ?? ConsentEngine.initialState(consentConfiguration)
        // Categories added to or removed from the configuration since the state was written.
        for name in consentConfiguration.categories.keys where persisted.consent[name] == nil {
            persisted.consent[name] = consentConfiguration.initialConsent[name] ?? consentConfiguration.defaultConsent
        }
        persisted.consent = persisted.consent.filter { consentConfiguration.categories[$0.key] != nil }
        persisted.enabledFeatures = persisted.enabledFeatures.filter { consentConfiguration.categories[$0] != nil }
        if consentConfiguration.resetEnabledFeatures { persisted.enabledFeatures = consentConfiguration.enabledFeatures.sorted() }
        let anonymousID = persisted.anonymousID ?? EventIDGenerator().next().description
        if persisted.persistence == .granted { persisted.anonymousID = anonymousID }
        let auditLog = AuditLog(path: directory + "/audit.log")
        if pending?.state != nil { pending?.state = persisted }
        // The audit entry before the state that names it as its head.
        if let entry = pending?.entry { try auditLog.appendOnce(entry) }
        if stored != persisted { try stateFile.save(persisted) }

        let verification = try auditLog.verify(expectedHead: (persisted.auditSeq, persisted.auditHead))
        if let problem = verification.problem {
            logger.warning("the consent audit log fails verification", metadata: ["problem": "\(problem)", "path": "\(auditLog.path)"])
        }
        let onceKeys = try OnceKeyStore(path: directory + "/once.keys")
        if onceKeys.damagedBytes > 0 {
            logger.warning("once-key marks had a damaged tail; cut it off", metadata: ["bytes": "\(onceKeys.damagedBytes)"])
        }
        var dedup = dedup
        var heldReport = RecoveryReport()
        let heldLog = try SegmentedLog(
            directory: configuration.dataDirectory + "/held", configuration: configuration.log, cursor: nil,
            logger: logger, recovered: &heldReport
        ) { id, at in dedup.insert(id, at: at) }
        if !heldReport.isClean {
            logger.warning("recovered the held area with damage", metadata: [
                "corrupt_regions": "\(heldReport.corruptRegions)", "truncated_bytes": "\(heldReport.truncatedBytes)",
            ])
        }
        let engine = ConsentEngine(configuration: consentConfiguration, persisted: persisted, anonymousID: anonymousID)
        let worker = try ConsentWorker(
            engine: engine, heldLog: heldLog, onceKeys: onceKeys, mainLog: log, stateFile: stateFile,
            auditLog: auditLog, journalFile: journalFile, deadLetters: DeadLetterStore(dataDirectory: configuration.dataDirectory),
            pending: pending, mailbox: mailbox, logger: logger)
        if worker.pending != nil {
            // A writer of its own for the queue, closed before the commit thread opens its own.
            try worker.finishPendingAtStart(writer: try LogWriter(log: log))
        }
        return (engine, UncheckedBox(worker), dedup)
    }

    /// Counts and checks, on a thread of its own, the sealed segments recovery left for later, so
    /// the time to the first ack does not grow with the backlog.
    private func verifySealedSegments(_ log: SegmentedLog) -> Verifier {
        let verifier = Verifier()
        guard log.unverifiedSegments > 0 else { return verifier }
        let logger = self.logger
        let thread = DedicatedThread(name: "ferry-verify") { [self] in
            let found = log.verifySealedSegments { verifier.stopping.load(ordering: .relaxed) }
            running.withLock { $0?.recovery.merge(found) }
            if found.isClean {
                logger.info("verified the older segments", metadata: ["events": "\(found.records)"])
            } else {
                logger.warning("verified the older segments with damage", metadata: [
                    "events": "\(found.records)", "corrupt_regions": "\(found.corruptRegions)",
                    "corrupt_bytes": "\(found.corruptBytes)",
                ])
            }
        }
        verifier.thread.withLock { $0 = thread }
        return verifier
    }

    private final class Verifier: Sendable {
        let stopping = Atomic<Bool>(false)
        let thread = Mutex<DedicatedThread?>(nil)
        func stop() async {
            stopping.store(true, ordering: .relaxed)
            if let thread = thread.withLock({ $0 }) { await thread.joinAsync() }
        }
    }

    private static func lock(_ path: String, mode: mode_t) throws -> CInt {
        let fd = try FileIO.open(path, O_RDWR | O_CREAT, mode: mode)
        fchmod(fd, mode)
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            throw AgentError(code: .alreadyRunning, message: "another ferryd holds \(path)")
        }
        return fd
    }

    // MARK: Control

    /// Answers one control request (JSON in, JSON out; the types are FerryProtocol's
    /// ``ControlRequest`` and replies). Consent changes go through the commit thread and a
    /// dead-letter replay waits on its sink; `reply` is called exactly once, from whichever thread
    /// finishes the work.
    func handleControl(_ request: [UInt8], peer: PeerCredentials?, reply: @escaping @Sendable ([UInt8]) -> Void) {
        @Sendable func fail(_ refusal: ControlRefusal) { reply(Self.json(refusal)) }
        let decoded: ControlRequest
        do {
            decoded = try ControlRequest.decode(json: request)
        } catch {
            return fail(error)
        }
        guard let running = running.withLock({ $0 }) else { return fail(ControlRefusal("agent starting")) }
        // Reading ops are open to whoever may send events; changes (and the audit log, which
        // names callers) need the control policy. `whoami` is answered to everyone.
        let scope: AccessControl.Scope? = switch decoded.operation {
        case .whoami: nil
        case .status, .metrics, .consentState: running.access.allows(.ingest, peer) ? nil : .control
        default: .control
        }
        if let scope, !running.access.allows(scope, peer) {
            counters.accessDenied.increment()
            return fail(ControlRefusal(running.access.refusal(scope, peer), code: ControlRefusal.accessDenied))
        }
        let engine = running.consent
        // The ops that read are answered here; the ones that change the consent state (or start
        // delivery) go to the commit thread, between two groups.
        let command: ConsentCommand
        switch decoded.operation {
        case .status:
            return reply(status().map { Self.json($0) } ?? Self.json(ControlRefusal("agent starting")))
        case .metrics:
            return reply(Self.json(MetricsReply(text: String(decoding: metricsExposition(), as: UTF8.self))))
        case .whoami:
            let rights = running.access.rights(of: peer)
            return reply(Self.json(WhoAmIReply(
                uid: peer?.uid, gid: peer?.gid, pid: peer?.pid, mode: configuration.mode.rawValue,
                ingest: rights[.ingest] ?? false, control: rights[.control] ?? false, events: rights[.events] ?? false)))
        case .consentState:
            return reply(Self.json(ConsentUpdate(consent: engine.snapshot())))
        case .deadLetterReplay(let id, let sink):
            Task { reply(Self.json(await self.replayDeadLetter(id: id, sink: sink))) }
            return
        case .consentLog(let limit):
            let persisted = engine.persisted
            do {
                let verification = try running.auditLog.verify(expectedHead: (persisted.auditSeq, persisted.auditHead))
                var entries = verification.entries
                if let limit, limit >= 0, entries.count > limit { entries = Array(entries.suffix(limit)) }
                return reply(Self.json(ConsentAuditLog(entries: entries, verified: verification.problem == nil,
                                                       problem: verification.problem)))
            } catch {
                return fail(ControlRefusal("cannot read the audit log: \(error)"))
            }
        case .setTracking(let enabled): command = .setTracking(enabled)
        case .setConsent(let category, let status): command = .setConsent(category: category, status: status)
        case .setPersistence(let status): command = .setPersistence(status)
        case .setGDPR(let fields): command = .setGDPR(fields)
        case .enableFeatures(let names): command = .enableFeatures(names)
        case .disableFeatures(let names): command = .disableFeatures(names)
        case .purge(let category): command = .purge(category: category)
        case .forget(let userID): command = .forget(userID: userID)
        case .start: command = .start
        }
        var actor = ConsentActor(uid: peer?.uid, pid: peer?.pid, process: peer.flatMap { processName(of: $0.pid) })
        if let text = decoded.actor { actor.actor = String(decoding: text.utf8.prefix(200), as: UTF8.self) }
        let submitted = running.pipeline.submit(command, by: actor) { result in
            switch result {
            case .success(let outcome):
                var deliveryStarted: Bool?
                if case .start = command { deliveryStarted = true }
                reply(Self.json(ConsentUpdate(consent: outcome.snapshot, purged: outcome.purged, deliveryStarted: deliveryStarted)))
            case .failure(let error):
                fail(ControlRefusal(error.message, valid: error.valid))
            }
        }
        if !submitted { fail(ControlRefusal("the agent is shutting down")) }
    }

    /// `{"op":"deadletter_replay","id":…,"sink":…}`: hands a dead letter to its sink once more.
    /// `sink` may be left out when only one sink holds `id`.
    func replayDeadLetter(id: String, sink: String?) async -> DeadLetterReplayReply {
        guard DeadLetterStore.isValidID(id) else {
            return .refused("deadletter_replay needs a string field \"id\" naming a dead letter")
        }
        guard let deliveries = running.withLock({ $0?.deliveries }) else { return .refused("agent starting") }
        var name = sink
        if name == nil {
            let store = DeadLetterStore(dataDirectory: configuration.dataDirectory)
            let holders = (try? await BlockingExecutor.runDetached(name: "ferry-deadletter-lookup") { try store.sinks(holding: id) }) ?? []
            guard holders.count == 1 else {
                return .refused(holders.isEmpty ? "no dead letter \(id)"
                    : "dead letter \(id) exists for sinks \(holders.joined(separator: ", ")); give \"sink\"")
            }
            name = holders[0]
        }
        guard let delivery = deliveries.first(where: { $0.name == name }) else {
            return .refused("no sink named \"\(name ?? "")\"; sinks: \(deliveries.map(\.name).joined(separator: ", "))")
        }
        do {
            let events = try await delivery.replay(id: id)
            return DeadLetterReplayReply(ok: true, sink: delivery.name, id: id, events: events)
        } catch let error as AgentError {
            return DeadLetterReplayReply(ok: false, sink: delivery.name, id: id, error: error.message)
        } catch {
            return DeadLetterReplayReply(ok: false, sink: delivery.name, id: id, error: "\(error)")
        }
    }

    /// The status document served to `ferry status --json`; nil until the agent runs.
    public func status() -> StatusReply? {
        guard let running = running.withLock({ $0 }) else { return nil }
        let log = running.log.status()
        let now = WallClock.unixMilliseconds()
        var oldestAge: Int?
        if log.undeliveredEvents > 0, let at = running.log.oldestUndeliveredAcceptedAt() {
            oldestAge = now >= at ? Int(now - at) : 0
        }
        // Counters come from the metrics: one store for `ferry status` and `ferry metrics`.
        let samples = counters.samples
        func bySink(_ name: String) -> [String: Int] { samples.values(name, by: "sink").mapValues { Int($0) } }
        let delivered = bySink("ferry_sink_delivered_total"), retried = bySink("ferry_sink_retried_total")
        let deadLettered = bySink("ferry_sink_dead_lettered_total")
        let letters = DeadLetterStore(dataDirectory: configuration.dataDirectory)
        let sinks = zip(running.deliveries, running.sinks).map { delivery, configured -> StatusReply.Sink in
            let state = delivery.state.withLock { $0 }
            return StatusReply.Sink(
                name: state.sink, type: configured.type, state: state.phase.rawValue,
                circuit: state.circuit.rawValue, consecutiveFailures: state.consecutiveFailures,
                backlogEvents: log.backlog[state.sink] ?? 0, delivered: delivered[state.sink] ?? 0,
                retried: retried[state.sink] ?? 0, deadLettered: deadLettered[state.sink] ?? 0,
                cursor: log.cursors[state.sink]?.description,
                lastSuccessAt: state.lastSuccessAt.map { Int($0) }, lastError: state.lastError,
                retryAt: state.phase == .retrying ? state.retryAt.map { Int($0) } : nil,
                deadLetters: (try? letters.ids(sink: state.sink).count) ?? 0)
        }
        return StatusReply(
            pid: Int(getpid()),
            protocolVersion: Int(ferryProtocolVersion),
            uptimeMilliseconds: Int(now - startedAt),
            runtimeDirectory: configuration.runtimeDirectory,
            dataDirectory: configuration.dataDirectory,
            queue: StatusReply.Queue(
                events: log.undeliveredEvents, bytes: Int(log.bytes), segments: log.segments,
                oldestUndeliveredAgeMilliseconds: oldestAge, cursor: log.cursor.description,
                verifyingSegments: log.unverifiedSegments, retentionMaxBytes: Int(clamping: configuration.log.retentionMaxBytes)),
            // The single-sink shape of earlier versions: the first sink.
            delivery: sinks.first.map { StatusReply.Delivery($0) },
            consent: running.consent.snapshot(),
            sinks: sinks,
            counters: AgentCounters.statusCounters(samples),
            recovery: StatusReply.Recovery(
                events: running.recovery.records, corruptRegions: running.recovery.corruptRegions,
                corruptBytes: Int(running.recovery.corruptBytes), truncatedBytes: Int(running.recovery.truncatedBytes)),
            clientEventsLost: samples.values("ferry_client_events_lost_total", by: "source").mapValues { Int($0) })
    }

    /// The agent's metrics in the Prometheus text exposition, with the gauges of its state
    /// (queue, held events, sink backlogs) brought up to date first. `ferry metrics` and
    /// `GET /metrics` serve this.
    public func metricsExposition() -> [UInt8] {
        if let running = running.withLock({ $0 }) {
            let log = running.log.status()
            counters.queueEvents.record(log.undeliveredEvents)
            counters.queueBytes.record(Int(log.bytes))
            var age = 0.0
            if log.undeliveredEvents > 0, let at = running.log.oldestUndeliveredAcceptedAt() {
                let now = WallClock.unixMilliseconds()
                age = now >= at ? Double(now - at) / 1000 : 0
            }
            counters.queueOldestAge.record(age)
            counters.eventsHeld.record(running.consent.snapshot().heldEvents)
            for delivery in running.deliveries {
                delivery.metrics.backlog.record(log.backlog[delivery.name] ?? 0)
            }
        }
        return counters.backend.exposition()
    }

    /// A control reply (or an audit log line) as JSON: encoded from its FerryProtocol type, then
    /// written with its keys sorted as `JSONSerialization` sorts them (numerically and ignoring
    /// case, unlike `JSONEncoder`'s `.sortedKeys`), so the bytes are those of every earlier version.
    static func json(_ value: some Encodable) -> [UInt8] { controlReplyJSON(value) }
}
