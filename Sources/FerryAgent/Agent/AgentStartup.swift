#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import FerryProtocol
import FerryStorage
import FerryThreads
import Logging
import Synchronization

/// Start-up and recovery of an agent, step by step: the directories and single-instance locks,
/// the log with its cursors and the dedup and session snapshots, the consent state and held
/// area, and the background check of older segments. ``FerryAgent`` calls these in order on its
/// start-up thread; each is file work only, and none keeps state of its own.
enum AgentStartup {
    /// What recovery rebuilt from the data directory.
    struct Recovered: Sendable {
        /// The main log, recovered.
        var log: SegmentedLog
        /// The dedup window: its snapshot plus the records after it.
        var dedup: DedupWindow
        /// The session table: its snapshot plus the records after it (the held area's are added
        /// by ``completeSessions(_:heldLog:)``).
        var sessions: SessionTable
        /// What recovery found.
        var report: RecoveryReport
        /// Each configured sink's stored checkpoint, in configuration order (nil: none).
        var checkpoints: [[UInt8]?]
    }

    /// Checks both directories and everything in them before anything is created or changed
    /// (PathSafety has the rule), creates them, and takes the single-instance locks; returns the
    /// locks' descriptors, to close at the end of the run. A system agent's runtime directory is
    /// searchable by every user (its sockets have modes of their own) and its lock readable, so
    /// clients can tell whether it runs.
    static func lockDirectories(_ configuration: AgentConfiguration) throws -> [CInt] {
        let system = configuration.mode == .system
        for directory in [configuration.runtimeDirectory, configuration.dataDirectory] {
            try PathSafety.checkDirectory(directory)
            try PathSafety.checkContents(of: directory)
        }
        try FileIO.makeDirectory(configuration.runtimeDirectory, mode: system ? 0o755 : 0o700)
        try FileIO.makeDirectory(configuration.dataDirectory, mode: 0o700)
        return [
            try lock(configuration.runtimeDirectory + "/" + FerryPaths.lockFileName, mode: system ? 0o644 : 0o600),
            try lock(configuration.dataDirectory + "/ferryd.lock", mode: 0o600),
        ]
    }

    /// Recovery: the data format, the sinks' cursors (from `cursorStores`, in configuration
    /// order), the dedup and session snapshots, then the segments. The id window keeps ids at
    /// least `minimumDedupSeconds` (the longest an ingest path served needs).
    static func recover(
        configuration: AgentConfiguration, cursorStores: [CursorStore], minimumDedupSeconds: Int = 0, logger: Logger
    ) throws -> Recovered {
        let configuredSinks = configuration.sinks
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
                                maxAgeMilliseconds: UInt64(max(configuration.dedup.maxAgeSeconds, minimumDedupSeconds)) * 1000)
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
        var sessions = emptySessionTable(configuration.dedup)
        let sessionsPath = configuration.dataDirectory + "/" + CommitPipeline.sessionsSnapshotName
        var sessionsFrom: LogPosition? = formatFound == nil ? nil : LogPosition(segment: 0, offset: 0)
        if let bytes = try FileIO.readFile(sessionsPath) {
            if let covered = sessions.restore(snapshot: bytes) {
                sessionsFrom = covered
            } else {
                logger.warning("session snapshot damaged; rebuilding it from the whole log", metadata: ["path": "\(sessionsPath)"])
                sessions = emptySessionTable(configuration.dedup)
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
        return Recovered(log: log, dedup: dedup, sessions: sessions, report: report, checkpoints: stored.map { $0?.checkpoint })
    }

    /// Logs what recovery found.
    static func logRecovery(_ report: RecoveryReport, logger: Logger) {
        if report.isClean {
            logger.info("recovered the queue", metadata: ["segments": "\(report.segments)", "events": "\(report.records)"])
        } else {
            logger.warning("recovered the queue with damage", metadata: [
                "segments": "\(report.segments)", "events": "\(report.records)",
                "corrupt_regions": "\(report.corruptRegions)", "corrupt_bytes": "\(report.corruptBytes)",
                "truncated_bytes": "\(report.truncatedBytes)",
            ])
        }
    }

    /// An empty session table with the configured limits.
    static func emptySessionTable(_ dedup: AgentConfiguration.Dedup) -> SessionTable {
        SessionTable(idleMilliseconds: UInt64(dedup.sessionIdleSeconds) * 1000, maxSessions: dedup.maxSessions,
                     lossGraceMilliseconds: UInt64(dedup.lossGraceSeconds) * 1000)
    }

    /// Adds the sessions of the held area's events (held events are not in the main log the
    /// session snapshot covers) and starts every session's idle clock now.
    static func completeSessions(_ sessions: SessionTable, heldLog: SegmentedLog) throws -> SessionTable {
        var sessions = sessions
        try heldLog.forEachRecord { event in
            guard let header = event.isErased ? nil : try? event.header(), let session = header.session else { return }
            sessions.insert(session: session, sequence: header.sequence, at: event.acceptedAt, source: header.source(in: event.frame))
        }
        sessions.touchAll(now: WallClock.unixMilliseconds())
        return sessions
    }

    /// Loads (or creates) the consent state, checks the audit chain, loads the once-key marks and
    /// recovers the held area (whose events join the dedup window).
    static func loadConsent(
        configuration: AgentConfiguration, log: SegmentedLog, dedup: DedupWindow, bus: EventBus,
        erasures: ErasureOutbox? = nil, quarantine: QuarantineStore? = nil, history: RecipientHistory = RecipientHistory(), logger: Logger
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
            pending: pending, bus: bus, erasures: erasures, quarantine: quarantine, history: history, logger: logger)
        if worker.pending != nil {
            // A writer of its own for the queue, closed before the commit thread opens its own.
            try worker.finishPendingAtStart(writer: try LogWriter(log: log))
        }
        return (engine, UncheckedBox(worker), dedup)
    }

    /// Counts and checks, on a thread of its own, the sealed segments recovery left for later, so
    /// the time to the first ack does not grow with the backlog.
    /// `merge` adds what it found to the running agent's recovery report.
    static func verifySealedSegments(
        _ log: SegmentedLog, logger: Logger, merge: @escaping @Sendable (RecoveryReport) -> Void
    ) -> Verifier {
        let verifier = Verifier()
        guard log.unverifiedSegments > 0 else { return verifier }
        let thread = DedicatedThread(name: "ferry-verify") {
            let found = log.verifySealedSegments { verifier.stopping.load(ordering: .relaxed) }
            merge(found)
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

    /// The background check of the sealed segments; ``stop()`` asks it to stop and waits.
    final class Verifier: Sendable {
        let stopping = Atomic<Bool>(false)
        let thread = Mutex<DedicatedThread?>(nil)
        /// Asks the check to stop and waits for its thread.
        func stop() async {
            stopping.store(true, ordering: .relaxed)
            if let thread = thread.withLock({ $0 }) { await thread.joinAsync() }
        }
    }

    /// Opens (creating with `mode`) and locks `path`, or throws `alreadyRunning`.
    private static func lock(_ path: String, mode: mode_t) throws -> CInt {
        let fd = try FileIO.open(path, O_RDWR | O_CREAT, mode: mode)
        fchmod(fd, mode)
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            throw AgentError(code: .alreadyRunning, message: "another ferryd holds \(path)")
        }
        return fd
    }
}
