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
    /// The sinks in configuration order, each with its configuration.
    private let sinks: [(configuration: AgentConfiguration.SinkConfiguration, sink: any Sink)]
    private let startedAt = WallClock.unixMilliseconds()
    private let running = Mutex<Running?>(nil)
    private let readyWaiters = Mutex<ReadyState>(ReadyState())

    private struct ReadyState {
        var outcome: Result<Void, any Error>?
        var waiters: [CheckedContinuation<Void, any Error>] = []
    }

    private struct Running: Sendable {
        var log: SegmentedLog
        var deliveries: [DeliveryLoop]
        var recovery: RecoveryReport
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
        sinks = configuration.sinks.map { sink in
            (sink, overrides[sink.name] ?? sink.makeSink(dataDirectory: configuration.dataDirectory))
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
        let io = BlockingExecutor.shared
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
        let sinks = self.sinks
        let cursorStores = sinks.map { CursorStore(dataDirectory: configuration.dataDirectory, sink: $0.configuration.name) }
        let (log, dedup, report, checkpoints) = try await io.run { () throws -> (SegmentedLog, DedupWindow, RecoveryReport, [[UInt8]?]) in
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
            for (sink, position) in zip(sinks, stored) { cursors.updateValue(position?.position, forKey: sink.configuration.name) }
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
                cursors: cursors, logger: logger, recovered: &report
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
        var startCheckpoints: [[UInt8]?] = []
        for ((configured, sink), (store, checkpoint)) in zip(sinks, zip(cursorStores, checkpoints)) {
            let initialCheckpoint = try await sink.recover(checkpoint: checkpoint)
            if checkpoint == nil {
                // First start (or a lost cursor): record where the sink stands before it receives
                // anything, so output of a batch cut short by a crash is recognised and cut back.
                let start = log.cursor(for: configured.name)
                try await io.run { try store.save(start, checkpoint: initialCheckpoint) }
            }
            startCheckpoints.append(checkpoint ?? initialCheckpoint)
        }

        let context = try ZMQContext()
        let serverBox = Mutex<IngestServer?>(nil)
        let pipeline = CommitPipeline(
            log: log, configuration: configuration, counters: counters, logger: logger,
            wantsDropped: { serverBox.withLock { $0 }?.wants(.dropped) ?? false },
            droppedEvents: { events in
                guard let server = serverBox.withLock({ $0 }) else { return }
                let now = WallClock.unixMilliseconds()
                for event in events {
                    if let json = BusMessage.event(topic: .dropped, frame: event.frame, at: now, reason: "retention") {
                        server.publish(.dropped, json)
                    }
                }
            })
        let deadLetters = DeadLetterStore(dataDirectory: configuration.dataDirectory)
        let deliveries = zip(sinks, zip(cursorStores, startCheckpoints)).map { sinkAndConfiguration, storeAndCheckpoint in
            let (configured, sink) = sinkAndConfiguration, (store, checkpoint) = storeAndCheckpoint
            let sinkName = configured.name
            return DeliveryLoop(
                sink: sink, configuration: configured, log: log, cursorStore: store, deadLetters: deadLetters,
                counters: counters, logger: logger, checkpoint: checkpoint,
                circuitChanged: { change in
                    guard let server = serverBox.withLock({ $0 }), server.wants(.circuit) else { return }
                    server.publish(.circuit, BusMessage.circuit(change))
                }
            ) { batch in
                guard let server = serverBox.withLock({ $0 }), server.wants(.delivered) else { return }
                let now = WallClock.unixMilliseconds()
                for event in batch.events {
                    if let json = BusMessage.event(topic: .delivered, frame: event.frame, at: now, sink: sinkName) {
                        server.publish(.delivered, json)
                    }
                }
            }
        }
        running.withLock { $0 = Running(log: log, deliveries: deliveries, recovery: report) }
        let server = try IngestServer(
            context: context, configuration: configuration, pipeline: pipeline, counters: counters, logger: logger
        ) { [weak self] request, reply in
            guard let self else { return reply(Array(#"{"ok":false,"error":"agent stopping"}"#.utf8)) }
            self.handleControl(request, reply: reply)
        }
        serverBox.withLock { $0 = server }
        try pipeline.start(dedup: dedup) { results in
            server.deliverAcks(results)
        } committedEvents: {
            for delivery in deliveries { delivery.wakeup.signal() }
        }
        do {
            try await io.run { try server.start() }
        } catch {
            await pipeline.stop()
            await io.run { context.terminate() }
            throw error
        }
        logger.info("ferryd ready", metadata: [
            "ingest": "\(FerryPaths.ingestEndpoint(configuration.runtimeDirectory))",
            "data": "\(configuration.dataDirectory)", "sinks": "\(sinks.map(\.configuration.name).joined(separator: ","))",
        ])
        settleReadiness(.success(()))

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
        for (_, sink) in sinks { try? await sink.shutdown() }
        await io.run { context.terminate() }
        logger.info("ferryd stopped", metadata: ["accepted": "\(counters.accepted.load(ordering: .relaxed))"])
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

    /// Answers one control request, at once or (for ops that wait on a sink) later through
    /// `reply`, which must be called exactly once.
    func handleControl(_ request: [UInt8], reply: @escaping @Sendable ([UInt8]) -> Void) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(request)) as? [String: Any],
              object["op"] as? String == "deadletter_replay" else {
            return reply(handleControl(request))
        }
        let id = object["id"] as? String, sink = object["sink"] as? String
        Task {
            reply(Self.json(await self.replayDeadLetter(id: id, sink: sink)))
        }
    }

    /// Answers one control request (JSON in, JSON out) that needs no waiting.
    func handleControl(_ request: [UInt8]) -> [UInt8] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(request)) as? [String: Any],
              let op = object["op"] as? String else {
            return Self.json(["ok": false, "error": "request must be a JSON object with a string field \"op\""])
        }
        switch op {
        case "status":
            return Self.json(status())
        default:
            return Self.json(["ok": false, "error": "unknown op \"\(op)\"; valid: status, deadletter_replay"])
        }
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
            let holders = (try? await BlockingExecutor.shared.run { try store.sinks(holding: id) }) ?? []
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

    /// The status document served to `ferry status --json`.
    public func status() -> [String: Any] {
        guard let running = running.withLock({ $0 }) else { return ["ok": false, "error": "agent starting"] }
        let log = running.log.status()
        let now = WallClock.unixMilliseconds()
        var oldestAge: Any = NSNull()
        if log.undeliveredEvents > 0, let at = running.log.oldestUndeliveredAcceptedAt() {
            oldestAge = now >= at ? Int(now - at) : 0
        }
        let sinksJSON = zip(running.deliveries, sinks).map { delivery, configured -> [String: Any] in
            let state = delivery.state.withLock { $0 }
            var json: [String: Any] = [
                "name": state.sink, "type": configured.configuration.kind.typeName, "state": state.phase.rawValue,
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
            ] as [String: Any],
            "delivery": deliveryJSON,
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
