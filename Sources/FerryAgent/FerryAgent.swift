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

/// The Ferry agent: ingest over ZeroMQ IPC, a durable group-committed log, delivery to a sink,
/// an event bus and a control socket.
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
    private let sink: any Sink
    private let startedAt = WallClock.unixMilliseconds()
    private let running = Mutex<Running?>(nil)
    private let readyWaiters = Mutex<ReadyState>(ReadyState())

    private struct ReadyState {
        var outcome: Result<Void, any Error>?
        var waiters: [CheckedContinuation<Void, any Error>] = []
    }

    private struct Running: Sendable {
        var log: SegmentedLog
        var delivery: DeliveryLoop
        var recovery: RecoveryReport
    }

    /// Creates an agent. Nothing starts until ``run()``. `sink` defaults to the configured one.
    public init(configuration: AgentConfiguration, sink: (any Sink)? = nil, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        switch configuration.sink {
        case .file(_, let maxFileBytes):
            self.sink = sink ?? FileSink(directory: configuration.fileSinkDirectory, maxFileBytes: maxFileBytes)
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

        // Recovery: cursor, dedup snapshot, then every segment.
        let cursorStore = CursorStore(dataDirectory: configuration.dataDirectory, sink: sink.name)
        let (log, dedup, report, checkpoint) = try await io.run { () throws -> (SegmentedLog, DedupWindow, RecoveryReport, [UInt8]?) in
            try FileIO.makeDirectory(configuration.dataDirectory + "/cursors", mode: 0o700)
            var stored: (position: LogPosition, checkpoint: [UInt8]?)?
            do {
                stored = try cursorStore.load()
            } catch {
                logger.warning("delivery cursor unreadable; delivering from the oldest segment", metadata: ["error": "\(error)"])
            }
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
                cursor: stored?.position, logger: logger, recovered: &report,
                dedupWindow: configuration.dedup.maxEntries
            ) { id, at in dedup.insert(id, at: at) }
            dedup.expire(now: WallClock.unixMilliseconds())
            return (log, dedup, report, stored?.checkpoint)
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
        let initialCheckpoint = try await sink.recover(checkpoint: checkpoint)
        if checkpoint == nil {
            // First start (or a lost cursor): record where the sink stands before it receives
            // anything, so output of a batch cut short by a crash is recognised and cut back.
            let start = log.cursor
            try await io.run { try cursorStore.save(start, checkpoint: initialCheckpoint) }
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
        let sinkName = sink.name
        let delivery = DeliveryLoop(
            sink: sink, log: log, cursorStore: cursorStore, configuration: configuration.delivery,
            counters: counters, logger: logger, checkpoint: checkpoint ?? initialCheckpoint
        ) { batch in
            guard let server = serverBox.withLock({ $0 }), server.wants(.delivered) else { return }
            let now = WallClock.unixMilliseconds()
            for event in batch.events {
                if let json = BusMessage.event(topic: .delivered, frame: event.frame, at: now, sink: sinkName) {
                    server.publish(.delivered, json)
                }
            }
        }
        running.withLock { $0 = Running(log: log, delivery: delivery, recovery: report) }
        let server = try IngestServer(
            context: context, configuration: configuration, pipeline: pipeline, counters: counters, logger: logger
        ) { [weak self] request in
            self?.handleControl(request) ?? Array(#"{"ok":false,"error":"agent stopping"}"#.utf8)
        }
        serverBox.withLock { $0 = server }
        try pipeline.start(dedup: dedup) { results in
            server.deliverAcks(results)
        } committedEvents: {
            delivery.wakeup.signal()
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
            "data": "\(configuration.dataDirectory)", "sink": "\(sink.name)",
        ])
        settleReadiness(.success(()))
        let verifier = verifySealedSegments(log)

        // Serve until graceful shutdown (or cancellation), then stop in order: intake, commit
        // (acks of what was written go out), sockets, delivery.
        // The delivery loop runs until then; a batch cut short is delivered again after restart.
        await cancelWhenGracefulShutdown { await delivery.run() }
        logger.info("ferryd stopping")
        server.stopIntake()
        await pipeline.stop()
        await server.stop()
        try? await sink.shutdown()
        await verifier.stop()
        await io.run { context.terminate() }
        logger.info("ferryd stopped", metadata: ["accepted": "\(counters.accepted.load(ordering: .relaxed))"])
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

    /// Answers one control request (JSON in, JSON out).
    func handleControl(_ request: [UInt8]) -> [UInt8] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(request)) as? [String: Any],
              let op = object["op"] as? String else {
            return Self.json(["ok": false, "error": "request must be a JSON object with a string field \"op\""])
        }
        switch op {
        case "status":
            return Self.json(status())
        default:
            return Self.json(["ok": false, "error": "unknown op \"\(op)\"; valid: status"])
        }
    }

    /// The status document served to `ferry status --json`.
    public func status() -> [String: Any] {
        guard let running = running.withLock({ $0 }) else { return ["ok": false, "error": "agent starting"] }
        let log = running.log.status()
        let delivery = running.delivery.state.withLock { $0 }
        let now = WallClock.unixMilliseconds()
        var oldestAge: Any = NSNull()
        if log.undeliveredEvents > 0, let at = running.log.oldestUndeliveredAcceptedAt() {
            oldestAge = now >= at ? Int(now - at) : 0
        }
        var deliveryJSON: [String: Any] = [
            "sink": delivery.sink, "state": delivery.phase.rawValue,
            "consecutive_failures": delivery.consecutiveFailures,
        ]
        if let at = delivery.lastSuccessAt { deliveryJSON["last_success_at"] = Int(at) }
        if let error = delivery.lastError { deliveryJSON["last_error"] = error }
        if let at = delivery.retryAt, delivery.phase == .retrying { deliveryJSON["retry_at"] = Int(at) }
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
