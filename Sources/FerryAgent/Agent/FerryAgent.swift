#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import FerryProtocol
import Logging
import ServiceLifecycle
import Synchronization
import ZeroMQ
import FerryStorage

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
public final class FerryAgent: Service, Sendable {
    /// The configuration the agent runs with.
    public let configuration: AgentConfiguration
    /// Counters, readable while the agent runs.
    public let counters = AgentCounters()
    private let logger: Logger
    /// Sink implementations that replace what their configuration describes, by sink name.
    private let sinkOverrides: [String: any Sink]
    private let startedAt = WallClock.unixMilliseconds()
    private let running = Mutex<Running?>(nil)
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
    }

    /// Creates an agent. Nothing starts until ``run()``. `sink`, if given, replaces the first
    /// configured sink's implementation (it keeps that sink's name, cursor and policies).
    public convenience init(configuration: AgentConfiguration, sink: (any Sink)? = nil, logger: Logger) {
        let first = configuration.sinks.first?.name ?? ""
        self.init(configuration: configuration, sinks: sink.map { [first: $0] } ?? [:], logger: logger)
    }

    /// Creates an agent whose sinks named in `overrides` use the given implementations instead of
    /// the ones their configuration describes (for tests and embedding).
    public init(configuration: AgentConfiguration, sinks overrides: [String: any Sink], logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        sinkOverrides = overrides
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

    /// What recovery found at start, once running.
    public var recoveryReport: RecoveryReport? { running.withLock { $0?.recovery } }

    public func run() async throws {
        do {
            try await serve()
        } catch {
            // Waiters must not hang when start-up fails.
            settleReadiness(.failure(error))
            throw error
        }
        settleReadiness(.failure(AgentError(code: .configuration, message: "the agent stopped before it was ready")))
    }

    private func serve() async throws {
        try configuration.validate()
        // Start-up and shutdown file work of this run: a thread of its own, shared with nothing.
        let io = BlockingExecutor(name: "ferry-agent-io")
        defer { io.shutdown() }
        let configuration = self.configuration, logger = self.logger

        // Directories and the single-instance locks.
        let locks = try await io.run { () throws -> [CInt] in
            try FileIO.makeDirectory(configuration.runtimeDirectory, mode: 0o700)
            try FileIO.makeDirectory(configuration.dataDirectory, mode: 0o700)
            return [
                try Self.lock(configuration.runtimeDirectory + "/ferryd.lock"),
                try Self.lock(configuration.dataDirectory + "/ferryd.lock"),
            ]
        }
        defer { locks.forEach { close($0) } }

        // Recovery: the sinks' cursors, dedup snapshot, then every segment.
        let configuredSinks = configuration.sinks
        let cursorStores = configuredSinks.map { CursorStore(dataDirectory: configuration.dataDirectory, sink: $0.name) }
        let (log, recoveredDedup, report, checkpoints) = try await io.run { () throws -> (SegmentedLog, DedupWindow, RecoveryReport, [[UInt8]?]) in
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
            if let bytes = try FileIO.readFile(snapshotPath) {
                if let entries = DedupWindow.parseSnapshot(bytes) {
                    for entry in entries { dedup.insert(entry.id, at: entry.at) }
                } else {
                    logger.warning("dedup snapshot damaged; ignoring it", metadata: ["path": "\(snapshotPath)"])
                }
            }
            var report = RecoveryReport()
            let log = try SegmentedLog(
                directory: configuration.dataDirectory + "/segments", configuration: configuration.log,
                cursors: cursors, logger: logger, recovered: &report,
                dedupWindow: configuration.dedup.maxEntries
            ) { id, at in dedup.insert(id, at: at) }
            dedup.expire(now: WallClock.unixMilliseconds())
            return (log, dedup, report, stored.map { $0?.checkpoint })
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
                    counters.blockedAtSend.add(live.count, ordering: .relaxed)
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
                    if let json = BusMessage.event(topic: .delivered, frame: event.frame, at: now, sink: sinkName) {
                        mailbox.publish(.delivered, json)
                    }
                }
            }
        }
        let pipeline = CommitPipeline(
            log: log, configuration: configuration, counters: counters, mailbox: mailbox,
            committedSignals: deliveries.map(\.wakeup), logger: logger)
        running.withLock {
            $0 = Running(sinks: configuredSinks, log: log, deliveries: deliveries, recovery: report, pipeline: pipeline,
                         consent: engine, auditLog: auditLog)
        }

        // Control requests are answered on a thread of their own: status, the audit log and
        // /proc reads never block the socket thread, and no sink's I/O holds them up.
        let controlThread = BlockingExecutor(name: "ferry-control")
        defer { controlThread.shutdown() }
        let context = try ZMQContext()
        let server = IngestServer(
            context: context, configuration: configuration, pipeline: pipeline, mailbox: mailbox, counters: counters,
            logger: logger, controlThread: controlThread
        ) { [weak self] request, peer, reply in
            guard let self else { return reply(Array(#"{"ok":false,"error":"agent stopping"}"#.utf8)) }
            self.handleControl(request, peer: peer, reply: reply)
        }
        try pipeline.start(dedup: dedup, consent: workerBox.take())
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
        await io.run { context.terminate() }
        logger.info("ferryd stopped", metadata: ["accepted": "\(counters.accepted.load(ordering: .relaxed))"])
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
        // A damaged state file stops the agent: falling back to the configured defaults could
        // deliver what a user refused.
        let stored = try stateFile.load()
        var persisted = stored ?? ConsentEngine.initialState(consentConfiguration)
        // Categories added to or removed from the configuration since the state was written.
        for name in consentConfiguration.categories.keys where persisted.consent[name] == nil {
            persisted.consent[name] = consentConfiguration.initialConsent[name] ?? consentConfiguration.defaultConsent
        }
        persisted.consent = persisted.consent.filter { consentConfiguration.categories[$0.key] != nil }
        persisted.enabledFeatures = persisted.enabledFeatures.filter { consentConfiguration.categories[$0] != nil }
        if consentConfiguration.resetEnabledFeatures { persisted.enabledFeatures = consentConfiguration.enabledFeatures.sorted() }
        let anonymousID = persisted.anonymousID ?? EventIDGenerator().next().description
        if persisted.persistence == .granted { persisted.anonymousID = anonymousID }
        if stored != persisted { try stateFile.save(persisted) }

        let auditLog = AuditLog(path: directory + "/audit.log")
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
            auditLog: auditLog, mailbox: mailbox, logger: logger)
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

    private static func lock(_ path: String) throws -> CInt {
        let fd = try FileIO.open(path, O_RDWR | O_CREAT)
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            throw AgentError(code: .alreadyRunning, message: "another ferryd holds \(path)")
        }
        return fd
    }

    // MARK: Control

    /// Answers one control request (JSON in, JSON out). Consent changes go through the commit
    /// thread and a dead-letter replay waits on its sink; `reply` is called exactly once, from
    /// whichever thread finishes the work.
    func handleControl(_ request: [UInt8], peer: PeerCredentials?, reply: @escaping @Sendable ([UInt8]) -> Void) {
        @Sendable func fail(_ message: String, valid: [String] = []) {
            var object: [String: Any] = ["ok": false, "error": message]
            if !valid.isEmpty { object["valid"] = valid }
            reply(Self.json(object))
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(request)) as? [String: Any],
              let op = object["op"] as? String else {
            return fail("request must be a JSON object with a string field \"op\"")
        }
        guard let running = running.withLock({ $0 }) else { return fail("agent starting") }
        let engine = running.consent
        switch op {
        case "status":
            return reply(Self.json(status()))
        case "consent_state":
            return reply(Self.json(["ok": true, "consent": Self.jsonObject(engine.snapshot())]))
        case "deadletter_replay":
            let id = object["id"] as? String, sink = object["sink"] as? String
            Task { reply(Self.json(await self.replayDeadLetter(id: id, sink: sink))) }
            return
        case "consent_log":
            let persisted = engine.persisted
            do {
                let verification = try running.auditLog.verify(expectedHead: (persisted.auditSeq, persisted.auditHead))
                var entries = verification.entries
                if let limit = object["limit"] as? Int, limit >= 0, entries.count > limit { entries = Array(entries.suffix(limit)) }
                var answer: [String: Any] = ["ok": true, "entries": entries.map(\.json), "verified": verification.problem == nil]
                if let problem = verification.problem { answer["problem"] = problem }
                return reply(Self.json(answer))
            } catch {
                return fail("cannot read the audit log: \(error)")
            }
        default:
            break
        }
        let command: ConsentCommand
        do {
            command = try Self.consentCommand(op: op, object)
        } catch {
            return fail(error.message, valid: error.valid)
        }
        var actor = ConsentActor(uid: peer?.uid, pid: peer?.pid, process: peer.flatMap { processName(of: $0.pid) })
        if let text = object["actor"] as? String { actor.actor = String(decoding: text.utf8.prefix(200), as: UTF8.self) }
        let submitted = running.pipeline.submit(command, by: actor) { result in
            switch result {
            case .success(let outcome):
                var answer: [String: Any] = ["ok": true, "consent": Self.jsonObject(outcome.snapshot)]
                if let purged = outcome.purged { answer["purged"] = Self.jsonObject(purged) }
                if case .start = command { answer["delivery_started"] = true }
                reply(Self.json(answer))
            case .failure(let error):
                fail(error.message, valid: error.valid)
            }
        }
        if !submitted { fail("the agent is shutting down") }
    }

    /// `{"op":"deadletter_replay","id":…,"sink":…}`: hands a dead letter to its sink once more.
    /// `sink` may be left out when only one sink holds `id`.
    func replayDeadLetter(id: String?, sink: String?) async -> [String: Any] {
        guard let id, DeadLetterStore.isValidID(id) else {
            return ["ok": false, "error": "deadletter_replay needs a string field \"id\" naming a dead letter"]
        }
        guard let deliveries = running.withLock({ $0?.deliveries }) else { return ["ok": false, "error": "agent starting"] }
        var name = sink
        if name == nil {
            let store = DeadLetterStore(dataDirectory: configuration.dataDirectory)
            let holders = (try? await BlockingExecutor.runDetached(name: "ferry-deadletter-lookup") { try store.sinks(holding: id) }) ?? []
            guard holders.count == 1 else {
                return ["ok": false, "error": holders.isEmpty ? "no dead letter \(id)"
                    : "dead letter \(id) exists for sinks \(holders.joined(separator: ", ")); give \"sink\""]
            }
            name = holders[0]
        }
        guard let delivery = deliveries.first(where: { $0.name == name }) else {
            return ["ok": false, "error": "no sink named \"\(name ?? "")\"; sinks: \(deliveries.map(\.name).joined(separator: ", "))"]
        }
        do {
            let events = try await delivery.replay(id: id)
            return ["ok": true, "sink": delivery.name, "id": id, "events": events]
        } catch let error as AgentError {
            return ["ok": false, "sink": delivery.name, "id": id, "error": error.message]
        } catch {
            return ["ok": false, "sink": delivery.name, "id": id, "error": "\(error)"]
        }
    }

    /// Parses a state-changing control request.
    private static func consentCommand(op: String, _ object: [String: Any]) throws(AgentError) -> ConsentCommand {
        func invalid(_ message: String, _ valid: [String] = []) -> AgentError {
            AgentError(code: .invalidRequest, message: message, valid: valid)
        }
        func status(_ key: String) throws(AgentError) -> ConsentStatus {
            let valid = ConsentStatus.allCases.map(\.rawValue)
            guard let text = object[key] as? String else { throw invalid("\"\(key)\" must be a string", valid) }
            guard let status = ConsentStatus(rawValue: text) else { throw invalid("unknown status \"\(text)\"", valid) }
            return status
        }
        func names(_ key: String) throws(AgentError) -> [String] {
            guard let names = object[key] as? [String], !names.isEmpty else {
                throw invalid("\"\(key)\" must be a non-empty array of strings")
            }
            return names
        }
        switch op {
        case "set_tracking":
            guard let number = object["enabled"] as? NSNumber, String(cString: number.objCType) == "c" else {
                throw invalid("\"enabled\" must be true or false")
            }
            return .setTracking(number.boolValue)
        case "set_consent":
            guard let category = object["category"] as? String else { throw invalid("\"category\" must be a string") }
            return .setConsent(category: category, status: try status("status"))
        case "set_persistence":
            return .setPersistence(try status("status"))
        case "set_gdpr":
            guard let fields = object["fields"] as? [String: Any], !fields.isEmpty else {
                throw invalid("\"fields\" must be a non-empty object", GDPRRecord.fieldNames)
            }
            var values: [String: GDPRValue] = [:]
            for (field, raw) in fields {
                guard GDPRRecord.fieldNames.contains(field) else { throw invalid("unknown GDPR field \"\(field)\"", GDPRRecord.fieldNames) }
                guard let text = raw as? String, let value = GDPRValue(rawValue: text) else {
                    throw invalid("\(field) must be one of unset, granted, denied", GDPRValue.allCases.map(\.rawValue))
                }
                values[field] = value
            }
            return .setGDPR(values)
        case "enable_features":
            return .enableFeatures(try names("features"))
        case "disable_features":
            return .disableFeatures(try names("features"))
        case "purge":
            if let category = object["category"], !(category is NSNull) {
                guard let name = category as? String else { throw invalid("\"category\" must be a string") }
                return .purge(category: name)
            }
            return .purge(category: nil)
        case "forget":
            guard let user = object["user_id"] as? String, !user.isEmpty else { throw invalid("\"user_id\" must be a non-empty string") }
            return .forget(userID: user)
        case "start":
            return .start
        default:
            throw invalid("unknown op \"\(op)\"", controlOps)
        }
    }

    /// Every op the control socket answers.
    static let controlOps = [
        "status", "deadletter_replay", "consent_state", "consent_log", "set_tracking", "set_consent", "set_persistence", "set_gdpr",
        "enable_features", "disable_features", "purge", "forget", "start",
    ]

    private static func jsonObject(_ value: some Encodable) -> Any {
        guard let data = try? JSONEncoder().encode(value), let object = try? JSONSerialization.jsonObject(with: data) else {
            return NSNull()
        }
        return object
    }

    /// The status document served to `ferry status --json`.
    public func status() -> [String: Any] {
        guard let running = running.withLock({ $0 }) else { return ["ok": false, "error": "agent starting"] }
        let log = running.log.status()
        let now = WallClock.unixMilliseconds()
        var oldestAge: Any = NSNull()
        if log.undeliveredEvents > 0, let at = running.log.oldestUndeliveredAcceptedAt() {
            oldestAge = now >= at ? Int(now - at) : 0
        }
        let sinksJSON = zip(running.deliveries, running.sinks).map { delivery, configured -> [String: Any] in
            let state = delivery.state.withLock { $0 }
            var json: [String: Any] = [
                "name": state.sink, "type": configured.type, "state": state.phase.rawValue,
                "circuit": state.circuit.rawValue, "consecutive_failures": state.consecutiveFailures,
                "backlog_events": log.backlog[state.sink] ?? 0, "delivered": state.delivered,
                "retried": state.retried, "dead_lettered": state.deadLettered,
                "cursor": log.cursors[state.sink]?.description ?? NSNull(),
                "last_success_at": state.lastSuccessAt.map { Int($0) } ?? NSNull(),
                "last_error": state.lastError ?? NSNull(),
                "retry_at": NSNull(),
            ]
            if let at = state.retryAt, state.phase == .retrying { json["retry_at"] = Int(at) }
            return json
        }
        // The single-sink shape of earlier versions: the first sink.
        var deliveryJSON: [String: Any] = [:]
        if let first = sinksJSON.first {
            deliveryJSON = ["sink": first["name"]!, "state": first["state"]!, "consecutive_failures": first["consecutive_failures"]!]
            for key in ["last_success_at", "last_error", "retry_at"] where !(first[key] is NSNull) { deliveryJSON[key] = first[key] }
        }
        return [
            "ok": true,
            "pid": Int(getpid()),
            "protocol_version": Int(ferryProtocolVersion),
            "uptime_ms": Int(now - startedAt),
            "runtime_dir": configuration.runtimeDirectory,
            "data_dir": configuration.dataDirectory,
            "queue": [
                "events": log.undeliveredEvents,
                "bytes": Int(log.bytes),
                "segments": log.segments,
                "oldest_undelivered_age_ms": oldestAge,
                "cursor": log.cursor.description,
                "verifying_segments": log.unverifiedSegments,
            ] as [String: Any],
            "delivery": deliveryJSON,
            "consent": Self.jsonObject(running.consent.snapshot()),
            "sinks": sinksJSON,
            "counters": counters.snapshot,
            "recovery": [
                "events": running.recovery.records,
                "corrupt_regions": running.recovery.corruptRegions,
                "corrupt_bytes": Int(running.recovery.corruptBytes),
                "truncated_bytes": Int(running.recovery.truncatedBytes),
            ],
        ]
    }

    static func json(_ object: [String: Any]) -> [UInt8] {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{\"ok\":false}".utf8)
        return Array(data)
    }
}
